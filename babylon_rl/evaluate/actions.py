"""The game's JSON action vocabulary, parsed from a model's answer.

An answer is valid when it contains one JSON object (alone, inside text or a ```json fence)
with `"action"` one of buy / sell / bet / hold and that action's fields:
buy/sell `ticker` (text) and `shares` (a whole number > 0); bet `market` (text), `side`
(YES/NO, any case) and `amount` (> 0); hold nothing. The first object that parses wins.
Anything else (prose, broken JSON, unknown actions, missing or wrong fields) is invalid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

KINDS = ("buy", "sell", "bet", "hold")


@dataclass(frozen=True)
class Action:
    kind: str  # buy | sell | bet | hold
    ticker: str = ""
    shares: int = 0
    market: str = ""
    side: str = ""
    amount: float = 0.0


def _objects(text: str):
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict):
            yield value
        start = text.find("{", start + 1)


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number > 0 and number == number and number != float("inf") else None


def _action(obj: dict) -> Action | None:
    kind = str(obj.get("action", "")).strip().lower()
    if kind == "hold":
        return Action("hold")
    if kind in ("buy", "sell"):
        ticker, shares = obj.get("ticker"), _positive(obj.get("shares"))
        if not isinstance(ticker, str) or not ticker.strip() or shares is None or shares != int(shares):
            return None
        return Action(kind, ticker=ticker.strip().upper(), shares=int(shares))
    if kind == "bet":
        market, side, amount = obj.get("market"), str(obj.get("side", "")).strip().upper(), _positive(obj.get("amount"))
        if not isinstance(market, str) or not market.strip() or side not in ("YES", "NO") or amount is None:
            return None
        return Action("bet", market=market.strip(), side=side, amount=amount)
    return None


def parse_action(text: str | None) -> Action | None:
    """The action in a model's answer, or None when the answer is not a valid action."""
    if not text:
        return None
    for obj in _objects(text):
        if "action" in obj:
            return _action(obj)
    return None
