"""`cli.py snapshot --format parquet`: the game tables as an open Parquet lake, partitioned by window day.

The lake is written from the warehouse's `raw.*` (after the snapshot, or after `simulate --target
duckdb`), so it holds exactly the rows the SQL models read, and any engine that reads Parquet reads
them: DuckDB (`read_parquet(..., hive_partitioning = true)`), Polars (`scan_parquet`), Spark.

Layout (docs/TABLES.md, "The lake"):

    HOME/lake/trajectories/day=2025-01-15/data_0.parquet      the day of the row's window
    HOME/lake/llm_call_logs/day=2025-01-15/data_0.parquet     the day of its trajectory's window
    HOME/lake/market_outcomes/day=2025-01-15/data_0.parquet   the day of its windowId
    HOME/lake/training_batches/data.parquet                   small, no window: one file
    HOME/lake/trained_models/data.parquet
    HOME/lake/_lake.json                                      when and from which snapshot it was written

Incremental like the snapshot: every writer of `raw.*` marks the days its rows touched in
`meta.lake_days` (the snapshot in its transaction, the simulator with its windows), and the next
lake write rewrites those days' partitions only, then clears the marks. A full snapshot, or a home
without a lake, writes the whole lake in a new directory that replaces the old one.

Nothing half-written: each file is written beside its place and renamed into it; a kill leaves a
partition old or new, and the marks are cleared only after every file is in place (a kill before
that rewrites the same days next time).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

import duckdb

from babylon_rl import atomic, warehouse
from babylon_rl.errors import WarehouseError
from babylon_rl.settings import Home

STATE_FILE = "_lake.json"
PARTITION = "day"
EVERYTHING = date(1970, 1, 1)  # a mark meaning "rewrite the whole lake" (a full snapshot)

_LLM_CALL_WINDOW = f"""(SELECT "trajectoryId", min({warehouse.trajectory_window()}) AS window_start
                       FROM raw.trajectories GROUP BY 1)"""
# Each partitioned table's rows with the day they belong to, as SQL over a relation of its rows ({rows}).
# A row whose window cannot be read falls back to its own timestamp's day, so no row is left out.
DAY_OF_ROWS = {
    "trajectories": f"""SELECT r.*, CAST(coalesce({warehouse.trajectory_window('r')}, r."createdAt") AS DATE) AS {PARTITION}
                        FROM {{rows}} r""",
    "llm_call_logs": f"""SELECT r.*, CAST(coalesce(w.window_start, r."timestamp", r."createdAt") AS DATE) AS {PARTITION}
                         FROM {{rows}} r LEFT JOIN {_LLM_CALL_WINDOW} w ON w."trajectoryId" = r."trajectoryId" """,
    "market_outcomes": f"""SELECT r.*, CAST(coalesce(try_strptime(r."windowId", '%Y-%m-%dT%H:%M'), r."createdAt") AS DATE) AS {PARTITION}
                           FROM {{rows}} r""",
}
# Within the warehouse's 1 GB memory limit at 100k trajectories (docs/BENCHMARKS.md): each thread and
# each open partition buffers rows of stepsJson-sized text, and with two threads, or rows kept in
# order, the partitioned COPY of raw.trajectories ran out of memory. One thread wrote it in 20.7 s.
ROW_GROUP_ROWS = 8192
WRITE_SETTINGS = ("SET threads = 1", "SET preserve_insertion_order = false",
                  f"SET partitioned_write_flush_threshold = {ROW_GROUP_ROWS}", "SET partitioned_write_max_open_files = 32")
UNPARTITIONED = tuple(t.name for t in warehouse.RAW_TABLES if t.name not in DAY_OF_ROWS)


@dataclass
class LakeResult:
    path: Path
    full: bool
    days: list[date] = field(default_factory=list)  # the day partitions rewritten
    rows: dict[str, int] = field(default_factory=dict)  # rows written per table
    seconds: float = 0.0


def mark_days(conn: duckdb.DuckDBPyConnection, table: str, rows: str) -> None:
    """Mark the lake days touched by `rows` (a relation of `table`'s rows) for the next lake write."""
    if table in DAY_OF_ROWS:
        conn.execute(f"""INSERT OR REPLACE INTO meta.lake_days
                         SELECT DISTINCT {PARTITION}, now()::TIMESTAMP FROM ({DAY_OF_ROWS[table].format(rows=rows)})""")


def mark_everything(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("INSERT OR REPLACE INTO meta.lake_days VALUES ($d, now()::TIMESTAMP)", {"d": EVERYTHING})


def write_lake(home: Home, snapshot_id: str | None = None, full: bool = False) -> LakeResult:
    """Bring HOME/lake up to date with raw.*: the marked days, or everything (`full`, or see the module docstring)."""
    started = time.monotonic()
    if not home.warehouse.exists():
        raise WarehouseError(f"no warehouse at {home.warehouse} to write the lake from: pass --database-url to snapshot "
                             "the game, or run `python cli.py simulate` first")
    conn = warehouse.connect(home)
    try:
        for setting in WRITE_SETTINGS:
            conn.execute(setting)
        warehouse.create_raw_schema(conn)
        warehouse.create_meta_schema(conn)
        marked = [row[0] for row in conn.execute("SELECT day FROM meta.lake_days ORDER BY day").fetchall()]
        full = full or EVERYTHING in marked or not (home.lake / STATE_FILE).exists()
        result = LakeResult(home.lake, full)
        if full:
            with atomic.directory(home.lake) as fresh:
                result.rows = _write_all(conn, fresh)
                result.days = _days(fresh)
                _write_state(fresh, snapshot_id)
        elif marked:
            result.days = marked
            result.rows = _write_days(conn, home.lake, marked)
            _write_state(home.lake, snapshot_id)
        conn.execute("DELETE FROM meta.lake_days")  # this connection holds the warehouse: no mark came in meanwhile
    except (duckdb.Error, OSError) as exc:
        raise WarehouseError(f"writing the lake {home.lake} failed: {exc}; the days not yet written are still "
                             "marked, run it again") from None
    finally:
        conn.close()
    result.seconds = time.monotonic() - started
    return result


def _copy(conn: duckdb.DuckDBPyConnection, select: str, target: Path, partitioned: bool) -> int:
    options = "FORMAT parquet"
    if partitioned:
        options += f", PARTITION_BY ({PARTITION}), OVERWRITE_OR_IGNORE"
    path = str(target).replace("'", "''")
    return conn.execute(f"COPY ({select}) TO '{path}' ({options})").fetchone()[0]


def _write_all(conn: duckdb.DuckDBPyConnection, root: Path) -> dict[str, int]:
    rows = {}
    for table, select in DAY_OF_ROWS.items():
        rows[table] = _copy(conn, select.format(rows=f"raw.{table}"), root / table, partitioned=True)
        (root / table).mkdir(exist_ok=True)  # an empty table is an empty directory, not a missing one
    for table in UNPARTITIONED:
        (root / table).mkdir()
        rows[table] = _copy(conn, f"SELECT * FROM raw.{table}", root / table / "data.parquet", partitioned=False)
    return rows


def _write_days(conn: duckdb.DuckDBPyConnection, lake: Path, days: list[date]) -> dict[str, int]:
    """Rewrite the partitions of `days` of every partitioned table, and the small tables whole."""
    scratch = lake / f".write-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    dates = ", ".join(f"DATE '{day.isoformat()}'" for day in days)
    rows = {}
    scratch.mkdir()
    try:
        for table, select in DAY_OF_ROWS.items():
            rows[table] = _copy(conn, select.format(rows=_rows_of_days(table, dates)), scratch / table, partitioned=True)
            for day in days:
                _replace_partition(scratch / table / f"{PARTITION}={day}", lake / table / f"{PARTITION}={day}")
        for table in UNPARTITIONED:
            with atomic.file(lake / table / "data.parquet") as tmp:
                rows[table] = _copy(conn, f"SELECT * FROM raw.{table}", tmp, partitioned=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def _rows_of_days(table: str, dates: str) -> str:
    """The table's rows of these days, found by their row ids: the days are computed from a few narrow
    columns and DuckDB reads the wide ones (stepsJson, the prompts) only for the rows it returns.
    Filtering on the day after reading every column took 4.4 s for one day of 100k trajectories; this 0.03 s."""
    keyed = DAY_OF_ROWS[table].format(rows=f"(SELECT rowid AS row_id, * FROM raw.{table})")
    return f"(SELECT * FROM raw.{table} WHERE rowid IN (SELECT row_id FROM ({keyed}) WHERE {PARTITION} IN ({dates})))"


def _replace_partition(written: Path, partition: Path) -> None:
    """Put one day's new files in place, each by a rename, then drop the files it no longer has."""
    partition.mkdir(parents=True, exist_ok=True)
    new = sorted(written.glob("*.parquet")) if written.exists() else []
    for path in new:
        os.replace(path, partition / path.name)
    for stale in set(partition.glob("*.parquet")) - {partition / p.name for p in new}:
        stale.unlink()
    if not new:
        partition.rmdir()  # every row of that day is gone (it cannot happen without deletes, which only --full copies)


def _days(root: Path) -> list[date]:
    return sorted({date.fromisoformat(p.name.split("=", 1)[1]) for t in DAY_OF_ROWS for p in (root / t).glob(f"{PARTITION}=*")})


def _write_state(root: Path, snapshot_id: str | None) -> None:
    state = {"written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "snapshot_id": snapshot_id,
             "partition": PARTITION, "tables": sorted(DAY_OF_ROWS) + sorted(UNPARTITIONED)}
    atomic.write_text(root / STATE_FILE, json.dumps(state, indent=2) + "\n")
