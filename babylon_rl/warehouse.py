"""The DuckDB warehouse: connections that never touch the network, and the `raw` schema.

`raw.*` mirrors the game tables column for column (quoted camelCase names, JSON kept
as text). The snapshot fills it from PostgreSQL; `simulate --target duckdb` writes it
directly. SQLMesh models read only `raw.*`.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb

from babylon_rl import atomic, locks
from babylon_rl.errors import WarehouseError
from babylon_rl.settings import Home

# Settings applied to every connection of the toolkit's own (simulate, snapshot, the build's
# bookkeeping, export): no network, and the memory limit SQLMesh's connection has in
# config.py. Without it, the first connection after a 100k-trajectory build took the
# process from 0.7 to 3.1 GB (docs/BENCHMARKS.md, "Model build").
MEMORY_LIMIT = "1GB"
OFFLINE_CONFIG = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "memory_limit": MEMORY_LIMIT,
    # No vacuum at checkpoints, as in SQLMesh's connection (config.py): after a 100k snapshot the
    # checkpoint's vacuum rewrote raw.* to merge a few partial row groups, 12 s of a 39 s copy.
    # Fully deleted row groups are still dropped.
    "max_vacuum_tasks": 0,
}

# The catalog name DuckDB gives warehouse.duckdb when SQLMesh opens it, so that the
# toolkit's connections and SQLMesh's see the same names.
CATALOG = "warehouse"
# Rows per row group of the tables the toolkit writes (raw.*). DuckDB hands a scan's
# threads one row group at a time, but gives a scan at most `total rows / 122,880 + 1`
# threads whatever this size (DataTable::MaxThreads counts with its default): it does not
# decide how many cores parse stepsJson (macros/threads.py). Smaller is not free: DuckDB
# keeps each row group's column metadata in memory, outside its memory limit, once a query
# has read it. At 2,048 rows, raw.llm_call_logs of a 1M-trajectory game held ~330 MB of it
# (docs/BENCHMARKS.md).
# The size is a property of the connection that writes the rows (an ATTACH option, not
# stored in the file), so every toolkit connection attaches with it.
ROW_GROUP_SIZE = 8192


def trajectory_window(alias: str = "") -> str:
    """SQL for the window a raw trajectory row counts in (its windowId, else its startTime's hour),
    as staging.trajectories computes it; `alias` is the row's table alias, if any."""
    prefix = f"{alias}." if alias else ""
    return f"""coalesce(try_strptime({prefix}"windowId", '%Y-%m-%dT%H:%M'), date_trunc('hour', {prefix}"startTime"))"""


@dataclass(frozen=True)
class RawTable:
    name: str
    columns: tuple[tuple[str, str], ...]  # (column, DuckDB type)
    primary_key: str  # unique in the game's table; kept unique here by the snapshot's upsert and the simulator's check
    watermark: str  # the column whose growth marks new or changed rows
    # DuckDB's compression for some text columns, named instead of chosen: otherwise DuckDB tries every
    # method on every string of each row group. stepsJson (~31 KB a document) ends up uncompressed
    # whatever it tries. Written outside a transaction, naming them halved a 100k copy of
    # raw.trajectories (11.1 s -> 5.1 s); inside the snapshot's one transaction the gain is ~1 s of
    # ~20 (docs/history/BENCHMARKS-build.md), at the same file size.
    compression: tuple[tuple[str, str], ...] = ()

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]

    def ddl(self, schema: str = "raw", replace: bool = False) -> str:
        """The table without a PRIMARY KEY constraint: DuckDB's index behind one cost a 100k snapshot
        12 s at its commit (1.4M keys; docs/BENCHMARKS.md), and nothing here looks rows up by it."""
        compression = dict(self.compression)
        cols = ",\n    ".join(
            f'"{name}" {type_}' + (f" USING COMPRESSION {compression[name]}" if name in compression else "")
            for name, type_ in self.columns
        )
        create = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
        return f"{create} {schema}.{self.name} (\n    {cols}\n)"


_TS = "TIMESTAMP"
RAW_TABLES: tuple[RawTable, ...] = (
    RawTable(
        "trajectories",
        (
            ("id", "VARCHAR"), ("trajectoryId", "VARCHAR"), ("agentId", "VARCHAR"),
            ("startTime", _TS), ("endTime", _TS), ("durationMs", "INTEGER"),
            ("windowId", "VARCHAR"), ("windowHours", "INTEGER"),
            ("episodeId", "VARCHAR"), ("scenarioId", "VARCHAR"), ("batchId", "VARCHAR"),
            ("stepsJson", "VARCHAR"), ("rewardComponentsJson", "VARCHAR"),
            ("metricsJson", "VARCHAR"), ("metadataJson", "VARCHAR"),
            ("totalReward", "DOUBLE"), ("episodeLength", "INTEGER"), ("finalStatus", "VARCHAR"),
            ("finalBalance", "DOUBLE"), ("finalPnL", "DOUBLE"),
            ("tradesExecuted", "INTEGER"), ("postsCreated", "INTEGER"),
            ("aiJudgeReward", "DOUBLE"), ("aiJudgeReasoning", "VARCHAR"), ("judgedAt", _TS),
            ("isTrainingData", "BOOLEAN"), ("isEvaluation", "BOOLEAN"),
            ("usedInTraining", "BOOLEAN"), ("trainedInBatch", "VARCHAR"),
            ("createdAt", _TS), ("updatedAt", _TS),
        ),
        primary_key="id",
        watermark="updatedAt",
        compression=(
            ("stepsJson", "uncompressed"),
            *((name, "fsst") for name in ("id", "trajectoryId", "episodeId", "rewardComponentsJson", "metricsJson")),
        ),
    ),
    RawTable(
        "llm_call_logs",
        (
            ("id", "VARCHAR"), ("trajectoryId", "VARCHAR"), ("stepId", "VARCHAR"), ("callId", "VARCHAR"),
            ("timestamp", _TS), ("latencyMs", "INTEGER"), ("model", "VARCHAR"), ("purpose", "VARCHAR"),
            ("actionType", "VARCHAR"), ("systemPrompt", "VARCHAR"), ("userPrompt", "VARCHAR"),
            ("messagesJson", "VARCHAR"), ("response", "VARCHAR"), ("reasoning", "VARCHAR"),
            ("temperature", "DOUBLE"), ("maxTokens", "INTEGER"), ("topP", "DOUBLE"),
            ("promptTokens", "INTEGER"), ("completionTokens", "INTEGER"), ("totalTokens", "INTEGER"),
            ("metadata", "VARCHAR"), ("createdAt", _TS),
        ),
        primary_key="id",
        watermark="createdAt",
        compression=tuple(
            (name, "fsst") for name in ("id", "stepId", "callId", "userPrompt", "messagesJson", "response", "reasoning")
        ),
    ),
    RawTable(
        "market_outcomes",
        (
            ("id", "VARCHAR"), ("windowId", "VARCHAR"), ("stockTicker", "VARCHAR"),
            ("startPrice", "DECIMAL(10,2)"), ("endPrice", "DECIMAL(10,2)"), ("changePercent", "DECIMAL(5,2)"),
            ("sentiment", "VARCHAR"), ("newsEvents", "VARCHAR"),
            ("predictionMarketId", "VARCHAR"), ("question", "VARCHAR"), ("outcome", "VARCHAR"),
            ("finalProbability", "DECIMAL(5,4)"), ("volume", "DECIMAL(15,2)"), ("createdAt", _TS),
        ),
        primary_key="id",
        watermark="createdAt",
    ),
    RawTable(
        "training_batches",
        (
            ("id", "VARCHAR"), ("batchId", "VARCHAR"), ("scenarioId", "VARCHAR"), ("baseModel", "VARCHAR"),
            ("modelVersion", "VARCHAR"), ("trajectoryIds", "VARCHAR"), ("rankingsJson", "VARCHAR"),
            ("rewardsJson", "VARCHAR"), ("trainingLoss", "DOUBLE"), ("policyImprovement", "DOUBLE"),
            ("status", "VARCHAR"), ("error", "VARCHAR"),
            ("createdAt", _TS), ("startedAt", _TS), ("completedAt", _TS),
        ),
        primary_key="id",
        watermark="createdAt",
    ),
    RawTable(
        "trained_models",
        (
            ("id", "VARCHAR"), ("modelId", "VARCHAR"), ("version", "VARCHAR"), ("baseModel", "VARCHAR"),
            ("trainingBatch", "VARCHAR"), ("status", "VARCHAR"), ("deployedAt", _TS), ("archivedAt", _TS),
            ("storagePath", "VARCHAR"), ("benchmarkScore", "DOUBLE"), ("accuracy", "DOUBLE"),
            ("avgReward", "DOUBLE"), ("evalMetrics", "VARCHAR"), ("wandbRunId", "VARCHAR"),
            ("wandbArtifactId", "VARCHAR"), ("agentsUsing", "INTEGER"), ("totalInferences", "INTEGER"),
            ("createdAt", _TS), ("updatedAt", _TS),
        ),
        primary_key="id",
        watermark="updatedAt",
    ),
)
RAW_BY_NAME = {table.name: table for table in RAW_TABLES}


def use_utc(conn: duckdb.DuckDBPyConnection) -> None:
    """Make `now()::TIMESTAMP` UTC, like every timestamp the toolkit stores. DuckDB's session time
    zone is the machine's: under TZ=Asia/Kolkata the dirty windows were marked 5.5 h ahead of the
    build's UTC clock, so a build never cleared them (and under a negative offset, too early)."""
    conn.execute("SET TimeZone = 'UTC'")


def connect(home: Home, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the warehouse file; a lock held by another process becomes a readable error."""
    if read_only and not home.warehouse.exists():
        raise WarehouseError(f"no warehouse at {home.warehouse}; run `cli.py build` (or `cli.py simulate --target duckdb`) first")
    home.ensure()
    conn = duckdb.connect(config={**OFFLINE_CONFIG, "temp_directory": f"{home.warehouse}.tmp"})
    options = f"ROW_GROUP_SIZE {ROW_GROUP_SIZE}" + (", READ_ONLY" if read_only else "")
    path = str(home.warehouse).replace("'", "''")
    try:
        conn.execute(f"ATTACH '{path}' AS {CATALOG} ({options})")
        conn.execute(f"USE {CATALOG}")
        use_utc(conn)
        return conn
    except duckdb.IOException as exc:
        conn.close()
        if "lock" in str(exc).lower():
            raise WarehouseError(
                f"the warehouse {home.warehouse} is in use by another process ({_lock_holder(str(exc))}); "
                f"wait for it to finish, or query the copy the last build published in {home.exports}"
            ) from None
        raise WarehouseError(f"cannot open the warehouse {home.warehouse}: {exc}") from None


def connect_memory() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the warehouse's settings (offline, memory limit, UTC), for reading other sources."""
    conn = duckdb.connect(config=OFFLINE_CONFIG)
    use_utc(conn)
    return conn


def _lock_holder(message: str) -> str:
    # DuckDB says "Conflicting lock is held in <exe> (PID 1234) by user root".
    found = re.search(r"PID (\d+)", message)
    return f"process {found.group(1)}" if found else "another process"


def create_raw_schema(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("CREATE SCHEMA IF NOT EXISTS raw")
    for table in RAW_TABLES:
        conn.execute(table.ddl())


def create_meta_schema(conn: duckdb.DuckDBPyConnection) -> None:
    """The toolkit's own bookkeeping: snapshot runs, rows stamped in the future, windows to rebuild, model versions."""
    conn.execute("CREATE SCHEMA IF NOT EXISTS meta")
    conn.execute(
        """CREATE TABLE IF NOT EXISTS meta.snapshots (
            snapshot_id VARCHAR PRIMARY KEY,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP NOT NULL,
            source VARCHAR NOT NULL,
            full_copy BOOLEAN NOT NULL,
            tables_json VARCHAR NOT NULL
        )"""
    )
    # The rows stamped after the source's clock at the last snapshot (a skewed game clock, a bad write).
    conn.execute(
        """CREATE TABLE IF NOT EXISTS meta.future_rows (
            table_name VARCHAR NOT NULL,
            row_id VARCHAR NOT NULL,
            stamped_at TIMESTAMP NOT NULL,
            source_now TIMESTAMP NOT NULL,
            snapshot_id VARCHAR NOT NULL
        )"""
    )
    # Windows whose raw rows changed since the last build; 1970-01-01 means "everything".
    conn.execute(
        """CREATE TABLE IF NOT EXISTS meta.dirty_windows (
            window_start TIMESTAMP PRIMARY KEY,
            marked_at TIMESTAMP NOT NULL
        )"""
    )
    # Days of the Parquet lake (lake.py) whose rows changed since it was last written; 1970-01-01: all.
    conn.execute(
        """CREATE TABLE IF NOT EXISTS meta.lake_days (
            day DATE PRIMARY KEY,
            marked_at TIMESTAMP NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS meta.model_versions (
            model VARCHAR PRIMARY KEY,
            fingerprint VARCHAR NOT NULL,
            version VARCHAR NOT NULL,
            built_at TIMESTAMP NOT NULL
        )"""
    )
    # One row per build; finished_at stays NULL until its marts and exports are complete, so
    # a build that was killed or failed half-way leaves a row that readers refuse (refuse_half_built).
    conn.execute(
        """CREATE TABLE IF NOT EXISTS meta.builds (
            build_id INTEGER PRIMARY KEY,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP
        )"""
    )


def refuse_half_built(conn: duckdb.DuckDBPyConnection, home: Home) -> None:
    """Raise when the newest build did not finish: its marts may be half rebuilt (one model new, the next old)."""
    try:
        row = conn.execute("SELECT build_id, started_at, finished_at FROM meta.builds ORDER BY build_id DESC LIMIT 1").fetchone()
    except duckdb.CatalogException:  # marts from before meta.builds, or not made by `cli.py build`
        return
    if row is None or row[2] is not None:
        return
    build = f"build {row[0]} (started {row[1]:%Y-%m-%d %H:%M:%S} UTC)"
    if locks.held(home.build_lock):
        raise WarehouseError(f"the marts are half-built: {build} is still running; wait for it to finish, then run this again")
    raise WarehouseError(
        f"the marts are half-built: {build} was interrupted or failed; run `python cli.py build` "
        "(with the same --database-url) to finish them, then run this again"
    )


def mark_windows_dirty(conn: duckdb.DuckDBPyConnection, window_starts: list) -> None:
    """Record windows whose raw rows were written outside a snapshot, so the next build restates them
    and the next lake write (lake.py) rewrites their days."""
    conn.executemany(
        "INSERT OR REPLACE INTO meta.dirty_windows VALUES (?, now()::TIMESTAMP)", [[start] for start in window_starts]
    )
    conn.executemany("INSERT OR REPLACE INTO meta.lake_days VALUES (CAST(? AS DATE), now()::TIMESTAMP)",
                     [[start] for start in window_starts])


def load_postgres_scanner(conn: duckdb.DuckDBPyConnection, home: Home) -> None:
    """LOAD the postgres scanner shipped by the `duckdb-extension-postgres` wheel, never downloading it."""
    import duckdb_extension_postgres

    version = duckdb.__version__
    shipped = Path(duckdb_extension_postgres.__file__).parent / "extensions" / f"v{version}" / "postgres.duckdb_extension"
    if not shipped.exists():
        raise WarehouseError(
            f"the postgres scanner for duckdb {version} is not installed; reinstall with "
            f"`pip install duckdb=={version} duckdb-extension-postgres=={version}`"
        )
    # DuckDB derives the entry point from the file name, so it must be called postgres_scanner.
    target = home.extensions / f"v{version}" / "postgres_scanner.duckdb_extension"
    if not target.exists() or target.stat().st_size != shipped.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic.file(target) as tmp:
            shutil.copyfile(shipped, tmp)
    quoted = str(target).replace("'", "''")
    conn.execute(f"LOAD '{quoted}'")
