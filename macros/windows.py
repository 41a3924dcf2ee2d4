"""Window arithmetic shared by the models (portable SQL, transpiled per gateway).

A window is identified by its UTC start rendered as `YYYY-MM-DDTHH:MM`. Trajectories carry
`windowId`; where it is NULL or not a valid `YYYY-MM-DDTHH:MM` the window is `startTime`
truncated to `windowHours` (windows are aligned to UTC midnight, so window lengths divide 24).
"""

from __future__ import annotations

from sqlglot import exp

from sqlmesh import macro

_WINDOW_ID = r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]$"


@macro()
def window_start_from_id(evaluator, window_id):
    """The TIMESTAMP a `YYYY-MM-DDTHH:MM` window id names; NULL when it is not a real date and time."""
    w = window_id.sql("duckdb")
    if evaluator.var("sql_engine", "duckdb") == "spark":  # its parse refuses impossible dates too
        w = window_id.sql("spark")
        return exp.maybe_parse(
            f"CASE WHEN {w} RLIKE '{_WINDOW_ID}' THEN try_to_timestamp(replace({w}, 'T', ' '), 'yyyy-MM-dd HH:mm') END",
            dialect="spark",
        )
    if evaluator.var("sql_engine", "duckdb") != "postgres":
        # DuckDB's TRY_STRPTIME rejects impossible dates itself; the pattern keeps the format
        # strict (it would accept 2026-1-5T3:04). A short expression matters: it is inlined
        # several times per query, and SQLMesh copies every query's tree a few times per batch.
        return evaluator.parse_one(f"CASE WHEN REGEXP_MATCHES({w}, '{_WINDOW_ID}') THEN TRY_STRPTIME({w}, '%Y-%m-%dT%H:%M') END")
    named = f"""(CAST(SUBSTRING({w}, 1, 7) || '-01 00:00:00' AS TIMESTAMP)
                 + INTERVAL 1 DAY * (CAST(SUBSTRING({w}, 9, 2) AS INT) - 1)
                 + INTERVAL 1 HOUR * CAST(SUBSTRING({w}, 12, 2) AS INT)
                 + INTERVAL 1 MINUTE * CAST(SUBSTRING({w}, 15, 2) AS INT))"""
    # PostgreSQL has no non-failing timestamp parse: the id is taken apart and put back
    # together. Nested CASEs: PostgreSQL evaluates CASE branches in order, but not the operands of AND.
    # A day past the month's end (2025-02-30) rolls over into the next month: not a real window.
    return evaluator.parse_one(
        f"""CASE WHEN REGEXP_MATCHES({w}, '{_WINDOW_ID}') THEN
               CASE WHEN EXTRACT(DAY FROM {named}) = CAST(SUBSTRING({w}, 9, 2) AS INT) THEN {named} END
             END"""
    )


@macro()
def window_hours(evaluator, hours):
    """The trajectory's window length in hours, or the `window_hours` variable when unusable."""
    h = hours.sql("duckdb")
    default = int(evaluator.var("window_hours", 1))
    return evaluator.parse_one(f"CASE WHEN {h} BETWEEN 1 AND 24 AND 24 % {h} = 0 THEN {h} ELSE {default} END")


@macro()
def window_start_from_time(evaluator, ts, hours):
    """`ts` truncated to a window of `hours` hours, counted from UTC midnight."""
    t, h = ts.sql("duckdb"), hours.sql("duckdb")
    return evaluator.parse_one(
        f"DATE_TRUNC('hour', {t}) - INTERVAL 1 HOUR * (CAST(EXTRACT(HOUR FROM {t}) AS INT) % {h})"
    )


@macro()
def window_id(evaluator, window_start):
    """The window id text `YYYY-MM-DDTHH:MM` of a window start."""
    s = window_start.sql("duckdb")
    return evaluator.parse_one(f"STRFTIME({s}, '%Y-%m-%d') || 'T' || STRFTIME({s}, '%H:%M')")


@macro()
def trajectories_in_range(evaluator):
    """The raw trajectories whose window starts in the batch's range (@start_ts..@end_ts), as a
    derived table: every raw column plus `window_start`.

    Two branches, so that each carries a filter on one plain column that DuckDB can apply
    while scanning (a condition on a computed window start, or an OR of two columns, makes it
    read every row's stepsJson for every batch): a valid windowId sorts like the time it
    names, so windows named in the range have windowId between the range's ids; a window
    taken from startTime starts at most a day before it. The second branch finds its rows on
    the small columns first and joins them back by id: filtered together with the window
    computed from two columns, DuckDB would read the stepsJson of every row in the range. The
    join's own filter on windowId alone (one column) is checked in the scan, so the stepsJson
    of the rows that have a valid windowId is not read there either (four days at 100k, alone:
    0.36 s -> 0.02 s read cold; inside a build, within the noise).
    """
    raw = f"{evaluator.var('raw_schema', 'raw')}.trajectories"
    # the other macros are called as functions: a macro's serialized code only carries what it calls
    named = window_start_from_id(evaluator, exp.column("windowId", quoted=True)).sql("duckdb")
    timed = window_start_from_time(
        evaluator, exp.column("startTime", quoted=True), window_hours(evaluator, exp.column("windowHours", quoted=True))
    ).sql("duckdb")
    first_id, last_id = (window_id(evaluator, evaluator.parse_one(f"CAST(@{name} AS TIMESTAMP)")).sql("duckdb") for name in ("start_ts", "end_ts"))
    sql = f"""(
      SELECT *, {named} AS window_start
      FROM {raw}
      WHERE "windowId" BETWEEN {first_id} AND {last_id}
        AND {named} BETWEEN @start_ts AND @end_ts
      UNION ALL
      SELECT r.*, k.window_start
      FROM {raw} AS r
      JOIN (
        SELECT "id" AS key_id, {timed} AS window_start
        FROM {raw}
        WHERE "startTime" >= CAST(@start_ts AS TIMESTAMP) AND "startTime" < CAST(@end_ts AS TIMESTAMP) + INTERVAL 1 DAY
          AND {named} IS NULL
      ) AS k
        ON k.key_id = r."id"
      WHERE r."startTime" >= CAST(@start_ts AS TIMESTAMP) AND r."startTime" < CAST(@end_ts AS TIMESTAMP) + INTERVAL 1 DAY
        AND {named} IS NULL
        AND k.window_start BETWEEN @start_ts AND @end_ts
    )"""
    return evaluator.transform(evaluator.parse_one(sql))


def _margin(evaluator) -> str:
    return f"INTERVAL 1 HOUR * {int(evaluator.var('call_log_margin_hours', 24))}"


@macro()
def logged_near_window(evaluator, call_time, window_start, window_end):
    """TRUE when a logged call's time is unknown or lies within `call_log_margin_hours` of its
    trajectory's window: a call is made while its trajectory plays. Logs stamped farther away
    are not staged (babylon.rejected_rows: call_outside_window)."""
    t, start, end = (e.sql("duckdb") for e in (call_time, window_start, window_end))
    margin = _margin(evaluator)
    return evaluator.parse_one(f"({t} IS NULL OR ({t} >= {start} - {margin} AND {t} < {end} + {margin}))")


@macro()
def call_logs_near_batch(evaluator):
    """The raw llm_call_logs rows that @logged_near_window can keep for some window starting in
    the batch's range (@start_ts..@end_ts, windows of at most 24 h), as a derived table.

    Two branches, so that each is a filter DuckDB can check against the row groups' min/max
    and skip the rest (the logs are appended in time order): the calls stamped near the
    batch's days, and those with no time. Written as one `t IS NULL OR t BETWEEN ...`
    condition, DuckDB 1.5 does not skip any row group, and each batch read all of the
    history's logs (docs/BENCHMARKS.md, "Every batch read every log")."""
    raw = f"{evaluator.var('raw_schema', 'raw')}.llm_call_logs"
    margin = _margin(evaluator)
    return evaluator.transform(evaluator.parse_one(
        f"""(
          SELECT * FROM {raw}
          WHERE "timestamp" >= CAST(@start_ts AS TIMESTAMP) - {margin}
            AND "timestamp" < CAST(@end_ts AS TIMESTAMP) + INTERVAL 1 DAY + {margin}
          UNION ALL
          SELECT * FROM {raw}
          WHERE "timestamp" IS NULL
        )"""
    ))


@macro()
def newest_call_logs(evaluator, trajectories, near_batch=None):
    """The llm_call_logs rows the models use, one per call id, as a derived table (call_id,
    log_id, source_id, trajectory_id, step_id, call_time): of the rows with a callId whose
    trajectory is in `trajectories` (a relation with source_id, trajectory_id, window_start and
    window_end) and stamped near its window (@logged_near_window), the newest (createdAt, then
    id). The others are babylon.rejected_rows' duplicate_call_id. With `near_batch := TRUE` it
    reads only the logs stamped near the batch's days (@call_logs_near_batch)."""
    logs = call_logs_near_batch(evaluator).sql("duckdb") if near_batch else f"{evaluator.var('raw_schema', 'raw')}.llm_call_logs"
    near = logged_near_window(evaluator, exp.column("timestamp", table="l", quoted=True),
                              exp.column("window_start", table="t"), exp.column("window_end", table="t")).sql("duckdb")
    return evaluator.transform(evaluator.parse_one(
        f"""(
          SELECT call_id, log_id, source_id, trajectory_id, step_id, call_time
          FROM (
            SELECT
              l."callId" AS call_id,
              l."id" AS log_id,
              t.source_id,
              t.trajectory_id,
              l."stepId" AS step_id,
              l."timestamp" AS call_time,
              ROW_NUMBER() OVER (PARTITION BY l."callId" ORDER BY l."createdAt" DESC, l."id" DESC) AS newest_first
            FROM {logs} AS l
            JOIN {trajectories.sql("duckdb")} AS t
              ON t.trajectory_id = l."trajectoryId"
            WHERE NULLIF(l."callId", '') IS NOT NULL
              AND {near}
          ) AS logged
          WHERE newest_first = 1
        )"""
    ))
