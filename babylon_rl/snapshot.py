"""`cli.py snapshot`: copy the game tables from PostgreSQL into the warehouse's `raw` schema.

DuckDB's own postgres scanner reads the source (LOADed from the pip-installed
extension, never downloaded). Later runs copy only rows whose watermark column
(`updatedAt`, else `createdAt`) is past the last watermark minus a safety margin,
and upsert them on the primary key; rows already present unchanged are not
counted again. The watermark is capped at the source's own clock (`now()` read from PostgreSQL
before the copy): a row stamped in the future (a skewed game clock, a bad write) is copied and
counted in the summary, but cannot hide the rows stamped after it. The margin (10 minutes) covers
rows a long transaction commits after a snapshot with an older stamp; a row committed later than
that after its stamp is caught only by `snapshot --full`. The windows touched by changed rows are recorded in
`meta.dirty_windows` so the next build restates them.

One DuckDB transaction per snapshot: an interrupted run leaves the warehouse as it was.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

import duckdb

from babylon_rl import lake, warehouse
from babylon_rl.errors import DatabaseError
from babylon_rl.settings import Home, mask_url, scrub, url_password
from babylon_rl.warehouse import RAW_TABLES, RawTable

DEFAULT_SAFETY_MARGIN = timedelta(minutes=10)
SOURCE_ALIAS = "game"


@dataclass
class TableCopy:
    table: str
    rows_copied: int
    watermark: str | None
    future_rows: int = 0  # rows stamped after the source's clock at copy time


@dataclass
class SnapshotResult:
    snapshot_id: str
    full_copy: bool
    tables: list[TableCopy] = field(default_factory=list)
    dirty_windows: int = 0
    seconds: float = 0.0

    @property
    def rows_copied(self) -> int:
        return sum(table.rows_copied for table in self.tables)


def last_watermarks(conn: duckdb.DuckDBPyConnection) -> dict[str, str | None]:
    row = conn.execute("SELECT tables_json FROM meta.snapshots ORDER BY finished_at DESC LIMIT 1").fetchone()
    if row is None:
        return {}
    return {entry["table"]: entry["watermark"] for entry in json.loads(row[0])}


def attach_source(conn: duckdb.DuckDBPyConnection, url: str, home: Home) -> None:
    warehouse.load_postgres_scanner(conn, home)
    try:
        # ATTACH takes no bound parameters; a quoted literal with doubled quotes is the safe form.
        literal = "'" + url.replace("'", "''") + "'"
        conn.execute(f"ATTACH {literal} AS {SOURCE_ALIAS} (TYPE postgres, READ_ONLY)")
    except duckdb.Error as exc:
        raise DatabaseError(f"cannot connect to {mask_url(url)}: {_clean(exc, url)}; check the URL and that the server runs") from None


def _clean(exc: Exception, url: str) -> str:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return scrub(first_line, url_password(url), url)


def _abandon(conn: duckdb.DuckDBPyConnection) -> None:
    """Roll back explicitly: when the source connection died, DuckDB's implicit rollback at close
    fails inside a destructor and aborts the process; here it is a caught error."""
    try:
        conn.execute("ROLLBACK")
    except duckdb.Error:
        pass


def _detach(conn: duckdb.DuckDBPyConnection) -> None:
    try:
        conn.execute(f"DETACH DATABASE IF EXISTS {SOURCE_ALIAS}")
    except duckdb.Error:
        pass


def _select_source(table: RawTable) -> str:
    casts = ", ".join(f'CAST("{name}" AS {type_}) AS "{name}"' for name, type_ in table.columns)
    return f"SELECT {casts} FROM {SOURCE_ALIAS}.public.{table.name}"


def _check_game_tables(conn: duckdb.DuckDBPyConnection, url: str) -> None:
    """A source without the game's tables (an empty or unmigrated database) is a setup error, not a failed copy."""
    # Asked of PostgreSQL itself: DuckDB's duckdb_tables() loads the attached catalog's every table, 0.5 s of
    # a 4.7 s build after one new window at 100k.
    query = "SELECT table_name FROM information_schema.tables WHERE table_schema = ''public''"
    present = {row[0] for row in conn.execute(f"SELECT table_name FROM postgres_query('{SOURCE_ALIAS}', '{query}')").fetchall()}
    missing = [table.name for table in RAW_TABLES if table.name not in present]
    if missing:
        raise DatabaseError(f"{mask_url(url)} has no {', '.join(missing)} table(s): run python cli.py db migrate there first, "
                            "or point --database-url at the game's database")


def _source_now(conn: duckdb.DuckDBPyConnection) -> datetime:
    """The source's clock in UTC (the game's timestamps are UTC without a zone), read through the attached database."""
    query = "SELECT (now() AT TIME ZONE ''UTC'')::timestamp AS now"
    return conn.execute(f"SELECT now FROM postgres_query('{SOURCE_ALIAS}', '{query}')").fetchone()[0]


def _new_watermark(conn: duckdb.DuckDBPyConnection, table: RawTable, source_now: datetime) -> datetime | None:
    """The newest stamp in raw, capped at the source's clock."""
    newest = conn.execute(f'SELECT max("{table.watermark}") FROM raw.{table.name}').fetchone()[0]
    return min(newest, source_now) if newest else None


def _list_future_rows(conn: duckdb.DuckDBPyConnection, table: RawTable, source_now: datetime, snapshot_id: str) -> int:
    """List the table's rows stamped after the source's clock in meta.future_rows; return how many."""
    conn.execute(
        f"""INSERT INTO meta.future_rows
            SELECT '{table.name}', "{table.primary_key}", "{table.watermark}", $now, $id FROM raw.{table.name}
            WHERE "{table.watermark}" > $now""", {"now": source_now, "id": snapshot_id})
    return conn.execute("SELECT count(*) FROM meta.future_rows WHERE table_name = $t", {"t": table.name}).fetchone()[0]


def _copy_table(conn: duckdb.DuckDBPyConnection, table: RawTable, since: datetime | None, full: bool) -> int:
    """Replace raw's rows (full) or upsert the source rows past `since` (every row when the table had
    none at the last snapshot) into the temp table `changed` and raw; return how many were new or changed."""
    source = _select_source(table)
    key, mark = table.primary_key, table.watermark
    if full:
        conn.execute(table.ddl(replace=True))  # also drops the primary key index of warehouses made before it went
        conn.execute(f"INSERT INTO raw.{table.name} {source}")
        return conn.execute(f"SELECT count(*) FROM raw.{table.name}").fetchone()[0]
    past = f'WHERE "{mark}" > $since' if since is not None else ""
    conn.execute(f"CREATE OR REPLACE TEMP TABLE changed AS {source} {past}", {"since": since} if since is not None else {})
    # Rows already present with the same watermark are unchanged: neither re-written nor counted.
    # DELETEs and a plain INSERT rather than an anti-join and INSERT OR REPLACE: with 100k
    # trajectories to re-read (rows re-stamped, or read again within the safety margin) both
    # ran DuckDB out of memory, the join by hashing the side that carries the rows' text, the
    # upsert by holding the new rows in memory; a DELETE's join carries only keys and row ids,
    # and a plain INSERT writes its row groups to the file as it goes.
    conn.execute(
        f"""DELETE FROM changed i USING raw.{table.name} r
            WHERE r."{key}" = i."{key}" AND r."{mark}" IS NOT DISTINCT FROM i."{mark}" """
    )
    conn.execute(f'DELETE FROM raw.{table.name} r USING changed c WHERE r."{key}" = c."{key}"')
    conn.execute(f"INSERT INTO raw.{table.name} SELECT * FROM changed")
    return conn.execute("SELECT count(*) FROM changed").fetchone()[0]


# Window starts touched by the rows of each table, as SQL over the temp table `changed`;
# llm_call_logs reach their window through the trajectory.
_TOUCHED_WINDOWS = {
    "trajectories": f"SELECT {warehouse.trajectory_window('t')} FROM {{rows}} t",
    "market_outcomes": """SELECT try_strptime(m."windowId", '%Y-%m-%dT%H:%M') FROM {rows} m""",
    "llm_call_logs": f"""SELECT {warehouse.trajectory_window('t')}
                        FROM {{rows}} c JOIN raw.trajectories t ON t."trajectoryId" = c."trajectoryId" """,
}


def _mark_dirty(conn: duckdb.DuckDBPyConnection, table: RawTable) -> None:
    """Record the windows of this incremental copy's changed rows (a full copy marks everything instead)."""
    sql = _TOUCHED_WINDOWS.get(table.name)
    if sql is None:
        return
    conn.execute(
        f"""INSERT OR REPLACE INTO meta.dirty_windows
            SELECT DISTINCT w, now()::TIMESTAMP FROM ({sql.format(rows='changed')}) AS touched(w) WHERE w IS NOT NULL"""
    )


def run_snapshot(home: Home, url: str, full: bool = False, margin: timedelta = DEFAULT_SAFETY_MARGIN) -> SnapshotResult:
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).replace(tzinfo=None)
    result = SnapshotResult(snapshot_id=f"snap-{started_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}", full_copy=full)
    conn = warehouse.connect(home)
    try:
        warehouse.create_raw_schema(conn)
        warehouse.create_meta_schema(conn)
        attach_source(conn, url, home)
        _check_game_tables(conn, url)
        previous = {} if full else last_watermarks(conn)
        result.full_copy = full or not previous
        # A whole table is read fastest in parallel ctid ranges; rows past a watermark by one query that
        # PostgreSQL answers from the column's index (with ctid ranges it visited every page of the table).
        conn.execute(f"SET pg_use_ctid_scan = {str(result.full_copy).lower()}")
        conn.execute("BEGIN TRANSACTION")
        source_now = _source_now(conn)
        conn.execute("DELETE FROM meta.future_rows")  # it lists what the latest snapshot found
        for table in RAW_TABLES:
            mark = previous.get(table.name)
            since = datetime.fromisoformat(mark) - margin if mark else None
            rows = _copy_table(conn, table, since, full=result.full_copy)
            if not result.full_copy:
                _mark_dirty(conn, table)
                lake.mark_days(conn, table.name, "changed")
            new_mark = _new_watermark(conn, table, source_now)
            future = _list_future_rows(conn, table, source_now, result.snapshot_id)
            result.tables.append(TableCopy(table.name, rows, new_mark.isoformat() if new_mark else mark, future))
        if result.full_copy:
            conn.execute("INSERT INTO meta.dirty_windows SELECT 'epoch'::TIMESTAMP, now()::TIMESTAMP ON CONFLICT DO NOTHING")
            lake.mark_everything(conn)
        result.dirty_windows = conn.execute("SELECT count(*) FROM meta.dirty_windows").fetchone()[0]
        conn.execute(
            "INSERT INTO meta.snapshots VALUES ($id, $started, now()::TIMESTAMP, $source, $full, $tables)",
            {
                "id": result.snapshot_id,
                "started": started_at,
                "source": mask_url(url),
                "full": result.full_copy,
                "tables": json.dumps([asdict(t) for t in result.tables]),
            },
        )
        conn.execute("COMMIT")
    except duckdb.Error as exc:
        _abandon(conn)
        raise DatabaseError(f"snapshot from {mask_url(url)} failed: {_clean(exc, url)}; the warehouse is unchanged, run it again") from None
    finally:
        _detach(conn)
        conn.close()
    result.seconds = time.monotonic() - started
    return result
