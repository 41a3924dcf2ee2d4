"""Read the eligible trajectories from the marts: one parameterised query, Arrow into Polars.

Eligibility (all in SQL, so rows that can never be used are not transferred):
rows of `babylon.training_samples` (already isTrainingData and not isEvaluation),
without `used_in_training` ones unless --include-used, with at least --min-actions
actions, in the selected windows, and only windows that still have >= --min-agents
distinct agents after those filters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import polars as pl

from babylon_rl import warehouse
from babylon_rl.dataset.params import BuildParams
from babylon_rl.errors import DatasetError, WarehouseError
from babylon_rl.settings import Home, require_database_url

REQUIRED_MARTS = ("training_samples", "windows", "window_market_context")

# Every column the sampler takes from the mart, with its output type (fixed, for byte-identical files).
# The messages (the bulk of the bytes) are fetched afterwards for the kept rows only.
SOURCE_COLUMNS: dict[str, pl.DataType] = {
    "trajectory_id": pl.String(),
    "source_id": pl.String(),
    "window_id": pl.String(),
    "window_start": pl.Datetime("us"),
    "agent_id": pl.String(),
    "pnl": pl.Float64(),
    "win_rate": pl.Float64(),
    "actions": pl.Int64(),
    "trades": pl.Int64(),
    "errors": pl.Int64(),
    "llm_calls": pl.Int64(),
    "window_agents": pl.Int64(),
}


@dataclass(frozen=True)
class Candidates:
    frame: pl.DataFrame  # SOURCE_COLUMNS + sample_key (Int64, from the seed and trajectory_id)
    anchor: datetime | None  # newest window in the warehouse (the lookback is relative to it)


def open_marts(home: Home, gateway: str = "duckdb", database_url: str | None = None,
               marts: tuple[str, ...] = REQUIRED_MARTS) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection in which `babylon.*` are the marts of `gateway` (`marts`, checked to exist): the warehouse
    (duckdb), the game database's schema babylon (postgres, through DuckDB's postgres scanner), or the Parquet
    files the spark gateway publishes (spark)."""
    if gateway == "postgres":
        return _postgres_marts(home, database_url, marts)
    if gateway == "spark":
        return _spark_marts(home, marts)
    return _warehouse_marts(home, marts)


def _postgres_marts(home: Home, database_url: str | None, marts: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    from babylon_rl.snapshot import SOURCE_ALIAS, attach_source

    conn = warehouse.connect_memory()
    attach_source(conn, require_database_url(database_url), home)
    present = {row[0] for row in conn.execute(
        f"SELECT table_name FROM information_schema.tables WHERE table_catalog = '{SOURCE_ALIAS}' AND table_schema = 'babylon'"
    ).fetchall()}
    _require(conn, present, marts, "the game database has no {}; build the marts there with `sqlmesh --gateway postgres plan`")
    conn.execute("CREATE SCHEMA babylon")
    for mart in marts:
        conn.execute(f"CREATE VIEW babylon.{mart} AS SELECT * FROM {SOURCE_ALIAS}.babylon.{mart}")
    return conn


def _spark_marts(home: Home, marts: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    conn = warehouse.connect_memory()
    files = {mart: home.spark_exports / (f"{mart}.parquet" if mart != "training_samples" else mart) for mart in marts}
    _require(conn, {mart for mart, path in files.items() if path.exists()}, marts,
             f"{home.spark_exports} has no export of {{}}; run `cli.py build --gateway spark`")
    conn.execute("CREATE SCHEMA babylon")
    for mart, path in files.items():
        pattern = f"{path}/*.parquet" if path.is_dir() else str(path)
        conn.execute(f"CREATE VIEW babylon.{mart} AS SELECT * FROM read_parquet('{pattern}')")
    return conn


def _require(conn: duckdb.DuckDBPyConnection, present: set[str], marts: tuple[str, ...], message: str) -> None:
    missing = [name for name in marts if name not in present]
    if missing:
        conn.close()
        raise WarehouseError(message.format(", ".join(f"babylon.{name}" for name in missing)))


def _warehouse_marts(home: Home, marts: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    """The warehouse opened read-only, after checking the marts exist and no build stopped half-way through them."""
    if not home.warehouse.exists():
        raise WarehouseError(f"no warehouse at {home.warehouse}; run `cli.py build` first")
    conn = warehouse.connect(home, read_only=True)
    present = {
        row[0]
        for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'babylon'"
        ).fetchall()
    }
    missing = [name for name in marts if name not in present]
    if missing:
        conn.close()
        names = ", ".join(f"babylon.{name}" for name in missing)
        raise WarehouseError(f"the warehouse {home.warehouse} has no {names}; run `cli.py build` to build the marts")
    try:
        warehouse.refuse_half_built(conn, home)
    except WarehouseError:
        conn.close()
        raise
    return conn


def _window_filter(params: BuildParams) -> tuple[str, list]:
    """A fixed SQL fragment for the selection mode and its parameters (user values only as parameters)."""
    if params.selection_mode == "windows":
        return "list_contains(?::VARCHAR[], window_id)", [list(params.windows)]
    if params.selection_mode == "range":
        return "window_start >= coalesce(?::TIMESTAMP, '-infinity'::TIMESTAMP) AND window_start < coalesce(?::TIMESTAMP, 'infinity'::TIMESTAMP)", [
            params.since,
            params.until,
        ]
    return "window_start > (SELECT max(window_start) FROM babylon.windows) - to_hours(?::BIGINT)", [params.lookback_hours]


def _base_cte(params: BuildParams) -> tuple[str, list]:
    window_sql, window_params = _window_filter(params)
    columns = ", ".join(f"s.{name}" for name in SOURCE_COLUMNS)
    sql = f"""
        base AS (
            SELECT {columns}
            FROM babylon.training_samples AS s
            WHERE (?::BOOLEAN OR NOT coalesce(s.used_in_training, false))
              AND coalesce(s.actions, 0) >= ?::BIGINT
              AND {window_sql}
        )"""
    return sql, [params.include_used, params.min_actions, *window_params]


def load_candidates(conn: duckdb.DuckDBPyConnection, params: BuildParams) -> Candidates:
    base_sql, base_params = _base_cte(params)
    sql = f"""
        WITH {base_sql},
        usable AS (
            SELECT window_id FROM base GROUP BY window_id HAVING count(DISTINCT agent_id) >= ?::BIGINT
        )
        SELECT base.*,
               CAST('0x' || substr(md5(CAST(?::BIGINT AS VARCHAR) || ':' || base.trajectory_id), 1, 15) AS BIGINT) AS sample_key
        FROM base SEMI JOIN usable USING (window_id)
    """
    frame = conn.execute(sql, [*base_params, params.min_agents, params.seed]).pl()
    frame = frame.with_columns(
        [pl.col(name).cast(dtype) for name, dtype in SOURCE_COLUMNS.items()] + [pl.col("sample_key").cast(pl.Int64)]
    )
    anchor = conn.execute("SELECT max(window_start) FROM babylon.windows").fetchone()[0]
    return Candidates(frame=frame, anchor=anchor)


def fetch_messages(conn: duckdb.DuckDBPyConnection, kept_rows: pl.DataFrame) -> pl.Series:
    """The messages of the kept trajectories (trajectory_id, window_start), in their order: one
    semi-join, not one query per row.

    The kept ids are the semi-join's build side; the mart's chats only stream past it and out of DuckDB,
    and Polars puts them in order. Joining or sorting the chats inside DuckDB held
    all of them (GBs at 100k trajectories) under the warehouse's memory limit, and ran out of it.
    The kept windows' range bounds the scan: babylon.training_samples is a view whose joins DuckDB
    does not push the semi-join below, while a range on window_start it does (at 100k, 1,000 chats
    of the last week: 1.3-2.0 s without it)."""
    kept = kept_rows.select("trajectory_id")
    conn.register("kept_rows", kept.to_arrow())
    try:
        # Messages of many trajectories can exceed 2 GiB: Arrow large string buffers.
        conn.execute("SET arrow_large_buffer_size = true")
        conn.execute("SET preserve_insertion_order = false")
        fetched = conn.execute(
            """SELECT trajectory_id, messages FROM babylon.training_samples
               WHERE window_start BETWEEN ? AND ? AND trajectory_id IN (SELECT trajectory_id FROM kept_rows)""",
            [kept_rows["window_start"].min(), kept_rows["window_start"].max()],
        ).pl()
    finally:
        conn.execute("RESET preserve_insertion_order")  # the later queries on this connection keep their order
        conn.unregister("kept_rows")
    in_order = kept.join(fetched.with_columns(pl.col("trajectory_id").cast(pl.String())), on="trajectory_id", how="left",
                         maintain_order="left")
    return in_order["messages"].cast(pl.String())


def fetch_contexts(conn: duckdb.DuckDBPyConnection, window_ids: pl.Series) -> pl.DataFrame:
    """The ground-truth block of each kept window, for the judge (never for the policy)."""
    windows = pl.DataFrame({"window_id": window_ids.unique().sort()})
    conn.register("kept_windows", windows.to_arrow())
    try:
        frame = conn.execute(
            """SELECT c.window_id, c.window_start, c.context_text, c.stocks_json, c.prediction_markets_json
               FROM kept_windows AS k JOIN babylon.window_market_context AS c USING (window_id)
               ORDER BY c.window_id"""
        ).pl()
    finally:
        conn.unregister("kept_windows")
    return frame.with_columns(
        pl.col("window_start").cast(pl.Datetime("us")),
        *(pl.col(name).cast(pl.String()) for name in ("window_id", "context_text", "stocks_json", "prediction_markets_json")),
    )


def explain_empty(conn: duckdb.DuckDBPyConnection, params: BuildParams) -> DatasetError:
    """Why no window qualified: how many windows were in scope and what --min-agents would give some."""
    base_sql, base_params = _base_cte(params)
    row = conn.execute(
        f"""
        WITH {base_sql},
        per_window AS (SELECT window_id, count(DISTINCT agent_id) AS agents FROM base GROUP BY window_id)
        SELECT (SELECT count(*) FROM babylon.windows), count(*), coalesce(max(agents), 0) FROM per_window
        """,
        base_params,
    ).fetchone()
    total, in_scope, best = row
    hint = (
        f"the largest has {best} eligible agents, so --min-agents {best} would give some"
        if best
        else "none has an eligible trajectory (try --include-used, a lower --min-actions, or a wider --lookback-hours/--since/--until/--windows)"
    )
    return DatasetError(
        f"no window has at least {params.min_agents} agents with eligible trajectories: "
        f"the warehouse has {total} windows, {in_scope} in the selection with eligible trajectories; {hint}"
    )


def source_versions(conn: duckdb.DuckDBPyConnection) -> tuple[str | None, dict[str, str]]:
    """The newest snapshot id and the SQLMesh model fingerprints, when the toolkit tables exist."""
    present = {
        row[0]
        for row in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'meta'").fetchall()
    }
    snapshot = None
    if "snapshots" in present:
        row = conn.execute(
            "SELECT snapshot_id FROM meta.snapshots ORDER BY started_at DESC NULLS LAST, snapshot_id DESC LIMIT 1"
        ).fetchone()
        snapshot = None if row is None else str(row[0])
    models: dict[str, str] = {}
    if "model_versions" in present:
        rows = conn.execute("SELECT model, fingerprint FROM meta.model_versions ORDER BY model").fetchall()
        models = {str(model): str(fingerprint) for model, fingerprint in rows}
    return snapshot, models
