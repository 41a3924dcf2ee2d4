"""The spark gateway beside the duckdb gateway: the first full build of one simulated history on each.

On a home that holds a simulated game and its lake, never built:

    python cli.py --home /tmp/s10k simulate --agents 100 --windows 100 --target duckdb --dirt-rate 0.02 --start 2025-01-01T00:00 --seed 5
    python cli.py --home /tmp/s10k snapshot --format parquet
    python bench/bench_spark.py --home /tmp/s10k

each build runs in a new process, timed, with the peak of its whole process tree's resident
memory sampled every 0.2 s (Spark's JVM is a child of the Python process):
  duckdb  `cli.py build` (SQLMesh on the warehouse's raw.*)
  spark   `cli.py build --gateway spark`: the same models through SQLMesh's Spark engine,
          local[2], over HOME/lake (config.py's spark_config)
Then the marts' row counts are compared: the two builds must agree.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import psutil

from babylon_rl.build import PUBLISHED_MARTS

ROOT = Path(__file__).resolve().parent.parent



def run_sampled(command: list[str], env_home: Path) -> tuple[float, float, str]:
    """Run a command: seconds, peak RSS of it and its descendants together in MB, its stdout."""
    env = {**os.environ, "BABYLON_RL_HOME": str(env_home)}
    started = time.monotonic()
    log = open(env_home / "bench_spark.log", "a")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    root, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.2)
    out = process.stdout.read()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command[:2])} failed with exit code {process.returncode}; its errors are in {log.name}")
    return time.monotonic() - started, peak / 2**20, out


def duckdb_counts(home: Path) -> dict[str, int]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return {m: conn.execute(f"SELECT count(*) FROM babylon.{m}").fetchone()[0] for m in PUBLISHED_MARTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    home = parser.parse_args().home.resolve()
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        trajectories, calls = (conn.execute(f"SELECT count(*) FROM raw.{t}").fetchone()[0] for t in ("trajectories", "llm_call_logs"))
    print(f"history: {trajectories:,} trajectories, {calls:,} logged LLM calls")

    seconds, peak, _ = run_sampled([sys.executable, str(ROOT / "cli.py"), "--home", str(home), "build"], home)
    print(f"duckdb build: {seconds:.1f} s, peak RSS {peak:,.0f} MB")
    on_duckdb = duckdb_counts(home)

    seconds, peak, _ = run_sampled([sys.executable, str(ROOT / "cli.py"), "--home", str(home), "build", "--gateway", "spark"], home)
    exported = {m: pl.read_parquet(home / "spark" / "exports" / f"{m}.parquet").height for m in PUBLISHED_MARTS}
    print(f"spark build:  {seconds:.1f} s, peak RSS {peak:,.0f} MB (Python and the JVM)")
    print(f"mart rows: duckdb {on_duckdb}, spark's exports {exported}")
    if any(exported[m] != on_duckdb[m] for m in PUBLISHED_MARTS):
        raise SystemExit("the two builds disagree")


if __name__ == "__main__":
    main()
