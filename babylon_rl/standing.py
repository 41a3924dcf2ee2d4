"""Agent standing: which agents are better than their peers over many windows, with confidence.

One decision's outcome is mostly what the market did in its window; an agent's mean over
hundreds of windows cancels that luck. For each agent and window the measure is its P&L
minus the **median** P&L of the window's agents: every agent of a window faced the same
market, and a median (unlike a mean) cannot be dragged by one heavy loser or winner, which
would otherwise lift or sink every other agent of the window.

The interval of each agent's mean is a percentile bootstrap over windows (the windows are
resampled, an agent's mean taken over the resampled windows it played), at a level
corrected for the number of agents compared (Bonferroni: 95 % overall means 1 - 0.05 / k
per agent). An agent *stands above* when its corrected interval is above zero, *below*
when it is below zero.

Inputs are one row per (window, agent) with its P&L and decisions: the `babylon.agent_window_pnl`
mart (`cli.py agents`, any gateway), or a dataset's split (what `train --objective distill`
chooses its teachers on: train windows only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from babylon_rl.errors import DatasetError
from babylon_rl.evaluate.stats import Interval

RESAMPLES = 4000
LEVEL = 0.95
CHUNK = 250  # resamples per matrix product: the (resamples, windows) weights stay small


@dataclass(frozen=True)
class AgentStanding:
    agent_id: str
    windows: int
    decisions: int
    pnl_per_window: float
    pnl_per_decision: float
    vs_peers: Interval  # P&L minus the window's median agent, mean over windows, corrected interval
    judge_score: float | None  # mean judge score of its trajectories, where scores exist

    @property
    def standing(self) -> str:
        if self.vs_peers.low > 0:
            return "above"
        if self.vs_peers.high < 0:
            return "below"
        return "within"

    def to_dict(self) -> dict:
        return asdict(self) | {"vs_peers": self.vs_peers.to_dict(), "standing": self.standing}


@dataclass(frozen=True)
class Standing:
    source: str  # what was read, in words
    windows: list[str]  # the windows read, sorted
    agents: list[AgentStanding]  # best first
    level: float = LEVEL
    resamples: int = RESAMPLES
    seed: int = 0
    measure: str = field(default="P&L minus the window's median agent, per window")

    @property
    def corrected_level(self) -> float:
        return 1 - (1 - self.level) / max(len(self.agents), 1)

    @property
    def above(self) -> list[AgentStanding]:
        return [a for a in self.agents if a.standing == "above"]

    def get(self, agent_id: str) -> AgentStanding | None:
        return next((a for a in self.agents if a.agent_id == agent_id), None)

    def to_dict(self) -> dict:
        return {"source": self.source, "windows": len(self.windows), "first_window": self.windows[0] if self.windows else None,
                "last_window": self.windows[-1] if self.windows else None, "measure": self.measure, "level": self.level,
                "corrected_level": self.corrected_level, "resamples": self.resamples, "seed": self.seed,
                "agents": [a.to_dict() for a in self.agents]}


def standing(rows: pl.DataFrame, source: str, seed: int = 0, resamples: int = RESAMPLES, level: float = LEVEL) -> Standing:
    """The standing of every agent in `rows` (columns window_id, agent_id, pnl, decisions, optional judge_score; several rows
    of one (window, agent) are summed). Windows with a single agent compare it with nobody and are left out."""
    if rows.is_empty():
        raise DatasetError(f"{source} has no windows with agents: choose a range or split that has played windows")
    per_agent = _per_window_agent(rows)
    window_ids = sorted(per_agent["window_id"].unique().to_list())
    if not window_ids:
        raise DatasetError(f"{source} has no window with two or more agents: no agent can be compared with its peers")
    agent_ids = sorted(per_agent["agent_id"].unique().to_list())
    values, present = _matrix(per_agent, window_ids, agent_ids)
    corrected = 1 - (1 - level) / len(agent_ids)
    low, high = _bootstrap(values, present, resamples, seed, corrected)
    summary = per_agent.group_by("agent_id", maintain_order=True).agg(
        pl.len().alias("windows"), pl.col("decisions").sum(), pl.col("pnl").sum(), pl.col("vs_peers").mean(),
        pl.col("judge_score").mean()).sort("agent_id")
    agents = []
    for i, r in enumerate(summary.iter_rows(named=True)):
        agents.append(AgentStanding(
            r["agent_id"], r["windows"], int(r["decisions"]), r["pnl"] / r["windows"],
            r["pnl"] / r["decisions"] if r["decisions"] else 0.0, Interval(r["vs_peers"], float(low[i]), float(high[i])),
            r["judge_score"]))
    agents.sort(key=lambda a: (-a.vs_peers.value, a.agent_id))
    return Standing(source, window_ids, agents, level, resamples, seed)


def _per_window_agent(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per (window, agent) of windows with 2+ agents, with its P&L against the window's median agent."""
    score = pl.col("judge_score").mean() if "judge_score" in rows.columns else pl.lit(None, pl.Float64)
    grouped = rows.sort("window_id", "agent_id").group_by("window_id", "agent_id", maintain_order=True).agg(
        pl.col("pnl").cast(pl.Float64).fill_null(0.0).sum(), pl.col("decisions").cast(pl.Int64).fill_null(0).sum(),
        score.alias("judge_score"))
    return (grouped.with_columns(pl.len().over("window_id").alias("agents"))
            .filter(pl.col("agents") >= 2)
            .with_columns((pl.col("pnl") - pl.col("pnl").median().over("window_id")).alias("vs_peers")))


def _matrix(per_agent: pl.DataFrame, window_ids: list[str], agent_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(windows, agents) of P&L against the median (0 where absent) and whether the agent played the window."""
    w = {x: i for i, x in enumerate(window_ids)}
    a = {x: i for i, x in enumerate(agent_ids)}
    values = np.zeros((len(window_ids), len(agent_ids)))
    present = np.zeros_like(values)
    rows = np.array([w[x] for x in per_agent["window_id"]]), np.array([a[x] for x in per_agent["agent_id"]])
    values[rows] = per_agent["vs_peers"].to_numpy()
    present[rows] = 1.0
    return values, present


def _bootstrap(values: np.ndarray, present: np.ndarray, resamples: int, seed: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Each agent's percentile interval of its mean over resampled windows: a resample is a count per window, so a chunk
    of resamples is one matrix product with the (windows, agents) sums."""
    rng = np.random.default_rng([seed, values.shape[0]])
    means = []
    for start in range(0, resamples, CHUNK):
        n = min(CHUNK, resamples - start)
        counts = np.stack([np.bincount(rng.integers(0, values.shape[0], values.shape[0]), minlength=values.shape[0])
                           for _ in range(n)]).astype(float)
        played = counts @ present
        means.append(np.where(played > 0, (counts @ values) / np.where(played > 0, played, 1), np.nan))
    samples = np.concatenate(means)
    tail = (1 - level) / 2 * 100
    return np.nanpercentile(samples, tail, axis=0), np.nanpercentile(samples, 100 - tail, axis=0)


# -- sources ------------------------------------------------------------------------------
def of_marts(conn, since: str | None = None, until: str | None = None) -> pl.DataFrame:
    """(window, agent) rows of `babylon.agent_window_pnl` on a connection from `dataset.selection.open_marts`, windows
    starting in [since, until) (window ids, `YYYY-MM-DDTHH:MM`)."""
    where, args = [], []
    if since:
        where.append("window_id >= ?")
        args.append(since)
    if until:
        where.append("window_id < ?")
        args.append(until)
    sql = ("SELECT window_id, agent_id, pnl, actions AS decisions FROM babylon.agent_window_pnl"
           + (" WHERE " + " AND ".join(where) if where else ""))
    return conn.execute(sql, args).pl()


def of_split(dataset, split: str, scores: pl.DataFrame | None = None) -> pl.DataFrame:
    """(window, agent) rows of one split of a dataset, with the judge's scores where `scores` (trajectory_id, score) has them."""
    rows = dataset.read_split(split, ["trajectory_id", "window_id", "agent_id", "pnl", "actions"])
    if rows is None:
        raise DatasetError(f"dataset {dataset.name!r} has no {split} split; rebuild it with a {split} fraction above 0")
    rows = rows.rename({"actions": "decisions"})
    if scores is not None:
        rows = rows.join(scores.select("trajectory_id", pl.col("score").alias("judge_score")), on="trajectory_id", how="left")
    if rows.is_empty() or rows["agent_id"].null_count() == len(rows):
        raise DatasetError(f"the {split} split of dataset {dataset.name!r} has no agent ids: no agent can be ranked")
    return rows.drop("trajectory_id").filter(pl.col("agent_id").is_not_null())
