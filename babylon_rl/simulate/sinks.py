"""Where simulated windows go: the game's PostgreSQL (COPY) or the DuckDB warehouse (raw.*).

Each `write` is one transaction, so an interrupted run never leaves half a window.
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from typing import Protocol

import psycopg
import pyarrow as pa

from babylon_rl import db, warehouse
from babylon_rl.errors import DatabaseError
from babylon_rl.settings import Home, mask_url
from babylon_rl.simulate.trajectories import WindowRows

TABLES = ("trajectories", "llm_call_logs", "market_outcomes")
# A window simulated again with the same seed repeats these ids (the call logs' ids are their trajectory's and step's).
SEEDED_ID_TABLES = ("trajectories", "market_outcomes")
ARROW_TYPES = {
    "VARCHAR": pa.string(), "TIMESTAMP": pa.timestamp("ms"), "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
}


class Sink(Protocol):
    name: str

    def newest_window(self) -> datetime | None: ...

    def write(self, batch: list[WindowRows]) -> None: ...

    def close(self) -> None: ...


class MemorySink:
    """Keeps the windows it is given and writes nothing: the arena's games are measurements, not the game's history."""

    name = "memory"

    def __init__(self) -> None:
        self.windows: list[WindowRows] = []

    def newest_window(self) -> datetime | None:
        return None

    def write(self, batch: list[WindowRows]) -> None:
        self.windows.extend(batch)

    def close(self) -> None:
        return None


def write_time() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _rows_of(batch: list[WindowRows], table: str) -> list[tuple]:
    attribute = {"trajectories": "trajectories", "llm_call_logs": "llm_calls", "market_outcomes": "outcomes"}[table]
    return [row for rows in batch for row in getattr(rows, attribute)]


def _stamp_count(table: str) -> int:
    return 2 if table == "trajectories" else 1  # createdAt, updatedAt / createdAt


def newest_start(window_ids: list[str | None]) -> datetime | None:
    """The start of the newest window present in either table (windowId is indexed in both)."""
    starts = [datetime.strptime(w[:16], "%Y-%m-%dT%H:%M") for w in window_ids if w]
    return max(starts) if starts else None


NEWEST_WINDOW_SQL = 'SELECT max("windowId") FROM {prefix}market_outcomes UNION ALL SELECT max("windowId") FROM {prefix}trajectories'


class PostgresSink:
    name = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self._stack = ExitStack()
        self.conn: psycopg.Connection = self._stack.enter_context(db.connect(url))
        self._check_tables()

    def _check_tables(self) -> None:
        row = self.conn.execute(
            "SELECT " + ", ".join(f"to_regclass('{t}') IS NOT NULL" for t in TABLES)
        ).fetchone()
        self.conn.rollback()
        missing = [t for t, ok in zip(TABLES, row) if not ok]
        if missing:
            raise DatabaseError(
                f"{mask_url(self.url)} has no {', '.join(missing)} table; run `cli.py db migrate` first"
            )

    def newest_window(self) -> datetime | None:
        rows = self.conn.execute(NEWEST_WINDOW_SQL.format(prefix="")).fetchall()
        self.conn.rollback()
        return newest_start([row[0] for row in rows])

    def write(self, batch: list[WindowRows]) -> None:
        now = write_time()
        try:
            with self.conn.transaction(), self.conn.cursor() as cur:
                for table in TABLES:
                    stamps = (now,) * _stamp_count(table)
                    columns = ", ".join(f'"{c}"' for c in warehouse.RAW_BY_NAME[table].column_names)
                    with cur.copy(f'COPY "{table}" ({columns}) FROM STDIN') as copy:
                        for row in _rows_of(batch, table):
                            copy.write_row(row + stamps)
        except psycopg.errors.UniqueViolation:
            raise DatabaseError(
                f"windows {batch[0].window_id} to {batch[-1].window_id} are already in {mask_url(self.url)}; "
                "omit --start to continue after the newest window, or pick another --start or --seed"
            ) from None
        except psycopg.Error as exc:
            raise DatabaseError(f"writing to {mask_url(self.url)} failed: {str(exc).strip().splitlines()[0]}") from None

    def close(self) -> None:
        self._stack.close()


class DuckDBSink:
    name = "duckdb"

    def __init__(self, home: Home) -> None:
        self.home = home
        self.conn = warehouse.connect(home)
        warehouse.create_raw_schema(self.conn)
        warehouse.create_meta_schema(self.conn)

    def newest_window(self) -> datetime | None:
        rows = self.conn.execute(NEWEST_WINDOW_SQL.format(prefix="raw.")).fetchall()
        return newest_start([row[0] for row in rows])

    def write(self, batch: list[WindowRows]) -> None:
        now = write_time()
        self.conn.execute("BEGIN TRANSACTION")
        try:
            for table in TABLES:
                arrow = _arrow_table(table, [row + (now,) * _stamp_count(table) for row in _rows_of(batch, table)])
                self.conn.register("_simulated", arrow)
                if table in SEEDED_ID_TABLES:
                    self._refuse_present_ids(table, batch)
                self.conn.execute(f"INSERT INTO raw.{table} SELECT * FROM _simulated")
                self.conn.unregister("_simulated")
            # Already-built intervals are not revisited by SQLMesh on their own: the next build restates these.
            warehouse.mark_windows_dirty(self.conn, [datetime.strptime(rows.window_id, "%Y-%m-%dT%H:%M") for rows in batch])
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _refuse_present_ids(self, table: str, batch: list[WindowRows]) -> None:
        """raw.* has no primary key index (warehouse.RawTable.ddl): the ids a seed gives a window are checked here."""
        present = self.conn.execute(f'SELECT 1 FROM raw.{table} WHERE "id" IN (SELECT "id" FROM _simulated) LIMIT 1').fetchone()
        if present:
            raise DatabaseError(
                f"windows {batch[0].window_id} to {batch[-1].window_id} are already in {self.home.warehouse}; "
                "omit --start to continue after the newest window, or pick another --start or --seed"
            )

    def close(self) -> None:
        self.conn.close()


def _arrow_table(table: str, rows: list[tuple]) -> pa.Table:
    spec = warehouse.RAW_BY_NAME[table].columns
    columns = list(zip(*rows)) if rows else [()] * len(spec)
    arrays = [pa.array(values, type=ARROW_TYPES.get(type_, pa.float64())) for (_, type_), values in zip(spec, columns)]
    return pa.Table.from_arrays(arrays, names=[name for name, _ in spec])


def start_after(newest: datetime | None, windows: int, window_hours: int, now: datetime | None = None) -> datetime:
    """The default --start: right after the newest window, else so the last window ends this hour."""
    if newest is not None:
        return newest + timedelta(hours=window_hours)
    hour = (now or write_time()).replace(minute=0, second=0, microsecond=0)
    return hour - timedelta(hours=windows * window_hours)
