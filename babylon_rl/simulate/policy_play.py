"""Agents whose decisions come from a model (`simulate --policy MODEL --policy-agents N`), beside the personas.

A policy agent observes what a persona observes, shown as the compact decision prompt that
training and evaluation use (`evaluate/prompts.py`), and answers with the game's JSON action.
The N policy agents of a window ask together at each step: a local model answers them in one
batch, an endpoint concurrently (`Player`).

An answer is executed under the game's rules: a buy needs the cash, a sell the shares, a bet
an open market not bet on yet. An answer that is no action, or that breaks a rule, is a failed
action, logged with the model's real answer and the reason, as the game logs one. Their rows
are the personas' rows in the plugin shape, with the model's id as the calls' model, persona
`policy`, and the real prompt, answer, latency and token counts. Their timing and ids come
from a random stream of their own, so the personas' rows are the same with and without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from babylon_rl.evaluate.actions import Action, parse_action
from babylon_rl.evaluate.policies import Reply
from babylon_rl.evaluate.prompts import DecisionPrompt, decision_prompt
from babylon_rl.settings import Home
from babylon_rl.simulate.agents import HOLD, Decision, Persona
from babylon_rl.simulate.trajectories import ACTION_TYPES, PARSE_ERROR, AgentPlay, Call, WindowPlay

POLICY_PERSONA = "policy"


class Player(Protocol):
    """A model answering decision prompts with what the game logs about each call (`evaluate/policies.py`)."""

    def replies(self, prompts: Sequence[DecisionPrompt]) -> list[Reply]: ...


def open_player(home: Home, model: str, base_url: str | None, device: str, agents: int,
                max_new_tokens: int = 32) -> tuple[Player, str]:
    """The model that plays, and its id in the logs: a served model's name, or a local model's path in the home."""
    from babylon_rl.evaluate.policies import EndpointPolicy, LocalPolicy
    from babylon_rl.model_names import in_home, resolve
    from babylon_rl.train.models import resolve_device

    if base_url:
        return EndpointPolicy(base_url, model, model, max_new_tokens, concurrency=agents), model
    ref = resolve(home, model)
    model_id = in_home(home, ref.path)
    return LocalPolicy(ref, model_id, max_new_tokens, agents, resolve_device(device)).load(), model_id


def policy_agent_id(index: int) -> str:
    return f"sim-policy-{index:04d}"


@dataclass(frozen=True)
class Ask:
    """What a policy agent saw at one step, and the prompt it was asked."""

    step: int
    minute: int
    state: dict
    prompt: DecisionPrompt


class PolicyAgentPlay(AgentPlay):
    def __init__(self, window: WindowPlay, index: int) -> None:
        config = window.config
        persona = Persona(POLICY_PERSONA, "", config.policy_model, 0.0, 0.0, 0.0)
        super().__init__(window, policy_agent_id(index), persona, window.policy_draws[index])
        self.steps: list[dict] = []
        self.previous = 0

    def ask(self, s: int) -> Ask:
        minute = s * self.w.interval + self.draws.phase
        text = self.observation_text(minute, self.previous, self.w.news(minute)[1])
        return Ask(s, minute, self.state(minute), decision_prompt(text))

    def act(self, ask: Ask, reply: Reply) -> None:
        action = ask.prompt.resolve(parse_action(reply.text))
        decision, error = self.decision(action, ask.minute)
        ts = self.w.start_ms + ask.minute * 60_000 + self.draws.jitter[ask.step]
        self.system_prompt = ask.prompt.messages[0]["content"]  # the prompt's own: it names a ticker of this observation
        call = Call("action", ACTION_TYPES[action.kind] if action else "HOLD", ask.prompt.messages[1]["content"],
                    reply.text, None, ts, reply.latency_ms, reply.prompt_tokens, reply.completion_tokens)
        self.last_call_end = ts + reply.latency_ms
        if error:
            action_type, params, result, pnl = call.action_type, self.attempted(action), None, 0.0
        else:
            action_type, params, result, pnl = self.execute(decision, ask.minute)
        reward = round(pnl * 0.01, 4)
        self.total_reward += reward
        self.steps.append(self.step_dict(ask.step, ts, ask.minute, ask.state, [call], action_type, params, result,
                                         bool(error), decision, reward, error or PARSE_ERROR))
        self.previous = ask.minute

    def decision(self, action: Action | None, minute: int) -> tuple[Decision, str]:
        """The action as the simulator's Decision, or the reason the game refuses it."""
        if action is None:
            return HOLD, PARSE_ERROR
        if action.kind == "hold":
            return HOLD, ""
        if action.kind == "bet":
            return self._bet(action)
        tickers = self.w.market.tickers
        if action.ticker not in tickers:
            return HOLD, f"unknown ticker {action.ticker}: the market lists {', '.join(tickers)}"
        ticker = tickers.index(action.ticker)
        price, p = self.w.market.prices[ticker][minute], self.portfolio
        if action.kind == "buy" and action.shares * price > p.cash:
            return HOLD, f"not enough cash: {action.shares} {action.ticker} cost ${action.shares * price:,.2f}, cash ${p.cash:,.2f}"
        held = p.holdings.get(ticker, (0, 0.0))[0]
        if action.kind == "sell" and action.shares > held:
            return HOLD, f"cannot sell {action.shares} {action.ticker}: holding {held}"
        return Decision(action.kind, ticker, action.shares), ""

    def _bet(self, action: Action) -> tuple[Decision, str]:
        ids = [m.market_id for m in self.w.market.markets]
        if action.market not in ids:
            return HOLD, f"unknown prediction market {action.market}"
        market = ids.index(action.market)
        if market in self.portfolio.bets:
            return HOLD, f"already bet on {action.market}"
        if action.amount > self.portfolio.cash:
            return HOLD, f"not enough cash: bet ${action.amount:,.2f}, cash ${self.portfolio.cash:,.2f}"
        return Decision("bet", market=market, side=action.side, amount=round(action.amount, 2)), ""

    @staticmethod
    def attempted(action: Action | None) -> dict:
        """The parameters of a refused action, as the game logs them; none for an answer that was no action."""
        if action is None or action.kind == "hold":
            return {}
        if action.kind == "bet":
            return {"marketId": action.market, "side": action.side, "amount": action.amount}
        return {"ticker": action.ticker, "shares": action.shares}

    def extra_metadata(self) -> dict:
        return {"policyModel": self.persona.model}


def play_policy_agents(window: WindowPlay, player: Player) -> None:
    """Every policy agent of the window, step by step: all of a step's prompts answered in one call."""
    agents = [PolicyAgentPlay(window, j) for j in range(len(window.policy_draws))]
    for s in range(window.config.steps_per_window):
        asks = [agent.ask(s) for agent in agents]
        for agent, ask, reply in zip(agents, asks, player.replies([a.prompt for a in asks])):
            agent.act(ask, reply)
    for agent in agents:
        agent.finish(agent.steps)
