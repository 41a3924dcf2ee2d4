"""The rule that reads the news: the reference a learner on the simulated market could reach.

Buy (sell) the ticker of the latest bullish (bearish) headline of the last `FRESH_MINUTES`,
read from the compact decision prompt (`prompts.py`: `12:23, 37 min left` and `12:13 ACME:
Acme Corp beats earnings expectations`); with no fresh telling headline, the fallback answer.
Headlines are told apart by the simulator's own wording (its 14 templates and the newsroom's
phrasings, `simulate/news.py`), so the rule knows what the text means and no model has to: an
oracle, the upper reference for the benchmark and the test that a policy which reads the news is
recognised, never a trained policy nor a training input.
"""

from __future__ import annotations

import json
import re
from typing import Iterator

from babylon_rl.evaluate.prompts import DecisionPrompt
from babylon_rl.simulate.market import HEADLINES
from babylon_rl.simulate.news import MIXED, phrasings

FRESH_MINUTES = 30
CLOCK = re.compile(r"^(\d\d):(\d\d)", re.M)
NEWS_LINE = re.compile(r"^(\d\d):(\d\d) ([A-Z][A-Z0-9.]{0,9}): (.*)$", re.M)
SLOT = re.compile(r"\\\{[a-z]+\\\}")


def _pattern(phrasing: str) -> re.Pattern:
    return re.compile(SLOT.sub(".+?", re.escape(phrasing)))


# the mixed stories first: their lines hold a phrase of the other sentiment
_WORDING = [(s, _pattern(p)) for s, mixed in MIXED.items() for p in mixed] + [
    (s, _pattern(p)) for s, wording in phrasings().items() for p in wording if p not in MIXED.get(s, ())] + [
    (s, _pattern(t)) for s, templates in HEADLINES.items() for t in templates]


def headline_sentiment(headline: str) -> str | None:
    """BULLISH, BEARISH or NEUTRAL for a headline the simulator wrote (a template, or a newsroom phrasing within its
    outlet's line), else None."""
    return next((s for s, pattern in _WORDING if pattern.search(headline)), None)


def fresh_headlines(prompt: DecisionPrompt) -> Iterator[tuple[str, str]]:
    """(ticker, headline) of the prompt's headlines of the last `FRESH_MINUTES`, the latest first."""
    for age, ticker, headline in _headlines_by_age(prompt):
        if age > FRESH_MINUTES:
            return
        yield ticker, headline


def latest_headline_age(prompt: DecisionPrompt) -> int:
    """Minutes from the prompt's latest headline to its clock (0 without one)."""
    return next((age for age, _, _ in _headlines_by_age(prompt)), 0)


def _headlines_by_age(prompt: DecisionPrompt) -> Iterator[tuple[int, str, str]]:
    """(minutes since it was published, ticker, headline) of every headline of the prompt, the latest first."""
    text = prompt.messages[-1]["content"]
    clock = CLOCK.search(text)
    now = int(clock.group(1)) * 60 + int(clock.group(2)) if clock else 0
    for hours, minutes, ticker, headline in reversed(NEWS_LINE.findall(text)):
        yield (now - int(hours) * 60 - int(minutes)) % 1440, ticker, headline


def latest_fresh_headline(prompt: DecisionPrompt) -> tuple[str, str] | None:
    """(ticker, BULLISH | BEARISH) of the latest telling headline of the last `FRESH_MINUTES`, or None."""
    for ticker, headline in fresh_headlines(prompt):
        sentiment = headline_sentiment(headline)
        if sentiment in ("BULLISH", "BEARISH"):
            return ticker, sentiment
    return None


def news_rule(prompt: DecisionPrompt, fallback: str, shares: int = 10) -> str:
    news = latest_fresh_headline(prompt)
    if news is None:
        return fallback
    ticker, sentiment = news
    return json.dumps({"action": "buy" if sentiment == "BULLISH" else "sell", "ticker": ticker, "shares": shares})
