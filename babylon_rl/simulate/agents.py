"""Trading personas. Each decides from its Observation only: prices up to now, the
headlines published so far, the current prediction-market probabilities and its own
portfolio. None of them can see the future; they differ in how well they read the present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from babylon_rl.simulate.market import NewsEvent

ACTION_HELP = (
    'Answer with exactly one JSON object: {"action": "buy", "ticker": T, "shares": N}, '
    '{"action": "sell", "ticker": T, "shares": N}, {"action": "bet", "market": ID, "side": "YES"|"NO", "amount": X} '
    'or {"action": "hold"}.'
)


@dataclass(frozen=True)
class Persona:
    name: str
    description: str
    model: str
    temperature: float
    risk_tolerance: float
    reasoning_share: float  # share of steps with a reasoning call before the action call

    def system_prompt(self, agent_id: str) -> str:
        return (
            f"You are {agent_id}, an autonomous trader in the Babylon market game. {self.description} "
            f"Your risk tolerance is {self.risk_tolerance:.1f}. Every few minutes you see prices, the news "
            f"published so far and open prediction markets, and you choose one action. {ACTION_HELP}"
        )


PERSONAS: dict[str, Persona] = {
    "news": Persona("news", "You trade on breaking news: buy on bullish headlines, sell on bearish ones, and bet on "
                    "prediction markets the news makes likely.", "gpt-4o-mini", 0.4, 0.6, 0.5),
    "momentum": Persona("momentum", "You follow momentum: buy what is rising, cut what is falling.",
                        "llama-3.1-8b-instruct", 0.7, 0.8, 0.35),
    "contrarian": Persona("contrarian", "You are a contrarian: buy what has fallen, sell what has risen.",
                          "mistral-7b-instruct", 0.7, 0.7, 0.35),
    "random": Persona("random", "You trade on instinct.", "qwen2.5-7b-instruct", 1.0, 0.9, 0.1),
    "risk_averse": Persona("risk_averse", "You protect capital: small positions, quick profits, tight stops.",
                           "gpt-4o-mini", 0.2, 0.2, 0.3),
}


@dataclass(frozen=True)
class Observation:
    minute: int
    prices: list[float]  # per ticker, now
    previous: list[float]  # per ticker, at this agent's previous step (window start for the first)
    news: list[NewsEvent]  # published at or before now
    markets: list[tuple[int, bool]]  # per prediction market: (ticker, asks "above"?)
    probs: list[float]  # per prediction market: P(YES) now
    cash: float
    holdings: dict[int, tuple[int, float]]  # ticker -> (shares, average cost)
    bets: frozenset[int]  # markets already bet on


@dataclass(frozen=True)
class Decision:
    kind: str  # buy | sell | bet | hold
    ticker: int = -1
    shares: int = 0
    market: int = -1
    side: str = ""
    amount: float = 0.0
    why: str = ""


HOLD = Decision("hold", why="nothing worth acting on")


def _buy(obs: Observation, ticker: int, budget_share: float, why: str) -> Decision:
    shares = int(obs.cash * budget_share / obs.prices[ticker])
    return Decision("buy", ticker, shares, why=why) if shares > 0 else HOLD


def _sell_all(obs: Observation, ticker: int, why: str) -> Decision:
    return Decision("sell", ticker, obs.holdings[ticker][0], why=why)


def _bet(obs: Observation, market: int, side: str, amount: float, why: str) -> Decision:
    amount = float(int(min(amount, obs.cash)))
    return Decision("bet", market=market, side=side, amount=amount, why=why) if amount >= 1 else HOLD


def _changes(obs: Observation) -> list[float]:
    return [now / before - 1.0 for now, before in zip(obs.prices, obs.previous)]


def decide_news(obs: Observation, u: list[float]) -> Decision:
    fresh = [e for e in obs.news if e.sentiment != "NEUTRAL" and obs.minute - e.minute <= 20]
    for event in reversed(fresh):
        if event.sentiment == "BEARISH" and event.ticker in obs.holdings:
            return _sell_all(obs, event.ticker, f"bearish headline '{event.headline}', getting out before the drop")
    for event in reversed(fresh):
        if event.sentiment == "BULLISH" and event.ticker not in obs.holdings and obs.minute - event.minute <= 12:
            return _buy(obs, event.ticker, 0.3, f"bullish headline '{event.headline}', buying before the move")
    for event in reversed(fresh):
        for market, (ticker, above) in enumerate(obs.markets):
            if ticker != event.ticker or market in obs.bets:
                continue
            side = "YES" if above == (event.sentiment == "BULLISH") else "NO"
            p_side = obs.probs[market] if side == "YES" else 1.0 - obs.probs[market]
            if p_side < 0.75:
                return _bet(obs, market, side, 0.04 * obs.cash, f"'{event.headline}' makes {side} likelier than {p_side:.0%}")
    recent = {e.ticker for e in obs.news if e.sentiment == "BULLISH" and obs.minute - e.minute <= 30}
    for ticker in obs.holdings:
        if ticker not in recent:
            return _sell_all(obs, ticker, "the news that moved it is priced in now, taking the profit")
    return HOLD


def decide_momentum(obs: Observation, u: list[float]) -> Decision:
    changes = _changes(obs)
    for ticker in obs.holdings:
        if changes[ticker] < -0.003:
            return _sell_all(obs, ticker, f"falling {changes[ticker]:+.2%}, cutting it")
    best = max(range(len(changes)), key=changes.__getitem__)
    if changes[best] > 0.004 and best not in obs.holdings:
        return _buy(obs, best, 0.2, f"rising {changes[best]:+.2%}, riding the trend")
    if u[1] < 0.15 and obs.probs:
        market = int(u[2] * len(obs.probs))
        if market not in obs.bets and 0.6 < max(obs.probs[market], 1 - obs.probs[market]) < 0.9:
            side = "YES" if obs.probs[market] > 0.5 else "NO"
            return _bet(obs, market, side, 0.02 * obs.cash, "the crowd leans this way, following it")
    return HOLD


def decide_contrarian(obs: Observation, u: list[float]) -> Decision:
    changes = _changes(obs)
    for ticker in obs.holdings:
        if changes[ticker] > 0.003:
            return _sell_all(obs, ticker, f"up {changes[ticker]:+.2%}, selling into strength")
    worst = min(range(len(changes)), key=changes.__getitem__)
    if changes[worst] < -0.004 and worst not in obs.holdings:
        return _buy(obs, worst, 0.2, f"down {changes[worst]:+.2%}, oversold")
    if u[1] < 0.15 and obs.probs:
        market = int(u[2] * len(obs.probs))
        if market not in obs.bets and max(obs.probs[market], 1 - obs.probs[market]) > 0.7:
            side = "NO" if obs.probs[market] > 0.5 else "YES"
            return _bet(obs, market, side, 0.02 * obs.cash, "the crowd is too sure, taking the other side")
    return HOLD


def decide_random(obs: Observation, u: list[float]) -> Decision:
    n = len(obs.prices)
    if u[0] < 0.4:
        return HOLD
    if u[0] < 0.65:
        return _buy(obs, int(u[1] * n), 0.05 + 0.2 * u[2], "feels like a good moment")
    if u[0] < 0.85:
        if not obs.holdings:
            return HOLD
        held = sorted(obs.holdings)
        return _sell_all(obs, held[int(u[1] * len(held))], "time to sell")
    if not obs.probs:
        return HOLD
    market = int(u[1] * len(obs.probs))
    if market in obs.bets:
        return HOLD
    return _bet(obs, market, "YES" if u[2] < 0.5 else "NO", 20 + 180 * u[3], "a hunch")


def decide_risk_averse(obs: Observation, u: list[float]) -> Decision:
    for ticker, (shares, cost) in obs.holdings.items():
        move = obs.prices[ticker] / cost - 1.0
        if abs(move) > 0.005:
            return _sell_all(obs, ticker, f"{move:+.2%} from my entry, closing")
    for event in reversed(obs.news):
        if event.sentiment == "BULLISH" and obs.minute - event.minute <= 10 and event.ticker not in obs.holdings:
            return _buy(obs, event.ticker, 0.05, f"small position on '{event.headline}'")
    for market, prob in enumerate(obs.probs):
        if market not in obs.bets and max(prob, 1 - prob) > 0.9 and u[1] < 0.3:
            return _bet(obs, market, "YES" if prob > 0.5 else "NO", 0.01 * obs.cash, "nearly settled, small safe bet")
    return HOLD


DECIDERS: dict[str, Callable[[Observation, list[float]], Decision]] = {
    "news": decide_news,
    "momentum": decide_momentum,
    "contrarian": decide_contrarian,
    "random": decide_random,
    "risk_averse": decide_risk_averse,
}
