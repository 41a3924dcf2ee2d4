"""The decision points of a dataset's windows as the logs have them: what each logged agent was asked, and what it
answered. Read from the split files `dataset build` wrote: the held-out ones for eval (`load_eval_set`), the train and
validation ones for eval's choices (`load_train_decisions`) and for training, which prices them as the decision
every objective trains on (`train/decisions.py`, its `Task`).

A decision point is an assistant turn that answers a request for an action: the user turn
right before it mentions a JSON action (as every action prompt of the game does), or the
logged answer itself parses as an action. Free-text reasoning turns ("Think it through...")
are context, not decisions. `Decision.prompt` is every logged message before that turn;
what a model is asked is `Decision.request`, the compact observation-only prompt of that step
(prompts.py): never the agent's own analysis, never the ground truth.

Turns of a model that played with that compact prompt itself (`simulate --policy`, or a trained
model in the game) are not decision points: their logged observation is already compact (prices
cut to whole dollars, markets renamed M1...), so the scorer could not price them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.prompts import SYSTEM_PROMPT, DecisionPrompt, decision_prompt
from babylon_rl.evaluate.scoring import GroundTruth

if TYPE_CHECKING:
    from babylon_rl.dataset.dataset import Dataset

COLUMNS = ["trajectory_id", "window_id", "agent_id", "messages"]
COMPACT_SYSTEM_HEAD = SYSTEM_PROMPT.split("\n", 1)[0]


@dataclass(frozen=True)
class Decision:
    window_id: str
    trajectory_id: str
    agent_id: str
    turn: int  # index of the assistant turn in the trajectory's messages
    prompt: tuple[dict, ...]
    logged_answer: str

    @property
    def observation(self) -> str:
        users = [m for m in self.prompt if m.get("role") == "user"]
        return str(users[-1].get("content", "")) if users else ""

    @cached_property  # parsed once: eval asks for it per policy, training per step
    def request(self) -> DecisionPrompt:
        """What a model under test answers: the observation of this step alone, compact."""
        return decision_prompt(self.observation)


@dataclass(frozen=True)
class EvalSet:
    dataset: str
    decisions: list[Decision]
    truths: dict[str, GroundTruth]

    @property
    def windows(self) -> list[str]:
        return sorted({d.window_id for d in self.decisions})

    def sample(self, per_window: int | None, seed: int) -> "EvalSet":
        """At most `per_window` decisions of each window, drawn with a seed (the same set on every run); None: all."""
        if per_window is None:
            return self
        by_window: dict[str, list[Decision]] = {}
        for decision in self.decisions:
            by_window.setdefault(decision.window_id, []).append(decision)
        rng = np.random.default_rng(seed)
        kept = []
        for window in sorted(by_window):
            found = by_window[window]
            chosen = sorted(rng.choice(len(found), per_window, replace=False)) if len(found) > per_window else range(len(found))
            kept += [found[i] for i in chosen]
        return EvalSet(self.dataset, kept, self.truths)


def _asks_for_action(message: dict) -> bool:
    return message.get("role") == "user" and "json" in str(message.get("content", "")).lower()


def _plays_the_compact_prompt(messages: list[dict]) -> bool:
    first = messages[0] if messages else {}
    return first.get("role") == "system" and str(first.get("content", "")).startswith(COMPACT_SYSTEM_HEAD)


def decision_points(window_id: str, trajectory_id: str, agent_id: str, messages: list[dict]) -> list[Decision]:
    if _plays_the_compact_prompt(messages):
        return []
    points = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or i == 0:
            continue
        answer = str(message.get("content", ""))
        if _asks_for_action(messages[i - 1]) or parse_action(answer) is not None:
            points.append(Decision(window_id, trajectory_id, agent_id, i, tuple(messages[:i]), answer))
    return points


def read_truths(dataset: Dataset, windows: set[str] | None = None) -> dict[str, GroundTruth]:
    """The ground truth of the dataset's windows (of `windows` only, when given: training never reads the eval ones)."""
    contexts = dataset.read_contexts(["window_id", "stocks_json", "prediction_markets_json"])
    if contexts is None:
        raise dataset.damaged(f"it has no ground truth ({dataset.contexts_path.name} is missing)")
    if windows is not None:
        contexts = contexts.filter(pl.col("window_id").is_in(sorted(windows)))
    return {r["window_id"]: GroundTruth.from_json(r["window_id"], r["stocks_json"], r["prediction_markets_json"])
            for r in contexts.iter_rows(named=True)}


def read_decisions(rows: pl.DataFrame, truths: dict[str, GroundTruth]) -> list[Decision]:
    """The decision points of a split's trajectories whose window has ground truth, in (window, trajectory) order."""
    decisions = []
    for r in rows.sort("window_id", "trajectory_id").iter_rows(named=True):
        if r["window_id"] in truths:
            decisions += decision_points(r["window_id"], r["trajectory_id"], r["agent_id"], json.loads(r["messages"]))
    return decisions


def load_eval_set(dataset: Dataset) -> EvalSet:
    name = dataset.name
    rows = dataset.read_split("eval", COLUMNS)
    if rows is None:
        raise dataset.damaged("eval.parquet is missing")
    if rows.is_empty():
        raise ConfigError(
            f"dataset {name!r} has no eval windows ({dataset.split_path('eval')} is empty): rebuild it with a larger "
            f"--eval-fraction or more windows, e.g. python cli.py dataset build --name {name} --eval-fraction 0.2 --force"
        )
    truths = read_truths(dataset)
    decisions = read_decisions(rows, truths)
    if not decisions:
        raise ConfigError(f"the eval windows of dataset {name!r} have no decision points (no assistant answers to action requests) with ground truth")
    return EvalSet(name, decisions, truths)


@dataclass(frozen=True)
class SelectionSet:
    """The decisions of the train and validation windows, with their ground truth: what choices may read."""

    decisions: list[Decision]
    truths: dict[str, GroundTruth]


def load_train_decisions(dataset: Dataset) -> SelectionSet:
    """The decision points of the train and validation windows (never the eval ones); empty without them."""
    frames = dataset.read_splits(("train", "validation"), COLUMNS)
    if not frames:
        return SelectionSet([], {})
    rows = pl.concat(frames)
    truths = read_truths(dataset, set(rows["window_id"].unique()))
    return SelectionSet(read_decisions(rows, truths), truths)
