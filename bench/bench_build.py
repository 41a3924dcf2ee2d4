"""Model build: a full `cli.py build` (SQLMesh plans prod over every window) and an
incremental one after one more simulated window, on realistic simulator data.

    /work/venv/bin/python bench/bench_build.py --agents 100 --windows 100    # 10k trajectories
    /work/venv/bin/python bench/bench_build.py --agents 100 --windows 1000   # 100k trajectories

Each step runs `cli.py` in its own process under /usr/bin/time -v, so the peak RSS is that
build's alone. Prints trajectories, full build seconds and rows/s, incremental seconds and
the ratio, and the peak RSS of each build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent


def _run(home: Path, *args: str) -> tuple[float, int]:
    """Run `cli.py --home HOME ARGS` under /usr/bin/time -v: (wall seconds, peak RSS in MB)."""
    began = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, str(ROOT / "cli.py"), "--home", str(home), *args],
        cwd=ROOT, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        # the CLI's one-line error comes before /usr/bin/time's report on stderr
        report_start = proc.stderr.find("\tCommand being timed")
        error = proc.stderr[:report_start] if report_start >= 0 else proc.stderr
        raise click.ClickException(f"cli.py {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{error[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) // 1024
    return seconds, rss


def _count(home: Path) -> int:
    import duckdb

    conn = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM raw.trajectories").fetchone()[0]
    finally:
        conn.close()


@click.command()
@click.option("--agents", default=100, show_default=True)
@click.option("--windows", default=100, show_default=True)
@click.option("--dirt-rate", default=0.02, show_default=True)
@click.option("--home", "home_dir", type=click.Path(path_type=Path), default=Path("/tmp/brl-bench-build"), show_default=True)
@click.option("--reuse", is_flag=True, help="Build the simulated warehouse already in HOME instead of simulating one (it must not be built yet: copy it from an untouched copy).")
def main(agents: int, windows: int, dirt_rate: float, home_dir: Path, reuse: bool) -> None:
    if not reuse:
        shutil.rmtree(home_dir, ignore_errors=True)
        _run(home_dir, "simulate", "--agents", str(agents), "--windows", str(windows), "--target", "duckdb", "--dirt-rate", str(dirt_rate))
    trajectories = _count(home_dir)
    full_s, full_rss = _run(home_dir, "build")
    _run(home_dir, "simulate", "--agents", str(agents), "--windows", "1", "--target", "duckdb", "--dirt-rate", str(dirt_rate))
    inc_s, inc_rss = _run(home_dir, "build")
    click.echo(f"trajectories           {trajectories:,}")
    click.echo(f"full build             {full_s:.1f} s  ({trajectories / full_s:,.0f} trajectories/s), peak RSS {full_rss:,} MB")
    click.echo(f"incremental (1 window) {inc_s:.1f} s  ({inc_s / full_s:.1%} of full), peak RSS {inc_rss:,} MB")


if __name__ == "__main__":
    main()
