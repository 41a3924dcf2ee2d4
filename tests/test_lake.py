"""`cli.py snapshot --format parquet`: the raw tables as a Parquet lake partitioned by window day, incremental."""

from __future__ import annotations

import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from babylon_rl import lake
from babylon_rl.errors import WarehouseError
from babylon_rl.settings import Home
from tests.game_rows import execute, insert, stock_outcome, trajectory

TABLES = ("trajectories", "llm_call_logs", "market_outcomes", "training_batches", "trained_models")


def _lake_rows(home: Path, table: str) -> list[tuple]:
    """The table's rows as DuckDB reads them from the lake, without the partition column."""
    if table in lake.DAY_OF_ROWS:
        source, columns = f"read_parquet('{home}/lake/{table}/*/*.parquet', hive_partitioning = true)", "* EXCLUDE (day)"
    else:
        source, columns = f"read_parquet('{home}/lake/{table}/data.parquet')", "*"
    with duckdb.connect() as conn:
        return conn.execute(f"SELECT {columns} FROM {source} ORDER BY id").fetchall()


def _raw_rows(home: Path, table: str) -> list[tuple]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute(f"SELECT * FROM raw.{table} ORDER BY id").fetchall()


def _files(home: Path) -> dict[str, int]:
    """Every Parquet file of the lake and its inode: a rewritten file gets a new one."""
    return {str(p.relative_to(home / "lake")): p.stat().st_ino for p in (home / "lake").rglob("*.parquet")}


def test_the_lake_holds_every_raw_row_in_its_windows_day(run_cli, home: Path) -> None:
    run_cli("simulate", "--agents", "4", "--windows", "30", "--seed", "3", "--start", "2025-01-15T00:00")
    result = run_cli("snapshot", "--format", "parquet")
    assert result.exit_code == 0, result.output
    assert "wrote the whole lake" in result.output and "2 day partition(s), 2025-01-15 .. 2025-01-16" in result.output
    for table in TABLES:
        assert _lake_rows(home, table) == _raw_rows(home, table), table
    with duckdb.connect() as conn:  # each row sits in the day of its window, the trajectory's for an LLM call
        misplaced = conn.execute(f"""
            SELECT count(*) FROM read_parquet('{home}/lake/llm_call_logs/*/*.parquet', hive_partitioning = true) c
            JOIN read_parquet('{home}/lake/trajectories/*/*.parquet', hive_partitioning = true) t USING ("trajectoryId")
            WHERE c.day <> t.day OR t.day <> CAST(strptime(t."windowId", '%Y-%m-%dT%H:%M') AS DATE)""").fetchone()[0]
    assert misplaced == 0
    polars_rows = pl.scan_parquet(home / "lake" / "trajectories" / "**" / "*.parquet", hive_partitioning=True)
    counts = dict(polars_rows.group_by("day").len().collect().iter_rows())
    assert {str(day): n for day, n in counts.items()} == {"2025-01-15": 96, "2025-01-16": 24}


def test_a_later_write_rewrites_only_the_days_that_changed(run_cli, home: Path) -> None:
    run_cli("simulate", "--agents", "4", "--windows", "30", "--seed", "3", "--start", "2025-01-15T00:00")
    run_cli("snapshot", "--format", "parquet")
    before = _files(home)
    again = run_cli("snapshot", "--format", "parquet")
    assert "is up to date" in again.output and _files(home) == before

    run_cli("simulate", "--agents", "4", "--windows", "2", "--seed", "4", "--start", "2025-01-17T05:00")
    result = run_cli("snapshot", "--format", "parquet")
    assert "wrote the changed days" in result.output and "1 day partition(s), 2025-01-17" in result.output
    after = _files(home)
    old_days = {path: inode for path, inode in before.items() if "day=" in path}
    assert {path: after[path] for path in old_days} == old_days  # the untouched days' files were not rewritten
    assert {p for p in after if "day=2025-01-17" in p} == {f"{t}/day=2025-01-17/data_0.parquet" for t in lake.DAY_OF_ROWS}
    for table in TABLES:
        assert _lake_rows(home, table) == _raw_rows(home, table), table
    assert not [p for p in (home / "lake").iterdir() if p.name.startswith(".")]  # no scratch directory left

    full = run_cli("snapshot", "--format", "parquet", "--full")  # without a database URL: the lake alone, whole
    assert "wrote the whole lake" in full.output and "3 day partition(s)" in full.output
    assert not set(_files(home).items()) & set(after.items())


def test_without_a_warehouse_or_a_database_url_it_says_what_to_do(run_cli, home: Path) -> None:
    result = run_cli("snapshot", "--format", "parquet")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: no warehouse at {home / 'warehouse.duckdb'} to write the lake from: pass --database-url to snapshot "
        "the game, or run `python cli.py simulate` first"]
    assert not (home / "lake").exists() and not (home / "warehouse.duckdb").exists()


def test_a_write_that_fails_keeps_its_marks_and_the_next_one_finishes_it(run_cli, home: Path, monkeypatch) -> None:
    run_cli("simulate", "--agents", "4", "--windows", "3", "--seed", "3", "--start", "2025-01-15T00:00")
    run_cli("snapshot", "--format", "parquet")
    run_cli("simulate", "--agents", "4", "--windows", "2", "--seed", "4", "--start", "2025-01-16T05:00")

    def fail(written: Path, partition: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(lake, "_replace_partition", fail)
    with pytest.raises(WarehouseError, match="disk full"):
        lake.write_lake(Home.resolve(home))
    monkeypatch.undo()
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT day FROM meta.lake_days").fetchall() == [(datetime(2025, 1, 16).date(),)]
    assert not list((home / "lake" / "trajectories").glob("day=2025-01-16"))
    lake.write_lake(Home.resolve(home))
    for table in TABLES:
        assert _lake_rows(home, table) == _raw_rows(home, table), table


@pytest.mark.postgres
def test_from_postgres_a_changed_row_rewrites_its_day_and_a_full_copy_the_whole_lake(run_cli, home: Path,
                                                                                       migrated_pg_url: str) -> None:
    insert(migrated_pg_url, "trajectories", [trajectory("t1", "a1", "2025-01-15T10:00", pnl=12.5),
                                            trajectory("t2", "a2", "2025-01-16T10:00", pnl=-3.0)])
    insert(migrated_pg_url, "market_outcomes", [stock_outcome("m1", "2025-01-15T10:00", "ACME", 1.25, "ACME wins contract")])
    assert run_cli("--database-url", migrated_pg_url, "snapshot", "--format", "parquet").exit_code == 0
    before = _files(home)
    execute(migrated_pg_url, """UPDATE trajectories SET "finalPnL" = 99, "updatedAt" = %s WHERE "trajectoryId" = 't2'""",
            (datetime(2025, 1, 16, 13, 0),))
    result = run_cli("--database-url", migrated_pg_url, "snapshot", "--format", "parquet")
    assert "1 day partition(s), 2025-01-16" in result.output, result.output
    after = _files(home)
    assert after["trajectories/day=2025-01-15/data_0.parquet"] == before["trajectories/day=2025-01-15/data_0.parquet"]
    assert after["trajectories/day=2025-01-16/data_0.parquet"] != before["trajectories/day=2025-01-16/data_0.parquet"]
    assert _lake_rows(home, "trajectories") == _raw_rows(home, "trajectories")
    assert [r[0] for r in _lake_rows(home, "trajectories") if 99.0 in r] != []

    full = run_cli("--database-url", migrated_pg_url, "snapshot", "--full", "--format", "parquet")
    assert "wrote the whole lake" in full.output
    assert all(after[path] != inode for path, inode in _files(home).items() if path in after)


def test_the_docs_lake_commands_run_as_written(run_cli, home: Path, tmp_path: Path) -> None:
    """docs/TABLES.md, "The lake": the DuckDB and Polars reads, as written, from a checkout whose default home is this one."""
    doc = (Path(__file__).parent.parent / "docs" / "TABLES.md").read_text()
    section = doc[doc.index("## The lake"):doc.index("## Marts")]
    commands = [line[2:] for line in section.splitlines() if line.startswith("$ ") and "lake/" in line]
    assert [c.split()[0] for c in commands] == ["duckdb", "python"], commands
    run_cli("simulate", "--agents", "5", "--windows", "30", "--seed", "1", "--start", "2025-01-15T00:00")
    run_cli("snapshot", "--format", "parquet")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".babylon").symlink_to(home)
    tools = {"duckdb": str(Path(sys.executable).parent / "duckdb"), "python": sys.executable}
    for command in commands:
        args = shlex.split(command)
        done = subprocess.run([tools[args[0]], *args[1:]], cwd=checkout, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        assert "2025-01-16" in done.stdout and "30" in done.stdout, (command, done.stdout)
