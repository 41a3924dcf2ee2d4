"""The decision every objective trains on: one replayed decision point, priced by its window's ground truth.

A `Task` is what a decision trainer (GRPO on its own answers, the menu objectives, distillation of
teachers) reads: the compact observation prompt the policy answers (`evaluate/prompts.py`), what the
agent saw, the window's ground truth that prices any answer with the evaluation's own rules
(`evaluate/scoring.py`), who answered it in the logs and what it answered. `load_decision_data`
reads the train and validation splits of a dataset, never the eval one. `reward_of` is the reward
every objective shares: a trade's P&L (in `PNL_SCALE` dollars, clipped) plus ±`DIRECTION_BONUS` for its
direction; a hold 0; an unparseable answer `INVALID_REWARD`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.constant import candidates
from babylon_rl.evaluate.decision_points import Decision
from babylon_rl.evaluate.prompts import DecisionPrompt
from babylon_rl.evaluate.rules import fresh_headlines
from babylon_rl.evaluate.scoring import GroundTruth, Observation, Outcome, read_observation, score_action
from babylon_rl.settings import Home

if TYPE_CHECKING:
    from babylon_rl.dataset.dataset import Dataset

INVALID_REWARD = -2.0
PNL_SCALE = 100.0  # dollars per reward unit
PNL_CLIP = 2.0
DIRECTION_BONUS = 0.5
LONGEST_SAMPLE = 16  # prompts, longest by characters, tokenised to find the longest in tokens


@dataclass(frozen=True)
class Task:
    """One replayed decision: the prompt the policy answers and what prices its answer."""

    trajectory_id: str
    window_id: str
    request: DecisionPrompt
    observation: Observation
    truth: GroundTruth
    logged_answer: str  # what the logged agent answered (the imitation baseline's and distillation's target)
    agent_id: str = ""  # who answered it in the logs (distillation keeps its teachers' decisions)
    # hindsight: the trade (buy | sell) or hold its latest fresh headline calls for, learned from outcomes on the train
    # windows (train/credit.py); None: no fresh headline
    news_direction: str | None = None

    @classmethod
    def from_decision(cls, decision: Decision, truth: GroundTruth) -> "Task":
        return cls(decision.trajectory_id, decision.window_id, decision.request, read_observation(decision.observation), truth,
                   decision.request.rename_markets(decision.logged_answer), decision.agent_id)

    def price(self, answer: str) -> tuple[float, Outcome]:
        outcome = score_action(self.request.resolve(parse_action(answer)), self.observation, self.truth)
        return reward_of(outcome), outcome

    @property
    def situation(self) -> tuple:
        """What decisions share a target: the window and its latest fresh headline (None: its steps without fresh news).
        Decisions of one situation differ by their agent's portfolio, not by what the market did next."""
        return self.window_id, next(fresh_headlines(self.request), None)

    @property
    def menu(self) -> list[str]:
        """Every answer the counterfactual objective prices: hold, and buy or sell each of the window's stocks."""
        return candidates({self.window_id: self.truth})


def longest_prompts(tasks: list[Task], count: int = LONGEST_SAMPLE) -> list[Task]:
    """The `count` tasks with the longest prompts by characters: what a memory plan tokenises to find the longest pass."""
    return sorted(tasks, key=lambda t: len(t.request.messages[-1]["content"]))[-count:]


class Finding(Protocol):
    """What an objective's preparation of the train decisions found (the teachers' standing, the critic's credit): its
    console line, and what inputs.json records of it. The preparations live with their objectives (`teachers.taught`,
    `credit.credited`); the shared data only carries what they found."""

    def line(self) -> str: ...

    def to_dict(self) -> dict: ...


@dataclass
class DecisionData:
    """The train and validation decisions of a dataset; the eval split is never opened here."""

    name: str
    path: Path
    manifest: dict
    train: list[Task]
    validation: list[Task]
    teachers: "Finding | None" = None  # distillation: who the train decisions were kept for (`teachers.taught`)
    teacher_answers: str = "all"  # distillation: which of their answers were kept (`teachers.TEACHER_ANSWERS`)
    credit: "Finding | None" = None  # hindsight: what each train situation's headline calls for (`credit.credited`)
    read_trajectory_ids: frozenset[str] = frozenset()  # ids read besides the kept decisions' (the credit's windows)

    @property
    def read_ids(self) -> list[str]:
        """Every trajectory id this run read (recorded in the run directory: none may be an eval id)."""
        return sorted({t.trajectory_id for t in self.train} | {t.trajectory_id for t in self.validation} | self.read_trajectory_ids)

    @property
    def every_train_id(self) -> frozenset[str]:
        """What a step that reads every train decision (a standing) adds to the ids read, whichever it then keeps."""
        return frozenset(t.trajectory_id for t in self.train) | self.read_trajectory_ids


def load_decision_data(home: Home, name: str) -> DecisionData:
    from babylon_rl.dataset.dataset import Dataset

    dataset = Dataset.open(home, name)
    splits = {split: read_split_decisions(dataset, split) for split in ("train", "validation")}
    if not splits["train"]:
        raise ConfigError(f"dataset {name!r} has no decision points in its train split: rebuild it with more windows")
    return DecisionData(name, dataset.path, dataset.manifest, splits["train"], splits["validation"])


def read_split_decisions(dataset: "Dataset", split: str) -> list[Task]:
    """The decision points of one split as tasks, with the ground truth of that split's windows only."""
    from babylon_rl.evaluate.decision_points import COLUMNS, read_decisions, read_truths

    rows = dataset.read_split(split, COLUMNS)
    if rows is None:
        return []
    truths = read_truths(dataset, set(rows["window_id"].unique()))
    return [Task.from_decision(d, truths[d.window_id]) for d in read_decisions(rows, truths)]


def reward_of(outcome: Outcome) -> float:
    if not outcome.valid:
        return INVALID_REWARD
    if outcome.kind == "hold":
        # No direction term: a hold is "right" only when no stock moves 0.5 %, which almost never happens, so a -0.5
        # there pushed every selection and improvement toward trading where the claim (P&L, trade precision) does not.
        return 0.0
    pnl = float(np.clip(outcome.pnl / PNL_SCALE, -PNL_CLIP, PNL_CLIP))
    return pnl + (DIRECTION_BONUS if outcome.correct else -DIRECTION_BONUS)


@dataclass
class StepResult:
    loss: float
    kl: float
    grad_norm: float
    tokens: int
    seconds: float
    rewards: dict[str, float]  # trajectory id -> mean reward of its sampled answers this step
    reward_mean: float
    valid_rate: float
    correct_rate: float
    groups_used: int
    groups_skipped: int
    sample_seconds: float = 0.0
    answers: list[str] = field(default_factory=list, repr=False)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0
