"""How many DuckDB threads a model that parses stepsJson runs on, as its pre- and post-statements.

DuckDB gives a table scan at most `total rows / 122,880 + 1` threads (DataTable::MaxThreads
counts with its default row-group size, whatever size the row groups were written in), and
a JSON parse runs in the scan's pipeline. So up to 122,879 trajectories stepsJson is parsed
on one thread, and beyond on two, each holding a vector of 2,048 parsed documents: at 1M
trajectories the batches that parse the calls (then staging.llm_calls, now
staging.training_chats) peaked 230-350 MB higher than on one thread, for the same batches
(docs/BENCHMARKS.md, "One thread for the stepsJson parse"). A model that calls

    @single_threaded_parse();  -- before its query
    ...query...;
    @restore_threads();        -- after it

runs on one thread once raw.trajectories is that large, and on the connection's threads
below it, where DuckDB parses on one thread anyway and the batch's other steps keep both.
On PostgreSQL and Spark both render to nothing. (Declared as metadata-only macros, SQLMesh 0.236
fails the build's restatement plan: "Another plan deployed new versions of 4 models ...
while they were being restated".)
"""

from __future__ import annotations

from sqlmesh import macro


DUCKDB_ROW_GROUP_SIZE = 122_880  # DuckDB's default: the unit of DataTable::MaxThreads
_SAVED = "babylon_rl_threads"
_BATCH = "babylon_rl_batch_threads"


@macro()
def single_threaded_parse(evaluator):
    """Pre-statements: remember the connection's thread count; run the batch on one thread
    when DuckDB would parse raw.trajectories on more than one."""
    if evaluator.var("sql_engine", "duckdb") != "duckdb":
        return None
    trajectories = f"{evaluator.var('raw_schema', 'raw')}.trajectories"
    return [
        evaluator.parse_one(f"SET VARIABLE {_SAVED} = current_setting('threads')"),
        evaluator.parse_one(
            f"SET VARIABLE {_BATCH} = CASE WHEN (SELECT count(*) FROM {trajectories}) >= {DUCKDB_ROW_GROUP_SIZE}"
            f" THEN 1 ELSE getvariable('{_SAVED}') END"
        ),
        evaluator.parse_one(f"SET threads = getvariable('{_BATCH}')"),
    ]


@macro()
def restore_threads(evaluator):
    """Post-statement: the thread count @single_threaded_parse found."""
    if evaluator.var("sql_engine", "duckdb") != "duckdb":
        return None
    return evaluator.parse_one(f"SET threads = getvariable('{_SAVED}')")
