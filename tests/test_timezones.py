"""The build under non-UTC machine clocks: every stored timestamp is UTC, whatever TZ and PGTZ say.

DuckDB's and PostgreSQL's sessions take the machine's (or PGTZ's) zone; the build compares the
dirty windows' marks with Python's UTC clock. These run the real CLI in a subprocess, where
TZ is read at start, as a user's shell would set it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import psycopg
import pytest

from babylon_rl import db, warehouse
from babylon_rl.settings import PROJECT_ROOT, Home

pytestmark = pytest.mark.postgres

ZONES = ["Asia/Kolkata", "America/Los_Angeles"]  # +5:30 and -8:00 (-7:00 in summer)


def _build(home: Path, url: str, zone: str) -> str:
    env = {**os.environ, "TZ": zone, "PGTZ": zone, "BABYLON_RL_HOME": str(home)}
    result = subprocess.run([sys.executable, "cli.py", "--database-url", url, "build"], cwd=PROJECT_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _warehouse(home: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.parametrize("zone", ZONES)
def test_a_changed_window_is_rebuilt_once_and_forgotten_under_a_local_clock(run_cli, migrated_pg_url: str,
                                                                              home: Path, zone: str) -> None:
    url = migrated_pg_url
    result = run_cli("--database-url", url, "simulate", "--agents", "6", "--windows", "3", "--seed", "3",
                     "--start", "2025-01-15T00:00")
    assert result.exit_code == 0, result.output
    _build(home, url, zone)
    assert _warehouse(home, "SELECT count(*) FROM meta.dirty_windows") == [(0,)]

    with psycopg.connect(url) as conn:  # a late row, stamped in UTC as the game stamps
        conn.execute("""UPDATE trajectories SET "finalPnL" = 12345.0, "updatedAt" = now() AT TIME ZONE 'UTC'
                        WHERE "trajectoryId" = (SELECT min("trajectoryId") FROM trajectories WHERE "windowId" = '2025-01-15T01:00')""")
    assert "restated 1 changed window(s)" in _build(home, url, zone)
    assert _warehouse(home, "SELECT max(pnl) FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T01:00'") == [(12345.0,)]
    # under +5:30 the window was marked 5.5 h "later" than the build's clock and never forgotten
    assert _warehouse(home, "SELECT count(*) FROM meta.dirty_windows") == [(0,)]
    assert "nothing to compute" in _build(home, url, zone)


def test_connections_store_utc_whatever_the_client_zone(pg_url: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PGTZ", "Asia/Kolkata")
    with db.connect(pg_url) as conn:
        assert conn.execute("SHOW TimeZone").fetchone()[0] == "UTC"
    conn = warehouse.connect(Home(tmp_path / "home"))
    try:
        assert conn.execute("SELECT current_setting('TimeZone')").fetchone()[0] == "UTC"
    finally:
        conn.close()
