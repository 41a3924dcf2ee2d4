"""Soak: `simulate --windows 1 --target duckdb` + `build` + `dataset build --force` in a loop.

Reports per cycle: seconds, warehouse file size, SQLMesh state size, tables in the warehouse and
SQLMesh snapshots in the state; then checks they stay flat (the build runs SQLMesh's janitor,
so old table versions are dropped). Exit code 1 when something grows without bound.

    python bench/soak.py --cycles 30 --home /tmp/soak-home
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]


def cli(home: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), BABYLON_RL_HOME=str(home))
    env.pop("DATABASE_URL", None)
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def measure(home: Path) -> dict:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        tables = conn.execute("SELECT count(*) FROM information_schema.tables").fetchone()[0]
        versions = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema LIKE 'sqlmesh__%'").fetchone()[0]
        size = conn.execute("SELECT block_size, used_blocks, free_blocks FROM pragma_database_size() WHERE database_name = 'warehouse'").fetchone()
    with duckdb.connect(str(home / "sqlmesh_state.duckdb"), read_only=True) as conn:
        snapshots = conn.execute("SELECT count(*) FROM sqlmesh._snapshots").fetchone()[0]
    return {"warehouse_mb": (home / "warehouse.duckdb").stat().st_size / 1e6,
            "state_mb": (home / "sqlmesh_state.duckdb").stat().st_size / 1e6,
            "used_mb": size[0] * size[1] / 1e6, "free_mb": size[0] * size[2] / 1e6, "tables": tables, "table_versions": versions, "snapshots": snapshots}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--home", type=Path, default=Path("/tmp/babylon-soak"))
    args = parser.parse_args()
    shutil.rmtree(args.home, ignore_errors=True)
    cli(args.home, "simulate", "--agents", str(args.agents), "--windows", "6", "--target", "duckdb", "--start", "2025-01-15T00:00")
    rows = []
    print("cycle  seconds  warehouse_MB  used_MB  free_MB  state_MB  tables  table_versions  snapshots", flush=True)
    for cycle in range(1, args.cycles + 1):
        started = time.monotonic()
        cli(args.home, "simulate", "--agents", str(args.agents), "--windows", "1", "--target", "duckdb")
        cli(args.home, "build")
        cli(args.home, "dataset", "build", "--name", "soak", "--min-agents", "3", "--force")
        row = {"cycle": cycle, "seconds": time.monotonic() - started, **measure(args.home)}
        rows.append(row)
        print(f"{cycle:5d}  {row['seconds']:7.1f}  {row['warehouse_mb']:12.1f}  {row['used_mb']:7.1f}  {row['free_mb']:7.1f}  {row['state_mb']:8.1f}  {row['tables']:6d}  "
              f"{row['table_versions']:14d}  {row['snapshots']:9d}", flush=True)
    problems = []
    for key in ("tables", "table_versions", "snapshots"):
        if rows[-1][key] > rows[0][key]:
            problems.append(f"{key} grew from {rows[0][key]} to {rows[-1][key]}")
    half = len(rows) // 2
    if rows[-1]["free_mb"] > 2 * max(r["free_mb"] for r in rows[:half] or rows) + 5:
        problems.append(f"free space in the warehouse file grew from {rows[0]['free_mb']:.1f} MB to {rows[-1]['free_mb']:.1f} MB")
    if rows[-1]["state_mb"] > 2 * max(r["state_mb"] for r in rows[:half] or rows):
        problems.append("SQLMesh state more than doubled in the second half")
    print("flat" if not problems else "NOT FLAT: " + "; ".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
