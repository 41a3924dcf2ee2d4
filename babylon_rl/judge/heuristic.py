"""The heuristic judge: a fixed formula of the dataset's features, no network.

For a trajectory in a group of n trajectories (the window's kept group; `pnl_rank` and
`pnl_zscore` are computed inside that group by `dataset build`):

    R = 1 - (pnl_rank - 1) / (n - 1)          P&L rank inside the window (1 best), 0.5 when n = 1
    Z = 0.5 + 0.5 * tanh(pnl_zscore / 2)      P&L z-score inside the window, squashed to (0, 1)
    W = win_rate                              winning trades / trades, 0.5 without trades
    A = min(trades, 5) / 5                    activity, saturating at 5 trades
    E = min(errors / max(actions, 1), 1)      share of steps that were errors

    score = clip(0.45 R + 0.30 Z + 0.15 W + 0.10 A - 0.25 E, 0, 1), rounded to 6 decimals

Ties in P&L share a rank (the dataset's RANK) and are separated only by the other
terms, deterministically: trajectories with equal features get equal scores, never an
arbitrary order. A group whose trajectories all have the same P&L (or a group of one)
carries no signal: every trajectory gets 0.5 and the group is flagged `no_signal`.
"""

from __future__ import annotations

import math

from babylon_rl.judge.base import GroupOutcome
from babylon_rl.judge.cache import Score
from babylon_rl.judge.dataset import WindowGroup, Trajectory

HEURISTIC_VERSION = "heuristic-v2"  # v2: rank normalised by the kept group size
WEIGHTS = {"rank": 0.45, "zscore": 0.30, "win_rate": 0.15, "activity": 0.10, "errors": 0.25}


def terms(traj: Trajectory, group_size: int) -> dict[str, float]:
    n = max(group_size, 1)
    rank = 0.5 if n == 1 or traj.pnl_rank is None else 1 - (traj.pnl_rank - 1) / (n - 1)
    return {
        "rank": min(max(rank, 0.0), 1.0),
        "zscore": 0.5 + 0.5 * math.tanh((traj.pnl_zscore or 0.0) / 2),
        "win_rate": 0.5 if traj.win_rate is None else float(traj.win_rate),
        "activity": min(traj.trades, 5) / 5,
        "errors": min(traj.errors / max(traj.actions, 1), 1.0),
    }


def heuristic_score(traj: Trajectory, group_size: int) -> float:
    t = terms(traj, group_size)
    raw = sum(WEIGHTS[k] * t[k] for k in ("rank", "zscore", "win_rate", "activity")) - WEIGHTS["errors"] * t["errors"]
    return round(min(max(raw, 0.0), 1.0), 6)


def explain(traj: Trajectory, group_size: int, score: float) -> str:
    win = "n/a" if traj.win_rate is None else f"{traj.win_rate:.0%}"
    return (f"heuristic: P&L {traj.pnl:+.2f}, rank {traj.pnl_rank}/{group_size}, "
            f"z {traj.pnl_zscore or 0.0:+.2f}, win rate {win}, {traj.trades} trades, {traj.errors} errors -> {score:.3f}")


def no_outcome_spread(group: WindowGroup) -> bool:
    return len({round(t.pnl, 9) for t in group.trajectories}) <= 1


class HeuristicJudge:
    name = "heuristic"
    model = HEURISTIC_VERSION
    rubric_version = HEURISTIC_VERSION

    async def score_group(self, group: WindowGroup) -> GroupOutcome:
        if no_outcome_spread(group):
            note = "no signal: every trajectory of the window has the same P&L"
            return GroupOutcome(scores={t.trajectory_id: Score(t.trajectory_id, 0.5, note) for t in group.trajectories})
        scores = {}
        size = len(group.trajectories)
        for traj in group.trajectories:
            value = heuristic_score(traj, size)
            scores[traj.trajectory_id] = Score(traj.trajectory_id, value, explain(traj, size, value))
        return GroupOutcome(scores=scores)

    async def aclose(self) -> None:
        return None
