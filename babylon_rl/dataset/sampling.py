"""Group cap, dropout inside windows, group features and the train/validation/eval split, all in Polars.

Works on the candidates without their messages (a few numeric columns per row);
the result names the rows to keep, in output order, with their computed columns.

Order inside a window: every trajectory has a seeded `sample_key`; an agent's first
trajectory (by key) comes before anyone's second, so keeping the first k trajectories
of a window keeps min(k, agents) distinct agents.

1. Cap: each window keeps its first `max_group_size` trajectories.
2. Dropout: with `available` trajectories left, rate = min(max_dropout, 1 - target/available)
   (0 when available <= target) and the budget is floor(rate * available). Each window
   can give up its surplus above `min_agents`; the budget is spread over windows in
   proportion to their surplus. When the surplus is too small, whole windows go
   (the smallest first, ties by seed) rather than leaving a group below min_agents,
   and never more than the budget: the removal is at most rate * available.
3. Group features inside the kept group: pnl_rank (1 = best, ties share), pnl_zscore,
   group_size, no_signal (max - min P&L <= tolerance).
4. Split by window: the latest ceil(eval_fraction * windows) windows are eval
   (at least 1 when there are 2+ windows and eval_fraction > 0, never all of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from babylon_rl.dataset.params import NO_SIGNAL_TOLERANCE, BuildParams

_META_COLUMNS = ["window_id", "window_start", "agent_id", "trajectory_id", "pnl", "sample_key"]


@dataclass(frozen=True)
class DropoutReport:
    available: int  # trajectories after eligibility filters and the group cap
    rate: float  # the rate applied: min(max_dropout, 1 - target / available), 0 if available <= target
    budget: int  # floor(rate * available)
    removed_by_cap: int
    removed_by_dropout: int  # inside windows plus whole windows
    windows_dropped: int
    trajectories_in_dropped_windows: int

    @property
    def removed_fraction(self) -> float:
        return self.removed_by_dropout / self.available if self.available else 0.0


@dataclass(frozen=True)
class Plan:
    rows: pl.DataFrame  # row (index into the candidates) + computed columns, in output order
    dropout: DropoutReport
    eval_windows: int
    validation_windows: int = 0


def dropout_rate(available: int, target: int, max_dropout: float) -> float:
    if available <= target:
        return 0.0
    return min(max_dropout, 1.0 - target / available)


def eval_window_count(windows: int, eval_fraction: float) -> int:
    if windows < 2 or eval_fraction <= 0:
        return 0
    return min(windows - 1, max(1, math.ceil(eval_fraction * windows - 1e-9)))


def plan(candidates: pl.DataFrame, params: BuildParams) -> Plan:
    rows = _order_in_windows(candidates.select(_META_COLUMNS).with_row_index("row"))
    windows = _window_sizes(rows, params)
    windows, report = _allocate(windows, params)
    kept = rows.join(windows.select("window_id", "keep"), on="window_id").filter(pl.col("pos") < pl.col("keep"))
    kept = _group_features(kept)
    kept, eval_windows, validation_windows = _split(kept, params.validation_fraction, params.eval_fraction)
    return Plan(rows=kept, dropout=report, eval_windows=eval_windows, validation_windows=validation_windows)


def _order_in_windows(rows: pl.DataFrame) -> pl.DataFrame:
    with_dup = rows.sort("window_id", "agent_id", "sample_key", "trajectory_id").with_columns(
        dup=pl.int_range(pl.len()).over("window_id", "agent_id")
    )
    return with_dup.sort("window_id", "dup", "sample_key", "trajectory_id").with_columns(
        pos=pl.int_range(pl.len()).over("window_id")
    )


def _window_sizes(rows: pl.DataFrame, params: BuildParams) -> pl.DataFrame:
    return (
        rows.group_by("window_id")
        .agg(n=pl.len().cast(pl.Int64), window_key=pl.col("sample_key").min())
        .with_columns(capped=pl.min_horizontal("n", pl.lit(params.max_group_size)))
        .with_columns(surplus=pl.col("capped") - params.min_agents)
        # Smallest windows go first when whole windows must be dropped; the seed breaks ties.
        .sort("capped", "window_key", "window_id")
    )


def _allocate(windows: pl.DataFrame, params: BuildParams) -> tuple[pl.DataFrame, DropoutReport]:
    available = int(windows["capped"].sum())
    rate = dropout_rate(available, params.target_trajectories, params.max_dropout)
    budget = math.floor(rate * available + 1e-9)
    surplus = int(windows["surplus"].sum())
    whole = 0 if surplus >= budget else min((budget - surplus) // params.min_agents, windows.height - 1)
    windows = windows.with_columns(dropped=pl.int_range(pl.len()) < whole)
    dropped_size = int(windows.filter("dropped")["capped"].sum())
    left_surplus = surplus - int(windows.filter("dropped")["surplus"].sum())
    inside = max(0, min(budget - dropped_size, left_surplus))
    windows = _spread(windows, inside, left_surplus)
    report = DropoutReport(
        available=available,
        rate=rate,
        budget=budget,
        removed_by_cap=int((windows["n"] - windows["capped"]).sum()),
        removed_by_dropout=dropped_size + inside,
        windows_dropped=whole,
        trajectories_in_dropped_windows=dropped_size,
    )
    return windows, report


def _spread(windows: pl.DataFrame, inside: int, left_surplus: int) -> pl.DataFrame:
    """Take `inside` trajectories from the kept windows in proportion to their surplus (integer arithmetic)."""
    share = pl.when(pl.col("dropped")).then(0).otherwise(pl.col("surplus")) * inside
    denominator = max(left_surplus, 1)
    windows = windows.with_columns(base=share // denominator, remainder=share % denominator)
    extra = inside - int(windows["base"].sum())
    windows = windows.sort(
        "remainder", "window_key", "window_id", descending=[True, False, False]
    ).with_columns(order=pl.int_range(pl.len()))
    take = pl.col("base") + (pl.col("order") < extra).cast(pl.Int64)
    return windows.with_columns(
        keep=pl.when(pl.col("dropped")).then(0).otherwise(pl.col("capped") - take)
    )


def _group_features(kept: pl.DataFrame) -> pl.DataFrame:
    pnl = pl.col("pnl")
    std = pnl.std(ddof=1).over("window_id").fill_null(0.0).fill_nan(0.0)
    spread = (pnl.max() - pnl.min()).over("window_id").fill_null(0.0)
    return kept.with_columns(
        pnl_rank=pnl.rank("min", descending=True).over("window_id").cast(pl.Int64),
        pnl_zscore=pl.when(std > 0).then((pnl - pnl.mean().over("window_id")) / std).otherwise(0.0),
        group_size=pl.len().over("window_id").cast(pl.Int64),
        no_signal=spread <= NO_SIGNAL_TOLERANCE,
    )


SPLIT_ORDER = {"train": 0, "validation": 1, "eval": 2}


def _split(kept: pl.DataFrame, validation_fraction: float, eval_fraction: float) -> tuple[pl.DataFrame, int, int]:
    """Windows by time: train (earliest), validation (next), eval (latest); rows ordered train, validation, eval."""
    order = kept.select("window_start", "window_id").unique().sort("window_start", "window_id")
    n_eval = eval_window_count(order.height, eval_fraction)
    n_validation = min(eval_window_count(order.height, validation_fraction), max(0, order.height - n_eval - 1))
    position = pl.int_range(pl.len())
    order = order.with_columns(
        split=pl.when(position >= order.height - n_eval).then(pl.lit("eval"))
        .when(position >= order.height - n_eval - n_validation).then(pl.lit("validation"))
        .otherwise(pl.lit("train"))
    )
    kept = kept.join(order.select("window_id", "split"), on="window_id")
    kept = kept.sort(pl.col("split").replace_strict(SPLIT_ORDER, return_dtype=pl.Int8), "window_start", "window_id", "trajectory_id")
    columns = ["row", "pnl_rank", "pnl_zscore", "group_size", "no_signal", "split"]
    return kept.select(columns), n_eval, n_validation
