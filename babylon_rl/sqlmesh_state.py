"""The build's only direct reads and writes of SQLMesh's state, in one adapter.

SQLMesh has no public call that forgets chosen intervals: a restatement plan takes one range,
so two late windows two weeks apart would recompute the two weeks between them.
`forget_intervals` calls the state sync's `remove_intervals`, an internal API. It was written
against SQLMesh `TESTED_WITH` (pinned in pyproject.toml); tests/test_sqlmesh_state.py fails on
any other version until this file has been checked against it.
"""

from __future__ import annotations

from datetime import datetime

TESTED_WITH = "0.236.4"


def prod_snapshots(context) -> list:
    """The snapshots (one per model) of the prod environment; empty before the first plan."""
    environment = context.state_reader.get_environment("prod")
    return list(environment.snapshots) if environment is not None else []


def forget_intervals(context, intervals: list[tuple[datetime, datetime]]) -> None:
    """Mark these [start, end) intervals of prod's incremental models as not computed, so the next `run` computes them again."""
    from sqlmesh.utils.date import to_timestamp

    snapshots = [s for s in prod_snapshots(context) if s.is_incremental]
    context.state_sync.remove_intervals([
        (snapshot, (to_timestamp(start), to_timestamp(end))) for start, end in intervals for snapshot in snapshots
    ])
