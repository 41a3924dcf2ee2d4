"""Scoring one action against the window's ground truth (contexts.parquet).

Price at the decision: read from the prompt's last user turn, where the simulator (and the
game) writes each stock as `  TICKER $123.45 (...)` (regex `PRICE_LINE`); when a ticker's
price cannot be read there, the window's start price from the ground truth is used.
Prediction-market probabilities are read from `pm-id "question" YES at 42%` (fallback 50 %),
the agent's cash from `cash $9,507.17` (fallback `STARTING_CASH`).

Direction (threshold `threshold_pct`, default 0.5 %, the simulator's sentiment threshold):
- buy T is right when T's end price is more than the threshold above its price now;
- sell T is right when it is more than the threshold below;
- hold is right when no stock moves more than the threshold either way from now to the end;
- bet on market M is right when its side equals M's outcome (UNRESOLVED: never right);
- an invalid answer, or an action on a ticker/market the window does not have, is wrong.

The game's rules (`game_rules`: eval scores every policy by them), where the observation shows the portfolio (`cash $9,507.17; positions: ACME 50
@ $123.45, ...`): a buy the cash does not cover and a sell of more shares than are held are
refused, and a refused action is invalid (0, wrong), as the game logs it. Where the positions are
not shown a sell is taken as valid; where the cash is not shown a buy is capped below.

Counterfactual P&L over the rest of the window, the simulator's own marking:
- buy N of T at price p: N' * (end - p); sell: N * (p - end) (what selling now gains over
  holding to the end), with N' = min(N, floor(cash / p)) (cash: STARTING_CASH where not shown),
  so a model cannot score by naming a huge size;
- bet X on side S at probability q (q = P(YES) for YES, 1 - P(YES) for NO, clipped to
  [0.02, 0.98]) with X' = min(X, cash): X' * (1 - q) / q when S wins, else -X';
- hold and invalid answers: 0.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from babylon_rl.evaluate.actions import Action

PRICE_LINE = re.compile(r"^\s*([A-Z][A-Z0-9.]{0,9}) \$([0-9][0-9,]*(?:\.[0-9]+)?) \(", re.MULTILINE)
MARKET_LINE = re.compile(r'^\s*(\S+) ".*" YES at ([0-9]+(?:\.[0-9]+)?)%', re.MULTILINE)
CASH = re.compile(r"cash \$([0-9][0-9,]*(?:\.[0-9]+)?)")
POSITIONS = re.compile(r"positions: (.*?); open bets")
POSITION = re.compile(r"([A-Z][A-Z0-9.]{0,9}) ([0-9]+) @ \$")
STARTING_CASH = 10_000.0
DEFAULT_THRESHOLD_PCT = 0.5


@dataclass(frozen=True)
class Observation:
    prices: dict[str, float]
    probabilities: dict[str, float]  # market id -> P(YES) now
    cash: float | None
    holdings: dict[str, int] | None = None  # ticker -> shares held; None where the observation does not show them


@dataclass(frozen=True)
class Stock:
    start: float
    end: float


@dataclass(frozen=True)
class GroundTruth:
    window_id: str
    stocks: dict[str, Stock]
    outcomes: dict[str, str]  # market id -> YES | NO | UNRESOLVED

    @classmethod
    def from_json(cls, window_id: str, stocks_json: str | None, markets_json: str | None) -> "GroundTruth":
        stocks = {}
        for s in json.loads(stocks_json or "[]"):
            if s.get("ticker") and s.get("start_price") and s.get("end_price") is not None:
                stocks[str(s["ticker"]).upper()] = Stock(float(s["start_price"]), float(s["end_price"]))
        outcomes = {str(m["market_id"]): str(m.get("outcome") or "UNRESOLVED").upper()
                    for m in json.loads(markets_json or "[]") if m.get("market_id")}
        return cls(window_id, stocks, outcomes)


@dataclass(frozen=True)
class Outcome:
    valid: bool
    correct: bool
    pnl: float
    kind: str  # buy | sell | bet | hold | invalid


INVALID = Outcome(False, False, 0.0, "invalid")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read_observation(text: str) -> Observation:
    prices = {ticker: _number(price) for ticker, price in PRICE_LINE.findall(text)}
    probabilities = {market: float(p) / 100.0 for market, p in MARKET_LINE.findall(text)}
    cash = CASH.search(text)
    positions = POSITIONS.search(text)
    holdings = {t: int(n) for t, n in POSITION.findall(positions.group(1))} if positions else None
    return Observation(prices, probabilities, _number(cash.group(1)) if cash else None, holdings)


def _price_now(ticker: str, obs: Observation, truth: GroundTruth) -> float:
    price = obs.prices.get(ticker)
    return price if price and price > 0 else truth.stocks[ticker].start


def _hold_right(obs: Observation, truth: GroundTruth, threshold: float) -> bool:
    return all(abs(stock.end / _price_now(t, obs, truth) - 1.0) * 100.0 <= threshold for t, stock in truth.stocks.items())


def score_action(action: Action | None, obs: Observation, truth: GroundTruth,
                 threshold_pct: float = DEFAULT_THRESHOLD_PCT, game_rules: bool = False) -> Outcome:
    """The action's outcome; with `game_rules` (eval), a trade the game would refuse is invalid (module docstring).
    Training prices each decision's valid menu, whose trades the game accepts, without them."""
    if action is None:
        return INVALID
    cash = obs.cash if obs.cash is not None else STARTING_CASH
    if action.kind == "hold":
        return Outcome(True, _hold_right(obs, truth, threshold_pct), 0.0, "hold")
    if action.kind == "bet":
        outcome = truth.outcomes.get(action.market)
        if outcome is None:
            return INVALID
        p_yes = obs.probabilities.get(action.market, 0.5)
        price = min(max(p_yes if action.side == "YES" else 1.0 - p_yes, 0.02), 0.98)
        amount = min(action.amount, max(cash, 0.0))
        won = action.side == outcome
        return Outcome(True, won, round(amount * (1.0 - price) / price if won else -amount, 2), "bet")
    stock = truth.stocks.get(action.ticker)
    if stock is None:
        return INVALID
    now = _price_now(action.ticker, obs, truth)
    move_pct = (stock.end / now - 1.0) * 100.0
    if action.kind == "buy":
        if game_rules and obs.cash is not None and action.shares * now > obs.cash:
            return INVALID  # the game refuses a buy the cash does not cover
        shares = min(action.shares, math.floor(max(cash, 0.0) / now))
        return Outcome(True, move_pct > threshold_pct, round(shares * (stock.end - now), 2), "buy")
    if game_rules and obs.holdings is not None and action.shares > obs.holdings.get(action.ticker, 0):
        return INVALID  # the game refuses a sell of shares not held
    return Outcome(True, move_pct < -threshold_pct, round(action.shares * (now - stock.end), 2), "sell")
