"""Credit where the noise averages out, for the news: what each recurring headline did to its stock on the train windows.

`hindsight` fits, in each decision after a fresh headline, the trade of the stock it names that paid to the window's
end. One decision's move is the news's drift plus the rest of the hour's noise: on the quickstart's train decisions the
named stock moved the headline's way 0.79-0.85 of the time after a bullish or bearish headline and either way after a
neutral one. Fitted to each decision's own move, a student trades every fresh headline, the neutral ones a coin flip
that costs trade precision (docs/TRAINING.md#the-headline-standing).

The same headline runs in dozens of train windows, about different stocks. Its mean move over them cancels the noise,
as an agent's mean over hundreds of windows does (`standing.py`): on the quickstart's world every bullish or bearish
headline's mean stands 4.7-7.9 standard errors from zero, no neutral one beyond 2.2. So `hindsight` fits, after a
headline that recurs (`MIN_SITUATIONS` train situations or more), the trade its mean move calls for where that mean
stands beyond its interval, and hold where it does not; after a headline too rare to judge, each decision's own move as
before. The interval is mean ± z · sd / √n over the headline's situations at a level corrected for the number of
headlines judged (Bonferroni, as the agents' standing is).

Headlines are compared with the named stock's ticker and company name masked ("{name} beats earnings expectations"),
so one headline pools its windows across stocks. The company name is the game's name for the ticker
(`simulate.market.company_name`, which the renamed training copies use too, `cached.renamed`); where a game's headlines
name a company otherwise, a headline pools within its stock only. No template or sentiment is read: the standing
finds the neutral headlines from the moves. Train decisions only; a situation (a window and its latest fresh
headline, `Task.situation`) counts once, at its first decision.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from babylon_rl.evaluate.stats import Interval
from babylon_rl.simulate.market import company_name

if TYPE_CHECKING:
    from babylon_rl.train.decisions import Task

MIN_SITUATIONS = 10  # train situations a headline must have run in to be judged by its mean
LEVEL = 0.95


@dataclass(frozen=True)
class HeadlineMove:
    headline: str  # the named stock's ticker and company name masked
    situations: int
    move: Interval  # the named stock's mean move to the window's end, %, at the standing's corrected level

    @property
    def direction(self) -> str:
        """The trade this headline calls for: buy (its mean move's interval above zero), sell (below), or hold."""
        return "buy" if self.move.low > 0 else "sell" if self.move.high < 0 else "hold"

    def to_dict(self) -> dict:
        return {"headline": self.headline, "situations": self.situations, "move_pct": self.move.to_dict(), "direction": self.direction}


@dataclass(frozen=True)
class HeadlineStanding:
    moves: dict[str, HeadlineMove]  # masked headline -> its move, for every headline judged
    rare: int  # distinct headlines that ran in fewer than MIN_SITUATIONS train situations: not judged
    level: float = LEVEL

    @property
    def corrected_level(self) -> float:
        return 1 - (1 - self.level) / max(len(self.moves), 1)

    def direction(self, task: "Task") -> str | None:
        """What the task's latest fresh headline calls for (buy, sell or hold); None: no fresh headline, or one not judged."""
        latest = task.situation[1]
        judged = self.moves.get(masked(*latest)) if latest else None
        return judged.direction if judged else None

    def credited(self, tasks: list["Task"]) -> list["Task"]:
        """The tasks with `news_direction` set where their headline was judged."""
        return [replace(task, news_direction=self.direction(task)) for task in tasks]

    def line(self) -> str:
        calls = [m.direction for m in self.moves.values()]
        return (f"headlines: {len(self.moves)} recur in {MIN_SITUATIONS}+ train situations ({self.rare} rarer ones not judged); "
                f"{calls.count('buy')} move their stock up and {calls.count('sell')} down beyond the {self.corrected_level:.2%} "
                f"interval (hindsight fits their trade), {calls.count('hold')} do not (hindsight fits hold)")

    def to_dict(self) -> dict:
        return {"min_situations": MIN_SITUATIONS, "level": self.level, "corrected_level": self.corrected_level, "rare": self.rare,
                "headlines": [m.to_dict() for m in sorted(self.moves.values(), key=lambda m: -m.move.value)]}


def masked(ticker: str, headline: str) -> str:
    return headline.replace(company_name(ticker), "{name}").replace(ticker, "{ticker}")


def headline_standing(tasks: list["Task"], level: float = LEVEL) -> HeadlineStanding:
    """Every recurring headline's mean move over the train situations it ran in (module docstring)."""
    moves: dict[str, list[float]] = {}
    seen = set()
    for task in tasks:
        situation = task.situation
        latest = situation[1]
        if latest is None or situation in seen:
            continue
        seen.add(situation)
        now, stock = task.observation.prices.get(latest[0]), task.truth.stocks.get(latest[0])
        if now and stock is not None:
            moves.setdefault(masked(*latest), []).append((stock.end / now - 1) * 100)
    judged = {h: np.array(m) for h, m in moves.items() if len(m) >= MIN_SITUATIONS}
    z = NormalDist().inv_cdf(1 - (1 - level) / max(len(judged), 1) / 2)
    return HeadlineStanding({h: _move(h, m, z) for h, m in judged.items()}, len(moves) - len(judged), level)


def _move(headline: str, moves: np.ndarray, z: float) -> HeadlineMove:
    mean, half = float(moves.mean()), z * float(moves.std(ddof=1)) / np.sqrt(len(moves))
    return HeadlineMove(headline, len(moves), Interval(mean, float(mean - half), float(mean + half)))
