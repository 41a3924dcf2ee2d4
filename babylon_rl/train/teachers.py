"""Teachers chosen by the data: the agents whose standing on train windows is beyond the corrected interval.

The measure is P&L against the window's median agent (`standing.py`): it is what the game pays,
it cancels what the market did in each window (every agent of a window faced the same market),
and the median cannot be tilted by one outlier. Judge scores are shown beside it but do not
choose: the heuristic judge is itself a function of P&L, and a hosted judge is not always there.

A teacher must stand above its peers on the **train** windows (its interval, corrected for the
number of agents compared, above zero), then hold its sign on the **validation** windows (its mean
there above zero) before any training time is spent. Nothing here reads the eval split, nor a
name, persona or anything the simulator knows: agent ids and outcomes only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from babylon_rl import standing
from babylon_rl.errors import ConfigError, DatasetError
from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.rules import FRESH_MINUTES, fresh_headlines

if TYPE_CHECKING:
    from babylon_rl.train.decisions import DecisionData, Task

# which of the teachers' train answers distillation imitates (`train --teacher-answers`)
TEACHER_ANSWERS = {
    "all": "every answer of theirs",
    "news": f"their trades of the stock the latest headline of the last {FRESH_MINUTES} minutes names, and all their holds",
}


class NoTeachers(DatasetError):
    """No agent stands out on the train windows (or none held on validation): there is nothing to distill."""


@dataclass(frozen=True)
class Teachers:
    dataset: str
    train: standing.Standing
    validation: standing.Standing | None
    chosen: list[str]  # agent ids, best first
    dropped: dict[str, str]  # agent id -> why it stood above on train but was not kept

    def figures(self, agent_id: str) -> dict:
        """What the run records of one teacher: its train and validation standing."""
        on_validation = self.validation.get(agent_id) if self.validation else None
        return {"agent_id": agent_id, "train": self.train.get(agent_id).to_dict(),
                "validation": on_validation.to_dict() if on_validation else None}

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "measure": self.train.measure, "corrected_level": self.train.corrected_level,
                "train_windows": len(self.train.windows), "validation_windows": len(self.validation.windows) if self.validation else 0,
                "teachers": [self.figures(a) for a in self.chosen], "dropped": self.dropped}

    def line(self, label: str = "teachers") -> str:
        """One line: who teaches (or, as `label` says, what else they are to the run), with their train figures."""
        parts = []
        for agent in self.chosen:
            s = self.train.get(agent).vs_peers
            parts.append(f"{agent} {s.value:+.1f} [{s.low:+.1f}, {s.high:+.1f}]")
        return (f"{label} ({len(self.chosen)} of {len(self.train.agents)} agents, P&L against the window's median agent on "
                f"{len(self.train.windows)} train windows, {self.train.corrected_level:.1%} intervals): " + ", ".join(parts))


def choose(dataset, seed: int = 0) -> Teachers:
    """The agents above their peers on the dataset's train windows whose mean on its validation windows stays above zero.
    Raises NoTeachers (one line) when none is left."""
    train = standing.standing(standing.of_split(dataset, "train"), f"the train windows of dataset {dataset.name!r}", seed)
    validation = (standing.standing(standing.of_split(dataset, "validation"), f"the validation windows of dataset {dataset.name!r}", seed)
                  if dataset.has_split("validation") and not dataset.read_split("validation", ["window_id"]).is_empty() else None)
    chosen, dropped = [], {}
    for agent in train.above:
        held = validation.get(agent.agent_id) if validation else None
        if validation is not None and (held is None or held.vs_peers.value <= 0):
            dropped[agent.agent_id] = ("it played no validation window" if held is None else
                                       f"its validation mean is {held.vs_peers.value:+.2f} (not above zero)")
            continue
        chosen.append(agent.agent_id)
    if not chosen:
        why = f"; {len(dropped)} stood above on train but not on validation" if dropped else ""
        raise NoTeachers(f"no agent of dataset {dataset.name!r} stands above its peers beyond the "
                         f"{train.corrected_level:.1%} interval on its {len(train.windows)} train windows{why}: "
                         f"nothing to distill, and nothing is claimed (see `cli.py agents --dataset {dataset.name}`; "
                         "`train --objective menu` needs no teacher)")
    return Teachers(dataset.name, train, validation, chosen, dropped)


def follows_news(task: "Task") -> bool:
    """A logged answer that follows from the prompt's news (`--teacher-answers news`): a trade of the stock the latest
    headline of the last `FRESH_MINUTES` names, or a hold.

    What the headline says is left to the student: no template or sentiment is read, so the filter works on any game's
    headlines. The holds beside fresh news are kept because only they tell a bearish headline from a bullish one: on the
    quickstart's world the teachers mostly buy the stock a fresh bullish headline names and mostly hold after a bearish
    one, and the trades kept are right in direction more often than those dropped (the counts:
    docs/TRAINING.md#distilling-the-best-agents---objective-distill-teacherspy-standingpy)."""
    action = parse_action(task.logged_answer)
    if action is None:
        return False
    latest = next(fresh_headlines(task.request), None)
    return action.kind == "hold" or (action.kind in ("buy", "sell") and latest is not None and latest[0] == action.ticker)


def taught(data: "DecisionData", teachers: Teachers, answers: str = "all") -> "DecisionData":
    """`data` with only the train decisions of `teachers` (chosen on train windows, checked on validation: `choose`);
    with `answers="news"` only those whose answer follows from the prompt's news (`follows_news`)."""
    kept = [t for t in data.train if t.agent_id in teachers.chosen]
    if not any(t.request.resolve(parse_action(t.logged_answer)) is not None for t in kept):
        raise ConfigError(f"none of the {len(kept)} train decisions of the teachers ({', '.join(teachers.chosen)}) of dataset "
                          f"{data.name!r} has an answer that parses as a game action: nothing to distill")
    if answers == "news":
        kept = [t for t in kept if follows_news(t)]
        if not any(parse_action(t.logged_answer).kind != "hold" for t in kept):
            raise ConfigError(f"none of the teachers' train trades of dataset {data.name!r} is of the stock the latest "
                              f"fresh headline of its prompt names (--teacher-answers news keeps {TEACHER_ANSWERS['news']}): "
                              "use --teacher-answers all")
    return replace(data, train=kept, teachers=teachers, teacher_answers=answers, read_trajectory_ids=data.every_train_id)
