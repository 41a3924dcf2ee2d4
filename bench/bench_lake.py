"""The Parquet lake (`snapshot --format parquet`): writing it whole, writing one changed day, reading it back.

On a home that holds a simulated game (`cli.py simulate --target duckdb`), each step in a new
process, timed with its peak RSS: the whole lake (`_lake.json` removed first), one more window
simulated into the last day and the changed day rewritten, then a write with nothing changed.
Then the trajectories and LLM calls are counted per day from the lake by DuckDB, Polars and, when
`pyspark` is installed (it is not a dependency: `pip install pyspark` and a Java 17+), Spark in
local mode, and each count is checked against the warehouse's raw tables.

    python cli.py --home /tmp/l100k simulate --agents 100 --windows 1000 --target duckdb --dirt-rate 0.02 --start 2025-01-01T00:00 --seed 5
    python bench/bench_lake.py --home /tmp/l100k
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("trajectories", "llm_call_logs")


def timed_cli(home: Path, *args: str) -> tuple[float, float, str]:
    """Run `cli.py --home HOME ARGS` in a new process: seconds, peak RSS in MB, its output."""
    started = time.monotonic()
    command = ["/usr/bin/time", "-f", "%M", sys.executable, str(ROOT / "cli.py"), "--home", str(home), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    peak_kb = int(done.stderr.strip().splitlines()[-1])
    return time.monotonic() - started, peak_kb / 1024, done.stdout.strip()


def raw_counts(home: Path) -> dict[str, int]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM raw.{t}").fetchone()[0] for t in TABLES}


def last_window(home: Path) -> datetime:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute("""SELECT max(strptime("windowId", '%Y-%m-%dT%H:%M')) FROM raw.trajectories""").fetchone()[0]


def read_duckdb(lake: Path) -> dict[str, int]:
    with duckdb.connect() as conn:
        return {t: sum(n for _, n in conn.execute(
            f"SELECT day, count(*) FROM read_parquet('{lake}/{t}/*/*.parquet', hive_partitioning = true) GROUP BY 1").fetchall())
            for t in TABLES}


def read_polars(lake: Path) -> dict[str, int]:
    import polars as pl

    return {t: int(pl.scan_parquet(lake / t / "**" / "*.parquet", hive_partitioning=True).group_by("day").len()
                   .collect()["len"].sum()) for t in TABLES}


def read_spark(lake: Path) -> dict[str, int] | None:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return {t: sum(r["count"] for r in spark.read.parquet(str(lake / t)).groupBy("day").count().collect()) for t in TABLES}
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--agents", type=int, default=100, help="agents of the one window added before the incremental write")
    args = parser.parse_args()
    lake = args.home / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    rows = []
    subprocess.run(["sync"], check=False)
    seconds, peak, out = timed_cli(args.home, "snapshot", "--format", "parquet")
    rows.append(("whole lake", seconds, peak, out))
    window = last_window(args.home) + timedelta(hours=1)
    timed_cli(args.home, "simulate", "--agents", str(args.agents), "--windows", "1", "--target", "duckdb",
              "--start", f"{window:%Y-%m-%dT%H:%M}", "--seed", "99")
    subprocess.run(["sync"], check=False)
    seconds, peak, out = timed_cli(args.home, "snapshot", "--format", "parquet")
    rows.append(("one changed day", seconds, peak, out))
    seconds, peak, out = timed_cli(args.home, "snapshot", "--format", "parquet")
    rows.append(("nothing changed", seconds, peak, out))

    expected = raw_counts(args.home)
    for name, reader in (("DuckDB", read_duckdb), ("Polars", read_polars), ("Spark local[2]", read_spark)):
        started = time.monotonic()
        counts = reader(lake)
        if counts is None:
            rows.append((f"read per day: {name}", 0.0, 0.0, "skipped: pyspark is not installed"))
            continue
        assert counts == expected, (name, counts, expected)
        rows.append((f"read per day: {name}", time.monotonic() - started, 0.0, f"rows equal raw.*: {json.dumps(counts)}"))

    print(f"lake of {args.home} ({sum(p.stat().st_size for p in lake.rglob('*.parquet')) / 2**20:,.0f} MiB), "
          f"{datetime.now():%Y-%m-%d %H:%M}")
    print("| step | seconds | peak RSS (MB) | output |\n|---|---:|---:|---|")
    for name, seconds, peak, out in rows:
        print(f"| {name} | {seconds:.1f} | {peak:,.0f} | {out.splitlines()[-1] if out else ''} |")


if __name__ == "__main__":
    main()
