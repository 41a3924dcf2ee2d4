"""`cli.py build` end to end: simulate into PostgreSQL, snapshot + SQLMesh, against PostgreSQL's own aggregates."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import duckdb
import psycopg
import pytest

from babylon_rl import locks

pytestmark = pytest.mark.postgres

START = "2025-01-15T00:00"

# The same figures as the marts, computed in PostgreSQL from the game tables: the window
# (windowId, else the startTime hour) and the P&L (finalPnL, else the last step's agentPnL).
PG_TYPED = """
    WITH typed AS (
        SELECT coalesce("windowId", to_char(date_trunc('hour', "startTime"), 'YYYY-MM-DD"T"HH24:MI')) AS window_id,
               "agentId" AS agent_id,
               coalesce("finalPnL", ("stepsJson"::jsonb -> -1 -> 'environmentState' ->> 'agentPnL')::float8) AS pnl
        FROM trajectories
    )"""
PG_AGENT_PNL = PG_TYPED + """
    SELECT window_id, agent_id, count(*) AS trajectories, round(sum(pnl)::numeric, 6) AS pnl,
           rank() OVER (PARTITION BY window_id ORDER BY sum(pnl) DESC) AS pnl_rank
    FROM typed GROUP BY window_id, agent_id ORDER BY window_id, agent_id
"""
PG_WINDOWS = PG_TYPED + """, per_agent AS (SELECT window_id, agent_id, sum(pnl) AS pnl FROM typed GROUP BY 1, 2)
    SELECT window_id, count(*) AS agents, round(avg(pnl)::numeric, 6), round(min(pnl)::numeric, 6), round(max(pnl)::numeric, 6)
    FROM per_agent GROUP BY window_id ORDER BY window_id
"""


def _warehouse(home: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute(sql).fetchall()


def _postgres(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def _copy_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the SQLMesh project that a test may edit, used by babylon_rl.build from now on."""
    import shutil

    from babylon_rl import build
    from babylon_rl.settings import PROJECT_ROOT

    project = tmp_path / "project"
    project.mkdir()
    for name in ("config.py", "external_models.yaml", "models", "macros", "audits"):
        source = PROJECT_ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, project / name)
    monkeypatch.setattr(build, "PROJECT_ROOT", project)
    return project


def _counting_project_loads(monkeypatch: pytest.MonkeyPatch) -> list:
    from babylon_rl import build

    loads = []
    load = build.sqlmesh_context

    def counted(*args, **kwargs):
        loads.append(args)
        return load(*args, **kwargs)

    monkeypatch.setattr(build, "sqlmesh_context", counted)
    return loads


def _broken(windows_sql: str, message: str) -> str:
    """babylon.windows' query made to fail at run time with DuckDB's error(message)."""
    return windows_sql.replace("WHERE c.window_start BETWEEN", f"WHERE error('{message}') IS NULL AND c.window_start BETWEEN")


@pytest.fixture
def built(run_cli, migrated_pg_url: str, home: Path) -> str:
    result = run_cli("--database-url", migrated_pg_url, "simulate", "--agents", "8", "--windows", "6", "--seed", "1",
                     "--start", START, "--dirt-rate", "0.05")
    assert result.exit_code == 0, result.output
    result = run_cli("--database-url", migrated_pg_url, "build")
    assert result.exit_code == 0, result.output
    return migrated_pg_url


def test_marts_agree_with_postgres(built: str, home: Path) -> None:
    marts = _warehouse(home, """SELECT window_id, agent_id, trajectories, round(pnl, 6), pnl_rank
                                FROM babylon.agent_window_pnl ORDER BY window_id, agent_id""")
    assert [(w, a, t, float(p), r) for w, a, t, p, r in marts] == [
        (w, a, t, float(p), r) for w, a, t, p, r in _postgres(built, PG_AGENT_PNL)
    ]
    windows = _warehouse(home, """SELECT window_id, agents, round(pnl_mean, 6), round(pnl_min, 6), round(pnl_max, 6)
                                  FROM babylon.windows ORDER BY window_id""")
    assert [tuple(float(v) if i >= 2 else v for i, v in enumerate(row)) for row in windows] == [
        tuple(float(v) if i >= 2 else v for i, v in enumerate(row)) for row in _postgres(built, PG_WINDOWS)
    ]
    assert len(windows) == 6 and all(row[1] == 8 for row in windows)


def test_counts_reconcile_with_rejected_rows(built: str, home: Path) -> None:
    raw = _warehouse(home, "SELECT count(*) FROM raw.trajectories")[0][0]
    staged = _warehouse(home, "SELECT count(*) FROM staging.trajectories")[0][0]
    rejected = _warehouse(home, "SELECT count(*) FROM babylon.rejected_rows WHERE source_table = 'trajectories'")[0][0]
    assert raw == staged + rejected == 48


def test_second_build_copies_nothing_and_one_more_window_adds_exactly_it(run_cli, built: str, home: Path) -> None:
    before = {row[0] for row in _warehouse(home, "SELECT window_id FROM babylon.windows")}
    again = run_cli("--database-url", built, "build")
    assert again.exit_code == 0, again.output
    copied = _warehouse(home, "SELECT tables_json FROM meta.snapshots ORDER BY finished_at DESC LIMIT 1")[0][0]
    assert sum(table["rows_copied"] for table in json.loads(copied)) == 0
    assert "nothing to compute" in again.output and "applied" not in again.output

    more = run_cli("--database-url", built, "simulate", "--agents", "8", "--windows", "1", "--seed", "1")
    assert more.exit_code == 0, more.output
    third = run_cli("--database-url", built, "build")
    assert third.exit_code == 0, third.output
    assert "restated" in third.output and "applied" not in third.output  # the new window only, no model plan
    after = {row[0] for row in _warehouse(home, "SELECT window_id FROM babylon.windows")}
    assert after - before == {"2025-01-15T06:00"}
    assert _warehouse(home, "SELECT agents FROM babylon.windows WHERE window_id = '2025-01-15T06:00'") == [(8,)]


def test_build_says_how_many_windows_it_computed(run_cli, migrated_pg_url: str) -> None:
    """The true count: the first build computes every window with data (it said "restated 1", the
    full snapshot's one marker), the next one only the new windows."""
    url = migrated_pg_url
    assert run_cli("--database-url", url, "simulate", "--agents", "5", "--windows", "30", "--seed", "2", "--start", START).exit_code == 0
    first = run_cli("--database-url", url, "build")
    assert first.exit_code == 0, first.output
    assert "computed all 30 window(s) with data between 2025-01-15 00:00 and 2025-01-17 00:00" in first.output
    assert run_cli("--database-url", url, "simulate", "--agents", "5", "--windows", "2", "--seed", "3",
                   "--start", "2025-01-16T06:00").exit_code == 0
    second = run_cli("--database-url", url, "build")
    assert "restated 2 changed window(s) between 2025-01-16 06:00 and 2025-01-16 08:00" in second.output, second.output


def test_late_row_into_a_built_window_is_rebuilt(run_cli, built: str, home: Path) -> None:
    with psycopg.connect(built) as conn:
        conn.execute("""UPDATE trajectories SET "finalPnL" = 12345.0, "updatedAt" = now()
                        WHERE "trajectoryId" = (SELECT min("trajectoryId") FROM trajectories WHERE "windowId" = '2025-01-15T02:00')""")
    assert run_cli("--database-url", built, "build").exit_code == 0
    assert _warehouse(home, "SELECT max(pnl) FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T02:00'") == [(12345.0,)]


def _bare_sqlmesh_run(home: Path) -> str:
    from babylon_rl.settings import PROJECT_ROOT

    sqlmesh = Path(sys.executable).parent / "sqlmesh"
    done = subprocess.run([str(sqlmesh), "run"], cwd=PROJECT_ROOT, env={**os.environ, "BABYLON_RL_HOME": str(home)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_late_row_snapshotted_alone_is_computed_by_a_bare_sqlmesh_run(run_cli, built: str, home: Path) -> None:
    """`cli.py snapshot` marks the changed window as not computed in SQLMesh's state, so an analyst's
    plain `sqlmesh run` (no cli.py build) recomputes it and republishes the exports (docs/BUILD.md);
    the next snapshot marks only its own windows, not those a bare run already computed."""
    late = "SELECT max(pnl) FROM {} WHERE window_id = '2025-01-15T0{}:00'"
    for hour, pnl in ((3, 54321.0), (4, 65432.0)):
        with psycopg.connect(built) as conn:
            conn.execute(f"""UPDATE trajectories SET "finalPnL" = {pnl}, "updatedAt" = now() WHERE "trajectoryId" =
                             (SELECT min("trajectoryId") FROM trajectories WHERE "windowId" = '2025-01-15T0{hour}:00')""")
        assert run_cli("--database-url", built, "snapshot").exit_code == 0
        computed = _bare_sqlmesh_run(home)
        assert f"2025-01-15 0{hour}:00:00-0{hour}:59:59" in computed
        assert _warehouse(home, late.format("babylon.agent_window_pnl", hour)) == [(pnl,)]
        assert _warehouse(home, late.format(f"'{home / 'exports' / 'agent_window_pnl.parquet'}'", hour)) == [(pnl,)]
    assert "2025-01-15 03:00:00" not in computed, "the second run computed the first late window again"


def test_the_readmes_duckdb_queries_run_with_the_installed_cli(built: str, home: Path, tmp_path: Path) -> None:
    """README, "Querying yourself": both commands, as written, with the `duckdb` the install provides."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    commands = [line.split("`")[1] for line in readme.splitlines() if line.startswith("**") and "`duckdb " in line]
    assert len(commands) == 2, commands
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".babylon").symlink_to(home)  # the default home, as in the README
    duckdb_cli = Path(sys.executable).parent / "duckdb"
    for command in commands:
        args = [str(duckdb_cli), *shlex.split(command)[1:]]
        done = subprocess.run(args, cwd=checkout, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        assert "2025-01-15T05:00" in done.stdout, (command, done.stdout)


def test_meta_builds_keeps_the_last_thousand_builds(run_cli, home: Path) -> None:
    from babylon_rl import build

    assert run_cli("simulate", "--target", "duckdb", "--agents", "3", "--windows", "2", "--start", START).exit_code == 0
    with duckdb.connect(str(home / "warehouse.duckdb")) as conn:
        conn.execute("""CREATE SCHEMA IF NOT EXISTS meta;
                        CREATE TABLE IF NOT EXISTS meta.builds (build_id INTEGER PRIMARY KEY, started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP);
                        INSERT INTO meta.builds SELECT i, TIMESTAMP '2025-01-01', TIMESTAMP '2025-01-01' FROM range(1, 1501) r(i)""")
    assert run_cli("build").exit_code == 0
    kept = _warehouse(home, "SELECT count(*), min(build_id), max(build_id), count(finished_at) FROM meta.builds")
    assert kept == [(build.KEPT_BUILDS, 1501 - build.KEPT_BUILDS + 1, 1501, build.KEPT_BUILDS)]


def test_build_publishes_marts_readable_while_the_warehouse_is_held(run_cli, built: str, home: Path) -> None:
    exports = home / "exports"
    assert {p.name for p in exports.glob("*.parquet")} >= {"windows.parquet", "agent_window_pnl.parquet"}
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(30)",
         str(home / "warehouse.duckdb")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        blocked = run_cli("--database-url", built, "build")
        assert blocked.exit_code == 2
        assert "in use by another process" in blocked.output and str(holder.pid) in blocked.output
        with duckdb.connect() as reader:  # the analyst's way in while the warehouse is held
            assert reader.execute(f"SELECT count(*) FROM '{exports / 'windows.parquet'}'").fetchone()[0] == 6
        report = run_cli("windows", "--as-of", "2025-01-15T12:00", "--json")
        assert report.exit_code == 0, report.output
        assert json.loads(report.output)["windows_total"] == 6
    finally:
        holder.kill()
        holder.wait()


def test_export_all_adds_training_samples(run_cli, built: str, home: Path) -> None:
    assert not (home / "exports" / "training_samples.parquet").exists()  # too big to publish on every build
    result = run_cli("export", "--all")
    assert result.exit_code == 0, result.output
    with duckdb.connect() as reader:
        rows = reader.execute(f"SELECT count(*) FROM '{home / 'exports' / 'training_samples.parquet'}'").fetchone()[0]
    assert rows == _warehouse(home, "SELECT count(*) FROM babylon.training_samples")[0][0] > 0


def test_a_second_build_waits_for_the_lock_or_refuses(run_cli, built: str, home: Path) -> None:
    with locks.exclusive(home / "build.lock", 0):
        refused = run_cli("--database-url", built, "build")
    assert refused.exit_code == 2
    assert "another build is running" in refused.output and "--wait" in refused.output


def test_windows_report(run_cli, built: str) -> None:
    result = run_cli("windows", "--as-of", "2025-01-15T06:00", "--lookback-hours", "4", "--min-agents", "8")
    assert result.exit_code == 0, result.output
    assert "READY: 4 of 4 windows have >= 8 agents" in result.output
    strict = run_cli("windows", "--as-of", "2025-01-15T06:00", "--min-agents", "9", "--json")
    verdict = json.loads(strict.output)
    assert verdict["windows_ready"] == 0 and verdict["verdict"].startswith("NOT READY")


def test_build_without_anything_to_build_says_what_to_do(run_cli) -> None:
    result = run_cli("build")
    assert result.exit_code == 2
    assert "simulate --target duckdb" in result.output


def test_build_and_windows_start_without_the_dataset_and_judge_stages(home: Path) -> None:
    """A command imports only its own stage: `build` and `windows`, run every hour, do not
    load Polars, psycopg or the judge (~0.35 s and ~50 MB at every start)."""
    for command in ("build", "windows"):
        proc = subprocess.run([sys.executable, "-X", "importtime", str(Path(__file__).parents[1] / "cli.py"),
                               "--home", str(home), command], capture_output=True, text=True)
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        assert "babylon_rl.readiness" in imported and "babylon_rl.build" in imported, proc.stderr[-500:]
        assert not imported & {"polars", "psycopg", "babylon_rl.judge.score", "babylon_rl.dataset.build"}, command


def test_a_failing_model_is_named_with_the_engine_error(run_cli, home: Path, tmp_path: Path, monkeypatch) -> None:
    """A model that fails at run time: the build says which one and what DuckDB said, in one line."""
    windows = _copy_project(tmp_path, monkeypatch) / "models" / "marts" / "windows.sql"
    windows.write_text(_broken(windows.read_text(), "boom: a broken model"))
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--target", "duckdb").exit_code == 0

    result = run_cli("build")
    assert result.exit_code == 2
    message = result.output.strip().splitlines()[-1]
    assert "babylon.windows failed" in message and "boom: a broken model" in message, message
    assert "Traceback" not in result.output


def test_changed_windows_far_apart_are_recomputed_alone(run_cli, home: Path) -> None:
    """Two changed windows recompute those two, not the range between them: a window in between
    whose raw rows were edited behind the toolkit's back (not marked dirty) keeps its marts."""
    assert run_cli("simulate", "--agents", "3", "--windows", "5", "--start", "2025-01-15T00:00", "--target", "duckdb").exit_code == 0
    assert run_cli("build").exit_code == 0
    with duckdb.connect(str(home / "warehouse.duckdb")) as conn:
        conn.execute("""UPDATE raw.trajectories SET "finalPnL" = 999 WHERE "windowId" = '2025-01-15T02:00'""")
    for window in ("2025-01-15T00:00", "2025-01-15T04:00"):
        late = run_cli("simulate", "--agents", "3", "--windows", "1", "--start", window, "--seed", "2", "--target", "duckdb")
        assert late.exit_code == 0, late.output

    result = run_cli("build")
    assert result.exit_code == 0, result.output
    assert "restated 2 changed window(s)" in result.output
    assert _warehouse(home, "SELECT window_id, trajectories FROM babylon.windows ORDER BY 1") == [
        ("2025-01-15T00:00", 6), ("2025-01-15T01:00", 3), ("2025-01-15T02:00", 3), ("2025-01-15T03:00", 3), ("2025-01-15T04:00", 6)]
    assert _warehouse(home, "SELECT max(pnl) FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T02:00'")[0][0] != 999


def test_a_changed_mart_recomputes_that_mart_and_what_reads_it_not_staging(run_cli, home: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Editing agent_window_pnl recomputes it and the marts that read it over the whole history, never the staging
    models that parse stepsJson; a window with new rows in the same build is still recomputed for every model."""
    project = _copy_project(tmp_path, monkeypatch)
    assert run_cli("simulate", "--agents", "3", "--windows", "4", "--start", START, "--target", "duckdb").exit_code == 0
    assert run_cli("build").exit_code == 0
    mart = project / "models" / "marts" / "agent_window_pnl.sql"
    mart.write_text(mart.read_text().replace("wins::INT AS wins", "(wins * 1)::INT AS wins"))
    late = run_cli("simulate", "--agents", "3", "--windows", "1", "--start", "2025-01-15T02:00", "--seed", "2", "--target", "duckdb")
    assert late.exit_code == 0, late.output

    result = run_cli("build")
    assert result.exit_code == 0, result.output
    assert ("computed the changed models and what reads them (babylon.agent_window_pnl, babylon.training_samples, "
            "babylon.windows) over all 4 window(s) with data") in result.output, result.output
    # the late window's rows reached the marts: staging computed them for that window
    assert _warehouse(home, "SELECT window_id, trajectories FROM babylon.windows ORDER BY 1") == [
        ("2025-01-15T00:00", 3), ("2025-01-15T01:00", 3), ("2025-01-15T02:00", 6), ("2025-01-15T03:00", 3)]


def test_a_model_failing_on_a_changed_window_is_named_and_the_window_stays_dirty(run_cli, home: Path) -> None:
    """Late rows are recomputed by `sqlmesh run`, which reports a failed model instead of raising."""
    window = "2025-01-15T00:00"
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", window, "--target", "duckdb").exit_code == 0
    assert run_cli("build").exit_code == 0
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", window, "--seed", "2", "--target", "duckdb").exit_code == 0
    with duckdb.connect(str(home / "warehouse.duckdb")) as conn:
        conn.execute("DROP TABLE raw.llm_call_logs")

    result = run_cli("build")
    assert result.exit_code == 2
    message = result.output.strip().splitlines()[-1]
    assert "staging.trajectory_checks failed" in message and "llm_call_logs" in message, message
    assert _warehouse(home, "SELECT strftime(window_start, '%Y-%m-%dT%H:%M') FROM meta.dirty_windows") == [(window,)]


def test_toolkit_connections_share_sqlmesh_memory_limit(tmp_path: Path) -> None:
    """The toolkit's own warehouse connections get config.py's DuckDB memory limit, not DuckDB's 80 % of RAM."""
    from sqlmesh.core.config import Config
    from sqlmesh.core.config.loader import load_config_from_paths

    from babylon_rl import warehouse
    from babylon_rl.settings import Home, PROJECT_ROOT

    config = load_config_from_paths(Config, project_paths=[PROJECT_ROOT / "config.py"])
    configured = config.gateways["duckdb"].connection.connector_config["memory_limit"]
    with duckdb.connect(config={"memory_limit": configured}) as reference:
        expected = reference.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    conn = warehouse.connect(Home(tmp_path))
    try:
        assert conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == expected
    finally:
        conn.close()


def test_raw_tables_keep_small_row_groups_through_a_build(run_cli, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The toolkit writes raw.* in row groups of warehouse.ROW_GROUP_SIZE rows, and SQLMesh's
    checkpoints do not merge them back into one.
    A smaller size than the toolkit's keeps the simulated history small."""
    from babylon_rl import warehouse

    monkeypatch.setattr(warehouse, "ROW_GROUP_SIZE", 2048)  # the smallest DuckDB takes
    assert run_cli("simulate", "--agents", "10", "--windows", "40", "--start", START, "--target", "duckdb").exit_code == 0
    assert run_cli("build").exit_code == 0

    groups = _warehouse(home, """SELECT row_group_id, max("count") FROM pragma_storage_info('raw.llm_call_logs')
                                 WHERE column_name = 'id' GROUP BY row_group_id""")
    calls = _warehouse(home, "SELECT count(*) FROM raw.llm_call_logs")[0][0]
    assert calls > 2 * warehouse.ROW_GROUP_SIZE
    assert len(groups) >= calls // warehouse.ROW_GROUP_SIZE
    assert max(rows for _, rows in groups) <= warehouse.ROW_GROUP_SIZE
    assert _warehouse(home, "SELECT sum(llm_calls) FROM babylon.training_samples")[0][0] > 0


@pytest.mark.parametrize("model", ["staging.trajectory_checks", "staging.training_chats"])
def test_a_batch_reads_only_the_logs_near_its_days(run_cli, home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    """The models that read llm_call_logs filter it on `timestamp` in a form DuckDB checks
    against the row groups' min/max: a batch of one day skips the row groups of the other weeks.
    (Written as `timestamp IS NULL OR timestamp BETWEEN ...`, DuckDB skipped none, and every
    batch of a 1M build read all 13.2M logs.)"""
    from babylon_rl import build, warehouse
    from babylon_rl.settings import Home

    group_rows = 2048  # the smallest row group DuckDB takes: a 60-day history spans several
    monkeypatch.setattr(warehouse, "ROW_GROUP_SIZE", group_rows)
    simulate = ("simulate", "--agents", "16", "--windows", "60", "--window-hours", "24", "--start", "2025-01-01T00:00")
    assert run_cli(*simulate, "--target", "duckdb").exit_code == 0
    assert run_cli("build").exit_code == 0
    context = build.sqlmesh_context(Home(home))
    try:
        batch = context.render(model, start="2025-01-30", end="2025-01-30").sql("duckdb")
    finally:
        context.close()

    conn = warehouse.connect(Home(home), read_only=True)
    try:
        conn.execute("PRAGMA enable_profiling = 'json'")
        conn.execute(f"PRAGMA profiling_output = '{tmp_path / 'profile.json'}'")
        staged = conn.execute(f"SELECT count(*) FROM ({batch})").fetchall()[0][0]
        profile = json.loads((tmp_path / "profile.json").read_text())
        logs = conn.execute("SELECT count(*) FROM raw.llm_call_logs").fetchone()[0]
    finally:
        conn.close()

    def log_scans(node: dict) -> list[int]:
        here = [node["operator_rows_scanned"]] if "llm_call_logs" in str(node.get("extra_info", {}).get("Table", "")) else []
        return here + [rows for child in node.get("children", []) for rows in log_scans(child)]

    scanned = log_scans(profile)
    assert staged > 0 and logs > 5 * group_rows
    assert scanned and max(scanned) <= 3 * group_rows, (scanned, logs)


def test_the_window_in_play_waits_for_a_build_after_its_hour(run_cli, home: Path) -> None:
    """SQLMesh computes nothing past the models' last hourly run, so the window of the current
    hour (still being played) is neither built nor forgotten: it stays dirty for a later build."""
    import time
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    if now.minute == 59:  # the hour must not turn between simulating the window and building it
        time.sleep(61 - now.second)
        now = datetime.now(timezone.utc)
    past = (now - timedelta(hours=3)).strftime("%Y-%m-%dT%H:00")
    in_play = now.strftime("%Y-%m-%dT%H:00")
    for start in (past, in_play):
        assert run_cli("simulate", "--agents", "5", "--windows", "1", "--start", start, "--target", "duckdb").exit_code == 0

    result = run_cli("build")
    assert result.exit_code == 0, result.output
    assert f"1 changed window(s) start at or after {in_play.replace('T', ' ')}" in result.output
    assert _warehouse(home, "SELECT window_id FROM babylon.windows") == [(past,)]
    assert _warehouse(home, "SELECT strftime(window_start, '%Y-%m-%dT%H:%M') FROM meta.dirty_windows") == [(in_play,)]

    again = run_cli("build")  # only the window in play is dirty: nothing to compute yet, no error
    assert again.exit_code == 0, again.output
    assert "1 changed window(s) start at or after" in again.output and "nothing to compute" in again.output


def test_a_builder_keeps_the_project_loaded_and_frees_the_warehouse_between_builds(run_cli, home: Path, monkeypatch) -> None:
    """`build --every`: later builds reuse the loaded models, and other writers can use the warehouse in between."""
    from babylon_rl import build
    from babylon_rl.settings import Home

    first_window = "2025-01-15T00:00"
    assert run_cli("simulate", "--agents", "3", "--windows", "2", "--start", first_window, "--target", "duckdb").exit_code == 0
    loads = _counting_project_loads(monkeypatch)
    builder = build.Builder(Home.resolve(str(home)), None)

    assert builder.build().models_changed
    late = run_cli("simulate", "--agents", "3", "--windows", "1", "--start", first_window, "--seed", "2", "--target", "duckdb")
    assert late.exit_code == 0, late.output  # a writer between builds: the builder does not hold the warehouse
    second = builder.build()

    assert second.restated_windows == 1 and not second.models_changed
    assert _warehouse(home, f"SELECT trajectories FROM babylon.windows WHERE window_id = '{first_window}'") == [(6,)]
    assert len(loads) == 1


def test_a_builder_loads_the_project_again_when_a_file_changed(run_cli, home: Path, tmp_path: Path, monkeypatch) -> None:
    from babylon_rl import build
    from babylon_rl.errors import WarehouseError
    from babylon_rl.settings import Home

    project = _copy_project(tmp_path, monkeypatch)
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", "2025-01-15T00:00", "--target", "duckdb").exit_code == 0
    loads = _counting_project_loads(monkeypatch)
    builder = build.Builder(Home.resolve(str(home)), None)
    builder.build()
    builder.build()
    assert len(loads) == 1

    windows = project / "models" / "marts" / "windows.sql"
    windows.write_text(_broken(windows.read_text(), "boom: edited"))
    with pytest.raises(WarehouseError, match="babylon.windows failed.*boom: edited"):
        builder.build()
    assert len(loads) == 2


def test_a_builder_builds_rows_older_than_the_models_start(run_cli, home: Path, monkeypatch) -> None:
    """The models start at the game's first day (HOME/data_start): older rows move it earlier, and a
    resident builder loads the project again, with the new start, and computes their window."""
    from babylon_rl import build
    from babylon_rl.settings import Home

    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", "2025-01-15T00:00", "--target", "duckdb").exit_code == 0
    assert (home / "data_start").read_text() == "2025-01-15\n"
    loads = _counting_project_loads(monkeypatch)
    builder = build.Builder(Home.resolve(str(home)), None)
    builder.build()
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", "2025-01-10T05:00", "--target", "duckdb").exit_code == 0
    assert (home / "data_start").read_text() == "2025-01-10\n"
    builder.build()

    assert len(loads) == 2
    assert _warehouse(home, "SELECT window_id FROM babylon.windows ORDER BY 1") == [("2025-01-10T05:00",), ("2025-01-15T00:00",)]
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", "2025-01-16T00:00", "--target", "duckdb").exit_code == 0
    assert (home / "data_start").read_text() == "2025-01-10\n", "the start only moves earlier"


def test_a_game_stamped_ahead_of_now_builds_and_waits_for_its_hours(run_cli, home: Path) -> None:
    """Rows stamped in the future: the models start no later than yesterday (SQLMesh refuses a start after the
    plan's end), and the first build computes nothing yet instead of failing."""
    from datetime import datetime, timedelta, timezone

    today = datetime.now(timezone.utc).replace(tzinfo=None)
    ahead = (today + timedelta(days=2)).strftime("%Y-%m-%dT00:00")
    assert run_cli("simulate", "--agents", "3", "--windows", "2", "--start", ahead, "--target", "duckdb").exit_code == 0
    assert (home / "data_start").read_text() <= f"{today - timedelta(days=1):%Y-%m-%d}\n"
    result = run_cli("build")
    assert result.exit_code == 0, result.output
    assert "2 changed window(s) start at or after" in result.output
    assert _warehouse(home, "SELECT count(*) FROM babylon.windows") == [(0,)]


def test_a_garbled_data_start_is_named_in_one_line(run_cli, home: Path) -> None:
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", "2025-01-15T00:00", "--target", "duckdb").exit_code == 0
    (home / "data_start").write_text("15/01/2025\n")
    result = run_cli("build")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: {home / 'data_start'} holds '15/01/2025', not a day like 2026-11-20: delete it, "
        "then run `cli.py build` (it writes the file again from the warehouse)"]


def test_build_every_runs_builds_until_told_to_stop(run_cli) -> None:
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--start", "2025-01-15T00:00", "--target", "duckdb").exit_code == 0
    result = run_cli("build", "--every", "0.001", "--builds", "2")
    assert result.exit_code == 0, result.output
    assert "build 1 at" in result.output and "build 2 at" in result.output
    assert "applied the project's models to prod" in result.output
    assert result.output.strip().splitlines()[-1].startswith("nothing to compute")  # the second found nothing new


def test_build_every_reports_a_failed_build_and_tries_the_next(run_cli) -> None:
    result = run_cli("build", "--every", "0.001", "--builds", "2")
    assert result.exit_code == 2
    assert "build 1 failed: no warehouse" in result.output and "build 2 failed: no warehouse" in result.output
    assert "Traceback" not in result.output


def test_builds_without_every_is_a_usage_error(run_cli) -> None:
    result = run_cli("build", "--builds", "2")
    assert result.exit_code == 2 and "--builds needs --every" in result.output


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """SIGINT handled by Python, as in a terminal: a shell that runs the tests in the background makes them ignore it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _ctrl_c_after(monkeypatch: pytest.MonkeyPatch, model: str, in_query: bool) -> None:
    """Ctrl-C once SQLMesh has computed `model`: while DuckDB runs a query (which DuckDB turns into
    RuntimeError('Query interrupted')), or between two Python statements (a KeyboardInterrupt)."""
    from sqlmesh.core.snapshot.evaluator import SnapshotEvaluator

    evaluate = SnapshotEvaluator.evaluate

    def evaluate_then_interrupt(self, snapshot, **kwargs):
        result = evaluate(self, snapshot, **kwargs)
        if snapshot.name.replace('"', "").endswith(model):
            if not in_query:
                raise KeyboardInterrupt
            # one thread: an interrupted query of DuckDB's worker threads runs on until its task ends
            conn = duckdb.connect(config={"threads": 1})
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            lost = threading.Timer(60, conn.interrupt)  # had the Ctrl-C been lost: a failure, not a hang
            lost.start()
            try:
                conn.execute("SELECT count(*) FROM range(10000000000000) t(x) WHERE x % 7 = 3").fetchall()
            finally:
                lost.cancel()
                conn.close()
        return result

    monkeypatch.setattr(SnapshotEvaluator, "evaluate", evaluate_then_interrupt)


@pytest.mark.parametrize("in_query, every", [(True, False), (False, False), (True, True)],
                         ids=["in-a-query", "in-python", "in-build-every"])
def test_ctrl_c_during_build_says_interrupted_and_dataset_build_refuses_until_a_build_finishes(
        ctrl_c, run_cli, home: Path, monkeypatch: pytest.MonkeyPatch, in_query: bool, every: bool) -> None:
    assert run_cli("simulate", "--agents", "3", "--windows", "3", "--start", START, "--target", "duckdb").exit_code == 0
    assert run_cli("build").exit_code == 0
    assert run_cli("simulate", "--agents", "3", "--windows", "1", "--target", "duckdb").exit_code == 0  # a 4th window
    with monkeypatch.context() as patched:
        _ctrl_c_after(patched, "babylon.agent_window_pnl", in_query)
        result = run_cli("build", *(("--every", "0.001", "--builds", "2") if every else ()))
    half = "SELECT (SELECT count(DISTINCT window_id) FROM babylon.agent_window_pnl), (SELECT count(*) FROM babylon.windows)"
    assert _warehouse(home, half) == [(4, 3)]  # agent_window_pnl has the new window, windows (after it) not yet

    assert result.exit_code == 130, result.output
    assert result.output.strip().splitlines()[-1] == (
        "build interrupted: the marts may be half-built; run `python cli.py build` again to finish them")
    assert "fix the model" not in result.output and "Traceback" not in result.output
    assert "build 2 at" not in result.output  # build --every stops
    dataset = ("dataset", "build", "--name", "d", "--min-agents", "3")
    refused = run_cli(*dataset)
    assert refused.exit_code == 2
    assert refused.output.startswith("Error: the marts are half-built: build 2 (started ") and "run `python cli.py build`" in refused.output
    assert run_cli("build").exit_code == 0
    assert run_cli(*dataset).exit_code == 0
    assert _warehouse(home, half) == [(4, 4)]


def test_a_build_interrupted_after_applying_changed_models_is_finished_by_the_next(
        run_cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed model's plan puts new, empty tables in prod before they are computed: the next build,
    which finds prod already holding the project, must still compute them."""
    project = _copy_project(tmp_path, monkeypatch)
    assert run_cli("simulate", "--agents", "3", "--windows", "3", "--start", START, "--target", "duckdb").exit_code == 0
    assert run_cli("build").exit_code == 0
    pnl = project / "models" / "marts" / "agent_window_pnl.sql"
    pnl.write_text(pnl.read_text().replace("wins::INT AS wins", "(wins * 1)::INT AS wins"))
    with monkeypatch.context() as patched:
        _ctrl_c_after(patched, "babylon.agent_window_pnl", in_query=False)
        assert run_cli("build").exit_code == 130
    counts = "SELECT (SELECT count(DISTINCT window_id) FROM babylon.agent_window_pnl), (SELECT count(*) FROM babylon.windows)"
    assert _warehouse(home, counts) == [(3, 0)]  # the new windows table (it reads agent_window_pnl) is in prod, still empty

    result = run_cli("build")
    assert result.exit_code == 0, result.output
    assert _warehouse(home, counts) == [(3, 3)]
