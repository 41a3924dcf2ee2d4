"""The `after_all` statement of config.py: a bare `sqlmesh plan` or `sqlmesh run` on the duckdb
gateway republishes the analysts' Parquet exports (HOME/exports/*.parquet), as `cli.py build` does;
on the spark gateway every plan and run publishes the marts to HOME/spark/exports/*.parquet.

`cli.py build` drives SQLMesh with BABYLON_RL_BUILD_ID set and publishes once at its end, when
the whole build is complete (babylon_rl/build.py); its plans and runs publish nothing. A bare
`sqlmesh run` runs `after_all` even when a model failed, so its exports then hold what the
marts hold: the failure is in its output and exit status.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlmesh import macro


@macro()
def publish_exports(evaluator):
    """Write the published marts next to the warehouse SQLMesh is building. The work is Python;
    the statement it renders to is `SELECT 1`, as SQLMesh expects one."""
    adapter = evaluator.engine_adapter
    if evaluator.runtime_stage == "after_all" and not os.environ.get("BABYLON_RL_BUILD_ID") and adapter.dialect == "duckdb":
        from babylon_rl.build import write_exports

        (warehouse,) = adapter.fetchone("SELECT path FROM duckdb_databases() WHERE database_name = current_database()")
        write_exports(adapter.fetchall, Path(warehouse).parent / "exports")
    if evaluator.runtime_stage == "after_all" and adapter.dialect == "spark":
        from babylon_rl.build import write_spark_exports

        write_spark_exports(adapter.spark, Path(evaluator.var("lake")).parent / "spark" / "exports")
    return evaluator.parse_one("SELECT 1 AS done")  # Spark renders a bare `SELECT 1` as `SELECT 1 AS 1`
