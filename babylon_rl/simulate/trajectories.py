"""One window of play turned into rows of trajectories, llm_call_logs and market_outcomes.

Rows are tuples in the column order of `warehouse.RAW_TABLES`, without the write-time
columns (createdAt, updatedAt) that the sinks append.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

import numpy as np

from babylon_rl.simulate.agents import DECIDERS, PERSONAS, Decision, Observation, Persona
from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.market import (
    EPOCH, STREAM_AGENTS, STREAM_DIRT, STREAM_IDS, STREAM_POLICY, NewsEvent, WindowMarket, generate_market, rng_for,
)

MAX_TOKENS = 256
TOP_P = 0.95
MODEL_VERSION = "2024-07-18"
BAD_ANSWER = "I think the market looks interesting right now, maybe buy something."
PARSE_ERROR = "could not parse the model's answer as a JSON action"
ACTION_TYPES = {"buy": "BUY_SHARES", "sell": "SELL_SHARES", "bet": "BUY_PREDICTION", "hold": "HOLD"}
SENTIMENT_THRESHOLD = 0.5  # percent change beyond which a stock's window is BULLISH/BEARISH


@dataclass
class WindowRows:
    window_id: str
    trajectories: list[tuple] = field(default_factory=list)
    llm_calls: list[tuple] = field(default_factory=list)
    outcomes: list[tuple] = field(default_factory=list)
    steps: int = 0
    agent_pnl: dict[str, tuple[str, float]] = field(default_factory=dict)  # agent id -> (persona, window P&L)


@dataclass(frozen=True)
class AgentDraws:
    """What chance decides about one agent in one window: its timing, ids, shape and the flaws injected into its rows."""

    phase: int  # minute of its first step
    jitter: list[int]  # ms after the step's minute, per step
    latency: list[list[int]]  # ms of the reasoning and the action call, per step
    uniforms: list[list[float]]  # the persona's own draws, per step
    rich: bool  # plugin step shape (else legacy)
    evaluation: bool
    ids: tuple[str, str]
    null_window: bool = False
    null_pnl: bool = False
    error_step: int = -1  # the step whose answer is garbled, -1 for none


class Call(NamedTuple):
    """One LLM call of a step, before it is shaped for stepsJson and llm_call_logs."""

    purpose: str
    action_type: str | None
    user: str
    answer: str
    reasoning: str | None
    ts: int  # epoch ms
    latency: int
    prompt_tokens: int | None = None  # None: estimated from the text (the personas have no tokenizer)
    completion_tokens: int | None = None


@dataclass
class Portfolio:
    cash: float
    holdings: dict[int, tuple[int, float]] = field(default_factory=dict)  # ticker -> (shares, avg cost)
    bets: dict[int, tuple[str, float, float]] = field(default_factory=dict)  # market -> (side, amount, price)


def agent_id(index: int) -> str:
    return f"sim-agent-{index:04d}"


def persona_of(config: SimulationConfig, index: int) -> Persona:
    return PERSONAS[config.personas[index % len(config.personas)]]


def to_datetime(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def iso_z(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class WindowPlay:
    """Generates one window; caches the observation text that all agents share at a minute."""

    def __init__(self, config: SimulationConfig, start: datetime) -> None:
        self.config = config
        self.market: WindowMarket = generate_market(config, start)
        self.rows = WindowRows(self.market.window_id)
        self.interval = config.window_minutes // config.steps_per_window
        self.start_ms = self.market.start_ms
        self.end_prices = [path[-1] for path in self.market.prices]
        self.pm_info = [(m.ticker, m.above) for m in self.market.markets]
        self.bet_volume = [0.0] * len(self.market.markets)
        self._draw()
        self._price_text: dict[tuple[int, int], str] = {}
        self._news: dict[int, tuple[list[NewsEvent], str]] = {}
        self._pm_text: dict[int, str] = {}
        self._providers: dict[int, list[dict]] = {}

    def _draw(self) -> None:
        config, key = self.config, self.market.key
        n, steps = config.agents, config.steps_per_window
        rng = rng_for(config, key, STREAM_AGENTS)
        phase = rng.integers(0, self.interval, n).tolist()
        jitter = rng.integers(1_000, 50_000, (n, steps)).tolist()
        latency = np.rint(rng.lognormal(6.8, 0.4, (n, steps, 2))).astype(int).tolist()
        uniforms = rng.random((n, steps, 5)).tolist()
        rich = (rng.random(n) < config.rich_share).tolist()
        evaluation = (rng.random(n) < config.evaluation_share).tolist()
        ids = rng_for(config, key, STREAM_IDS).integers(0, 2**63, (n + 2 * len(config.tickers) + 1, 2))
        self.ids = [(f"{a:016x}", f"{b:016x}") for a, b in ids.tolist()]
        dirt, rates = rng_for(config, key, STREAM_DIRT), config.dirt_rates
        draws = dirt.random((n, 3)).tolist()
        null_window = [d[0] < rates.null_window_id for d in draws]
        null_pnl = [d[1] < rates.null_final_pnl for d in draws]
        error_at = dirt.integers(0, steps, n).tolist()
        error_step = [s if d[2] < rates.error_step else -1 for s, d in zip(error_at, draws)]
        outcome_draws = dirt.random((len(config.tickers), 2)).tolist()
        self.duplicate = [d[0] < rates.duplicate_outcome for d in outcome_draws]
        self.zero_bearish = [d[1] < rates.zero_change_bearish for d in outcome_draws]
        self.draws = [
            AgentDraws(phase[i], jitter[i], latency[i], uniforms[i], rich[i], evaluation[i],
                       self.ids[i], null_window[i], null_pnl[i], error_step[i])
            for i in range(n)
        ]
        self.policy_draws = self._draw_policy_agents()

    def _draw_policy_agents(self) -> list[AgentDraws]:
        """The policy agents' draws, from a stream of their own: the personas' rows do not change when they join.
        Their latency is measured, their shape is always plugin (it logs the messages) and no flaw is injected."""
        m, steps = self.config.policy_agents, self.config.steps_per_window
        if not m:
            return []
        rng = rng_for(self.config, self.market.key, STREAM_POLICY)
        phase = rng.integers(0, self.interval, m).tolist()
        jitter = rng.integers(1_000, 50_000, (m, steps)).tolist()
        evaluation = (rng.random(m) < self.config.evaluation_share).tolist()
        ids = [(f"{a:016x}", f"{b:016x}") for a, b in rng.integers(0, 2**63, (m, 2)).tolist()]
        return [AgentDraws(phase[j], jitter[j], [], [], True, evaluation[j], ids[j]) for j in range(m)]

    # -- shared observation pieces ----------------------------------------------------
    def clock(self, minute: int) -> str:
        return (self.market.start + timedelta(minutes=minute)).strftime("%H:%M")

    def price_text(self, minute: int, previous: int) -> str:
        key = (minute, previous)
        text = self._price_text.get(key)
        if text is None:
            prices = self.market.prices
            lines = [
                f"  {ticker} ${prices[i][minute]:.2f} ({prices[i][minute] / prices[i][previous] - 1:+.2%} since your last look)"
                for i, ticker in enumerate(self.market.tickers)
            ]
            text = self._price_text[key] = "Prices:\n" + "\n".join(lines)
        return text

    def news(self, minute: int) -> tuple[list[NewsEvent], str]:
        cached = self._news.get(minute)
        if cached is None:
            seen = [e for e in self.market.news if e.minute <= minute]
            lines = [f"  [{self.clock(e.minute)}] {self.market.tickers[e.ticker]}: {e.headline}" for e in seen]
            cached = self._news[minute] = (seen, "News so far this window:\n" + ("\n".join(lines) if lines else "  (none yet)"))
        return cached

    def pm_text(self, minute: int) -> str:
        text = self._pm_text.get(minute)
        if text is None:
            lines = [f'  {m.market_id} "{m.question}" YES at {m.prob[minute]:.0%}' for m in self.market.markets]
            text = self._pm_text[minute] = "Prediction markets:\n" + ("\n".join(lines) if lines else "  (none open)")
        return text

    def providers(self, minute: int) -> list[dict]:
        accesses = self._providers.get(minute)
        if accesses is None:
            prices = {t: self.market.prices[i][minute] for i, t in enumerate(self.market.tickers)}
            accesses = self._providers[minute] = [
                {"providerName": "market_data", "data": {"prices": prices}, "purpose": "get_market_data"},
                {"providerName": "news_feed", "data": {"headlines": len(self.news(minute)[0])}, "purpose": "get_news"},
                {"providerName": "prediction_markets", "data": {"open": len(self.market.markets)}, "purpose": "get_prediction_markets"},
            ]
        return accesses

    # -- the window ---------------------------------------------------------------------
    def run(self, play_policy_agents: Callable[["WindowPlay"], None] | None = None) -> WindowRows:
        """The window's rows: the personas, then the policy agents (`play_policy_agents`: `window.simulate_window` passes
        them; a config with policy agents needs it), then the outcomes."""
        for index in range(self.config.agents):
            AgentPlay.persona_agent(self, index).run()
        if self.policy_draws:
            if play_policy_agents is None:
                raise ValueError(f"{len(self.policy_draws)} policy agents and nothing to answer them: use window.simulate_window")
            play_policy_agents(self)
        self.rows.outcomes = self.outcome_rows()
        return self.rows

    def outcome_rows(self) -> list[tuple]:
        market, rows = self.market, []
        id_base = self.config.agents
        for i, ticker in enumerate(market.tickers):
            start, end = market.prices[i][0], market.prices[i][-1]
            change = round((end / start - 1.0) * 100.0, 2)
            sentiment = "BULLISH" if change >= SENTIMENT_THRESHOLD else "BEARISH" if change <= -SENTIMENT_THRESHOLD else "NEUTRAL"
            if self.zero_bearish[i]:
                end, change, sentiment = start, 0.0, "BEARISH"
            news = json.dumps([
                {"headline": e.headline, "sentiment": e.sentiment, "at": iso_z(market.start + timedelta(minutes=e.minute))}
                for e in market.news if e.ticker == i
            ])
            row = (f"mo_{self.ids[id_base + i][0]}", market.window_id, ticker, start, end, change, sentiment, news,
                   None, None, None, None, None)
            rows.append(row)
            if self.duplicate[i]:
                rows.append((f"mo_{self.ids[id_base + len(market.tickers) + i][0]}",) + row[1:])
        for m, volume in zip(market.markets, self.bet_volume):
            rows.append((f"mo_{m.market_id}", market.window_id, None, None, None, None, None, None,
                         m.market_id, m.question, m.outcome, m.prob[-2], round(m.base_volume + volume, 2)))
        return rows


class AgentPlay:
    """One agent's trajectory in a window."""

    def __init__(self, window: WindowPlay, agent: str, persona: Persona, draws: AgentDraws) -> None:
        self.w = window
        self.agent_id = agent
        self.persona = persona
        self.draws = draws
        self.system_prompt = persona.system_prompt(agent)
        self.rich = draws.rich
        self.id_hex, self.tid_hex = draws.ids
        self.trajectory_id = f"{self.tid_hex[:8]}-{self.tid_hex[8:12]}-4{self.tid_hex[13:16]}-a{self.id_hex[1:4]}-{self.id_hex[4:16]}"
        self.portfolio = Portfolio(window.config.starting_balance)
        self.trade_count = 0
        self.total_reward = 0.0
        self.last_call_end = 0  # epoch ms

    @classmethod
    def persona_agent(cls, window: WindowPlay, index: int) -> "AgentPlay":
        return cls(window, agent_id(index), persona_of(window.config, index), window.draws[index])

    def run(self) -> None:
        w, config = self.w, self.w.config
        steps, previous = [], 0
        for s in range(config.steps_per_window):
            minute = s * w.interval + self.draws.phase
            steps.append(self.step(s, minute, previous))
            previous = minute
        self.finish(steps)

    def mark(self, minute: int) -> float:
        p, prices, probs = self.portfolio, self.w.market.prices, self.w.market.markets
        value = p.cash + sum(shares * prices[t][minute] for t, (shares, _) in p.holdings.items())
        for market, (side, amount, price) in p.bets.items():
            now = probs[market].prob[minute]
            value += amount * (now if side == "YES" else 1.0 - now) / price
        return round(value - self.w.config.starting_balance, 2)

    def observation_text(self, minute: int, previous: int, news_text: str) -> str:
        w, p = self.w, self.portfolio
        tickers = w.market.tickers
        held = ", ".join(f"{tickers[t]} {n} @ ${c:.2f}" for t, (n, c) in p.holdings.items()) or "none"
        bets = ", ".join(f"{w.market.markets[m].market_id} {side} ${a:.0f}" for m, (side, a, _) in p.bets.items()) or "none"
        return (
            f"It is {w.clock(minute)} UTC; window {w.market.window_id} closes in {w.market.minutes - minute} min.\n"
            f"{w.price_text(minute, previous)}\n{news_text}\n{w.pm_text(minute)}\n"
            f"Your portfolio: cash ${p.cash:,.2f}; positions: {held}; open bets: {bets}; "
            f"P&L so far ${self.mark(minute):+,.2f}.\nWhat do you do?"
        )

    def state(self, minute: int) -> dict:
        """The environment state logged with a step, as the agent found it."""
        p = self.portfolio
        return {"agentBalance": round(p.cash, 2), "agentPnL": self.mark(minute), "openPositions": len(p.holdings) + len(p.bets),
                "activeMarkets": len(self.w.market.tickers) + len(self.w.pm_info)}

    def step(self, s: int, minute: int, previous: int) -> dict:
        w, p = self.w, self.portfolio
        seen, news_text = w.news(minute)
        prices = [path[minute] for path in w.market.prices]
        u = self.draws.uniforms[s]
        state = self.state(minute)
        obs = Observation(minute, prices, [path[previous] for path in w.market.prices], seen, w.pm_info,
                          [m.prob[minute] for m in w.market.markets], p.cash, p.holdings, frozenset(p.bets))
        decision = DECIDERS[self.persona.name](obs, u)
        failed = s == self.draws.error_step
        text = self.observation_text(minute, previous, news_text)
        ts = w.start_ms + minute * 60_000 + self.draws.jitter[s]
        calls = self.calls(s, ts, text, decision, failed, u[4] < self.persona.reasoning_share)
        if failed:
            action_type, params, result, pnl = "HOLD", {}, None, 0.0
        else:
            action_type, params, result, pnl = self.execute(decision, minute)
        reward = round(pnl * 0.01, 4)
        self.total_reward += reward
        return self.step_dict(s, ts, minute, state, calls, action_type, params, result, failed, decision, reward)

    def calls(self, s: int, ts: int, text: str, decision: Decision, failed: bool, reasons: bool) -> list[Call]:
        """The LLM calls of a step as neutral records; shaped for stepsJson and llm_call_logs later."""
        latency = self.draws.latency[s]
        records = []
        user = text + '\nAnswer with one JSON action, e.g. {"action": "hold"}.'
        if reasons:
            prompt = text + "\nThink it through in two or three sentences before you act."
            records.append(Call("reasoning", None, prompt, decision.why[:1].upper() + decision.why[1:] + ".", None, ts, latency[0]))
            user = text + f"\nYour analysis: {records[0].answer}\nAnswer with one JSON action."
            ts += latency[0] + 40
        answer = BAD_ANSWER if failed else response_json(decision, self.w)
        action_type = "HOLD" if failed else ACTION_TYPES[decision.kind]
        records.append(Call("action", action_type, user, answer, decision.why if reasons else None, ts, latency[1]))
        self.last_call_end = ts + latency[1]
        return records

    def execute(self, d: Decision, minute: int) -> tuple[str, dict, dict | None, float]:
        w, p = self.w, self.portfolio
        if d.kind == "hold":
            return "HOLD", {}, {"held": True}, 0.0
        self.trade_count += 1
        if d.kind == "bet":
            market = w.market.markets[d.market]
            prob = market.prob[minute]
            price = min(max(prob if d.side == "YES" else 1.0 - prob, 0.02), 0.98)
            p.cash -= d.amount
            p.bets[d.market] = (d.side, d.amount, price)
            w.bet_volume[d.market] += d.amount
            pnl = round(d.amount * (1.0 - price) / price if market.outcome == d.side else -d.amount, 2)
            params = {"marketId": market.market_id, "side": d.side, "amount": d.amount, "probability": prob}
            return "BUY_PREDICTION", params, {"executed": True, "pnl": pnl}, pnl
        price, end = w.market.prices[d.ticker][minute], w.end_prices[d.ticker]
        params = {"ticker": w.market.tickers[d.ticker], "shares": d.shares, "price": price}
        if d.kind == "buy":
            shares, cost = p.holdings.get(d.ticker, (0, 0.0))
            p.holdings[d.ticker] = (shares + d.shares, (shares * cost + d.shares * price) / (shares + d.shares))
            p.cash -= d.shares * price
            pnl = round(d.shares * (end - price), 2)  # marked to the window's end price
            return "BUY_SHARES", params, {"executed": True, "pnl": pnl}, pnl
        held, cost = p.holdings[d.ticker]
        if d.shares < held:
            p.holdings[d.ticker] = (held - d.shares, cost)
        else:
            del p.holdings[d.ticker]
        p.cash += d.shares * price
        pnl = round(d.shares * (price - end), 2)  # what selling now gained over holding to the end
        return "SELL_SHARES", params, {"executed": True, "pnl": pnl}, pnl

    def step_dict(
        self, s: int, ts: int, minute: int, state: dict, calls: list[Call], action_type: str, params: dict,
        result: dict | None, failed: bool, decision: Decision, reward: float, error: str = PARSE_ERROR,
    ) -> dict:
        action = {"success": not failed, "parameters": params}
        if failed:
            action["error"] = error
        else:
            action["result"] = result
            if decision.kind != "hold" and decision.why:
                action["reasoning"] = decision.why
        step = {"stepNumber": s, "timestamp": ts, "environmentState": state, "providerAccesses": self.w.providers(minute)}
        if self.rich:
            step_id = f"{self.trajectory_id}:{s}"
            call_ids = [f"call_{self.tid_hex}{self.id_hex[:8]}_{s}_{i}" for i in range(len(calls))]
            step["stepId"] = step_id
            step["observation"] = {"minute": minute, "newsSeen": len(self.w.news(minute)[0])}
            state.update(timestamp=ts, agentPoints=self.trade_count * 10, portfolioValue=round(self.w.config.starting_balance + state["agentPnL"], 2),
                         custom={"persona": self.persona.name})
            step["llmCalls"] = [self.plugin_call(cid, c) for cid, c in zip(call_ids, calls)]
            action["actionName"] = action_type
            action["llmCallId"] = call_ids[-1]
            action["immediateReward"] = reward
            step["done"] = s == self.w.config.steps_per_window - 1
            step["metadata"] = {"persona": self.persona.name, "minute": minute}
        else:
            call_ids = [f"{self.trajectory_id}:{s}:{i}" for i in range(len(calls))]
            step["llmCalls"] = [self.legacy_call(c) for c in calls]
            action["actionType"] = action_type
        step["action"] = action
        step["reward"] = reward
        self.log_calls(s, call_ids, calls, step["llmCalls"])
        return step

    def legacy_call(self, c: Call) -> dict:
        call = {"model": self.persona.model, "modelVersion": MODEL_VERSION, "systemPrompt": self.system_prompt,
                "userPrompt": c.user, "response": c.answer, "temperature": self.persona.temperature,
                "maxTokens": MAX_TOKENS, "latencyMs": c.latency, "purpose": c.purpose}
        if c.reasoning:
            call["reasoning"] = c.reasoning
        if c.action_type:
            call["actionType"] = c.action_type
        return call

    def plugin_call(self, call_id: str, c: Call) -> dict:
        prompt_tokens, completion_tokens = self.tokens(c)
        call = {"callId": call_id, "timestamp": c.ts, "model": self.persona.model, "purpose": c.purpose,
                "messages": [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": c.user}],
                "response": c.answer, "temperature": self.persona.temperature, "topP": TOP_P, "maxTokens": MAX_TOKENS,
                "promptTokens": prompt_tokens, "completionTokens": completion_tokens, "latencyMs": c.latency}
        if c.reasoning:
            call["reasoning"] = c.reasoning
        if c.action_type:
            call["actionType"] = c.action_type
        return call

    def tokens(self, c: Call) -> tuple[int, int]:
        """Prompt and completion tokens: counted by the model's tokenizer where it ran, else estimated at 4 characters a token."""
        if c.prompt_tokens is not None and c.completion_tokens is not None:
            return c.prompt_tokens, c.completion_tokens
        return (len(self.system_prompt) + len(c.user)) // 4, len(c.answer) // 4 + 1

    def log_calls(self, s: int, call_ids: list[str], calls: list[Call], shaped: list[dict]) -> None:
        step_id = f"{self.trajectory_id}:{s}"
        rows = self.w.rows.llm_calls
        metadata = f'{{"persona": "{self.persona.name}", "shape": "{"plugin" if self.rich else "legacy"}"}}'
        for i, (call_id, c, call) in enumerate(zip(call_ids, calls, shaped)):
            prompt_tokens, completion_tokens = self.tokens(c)
            messages = json.dumps(call["messages"]) if self.rich else None
            rows.append((
                f"lcl_{self.id_hex}_{s}_{i}", self.trajectory_id, step_id, call_id, to_datetime(c.ts), c.latency,
                self.persona.model, c.purpose, c.action_type, self.system_prompt, c.user, messages, c.answer, c.reasoning,
                self.persona.temperature, MAX_TOKENS, TOP_P if self.rich else None, prompt_tokens, completion_tokens,
                prompt_tokens + completion_tokens, metadata,
            ))

    def finish(self, steps: list[dict]) -> None:
        w, p, config = self.w, self.portfolio, self.w.config
        balance = p.cash + sum(n * w.end_prices[t] for t, (n, _) in p.holdings.items())
        for market, (side, amount, price) in p.bets.items():
            balance += amount / price if w.market.markets[market].outcome == side else 0.0
        balance = round(balance, 2)
        pnl = round(balance - config.starting_balance, 2)
        start_ms = steps[0]["timestamp"] - 2_000
        end_ms = self.last_call_end + 500
        errors = sum(1 for step in steps if not step["action"]["success"])
        total_reward = round(self.total_reward, 4)
        window_id = None if self.draws.null_window else w.market.window_id
        metrics = json.dumps({"episodeLength": len(steps), "finalStatus": "completed", "finalBalance": balance,
                              "finalPnL": pnl, "tradesExecuted": self.trade_count, "postsCreated": 0, "errorCount": errors})
        metadata = json.dumps({"isTrainingData": True, "persona": self.persona.name, "stepShape": "plugin" if self.rich else "legacy",
                               "simulator": {"seed": config.seed, "windowKey": w.market.key}, "gameKnowledge": {},
                               **self.extra_metadata()})
        w.rows.steps += len(steps)
        w.rows.agent_pnl[self.agent_id] = (self.persona.name, pnl)
        w.rows.trajectories.append((
            f"c{self.id_hex}{self.tid_hex[:8]}", self.trajectory_id, self.agent_id, to_datetime(start_ms), to_datetime(end_ms),
            end_ms - start_ms, window_id, config.window_hours, f"{w.market.window_id}-{self.agent_id}", w.market.window_id, None,
            json.dumps(steps), json.dumps({"environmentReward": total_reward}), metrics, metadata, total_reward,
            len(steps), "completed", balance, None if self.draws.null_pnl else pnl, self.trade_count, 0,
            None, None, None, True, self.draws.evaluation, False, None,
        ))

    def extra_metadata(self) -> dict:
        return {}


def response_json(d: Decision, w: WindowPlay) -> str:
    if d.kind == "hold":
        return '{"action": "hold"}'
    if d.kind == "bet":
        return f'{{"action": "bet", "market": "{w.market.markets[d.market].market_id}", "side": "{d.side}", "amount": {d.amount:g}}}'
    return f'{{"action": "{d.kind}", "ticker": "{w.market.tickers[d.ticker]}", "shares": {d.shares}}}'


