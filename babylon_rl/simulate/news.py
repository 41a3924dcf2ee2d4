"""The newsroom: every story worded afresh, as the game's LLM-written news is.

The game writes each article with an LLM at temperature 0.7-0.9, several outlets a story, each with its own slant
(elizaOS/babylon `ArticleGenerator`): almost no headline recurs. The simulator's stand-in composes each headline from
an event's phrasing, figures drawn for it (a percentage, an amount, a quarter, an analyst's firm), an outlet and, now
and then, the outlet's slant (a protective or a critical clause) or a mixed story (good and bad in one line, its
effect the story's). A story is picked up by a second outlet, in other words, a few minutes later about a third of
the time; the market moves once per story.

Phrasings and outlets come in two disjoint families: windows that start before `SimulationConfig.unseen_wording_from`
draw from the first, later windows from the second, so held-out windows read wording no train or validation window
had, and a claim measured on them measures reading, not recall.

`wording="templates"` keeps the 14 fixed sentences of earlier versions (`market.HEADLINES`), for comparison. Either
way the story (minute, stock, sentiment) and the market's moves are the same for a seed: the wording has its own
random stream. The sentiment is the simulator's own label: it moves prices and the personas read it; nothing that
trains reads it (the window contexts leave it out: models/marts/window_market_context.sql).
"""

from __future__ import annotations

import numpy as np

OUTLETS = (
    ("Babylon Wire", "The Ledger", "MarketWatchers", "Street Signal", "Capital Desk", "Ticker Times"),
    ("Exchange Herald", "Bull & Bear Daily", "The Trading Post", "Fintrend", "Open Interest", "Quarterly Review"),
)
FIRMS = ("Morgan Hale", "Goldmark", "Barrow & Finch", "Keystone Research", "Northbridge", "Sable Capital")
QUARTERS = ("Q1", "Q2", "Q3", "Q4", "first-quarter", "second-quarter", "third-quarter", "fourth-quarter")

# sentiment -> event -> phrasings; even-indexed phrasings form the first family, odd ones the second
EVENTS: dict[str, dict[str, tuple[str, ...]]] = {
    "BULLISH": {
        "earnings": (
            "{name} beats earnings expectations as {quarter} profit jumps {pct}",
            "{name} tops analyst forecasts with a {pct} rise in {quarter} profit",
            "{name} posts {quarter} earnings well above estimates",
            "{name} crushes {quarter} estimates, profit up {pct}",
            "{name} reports stronger-than-expected {quarter} results",
            "Blowout quarter: {name} earnings surge {pct}",
        ),
        "contract": (
            "{name} wins a {amount} government contract",
            "{name} lands {amount} defense deal",
            "{name} secures a major {amount} supply agreement",
            "{name} awarded {amount} contract by federal agency",
            "{name} signs {amount} multi-year deal with a top customer",
            "Big win for {name}: {amount} order book boost",
        ),
        "upgrade": (
            "{firm} upgrades {ticker} to buy, sees {pct} upside",
            "{ticker} raised to outperform at {firm}",
            "Analysts at {firm} turn bullish on {name}",
            "{firm} lifts {ticker} price target by {pct}",
            "{name} gets a strong-buy rating from {firm}",
            "{firm} names {ticker} a top pick for the year",
        ),
        "growth": (
            "{name} reports record user growth, up {pct}",
            "{name} sales climb {pct} to an all-time high",
            "{name} raises full-year guidance on strong demand",
            "Demand for {name} products soars {pct}",
            "{name} revenue accelerates for a third straight quarter",
            "{name} boosts its outlook after a record {quarter}",
        ),
        "buyback": (
            "{name} announces a {amount} share buyback",
            "{name} unveils {amount} stock repurchase plan",
            "{name} hikes its dividend by {pct}",
            "{name} board approves {amount} buyback",
            "{name} to return {amount} to shareholders",
            "{name} raises payout {pct} and adds a buyback",
        ),
    },
    "BEARISH": {
        "earnings": (
            "{name} misses revenue guidance as {quarter} sales fall {pct}",
            "{name} falls short of {quarter} estimates",
            "{name} profit slumps {pct}, missing forecasts",
            "{name} posts a surprise {quarter} loss",
            "{name} cuts its full-year outlook after a weak {quarter}",
            "Disappointing quarter: {name} revenue drops {pct}",
        ),
        "probe": (
            "Regulators open a probe into {name}",
            "{name} faces a federal investigation over its accounting",
            "{name} hit with a {amount} lawsuit from investors",
            "SEC subpoenas {name} over disclosures",
            "{name} fined {amount} by regulators",
            "Antitrust officials target {name} in a new inquiry",
        ),
        "leadership": (
            "{name} CEO resigns unexpectedly",
            "{name} chief executive steps down amid turmoil",
            "{name} CFO departs abruptly as the board reshuffles",
            "{name} ousts its CEO after a clash with the board",
            "Top executives exit {name} in a surprise shake-up",
            "{name} founder quits, leaving a leadership vacuum",
        ),
        "downgrade": (
            "{firm} downgrades {ticker} to sell",
            "{ticker} cut to underperform at {firm}",
            "Analysts at {firm} turn bearish on {name}",
            "{firm} slashes {ticker} price target by {pct}",
            "{name} gets a sell rating from {firm}, sees {pct} downside",
            "{firm} warns investors away from {ticker}",
        ),
        "recall": (
            "{name} recalls its flagship product",
            "{name} halts shipments after safety defects",
            "{name} pulls {amount} of products over quality failures",
            "Safety regulators order a {name} recall",
            "{name} plant shut down after a fire, output hit",
            "{name} warns of a {pct} drop in deliveries after supply failures",
        ),
    },
    "NEUTRAL": {
        "meeting": (
            "{name} schedules its annual shareholder meeting",
            "{name} sets the date for its {quarter} earnings call",
            "{name} to present at an industry conference next week",
            "{name} confirms the agenda of its investor day",
            "{name} will host a webcast for shareholders",
            "{name} announces the time of its annual meeting",
        ),
        "board": (
            "{name} names a new board member",
            "{name} appoints a director to its audit committee",
            "{name} adds a former banker to its board",
            "{name} board welcomes an independent director",
            "{name} hires a new head of communications",
            "{name} promotes a veteran to chief of staff",
        ),
        "office": (
            "{name} moves its headquarters across town",
            "{name} opens a new regional office",
            "{name} updates its logo",
            "{name} renames its customer app",
            "{name} refreshes its website design",
            "{name} relocates a team to a new campus",
        ),
    },
}
# the same story with good and bad in one line; its effect is the story's sentiment
MIXED: dict[str, tuple[str, ...]] = {
    "BULLISH": (
        "{name} misses on revenue but raises full-year profit guidance {pct}",
        "Despite a probe, {name} beats {quarter} estimates",
        "{name} CFO leaves as {quarter} profit tops forecasts",
        "{name} sales slip, yet margins hit a record",
    ),
    "BEARISH": (
        "{name} beats on sales but warns of a {pct} profit drop",
        "{name} wins a contract, then cuts its outlook",
        "Record users for {name}, but losses widen {pct}",
        "{name} upgrades its logo as its revenue falls {pct}",
    ),
}
SLANTS = {
    "protective": (", company says fundamentals remain strong", " - management upbeat", ", though long-term holders stay calm",
                   ", company stands by its strategy"),
    "critical": (", skeptics unconvinced", " - questions remain", ", critics say the story is overhyped",
                 ", raising eyebrows on the street"),
}
LAYOUTS = ("{outlet}: {text}", "{text} ({outlet})", "{text} | {outlet}", "{outlet} reports: {text}")
MIXED_SHARE, SLANT_SHARE, ECHO_SHARE = 0.1, 0.25, 0.35


def families(index: int, items: tuple) -> tuple:
    """The family `index` (0: before `unseen_wording_from`, 1: from it on) of `items`: every other one."""
    return items[index::2]


def word(rng: np.random.Generator, sentiment: str, name: str, ticker: str, family: int) -> str:
    """A fresh headline for a story of `sentiment` about `name` (`ticker`), from `family`'s phrasings and outlets."""
    if sentiment in MIXED and rng.random() < MIXED_SHARE:
        phrasing = _pick(rng, families(family, MIXED[sentiment]))
    else:
        event = _pick(rng, tuple(EVENTS[sentiment]))
        phrasing = _pick(rng, families(family, EVENTS[sentiment][event]))
    text = phrasing.format(name=name, ticker=ticker, pct=f"{int(rng.integers(3, 48))}%", amount=_amount(rng),
                           quarter=_pick(rng, QUARTERS), firm=_pick(rng, FIRMS))
    if rng.random() < SLANT_SHARE:
        text += _pick(rng, SLANTS[_pick(rng, tuple(SLANTS))])
    return _pick(rng, LAYOUTS).format(outlet=_pick(rng, OUTLETS[family]), text=text[0].upper() + text[1:])


def echoes(rng: np.random.Generator) -> bool:
    """Whether a second outlet picks the story up."""
    return bool(rng.random() < ECHO_SHARE)


def _pick(rng: np.random.Generator, items: tuple):
    return items[int(rng.integers(0, len(items)))]


def _amount(rng: np.random.Generator) -> str:
    value = float(rng.uniform(20, 4000))
    return f"${value / 1000:.1f} billion" if value >= 1000 else f"${value:.0f} million"


def phrasings() -> dict[str, list[str]]:
    """Every phrasing by the sentiment it moves its stock: the news rule's oracle (`evaluate/rules.py`) reads it."""
    out: dict[str, list[str]] = {s: [p for event in events.values() for p in event] for s, events in EVENTS.items()}
    for sentiment, mixed in MIXED.items():
        out[sentiment] += list(mixed)
    return out
