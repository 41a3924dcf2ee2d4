"""The spark gateway's raw tables: views over the lake that `snapshot --format parquet` writes.

`raw_views(lake, schema)` gives the statements @prepare_engine() runs before every plan and run:
each game table as a view that reads its Parquet directory (Spark discovers the `day=...`
partitions at each query, so days written since are read without a new view), with exactly the
columns the other gateways' raw tables have (babylon_rl.warehouse.RAW_TABLES; the `day`
partition column is left out). A table with no file yet (no market outcomes written, say) is an
empty view with the same columns, so the models compile and find nothing.
"""

from __future__ import annotations

from pathlib import Path

from babylon_rl.lake import DAY_OF_ROWS
from babylon_rl.warehouse import RAW_TABLES

# DuckDB's types of the raw columns, as Spark names them (timestamps are naive UTC on every gateway)
_SPARK_TYPES = {"VARCHAR": "STRING", "TIMESTAMP": "TIMESTAMP_NTZ", "INTEGER": "INT"}


def _spark_type(duckdb_type: str) -> str:
    return _SPARK_TYPES.get(duckdb_type, duckdb_type)


def _source(lake: Path, table: str) -> str | None:
    """The Parquet path Spark reads for `table`, or None when the lake holds no file of it."""
    if table in DAY_OF_ROWS:
        folder = lake / table
        return str(folder) if any(folder.glob("*/*.parquet")) else None
    single = lake / table / "data.parquet"
    return str(single) if single.exists() else None


def raw_views(lake: str, schema: str) -> list[str]:
    statements = [f"CREATE DATABASE IF NOT EXISTS {schema}"]
    for table in RAW_TABLES:
        source = _source(Path(lake), table.name)
        columns = ", ".join(
            f"CAST(`{name}` AS {_spark_type(kind)}) AS `{name}`" if source else f"CAST(NULL AS {_spark_type(kind)}) AS `{name}`"
            for name, kind in table.columns
        )
        origin = f"FROM parquet.`{source}`" if source else "WHERE FALSE"
        statements.append(f"CREATE OR REPLACE VIEW {schema}.{table.name} AS SELECT {columns} {origin}")
    return statements
