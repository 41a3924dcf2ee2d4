"""Model build: a full `cli.py build` (SQLMesh plans prod over every window) and an
incremental one after one more simulated window, on realistic simulator data.

    python bench/bench_build.py --agents 100 --windows 100    # 10k trajectories
    python bench/bench_build.py --agents 100 --windows 1000   # 100k trajectories
    python bench/bench_build.py --agents 100 --windows 1000 --source postgres

With `--source duckdb` (the default) the simulator writes the warehouse's raw tables
directly. With `--source postgres` it writes a fresh, migrated PostgreSQL database on
--admin-url's server (dropped at the end), `cli.py snapshot` copies it (timed: rows/s),
and both builds snapshot first, as a production build does. Before the first snapshot the
simulated rows are stamped with the game time they would have been written at (see
_GAME_TIME_STAMPS), so that later snapshots re-read only the rows of their safety margin.

The incremental build is measured twice: a new `cli.py build` process after one more
simulated window, and the second build of a running `cli.py build --every` after another
(it has the models loaded already). The history ends two hours before the current one, so
that both new windows are over when they are built (SQLMesh computes nothing past the
models' last hourly run); with --reuse the script stops if they would still be in play.

Each step runs `cli.py` in its own process under /usr/bin/time -v, so the peak RSS is that
step's alone. Prints trajectories, snapshot rows/s, full build seconds and rows/s,
both incremental seconds and their ratio to the full build, and the peak RSS of each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterator

import click
import psycopg


ROOT = Path(__file__).resolve().parent.parent


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """`command` from the repository root under /usr/bin/time -v: (wall seconds, peak RSS in MB, stdout)."""
    began = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *command], cwd=ROOT, capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env})
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        # the command's own error comes before /usr/bin/time's report on stderr
        report_start = proc.stderr.find("\tCommand being timed")
        error = proc.stderr[:report_start] if report_start >= 0 else proc.stderr
        raise click.ClickException(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{error[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) // 1024
    return seconds, rss, proc.stdout


def run_cli(home: Path, *args: str, cli: Path = ROOT / "cli.py") -> tuple[float, int, str]:
    """Run `cli.py --home HOME ARGS` (this project's, or `cli`) under /usr/bin/time -v: (wall seconds, peak RSS in MB, stdout)."""
    return timed([sys.executable, str(cli), "--home", str(home), *args])


def _warehouse_value(home: Path, sql: str):
    import duckdb

    conn = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database on admin_url's server, dropped afterwards."""
    name = f"brl_bench_build_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _simulate(home: Path, source: list[str], agents: int, windows: int, dirt_rate: float, *start: str) -> None:
    target = "postgres" if source else "duckdb"
    run_cli(home, *source, "simulate", "--agents", str(agents), "--windows", str(windows), "--target", target,
         "--dirt-rate", str(dirt_rate), *start)


def _current_hour() -> datetime:
    return datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0, tzinfo=None)


def history_start(windows: int) -> list[str]:
    """`--start` for a history that ends two hours before the current one: the two windows
    simulated after it, one per incremental build, are then over, and a build computes them
    (none computes the window in play)."""
    return ["--start", (_current_hour() - timedelta(hours=windows + 2)).strftime("%Y-%m-%dT%H:%M")]


def _next_windows(home: Path) -> list[datetime]:
    """The starts of the two windows after the history; the script stops if one would still be in play."""
    newest = _warehouse_value(home, 'SELECT max(coalesce(try_strptime("windowId", \'%Y-%m-%dT%H:%M\'), "startTime")) FROM raw.trajectories')
    following = [newest.replace(minute=0, second=0, microsecond=0) + timedelta(hours=n) for n in (1, 2)]
    if following[-1] >= _current_hour():
        raise click.ClickException(
            f"the window starting {following[-1]:%Y-%m-%d %H:%M} is still in play, so an incremental build would "
            f"compute nothing: rerun after {following[-1] + timedelta(hours=1):%H:%M} UTC, or simulate a history that ends earlier"
        )
    return following


def _check_built(home: Path, window: datetime) -> None:
    if not _warehouse_value(home, f"SELECT count(*) FROM babylon.windows WHERE window_start = '{window}'"):
        raise click.ClickException(f"the incremental build did not build the new window {window:%Y-%m-%d %H:%M}")


def warm_incremental(home: Path, source: list[str], add_window: Callable[[], None]) -> tuple[float, int]:
    """`cli.py build --every` with one more window added (`add_window`) between its two builds: the
    second build's own seconds (as it reports them), and the process's peak RSS in MB."""
    command = ["/usr/bin/time", "-v", sys.executable, str(ROOT / "cli.py"), "--home", str(home), *source,
               "build", "--every", "1", "--builds", "2"]  # a minute: the window added (simulated, stamped) lands before the second build
    builder = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output = []
    for line in builder.stdout:
        output.append(line)
        if line.startswith("nothing to compute"):  # the first build: everything is built already
            add_window()
    stderr = builder.stderr.read()
    if builder.wait() != 0 or len(output) < 2:
        raise click.ClickException(f"cli.py build --every failed:\n{''.join(output)[-2000:]}\n{stderr[-2000:]}")
    seconds = re.search(r"built \d+ models in ([\d.]+)s", output[-1])
    if not seconds:
        raise click.ClickException(f"the second build of `build --every` built nothing:\n{''.join(output)}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr).group(1)) // 1024
    return float(seconds.group(1)), rss


# When each simulated row would have been written in a live game: a trajectory when its
# window's play ends, a logged call when it is made, a market outcome when its window closes.
_GAME_TIME_STAMPS = {
    "trajectories": '"createdAt" = "endTime", "updatedAt" = "endTime"',
    "llm_call_logs": '"createdAt" = "timestamp"',
    "market_outcomes": """"createdAt" = CASE WHEN "windowId" ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}$'
                                             THEN to_timestamp("windowId", 'YYYY-MM-DD"T"HH24:MI')::timestamp + interval '1 hour'
                                             ELSE "createdAt" END""",
}


def stamp_game_time(url: str, written_since: datetime | None = None) -> None:
    """Stamp the simulated rows (those written since `written_since`, else all) with the game
    time they would have been written at. The simulator stamps every row with the minute it
    wrote it, so a history simulated in a few minutes would lie inside the snapshot's 10-minute
    safety margin and every later snapshot would re-read all of it; a game's history is
    written over its whole life."""
    where = ' WHERE "createdAt" >= %(since)s' if written_since else ""
    with psycopg.connect(url) as conn:
        for table, assignments in _GAME_TIME_STAMPS.items():
            conn.execute(f'UPDATE "{table}" SET {assignments}{where}', {"since": written_since})
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # the UPDATE left a dead copy of every row it stamped behind
        # and GBs of dirty pages, which PostgreSQL would write out during the timed steps that follow
        conn.execute("CHECKPOINT")


def _bench(home: Path, source: list[str], agents: int, windows: int, dirt_rate: float, reuse: bool) -> None:
    if not reuse:
        shutil.rmtree(home, ignore_errors=True)
        _simulate(home, source, agents, windows, dirt_rate, *history_start(windows))
        if source:
            stamp_game_time(source[1])
    if source:
        snap_s, snap_rss, _ = run_cli(home, *source, "snapshot")
        copied = json.loads(_warehouse_value(home, "SELECT tables_json FROM meta.snapshots ORDER BY started_at DESC LIMIT 1"))
        rows = sum(table["rows_copied"] for table in copied)
    trajectories = _warehouse_value(home, "SELECT COUNT(*) FROM raw.trajectories")
    next_windows = _next_windows(home)
    full_s, full_rss, _ = run_cli(home, *source, "build")
    _simulate(home, source, agents, 1, dirt_rate)
    inc_s, inc_rss, _ = run_cli(home, *source, "build")
    _check_built(home, next_windows[0])
    warm_s, warm_rss = warm_incremental(home, source, lambda: _simulate(home, source, agents, 1, dirt_rate))
    _check_built(home, next_windows[1])
    click.echo(f"trajectories           {trajectories:,}")
    if source:
        click.echo(f"snapshot               {snap_s:.1f} s  ({rows:,} rows of all tables, {rows / snap_s:,.0f} rows/s), peak RSS {snap_rss:,} MB")
    click.echo(f"full build             {full_s:.1f} s  ({trajectories / full_s:,.0f} trajectories/s), peak RSS {full_rss:,} MB")
    click.echo(f"incremental (1 window) {inc_s:.1f} s  ({inc_s / full_s:.1%} of full), peak RSS {inc_rss:,} MB; a new `cli.py build`")
    click.echo(f"  in `build --every`   {warm_s:.1f} s  ({warm_s / full_s:.1%} of full), peak RSS {warm_rss:,} MB; its second build")

@click.command()
@click.option("--agents", default=100, show_default=True)
@click.option("--windows", default=100, show_default=True)
@click.option("--dirt-rate", default=0.02, show_default=True)
@click.option("--source", type=click.Choice(["duckdb", "postgres"]), default="duckdb", show_default=True,
              help="Simulate into the warehouse directly, or into PostgreSQL and snapshot it.")
@click.option("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres", show_default=True,
              help="With --source postgres: the server to create the game database on.")
@click.option("--home", "home_dir", type=click.Path(path_type=Path), default=Path("/tmp/brl-bench-build"), show_default=True)
@click.option("--reuse", is_flag=True, help="Build the simulated warehouse already in HOME instead of simulating one (it must not be built yet: copy it from an untouched copy).")
def main(agents: int, windows: int, dirt_rate: float, source: str, admin_url: str, home_dir: Path, reuse: bool) -> None:
    if source == "duckdb":
        _bench(home_dir, [], agents, windows, dirt_rate, reuse)
        return
    if reuse:
        raise click.UsageError("--reuse needs --source duckdb: the PostgreSQL database is created for each run")
    with fresh_database(admin_url) as url:
        run_cli(home_dir, "--database-url", url, "db", "migrate")
        _bench(home_dir, ["--database-url", url], agents, windows, dirt_rate, reuse=False)


if __name__ == "__main__":
    main()
