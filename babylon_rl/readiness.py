"""`cli.py windows`: which recent windows have enough agents to form a training group."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb

from babylon_rl import warehouse
from babylon_rl.errors import WarehouseError
from babylon_rl.settings import Home


@dataclass(frozen=True)
class WindowRow:
    window_id: str
    window_start: datetime
    agents: int
    trajectories: int
    pnl_std: float | None


@dataclass(frozen=True)
class Readiness:
    as_of: datetime
    lookback_hours: int
    min_agents: int
    windows: list[WindowRow]

    @property
    def ready(self) -> list[WindowRow]:
        return [w for w in self.windows if w.agents >= self.min_agents]

    @property
    def verdict(self) -> str:
        total, ready = len(self.windows), len(self.ready)
        if total == 0:
            return f"NOT READY: no windows in the {self.lookback_hours} hours before {self.as_of:%Y-%m-%d %H:%M}"
        if ready == 0:
            most = max(w.agents for w in self.windows)
            return f"NOT READY: 0 of {total} windows have >= {self.min_agents} agents (the largest has {most})"
        return f"READY: {ready} of {total} windows have >= {self.min_agents} agents"

    def to_dict(self) -> dict:
        return {
            "as_of": self.as_of.isoformat(),
            "lookback_hours": self.lookback_hours,
            "min_agents": self.min_agents,
            "windows_total": len(self.windows),
            "windows_ready": len(self.ready),
            "verdict": self.verdict,
            "windows": [
                {
                    "window_id": w.window_id,
                    "agents": w.agents,
                    "trajectories": w.trajectories,
                    "ready": w.agents >= self.min_agents,
                }
                for w in self.windows
            ],
        }


_WINDOWS_SQL = """
    SELECT window_id, window_start, agents, trajectories, pnl_std
    FROM {source}
    WHERE window_start >= $since AND window_start < $as_of
    ORDER BY window_start
"""


def readiness(home: Home, lookback_hours: int, min_agents: int, as_of: datetime) -> Readiness:
    since = as_of - timedelta(hours=lookback_hours)
    rows = _query_windows(home, {"since": since, "as_of": as_of})
    return Readiness(as_of, lookback_hours, min_agents, [WindowRow(*row) for row in rows])


def _query_windows(home: Home, params: dict) -> list[tuple]:
    """Read babylon.windows; while a build holds the warehouse, read the published Parquet copy."""
    try:
        conn = warehouse.connect(home, read_only=True)
    except WarehouseError:
        published = home.exports / "windows.parquet"
        if not published.exists():
            raise
        with duckdb.connect(config=dict(warehouse.OFFLINE_CONFIG)) as conn:
            return conn.execute(_WINDOWS_SQL.format(source="read_parquet($path)"), {**params, "path": str(published)}).fetchall()
    try:
        return conn.execute(_WINDOWS_SQL.format(source="babylon.windows"), params).fetchall()
    except duckdb.CatalogException:
        raise WarehouseError(f"the warehouse {home.warehouse} has no window tables yet; run `cli.py build`") from None
    finally:
        conn.close()
