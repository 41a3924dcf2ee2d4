"""The menu of valid actions at one decision, read from what the agent saw.

Every model answers a game decision by choosing one entry of this menu (`babylon_rl/evaluate/decide.py`),
as structured output does in vLLM (`guided_choice`) and OpenAI (`response_format` with a schema):
every answer is an action the game accepts, whatever the model's writing is worth. The menu is
built from the compact decision prompt alone (`prompts.decision_prompt`), so eval, arena,
`simulate --policy`, `improve`'s gate and `serve` build the same menu for the same observation:

- hold, always;
- buy `shares` of each listed stock, fewer where the cash does not cover `shares` (none where it
  covers not one). A compact price line keeps the dollars only (`ACME 223 +0.1%`), so a share is
  taken to cost one dollar more than it shows: a buy on the menu never costs more than the cash;
- sell `shares` of each stock held, or all of it where fewer are held.

Prediction-market bets are not on the menu: no objective trains them yet. Where the prompt has no
portfolio line in the game's layout (`Cash 9,507; holding ACME 50 @ $123.45; bets none; P&L +12`),
what the agent can afford and holds is unknown, and the menu is hold, buy and sell of each listed
stock at `shares`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.prompts import DecisionPrompt

HOLD_ANSWER = json.dumps({"action": "hold"})
PRICE = re.compile(r"^([A-Z][A-Z0-9.]{0,9}) ([0-9,]+) [+-][0-9.]+%$", re.M)
PORTFOLIO = re.compile(r"^Cash ([0-9,]+); holding (.*?); bets .*?; P&L [+-]?[0-9,]+$", re.M)
POSITION = re.compile(r"([A-Z][A-Z0-9.]{0,9}) ([0-9]+) @ \$")


@dataclass(frozen=True)
class Portfolio:
    """What the agent could spend and sell, as its prompt shows it."""

    cash: float  # the whole dollars shown (the cents are cut: never more than the agent has)
    holdings: dict[str, int]  # ticker -> shares held


def read_portfolio(text: str) -> Portfolio | None:
    """The portfolio line of a compact observation; None when the prompt has none in the game's layout."""
    line = PORTFOLIO.search(text)
    if line is None:
        return None
    holdings = {ticker: int(shares) for ticker, shares in POSITION.findall(line.group(2)) if int(shares) > 0}
    return Portfolio(float(line.group(1).replace(",", "")), holdings)


def valid_menu(prompt: DecisionPrompt, shares: int) -> list[str]:
    """Hold, then the buys, then the sells the game would accept at this decision (tickers sorted); module docstring."""
    text = str(prompt.messages[-1]["content"])
    prices = {ticker: float(price.replace(",", "")) for ticker, price in PRICE.findall(text)}
    portfolio = read_portfolio(text)
    buys, sells = [], []
    for ticker in sorted(prices):
        buy = shares if portfolio is None else min(shares, math.floor(portfolio.cash / (prices[ticker] + 1.0)))
        sell = shares if portfolio is None else min(shares, portfolio.holdings.get(ticker, 0))
        if buy > 0:
            buys.append(_trade("buy", ticker, buy))
        if sell > 0:
            sells.append(_trade("sell", ticker, sell))
    return [HOLD_ANSWER, *buys, *sells]


def on_menu(answer: str, prompt: DecisionPrompt, shares: int) -> str:
    """A reference's answer as an agent that decides from the menu gives it: the menu's entry of the same action and stock
    (sized as the menu sizes it), else hold. The best constant and the news rule are compared with the models this way:
    each plays by the rules that bind the models."""
    action = parse_action(answer)
    if action is None or action.kind not in ("buy", "sell"):
        return answer if action is not None and action.kind == "hold" else HOLD_ANSWER
    for entry in valid_menu(prompt, shares):
        chosen = parse_action(entry)
        if (chosen.kind, chosen.ticker) == (action.kind, action.ticker):
            return entry
    return HOLD_ANSWER


def _trade(kind: str, ticker: str, shares: int) -> str:
    return json.dumps({"action": kind, "ticker": ticker, "shares": shares})
