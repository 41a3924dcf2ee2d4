"""Services that go away: PostgreSQL mid-snapshot, the judge endpoint, the disk."""

from __future__ import annotations

import resource
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.dataset_factory import make_dataset
from tests.judge_server import JudgeServer
from tests.reliability.conftest import factory_marts, simulate_game
from tests.reliability.support import (CLI, ROOT, cli_env, ok, one_line_error, pg_rows, run, start, tree,
                                       warehouse_rows, wait_for)
from tests.reliability.test_interrupted import blocked_reader, raw_digest, table_locked

# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_connection_killed_mid_snapshot(migrated_pg_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = ["--database-url", migrated_pg_url]
    simulate_game(migrated_pg_url, home, windows=2)
    ok(run(home, *url, "snapshot"))
    before = raw_digest(home), warehouse_rows(home, "SELECT * FROM meta.snapshots")
    simulate_game(migrated_pg_url, home, windows=2, start=None)

    with table_locked(migrated_pg_url, "market_outcomes"):
        proc = start(home, *url, "snapshot")
        assert wait_for(lambda: blocked_reader(migrated_pg_url), timeout=60)
        pg_rows(migrated_pg_url, """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                                    WHERE datname = current_database() AND wait_event_type = 'Lock'""")
    out, err = proc.communicate(timeout=60)
    line = one_line_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), "snapshot from", "failed")
    assert "unchanged" in line and "run it again" in line
    assert (raw_digest(home), warehouse_rows(home, "SELECT * FROM meta.snapshots")) == before


def test_postgres_on_a_closed_port_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for command in (["snapshot"], ["build"], ["db", "status"], ["simulate", "--windows", "1"]):
        result = run(home, "--database-url", "postgresql://postgres:pw-closed@127.0.0.1:1/babylon", *command)
        line = one_line_error(result, "postgres:***@127.0.0.1:1")
        assert "pw-closed" not in result.stdout + result.stderr, command
        assert "cannot connect" in line or "failed" in line, line


# -- the judge endpoint ---------------------------------------------------------------------


def _ruler(base_url: str, *extra: str) -> tuple[str, ...]:
    return ("score", "--dataset", "demo", "--judge", "ruler", "--judge-model", "m", "--judge-base-url", base_url,
            "--concurrency", "1", *extra)


def test_slow_judge_is_bounded_in_time(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_dataset(home, windows=3, agents=3)
    env = cli_env(home, OPENAI_API_KEY="sk-test-slow")
    with JudgeServer() as server:
        server.mode, server.sleep_seconds = "timeout", 30
        started = time.monotonic()
        result = run(home, *_ruler(server.base_url, "--timeout", "0.5", "--max-retries", "1"), env=env, timeout=60)
        elapsed = time.monotonic() - started
    one_line_error(result, "scored 0 of 3 groups", "timed out")
    assert elapsed < 20  # 3 groups x 2 requests x 0.5 s, plus start-up and backoff
    assert not (home / "datasets" / "demo" / "scores.parquet").exists()


def _cached_groups(home: Path) -> int:
    path = home / "judge_cache" / "scores.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(path, timeout=5) as conn:
        try:
            return conn.execute("SELECT count(DISTINCT group_key) FROM scores").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def test_judge_going_down_mid_run_then_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_dataset(home, windows=4, agents=3)
    env = cli_env(home, OPENAI_API_KEY="sk-test-down")
    server = subprocess.Popen([sys.executable, "-m", "tests.judge_server", "0.3"], cwd=str(ROOT), stdout=subprocess.PIPE,
                              text=True, env=cli_env(home))
    try:
        base_url = server.stdout.readline().strip()
        proc = start(home, *_ruler(base_url, "--timeout", "2", "--max-retries", "1"), env=env)
        assert wait_for(lambda: _cached_groups(home) >= 1, timeout=60)
    finally:
        server.kill()  # the endpoint goes away mid-run: refused connections from now on
        server.wait()
    out, err = proc.communicate(timeout=60)
    line = one_line_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), "of 4 groups")
    assert "re-run the same command" in line
    scored = _cached_groups(home)
    assert 1 <= scored < 4
    assert not (home / "datasets" / "demo" / "scores.parquet").exists()
    with JudgeServer() as back:
        ok(run(home, *_ruler(back.base_url, "--timeout", "5"), env=env))
        assert len(back.requests) == 4 - scored  # only the groups that failed are sent again


# -- disk full ------------------------------------------------------------------------------


@contextmanager
def tiny_tmpfs(directory: Path, size: str = "300k"):
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the RLIMIT_FSIZE case covers disk full")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


DATASET = ("dataset", "build", "--name", "big", "--min-agents", "3")


def _assert_nothing_published(home: Path) -> None:
    datasets = home / "datasets"
    assert not (datasets / "big").exists()
    assert [p.name for p in datasets.iterdir()] == []  # no half-written work directory left behind


def test_disk_full_while_writing_parquet_tmpfs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    factory_marts(home, windows=24, agents=8, filler=300)
    with tiny_tmpfs(home / "datasets"):
        result = run(home, *DATASET)
        line = one_line_error(result, "No space left on device", "nothing was published")
        assert "big" in line
        _assert_nothing_published(home)


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


def test_disk_full_while_writing_parquet_rlimit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    factory_marts(home, windows=24, agents=8, filler=300)
    (home / "datasets").mkdir()
    before = tree(home)
    result = subprocess.run([sys.executable, CLI, *DATASET], env=cli_env(home), cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=120, preexec_fn=_limit_file_size)
    one_line_error(result, "cannot write dataset 'big'", "File too large")
    _assert_nothing_published(home)
    assert tree(home) == before
