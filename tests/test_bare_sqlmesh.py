"""Bare `sqlmesh plan` and `sqlmesh run` (how analysts build) give the marts `cli.py build` gives.

Two homes get the same simulated history, whose last window is the one in play. One is built
only by the `sqlmesh` command, run with `-p` from another directory and a home relative to it;
the other by `cli.py build`. Then both get late rows in an already-built window. After each
step every mart and every Parquet export must be equal. Then rows older than the game's first
day arrive: the models' start moves (HOME/data_start) and the next plan builds them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest

from babylon_rl.settings import PROJECT_ROOT

MARTS = ("windows", "agent_window_pnl", "window_market_context", "training_samples", "rejected_rows")
WINDOWS = 12
SQLMESH = str(Path(sys.executable).parent / "sqlmesh")


def _hour_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None, minute=0, second=0, microsecond=0)


def _run(args: list[str], cwd: Path, home: str) -> str:
    env = {**os.environ, "BABYLON_RL_HOME": home}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _cli(cwd: Path, home: str, *args: str) -> str:
    return _run([sys.executable, str(PROJECT_ROOT / "cli.py"), *args], cwd, home)


def _sqlmesh(cwd: Path, home: str, *args: str) -> str:
    return _run([SQLMESH, "-p", str(PROJECT_ROOT), *args], cwd, home)


def _simulate(cwd: Path, home: str, start: datetime, windows: int, seed: int, agents: int) -> None:
    _cli(cwd, home, "simulate", "--target", "duckdb", "--agents", str(agents), "--windows", str(windows),
         "--seed", str(seed), "--start", f"{start:%Y-%m-%dT%H:%M}")


def _rows(conn: duckdb.DuckDBPyConnection, relation: str) -> list[tuple]:
    """The rows in order, floats to 9 decimals: an average sums in a different order in a different batch."""
    rows = conn.execute(f"SELECT * FROM {relation} ORDER BY ALL").fetchall()
    return [tuple(round(value, 9) if isinstance(value, float) else value for value in row) for row in rows]


def _marts(home: Path) -> dict[str, list[tuple]]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return {mart: _rows(conn, f"babylon.{mart}") for mart in MARTS}


def _exports(home: Path) -> dict[str, list[tuple]]:
    with duckdb.connect() as conn:
        return {path.name: _rows(conn, f"'{path}'") for path in sorted((home / "exports").glob("*.parquet"))}


class Homes:
    """The two homes: `bare` built by the sqlmesh command, `toolkit` by cli.py build."""

    def __init__(self, root: Path) -> None:
        self.cwd = root / "elsewhere"  # not the repository: the bare commands find the project by -p
        self.cwd.mkdir()
        self.bare = self.cwd / "bare"
        self.toolkit = root / "toolkit"

    def both(self, bare_command: str) -> None:
        """`sqlmesh <bare_command>` in one home, `cli.py build` in the other, in the same hour:
        when an hour ends between them, the next window is due in one and not the other, so both run again."""
        for _ in range(3):
            hour = _hour_now()
            _sqlmesh(self.cwd, "bare", bare_command, *(["--auto-apply"] if bare_command == "plan" else []))
            _cli(self.cwd, str(self.toolkit), "build")
            if _hour_now() == hour:
                return
            bare_command = "run"
        raise AssertionError("the hour kept changing while building")


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Homes:
    homes = Homes(tmp_path_factory.mktemp("bare"))
    first = _hour_now() - timedelta(hours=WINDOWS - 1)  # the last window is the one in play
    for home in ("bare", str(homes.toolkit)):
        _simulate(homes.cwd, home, first, WINDOWS, seed=5, agents=6)
    homes.both("plan")
    return homes


def test_a_first_bare_plan_from_another_directory_gives_the_marts_and_exports_of_a_build(homes: Homes) -> None:
    bare, toolkit = _marts(homes.bare), _marts(homes.toolkit)
    assert len(bare["windows"]) >= WINDOWS - 2, "too few windows built to compare"
    assert bare == toolkit
    in_play = f"{_hour_now():%Y-%m-%dT%H:%M}"
    assert in_play not in {row[0] for row in bare["windows"]}, "the window in play is left for a later build by both"
    assert set(_exports(homes.bare)) == {"windows.parquet", "agent_window_pnl.parquet", "window_market_context.parquet"}
    assert _exports(homes.bare) == _exports(homes.toolkit)


def test_late_rows_in_a_built_window_are_picked_up_by_a_bare_run(homes: Homes) -> None:
    late_window = _hour_now() - timedelta(hours=WINDOWS // 2)
    window_id = f"{late_window:%Y-%m-%dT%H:%M}"
    before = {row[0]: row for row in _marts(homes.bare)["windows"]}[window_id]
    for home in ("bare", str(homes.toolkit)):
        _simulate(homes.cwd, home, late_window, 1, seed=77, agents=3)
    homes.both("run")
    bare, toolkit = _marts(homes.bare), _marts(homes.toolkit)
    after = {row[0]: row for row in bare["windows"]}[window_id]
    assert after[4] > before[4], "the late trajectories are in the window's row"  # windows.trajectories
    assert bare == toolkit
    assert _exports(homes.bare) == _exports(homes.toolkit)


def test_rows_older_than_the_first_day_move_the_models_start_and_the_next_plan_builds_them(homes: Homes) -> None:
    first_day = (_hour_now() - timedelta(hours=WINDOWS - 1)).date()
    yesterday = _hour_now().date() - timedelta(days=1)  # the start is never later (build.record_data_start)
    assert (homes.bare / "data_start").read_text().strip() == min(first_day, yesterday).isoformat()
    older = datetime.combine(first_day - timedelta(days=3), datetime.min.time()) + timedelta(hours=5)
    for home in ("bare", str(homes.toolkit)):
        _simulate(homes.cwd, home, older, 1, seed=91, agents=6)
    assert (homes.bare / "data_start").read_text().strip() == older.date().isoformat()
    homes.both("plan")  # the start is the models' metadata: a bare run keeps prod's, a plan takes the new one
    bare, toolkit = _marts(homes.bare), _marts(homes.toolkit)
    assert f"{older:%Y-%m-%dT%H:%M}" in {row[0] for row in bare["windows"]}, "the older window is built"
    assert bare == toolkit
    assert _exports(homes.bare) == _exports(homes.toolkit)


def test_the_default_home_is_the_checkouts_whatever_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    from sqlmesh.core.config import Config
    from sqlmesh.core.config.loader import load_config_from_paths

    from babylon_rl.settings import Home

    monkeypatch.delenv("BABYLON_RL_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    config = load_config_from_paths(Config, project_paths=[PROJECT_ROOT / "config.py"])
    assert Path(config.gateways["duckdb"].connection.database) == PROJECT_ROOT / ".babylon" / "warehouse.duckdb"
    assert Home.resolve().warehouse == PROJECT_ROOT / ".babylon" / "warehouse.duckdb"
    monkeypatch.setenv("BABYLON_RL_HOME", "relative")
    assert Home.resolve().root == tmp_path / "relative"
