"""Observation-only, compact decision prompts: what the agent saw at one step, and nothing it said.

A logged action prompt is the agent's system prompt (its persona), the observation and, when
the agent reasoned first, its own analysis ("Your analysis: ... buying"). Handing that to a
model under test gives it the behaviour policy's decision. So every model, in training and in
evaluation, answers the same prompt built from the observation alone:

- one fixed system prompt with the game's action format (no persona, no strategy hint), and the
  answer opened with `ANSWER_PREFIX` and closed at the first `STOP_TEXT`;
- the observation text of that step, cut before the first agent-written or instruction part
  (`CUT_MARKERS`), and shortened line by line where it has the simulator's (and the game's)
  layout: digits are tokens of their own in most tokenizers, so `ACME $223.79 (+0.13% since your
  last look)` becomes `ACME 223 +0.1%`, and a prediction market's long id becomes `M1` (answers
  naming M1 are mapped back to the id before they are priced). Lines of any other layout pass
  through unchanged.

One decision, one short prompt (~200 SmolLM2 tokens), not the conversation so far.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace

from babylon_rl.evaluate.actions import Action

SYSTEM_PROMPT = (
    "You trade in the Babylon market game. Reply with one JSON action, one of:\n"
    '{{"action": "buy", "ticker": "{ticker}", "shares": 10}}\n{{"action": "sell", "ticker": "{ticker}", "shares": 10}}\n'
    '{{"action": "bet", "market": "M1", "side": "YES", "amount": 100}}\n{{"action": "hold"}}'
)  # {ticker}: a stock of the observation (`example_ticker`), so that the examples name one that exists
TICKER = re.compile(r"^([A-Z][A-Z0-9.]{0,9}) [0-9,]+ [+-][0-9.]+%$", re.M)
# The answer starts with this text, written into the prompt after the assistant's turn opens, and
# ends at its first "}" (the actions are flat objects): a small model then always answers in the
# format, and no answer runs on past its action.
ANSWER_PREFIX = '{"action": "'
STOP_TEXT = "}"
CUT_MARKERS = ("\nYour analysis:", "\nAnswer with", "\nThink it through")
MARKET_LINE = re.compile(
    r'^\s*(\S+) "Will ([A-Z][A-Z0-9.]{0,9}) close the (?:hour|window) (above|below) \$([0-9.,]+)\?" YES at (\d+%)$', re.M)

_REWRITES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"^It is (\d\d:\d\d) UTC; window \S+ closes in (\d+) min\.$", re.M), r"\1, \2 min left"),
    (re.compile(r"^Prices:$\n?", re.M), ""),
    (re.compile(r"^\s*([A-Z][A-Z0-9.]{0,9}) \$([0-9,]+)\.[0-9]+ \(([+-][0-9]+\.[0-9])[0-9]*% since your last look\)$", re.M),
     r"\1 \2 \3%"),
    (re.compile(r"^News so far this window:$", re.M), "News:"),
    (re.compile(r"^\s*\[(\d\d:\d\d)\] ", re.M), r"\1 "),
    (re.compile(r"^Prediction markets:$", re.M), "Markets:"),
    (re.compile(r"^Your portfolio: cash \$([0-9,]+)\.[0-9]+; positions: (.*?); open bets: (.*?); "
                r"P&L so far \$([+-][0-9,]+)\.[0-9]+\.$", re.M),
     r"Cash \1; holding \2; bets \3; P&L \4"),
    (re.compile(r"^What do you do\?$\n?", re.M), ""),
)


@dataclass(frozen=True)
class DecisionPrompt:
    """The chat a model answers at one decision, and the short market names it uses (M1 -> the market id)."""

    messages: list[dict]
    markets: dict[str, str]

    def resolve(self, action: Action | None) -> Action | None:
        """An action in the prompt's names turned into the game's: a bet on M1 becomes a bet on M1's market id."""
        if action is not None and action.kind == "bet" and action.market in self.markets:
            return replace(action, market=self.markets[action.market])
        return action

    def rename_markets(self, answer: str) -> str:
        """A logged answer in the prompt's names (a market id becomes M1), as a model answering this prompt would write it."""
        for short, market_id in self.markets.items():
            answer = answer.replace(f'"{market_id}"', f'"{short}"')
        return answer


def observation_text(user_turn: str) -> str:
    """The observation part of an action request: everything before the agent's analysis or the instructions."""
    cut = min((i for i in (user_turn.find(m) for m in CUT_MARKERS) if i >= 0), default=len(user_turn))
    return user_turn[:cut].strip()


def compact(observation: str) -> str:
    text = observation
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return text.strip()


def example_ticker(text: str) -> str:
    """One of the observation's tickers, picked by a hash of the observation: the same prompt always shows the same
    example, and across prompts the example is no hint (with one fixed example a small model answers it everywhere)."""
    tickers = TICKER.findall(text)
    if not tickers:
        return "ACME"
    return tickers[int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % len(tickers)]


def decision_prompt(user_turn: str) -> DecisionPrompt:
    """The fixed system prompt and the compact observation; prediction markets are named M1, M2, ..."""
    markets: dict[str, str] = {}

    def short_name(match: re.Match) -> str:
        name = f"M{len(markets) + 1}"
        markets[name] = match.group(1)
        return f"{name}: {match.group(2)} {match.group(3)} {match.group(4)}? YES {match.group(5)}"

    text = compact(MARKET_LINE.sub(short_name, observation_text(user_turn)))
    system = SYSTEM_PROMPT.format(ticker=example_ticker(text))
    return DecisionPrompt([{"role": "system", "content": system}, {"role": "user", "content": text}], markets)
