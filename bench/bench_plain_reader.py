"""Plain reader vs pipeline: what `snapshot` + `build` + `dataset build` cost next to reading the game database directly.

    python bench/bench_plain_reader.py --agents 50 --windows 2000      # 100k trajectories
    python bench/bench_plain_reader.py --agents 50 --windows 6000      # 300k (~18 GB in PostgreSQL; 1M does not fit the disk)
    python bench/bench_plain_reader.py --agents 50 --windows 200       # 10k, a quick check

One run, on one fresh PostgreSQL database made by the project's migrations (the game's Prisma
schema) and filled by `cli.py simulate --target postgres`, its rows stamped with the game time
they would have been written at (bench_build.stamp_game_time). Then, each step a process of its
own under /usr/bin/time -v (wall seconds and peak RSS):

1. **COPY**: PostgreSQL's own `COPY (SELECT <the snapshot's columns>) TO STDOUT (FORMAT binary)`
   of the three tables the snapshot copies, read and dropped: the floor for moving the rows out.
2. **plain read**: the reader of the game's first trainer: psycopg, one query per window for its
   trajectories, `stepsJson` parsed with `json.loads`, each trajectory turned into its chat
   messages and P&L (`plain_read`). It needs no llm_call_logs (the calls are in stepsJson).
3. **pipeline**: `cli.py snapshot`, `cli.py build` (its own snapshot then finds nothing new),
   `cli.py dataset build` with its defaults (as a user runs it), and also of every window (what
   the plain reader hands its trainer).
4. **one new window**: `simulate` one more window of --new-agents trajectories, then the plain
   reader reads everything again (it keeps no state) against `cli.py build` (snapshot + models),
   `cli.py build` again with nothing new (the floor of a new process: Python, SQLMesh's import,
   the project's load and plan, the snapshot's check) and a `dataset build` of that window; then one more window again, built by a resident
   `cli.py build --every` (SQLMesh imported and the project loaded before the window arrives).
5. **a changed mart**: `agent_window_pnl.sql` edited in a copy of the project, then `cli.py build`
   of that copy on the same home: SQLMesh recomputes that mart and the marts that read it.
6. **bare `sqlmesh plan` on a fresh home** (the design card's first command) against `cli.py build`
   on another, each after the same small simulated game (`--target duckdb`, 12 windows of 8
   agents, the last the one in play): `sqlmesh -p . plan --auto-apply --no-prompts` computes every
   hour from the models' start, the game's first day (HOME/data_start). Also alone: `bench_plain_reader.py bare-plan`.
7. **the parse's floor**: one pass of DuckDB's JSON parser over every stepsJson in the warehouse
   (the calls' structure, as babylon.training_samples reads it), on one thread as DuckDB scans a table
   under 122,880 rows, and split into two scans that run side by side: with COPY, the least any
   pipeline that copies the game and then parses it can cost; with the snapshot, the least any
   build from this snapshot can cost.

Prints each step and the ratios the build-speed goals are stated in. The database is dropped at
the end; HOME is kept for a look at the warehouse.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import click
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_build import ROOT, fresh_database, history_start, run_cli, stamp_game_time, timed, warm_incremental  # noqa: E402

PROJECT_FILES = ("cli.py", "config.py", "external_models.yaml", "babylon_rl", "models", "macros", "audits")
MART_EDIT = ("wins::INT AS wins", "(wins * 1)::INT AS wins")  # a real change of agent_window_pnl's query, same figures


def plain_read(url: str) -> dict:
    """Every window's trajectories as (agent, chat messages, P&L) groups, the way a direct reader does it."""
    windows = groups = trajectories = calls = 0
    with psycopg.connect(url) as conn:
        window_ids = [w for (w,) in conn.execute('SELECT DISTINCT "windowId" FROM trajectories WHERE "windowId" IS NOT NULL ORDER BY 1')]
        for window_id in window_ids:
            rows = conn.execute('SELECT "agentId", "stepsJson", "finalPnL" FROM trajectories WHERE "windowId" = %s',
                                (window_id,)).fetchall()
            group = []
            for agent_id, steps_json, final_pnl in rows:
                steps = json.loads(steps_json)
                messages = []
                for step in steps:
                    for call in step.get("llmCalls") or []:
                        messages += [{"role": "system", "content": call.get("systemPrompt")},
                                     {"role": "user", "content": call.get("userPrompt")},
                                     {"role": "assistant", "content": call.get("response")}]
                        calls += 1
                last_pnl = (steps[-1].get("environmentState") or {}).get("agentPnL") if steps else None
                group.append((agent_id, messages, final_pnl if final_pnl is not None else last_pnl))
            windows += 1
            groups += len(group) >= 2
            trajectories += len(group)
    return {"windows": windows, "groups": groups, "trajectories": trajectories, "llm_calls": calls}


def parse_floor(warehouse_file: str) -> dict:
    """Seconds for one json_transform of every raw stepsJson (the calls' structure): in one scan, and in two halves side by side."""
    # imported here, not at the top: the plain reader's process should not carry DuckDB
    from babylon_rl.warehouse import connect_memory
    from macros.steps import STEP_CALLS_STRUCTURE

    conn = connect_memory()  # the warehouse's settings: offline, its memory limit
    conn.execute(f"ATTACH '{warehouse_file}' AS w (READ_ONLY)")
    size = conn.execute('SELECT sum(length("stepsJson")) FROM w.raw.trajectories').fetchone()[0]
    parse = f"""sum(len(json_transform("stepsJson", '{STEP_CALLS_STRUCTURE}')))"""
    seconds = {}
    for label, sql in (
        ("one_scan", f"SELECT {parse} FROM w.raw.trajectories"),
        ("two_scans", f"""SELECT {parse} FROM (SELECT "stepsJson" FROM w.raw.trajectories WHERE rowid % 2 = 0
                                               UNION ALL SELECT "stepsJson" FROM w.raw.trajectories WHERE rowid % 2 = 1)"""),
    ):
        began = time.perf_counter()
        conn.execute(sql).fetchone()
        seconds[label] = time.perf_counter() - began
    return {"bytes": size, **seconds}


def copy_binary(url: str) -> dict:
    """PostgreSQL's binary COPY of the snapshot's columns of its three tables: rows and bytes read."""
    from babylon_rl.warehouse import RAW_TABLES

    rows = size = 0
    with psycopg.connect(url) as conn:
        for table in RAW_TABLES:
            columns = ", ".join(f'"{name}"' for name in table.column_names)
            with conn.cursor().copy(f"COPY (SELECT {columns} FROM {table.name}) TO STDOUT (FORMAT binary)") as copy:
                for chunk in copy:
                    size += len(chunk)
            rows += conn.execute(f"SELECT count(*) FROM {table.name}").fetchone()[0]
    return {"rows": rows, "bytes": size}


def _timed_self(*args: str) -> tuple[float, int, dict]:
    """This script's subcommand in its own process under /usr/bin/time -v: (seconds, peak RSS MB, its JSON)."""
    began = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, __file__, *args], capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        raise click.ClickException(f"{' '.join(args)} failed: {proc.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) // 1024
    return seconds, rss, json.loads(proc.stdout)


def _copy_project(to: Path) -> Path:
    """The project's files in `to`, its agent_window_pnl edited: a `cli.py` there builds with the edited model."""
    shutil.rmtree(to, ignore_errors=True)
    to.mkdir(parents=True)
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, to / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, to / name)
    mart = to / "models" / "marts" / "agent_window_pnl.sql"
    assert MART_EDIT[0] in mart.read_text(), "agent_window_pnl.sql changed: update MART_EDIT"
    mart.write_text(mart.read_text().replace(*MART_EDIT))
    return to / "cli.py"


def _size(url: str) -> tuple[int, int, int]:
    with psycopg.connect(url) as conn:
        return conn.execute("""SELECT (SELECT count(*) FROM trajectories), (SELECT count(*) FROM llm_call_logs),
                                      pg_database_size(current_database())""").fetchone()


def _line(label: str, seconds: float, rss: int, note: str = "") -> None:
    click.echo(f"{label:<34} {seconds:8.1f} s  peak RSS {rss:>6,} MB  {note}")


def bare_plan(root: Path, agents: int = 8, windows: int = 12) -> None:
    """Bare `sqlmesh plan` on a fresh home against `cli.py build` on another, the same simulated game in both."""
    homes = {"sqlmesh plan": root / "bare-plan", "cli.py build": root / "cli-build"}
    game = ["simulate", "--target", "duckdb", "--agents", str(agents), "--windows", str(windows), "--seed", "3",
            *history_start(windows - 3)]  # its last window is the one in play
    for home in homes.values():
        shutil.rmtree(home, ignore_errors=True)
        run_cli(home, *game)
    sqlmesh = str(Path(sys.executable).parent / "sqlmesh")
    plan_s, plan_rss, _ = timed([sqlmesh, "-p", str(ROOT), "plan", "--auto-apply", "--no-prompts"],
                                env={"BABYLON_RL_HOME": str(homes["sqlmesh plan"])})
    build_s, build_rss, _ = run_cli(homes["cli.py build"], "build")
    _line(f"fresh home, {windows} windows x {agents} agents: cli.py build", build_s, build_rss)
    _line("  the same: bare sqlmesh plan", plan_s, plan_rss, f"{plan_s / build_s:.2f}x cli.py build")


def _bench(url: str, home: Path, agents: int, windows: int, new_agents: int) -> None:
    source = ["--database-url", url]
    run_cli(home, *source, "db", "migrate")
    run_cli(home, *source, "simulate", "--agents", str(agents), "--windows", str(windows), "--target", "postgres",
            "--dirt-rate", "0.02", *history_start(windows))
    stamp_game_time(url)
    trajectories, calls, size = _size(url)
    click.echo(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {trajectories:,} trajectories, {calls:,} LLM calls, "
               f"{windows:,} windows; the database is {size / 2**30:.2f} GiB")

    copy_s, copy_rss, copied = _timed_self("copy", url)
    _line("COPY ... (FORMAT binary)", copy_s, copy_rss,
          f"{copied['rows']:,} rows, {copied['bytes'] / 2**30:.2f} GiB, {copied['rows'] / copy_s:,.0f} rows/s")
    read_s, read_rss, read = _timed_self("read", url)
    _line("plain read", read_s, read_rss, f"{read['trajectories']:,} trajectories, {read['llm_calls']:,} calls, "
                                         f"{read['windows']:,} windows")

    snap_s, snap_rss, _ = run_cli(home, *source, "snapshot")
    _line("pipeline: snapshot", snap_s, snap_rss, f"{copied['rows'] / snap_s:,.0f} rows/s "
                                                 f"({copied['rows'] / snap_s / (copied['rows'] / copy_s):.2f}x COPY's)")
    build_s, build_rss, _ = run_cli(home, *source, "build")
    _line("pipeline: build", build_s, build_rss)
    data_s, data_rss, _ = run_cli(home, "dataset", "build", "--name", "default")
    _line("pipeline: dataset build", data_s, data_rss, "its defaults: 1,000 trajectories of the last week")
    pipeline_s = snap_s + build_s + data_s
    _line("pipeline", pipeline_s, max(snap_rss, build_rss, data_rss), f"{pipeline_s / read_s:.2f}x the plain read")
    all_s, all_rss, _ = run_cli(home, "dataset", "build", "--name", "everything", "--since", "2000-01-01",
                                "--target-trajectories", "1000000000", "--max-dropout", "0", "--max-group-size", "100000",
                                "--min-actions", "0", "--min-agents", "2")
    _line("  a dataset of every window instead", all_s, all_rss,
          f"pipeline {(snap_s + build_s + all_s) / read_s:.2f}x the plain read")
    bare_plan(home.parent / f"{home.name}-bare")
    _, _, floor = _timed_self("floor", str(home / "warehouse.duckdb"))
    click.echo(f"{'floor: one parse of every stepsJson':<34} {floor['one_scan']:8.1f} s  {floor['bytes'] / 1e9:.2f} GB, "
               f"{floor['bytes'] / 1e6 / floor['one_scan']:,.0f} MB/s on one thread; {floor['two_scans']:.1f} s in two scans side by side")
    least = copy_s + floor["two_scans"]
    click.echo(f"{'floor: COPY + that parse':<34} {least:8.1f} s  {least / read_s:.2f}x the plain read: "
               "less than any pipeline that copies the game, then parses it")
    ours = snap_s + floor["two_scans"]
    click.echo(f"{'floor: the snapshot + that parse':<34} {ours:8.1f} s  {ours / read_s:.2f}x the plain read: "
               "less than any build from this snapshot")

    def add_window() -> None:
        began = datetime.now(timezone.utc).replace(tzinfo=None)
        run_cli(home, *source, "simulate", "--agents", str(new_agents), "--windows", "1", "--target", "postgres", "--dirt-rate", "0.02")
        stamp_game_time(url, written_since=began)

    add_window()
    reread_s, reread_rss, _ = _timed_self("read", url)
    _line("one new window: plain re-read", reread_s, reread_rss)
    one_s, one_rss, _ = run_cli(home, *source, "build")
    _line("one new window: build", one_s, one_rss, f"{one_s / reread_s:.3f}x the re-read")
    idle_s, idle_rss, _ = run_cli(home, *source, "build")
    _line("floor: a build with nothing new", idle_s, idle_rss,
          f"{idle_s / reread_s:.3f}x the re-read: a new process's Python, SQLMesh and snapshot check, no window")
    one_data_s, one_data_rss, _ = run_cli(home, "dataset", "build", "--name", "newest", "--lookback-hours", "1",
                                       "--max-group-size", "100000", "--min-actions", "0", "--min-agents", "2", "--eval-fraction", "0")
    _line("one new window: dataset build", one_data_s, one_data_rss,
          f"with the build {(one_s + one_data_s) / reread_s:.3f}x the re-read")

    warm_s, warm_rss = warm_incremental(home, source, add_window)
    _line("one new window: build --every", warm_s, warm_rss, f"{warm_s / reread_s:.3f}x the re-read (a resident build: "
                                                            "SQLMesh imported and the project loaded once)")

    edited = _copy_project(home.parent / f"{home.name}-edited-project")
    change_s, change_rss, said = run_cli(home, *source, "build", cli=edited)
    _line("agent_window_pnl changed: build", change_s, change_rss, f"{change_s / build_s:.2f}x the first build")
    click.echo("  " + next((line for line in said.splitlines() if line.startswith("computed")), "computed nothing"))


@click.group(invoke_without_command=True)
@click.option("--agents", default=50, show_default=True)
@click.option("--windows", default=2000, show_default=True)
@click.option("--new-agents", default=50, show_default=True, help="Trajectories in the one new window.")
@click.option("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres", show_default=True,
              help="The server to create the game database on (dropped at the end).")
@click.option("--home", "home_dir", type=click.Path(path_type=Path), default=Path("/tmp/brl-bench-plain"), show_default=True)
@click.pass_context
def main(ctx: click.Context, agents: int, windows: int, new_agents: int, admin_url: str, home_dir: Path) -> None:
    if ctx.invoked_subcommand:
        return
    shutil.rmtree(home_dir, ignore_errors=True)
    with fresh_database(admin_url) as url:
        _bench(url, home_dir, agents, windows, new_agents)


@main.command("bare-plan")
@click.option("--home", "root", type=click.Path(path_type=Path), default=Path("/tmp/brl-bench-plain-bare"), show_default=True,
              help="Where the two fresh homes go.")
def bare_plan_command(root: Path) -> None:
    """Only the bare `sqlmesh plan` against `cli.py build` on a fresh home (step 6)."""
    bare_plan(root)


@main.command("read", hidden=True)
@click.argument("url")
def read_command(url: str) -> None:
    click.echo(json.dumps(plain_read(url)))


@main.command("floor", hidden=True)
@click.argument("warehouse_file")
def floor_command(warehouse_file: str) -> None:
    click.echo(json.dumps(parse_floor(warehouse_file)))


@main.command("copy", hidden=True)
@click.argument("url")
def copy_command(url: str) -> None:
    click.echo(json.dumps(copy_binary(url)))


if __name__ == "__main__":
    main()
