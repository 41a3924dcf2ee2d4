"""Two writers, a reader and two trainings at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest

from babylon_rl import locks
from tests.reliability.conftest import simulate_game
from tests.reliability.support import ok, one_line_error, pg_rows, run, start, wait_for
from tests.reliability.test_interrupted import expected_batches, insert_dataset_trajectories
from tests.train_support import install

pytestmark = pytest.mark.postgres


@pytest.fixture
def built(migrated_pg_url: str, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    simulate_game(migrated_pg_url, home, windows=2, agents=5)
    ok(run(home, "--database-url", migrated_pg_url, "build"))
    return home


def _has_open(pid: int, path: Path) -> bool:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
        return any(os.readlink(fd) == str(path) for fd in fds)
    except OSError:  # the process or one of its descriptors is gone
        return False


def test_a_build_refuses_or_waits_while_another_holds_the_lock(built: Path, migrated_pg_url: str) -> None:
    # The test holds the lock itself, as a running build does, for as long as it needs: with a
    # real first build the second one raced it and, on a loaded machine, found the lock free.
    url = ("--database-url", migrated_pg_url)
    lock = built / "build.lock"
    with locks.exclusive(lock, 0):
        line = one_line_error(run(built, *url, "build"), "another build is running", f"process {os.getpid()}")
        assert "--wait" in line
        waiter = start(built, *url, "build", "--wait", "300")
        # with the lock file open the waiter is in its wait loop, which says so at its first refusal
        assert wait_for(lambda: _has_open(waiter.pid, lock), timeout=120)
        time.sleep(0.5)
        assert waiter.poll() is None
    out, err = waiter.communicate(timeout=300)
    assert waiter.returncode == 0, out + err
    assert "waiting up to 300s" in out and "nothing to compute" in out


READER = """
import sys, time, duckdb
conn = duckdb.connect(sys.argv[1], read_only=True)
conn.execute("SELECT count(*) FROM babylon.windows").fetchall()
print("reading", flush=True)
time.sleep(120)
"""


def test_analyst_reader_blocks_a_build_which_names_it_while_exports_stay_readable(built: Path, migrated_pg_url: str) -> None:
    reader = subprocess.Popen([sys.executable, "-c", READER, str(built / "warehouse.duckdb")], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "reading"
        blocked = run(built, "--database-url", migrated_pg_url, "build")
        one_line_error(blocked, "in use by another process", str(reader.pid), "exports")
    finally:
        reader.kill()
        reader.wait()
    # the published copy is readable at any time, also while a build holds the warehouse
    building = start(built, "--database-url", migrated_pg_url, "build")
    try:
        assert wait_for(lambda: (built / "build.lock").read_text().strip() == str(building.pid), timeout=60)
        rows = duckdb.sql(f"SELECT count(*) FROM '{built / 'exports' / 'windows.parquet'}'").fetchone()[0]
        assert rows >= 2
    finally:
        assert building.wait(timeout=300) == 0


@pytest.mark.slow
def test_two_trainings_on_one_dataset(train_template: Path, tmp_path: Path, migrated_pg_url: str) -> None:
    home = install(train_template, tmp_path / "home")
    insert_dataset_trajectories(migrated_pg_url, home)
    args = ("--database-url", migrated_pg_url, "train", "--dataset", "ds", "--base-model", "tiny", "--objective", "grpo", "--groups-per-step", "2",
            "--learning-rate", "1e-3", "--max-steps", "3")
    runs = [start(home.root, *args, "--run-name", name) for name in ("a", "b")]
    for proc in runs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
    rows = pg_rows(migrated_pg_url, 'SELECT "batchId", status FROM training_batches')
    assert sorted(r[0] for r in rows) == sorted([*expected_batches(home, "a", 3), *expected_batches(home, "b", 3)])
    assert {r[1] for r in rows} == {"completed"}
    for name in ("a", "b"):
        assert pl.read_csv(home.runs / name / "metrics.csv")["step"].to_list() == [1, 2, 3]
