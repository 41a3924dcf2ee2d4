"""Agreement between judges, and writing a judge's scores back to the game database.

`compare` reads every `scores.<judge>.parquet` of a dataset and, window by window, the
Spearman rank correlation between each pair of judges and between each judge and the
realised P&L. Windows where either side is constant (or has < 2 trajectories) have no
defined correlation and are left out; the report gives the mean over the remaining
windows and how many there were.

`write_back` sets aiJudgeReward, aiJudgeReasoning, judgedAt and updatedAt (so the next
snapshot sees the change) on the game's trajectories by trajectoryId, in one transaction.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import polars as pl

from babylon_rl import db
from babylon_rl.errors import ConfigError
from babylon_rl.dataset.dataset import Dataset
from babylon_rl.settings import Home


@dataclass(frozen=True)
class Agreement:
    left: str
    right: str
    mean_spearman: float | None
    windows: int


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    ra = pl.Series(a).rank("average").to_numpy()
    rb = pl.Series(b).rank("average").to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def _judge_scores(dataset: Dataset) -> dict[str, pl.DataFrame]:
    columns = ["trajectory_id", "window_id", "score"]
    found = {judge: dataset.read_scores(judge, columns) for judge in dataset.judges()}
    if not found:
        raise ConfigError(f"dataset {dataset.name!r} has no scores yet: run `cli.py score --dataset {dataset.name} --judge heuristic` first")
    return found  # type: ignore[return-value]


def _pnl(dataset: Dataset) -> pl.DataFrame:
    return pl.concat(dataset.read_splits(columns=["trajectory_id", "window_id", "pnl"])).rename({"pnl": "score"})


def _agreement(left: str, right: str, a: pl.DataFrame, b: pl.DataFrame) -> Agreement:
    joined = a.join(b.select("trajectory_id", pl.col("score").alias("other")), on="trajectory_id")
    values = []
    for _, part in joined.group_by("window_id"):
        rho = spearman(part["score"].to_numpy(), part["other"].to_numpy())
        if rho is not None:
            values.append(rho)
    return Agreement(left, right, float(np.mean(values)) if values else None, len(values))


def compare(home: Home, name: str) -> list[Agreement]:
    dataset = Dataset.open(home, name)
    judges = _judge_scores(dataset)
    pnl = _pnl(dataset)
    pairs = [_agreement(a, b, judges[a], judges[b]) for a, b in itertools.combinations(judges, 2)]
    return pairs + [_agreement(judge, "pnl", frame, pnl) for judge, frame in judges.items()]


def write_back(home: Home, name: str, judge: str, url: str) -> int:
    """Write the judge's scores of dataset `name` to the game's trajectories; returns rows updated."""
    scores = Dataset.open(home, name).read_scores(judge)
    if scores is None:
        raise ConfigError(f"dataset {name!r} has no complete {judge} scores to write back; run `cli.py score` first")
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = [(r["score"], r["explanation"], now, now, r["trajectory_id"]) for r in scores.iter_rows(named=True)]
    sql = ('UPDATE "trajectories" SET "aiJudgeReward" = %s, "aiJudgeReasoning" = %s, "judgedAt" = %s, '
           '"updatedAt" = %s WHERE "trajectoryId" = %s')
    with db.connect(url) as conn:
        with conn.transaction():
            with conn.cursor() as cur:
                cur.executemany(sql, rows, returning=False)
                updated = cur.rowcount
    return updated
