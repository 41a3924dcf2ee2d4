"""Reading an opened dataset (`babylon_rl.dataset.dataset.Dataset`) into judge groups, one per window."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import polars as pl

from babylon_rl.errors import ConfigError

if TYPE_CHECKING:
    from babylon_rl.dataset.dataset import Dataset

REQUIRED_SPLITS = ("train", "eval")  # validation is read when there (datasets since the 3-way split)
REQUIRED_COLUMNS = ("trajectory_id", "window_id", "messages", "pnl", "split")


@dataclass(frozen=True)
class Trajectory:
    """One trajectory as the judges see it: ids, the chat, and the dataset's features."""

    trajectory_id: str
    window_id: str
    split: str
    messages: tuple[dict, ...]
    pnl: float
    pnl_rank: int | None
    pnl_zscore: float | None
    win_rate: float | None
    actions: int
    trades: int
    errors: int
    window_agents: int
    no_signal: bool

    @cached_property  # read for the cache key and again for every cache row
    def content_hash(self) -> str:
        payload = [self.trajectory_id, list(self.messages), self.pnl, self.win_rate, self.actions, self.trades, self.errors]
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class WindowGroup:
    """The trajectories of one window (sorted by trajectory_id) and the window's ground truth."""

    window_id: str
    context_text: str
    trajectories: tuple[Trajectory, ...]

    @cached_property
    def context_hash(self) -> str:
        return hashlib.sha256(self.context_text.encode()).hexdigest()


def _read_rows(dataset: "Dataset") -> pl.DataFrame:
    missing = [f"{split}.parquet" for split in REQUIRED_SPLITS if not dataset.has_split(split)]
    if missing:
        raise dataset.damaged(f"{missing[0]} is missing")
    frame = pl.concat(dataset.read_splits(), how="diagonal_relaxed")
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"dataset {dataset.name!r} lacks the columns {', '.join(missing)}; rebuild it with `cli.py dataset build`")
    return frame.sort("window_id", "trajectory_id")


def _contexts(dataset: "Dataset") -> dict[str, str]:
    frame = dataset.read_contexts(["window_id", "context_text"])
    if frame is None:
        return {}
    return {row["window_id"]: row["context_text"] or "" for row in frame.iter_rows(named=True)}


def _int(value: object, default: int = 0) -> int:
    return default if value is None else int(value)  # type: ignore[arg-type]


def _trajectory(row: dict) -> Trajectory:
    try:
        messages = tuple(json.loads(row["messages"]))
    except (TypeError, ValueError):
        messages = ()
    return Trajectory(
        trajectory_id=str(row["trajectory_id"]),
        window_id=str(row["window_id"]),
        split=str(row["split"]),
        messages=messages,
        pnl=float(row.get("pnl") or 0.0),
        pnl_rank=row.get("pnl_rank"),
        pnl_zscore=row.get("pnl_zscore"),
        win_rate=row.get("win_rate"),
        actions=_int(row.get("actions")),
        trades=_int(row.get("trades")),
        errors=_int(row.get("errors")),
        window_agents=_int(row.get("window_agents"), 1),
        no_signal=bool(row.get("no_signal") or False),
    )


def load_groups(dataset: "Dataset") -> list[WindowGroup]:
    """Every window of the dataset (train and eval together) as one group, in window order."""
    frame = _read_rows(dataset)
    contexts = _contexts(dataset)
    groups: dict[str, list[Trajectory]] = {}
    for row in frame.iter_rows(named=True):
        traj = _trajectory(row)
        groups.setdefault(traj.window_id, []).append(traj)
    return [WindowGroup(wid, contexts.get(wid, ""), tuple(trajs)) for wid, trajs in groups.items()]
