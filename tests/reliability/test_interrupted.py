"""kill -9 in the middle of each command, then the same command again: the result equals an uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import ANY

import psycopg
import polars as pl
import pytest

from babylon_rl.settings import Home
from bench.soak_kills import mart_rows
from babylon_rl.train.data import Schedule, load_scored_dataset
from tests import game_rows
from tests.dataset_factory import make_dataset
from tests.judge_server import JudgeServer, expected_score
from tests.reliability.conftest import factory_marts, simulate_game
from tests.reliability.support import (cli_env, kill_after, kill_when, ok, one_line_error, pg_rows, raw_counts, run, source_counts,
                                       start, wait_for, warehouse_rows)
from tests.train_support import install


@contextmanager
def table_locked(url: str, table: str):
    """Hold an ACCESS EXCLUSIVE lock on a source table: a snapshot copying it blocks mid-transaction."""
    with psycopg.connect(url) as conn:
        conn.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
        yield
        conn.rollback()


def blocked_reader(url: str) -> bool:
    rows = pg_rows(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
    return rows[0][0] > 0


def raw_digest(home: Path) -> list[tuple]:
    return [warehouse_rows(home, f'SELECT count(*), md5(string_agg(id, \',\' ORDER BY id)) FROM raw.{t}')[0]
            for t in ("trajectories", "llm_call_logs", "market_outcomes")]


def leftovers(home: Path) -> list[str]:
    """Work entries in datasets/, and versions no published name points at (what a killed build can leave)."""
    datasets = home / "datasets"
    work = [p.name for p in datasets.iterdir() if p.name.startswith(".") and p.name != ".versions"]
    published = {p.resolve() for p in datasets.iterdir() if p.is_symlink()}
    versions = datasets / ".versions"
    stale = [f".versions/{p.name}" for p in versions.iterdir() if p.resolve() not in published] if versions.is_dir() else []
    return sorted(work + stale)


# -- snapshot -------------------------------------------------------------------------------


@pytest.mark.postgres
def test_snapshot_killed_mid_copy_then_rerun(migrated_pg_url: str, tmp_path: Path) -> None:
    home, reference = tmp_path / "home", tmp_path / "reference"
    url = ["--database-url", migrated_pg_url]
    simulate_game(migrated_pg_url, home, windows=2)
    ok(run(home, *url, "snapshot"))
    simulate_game(migrated_pg_url, home, windows=2, start=None)  # two more windows: an incremental snapshot

    with table_locked(migrated_pg_url, "market_outcomes"):  # trajectories and calls are copied, then it blocks
        proc = start(home, *url, "snapshot")
        assert kill_when(proc, lambda: blocked_reader(migrated_pg_url), timeout=60)
    assert warehouse_rows(home, "SELECT count(*) FROM meta.snapshots") == [(1,)]  # the killed run left nothing

    ok(run(home, *url, "snapshot"))
    ok(run(reference, *url, "snapshot"))
    assert raw_counts(home) == source_counts(migrated_pg_url)
    assert raw_digest(home) == raw_digest(reference)
    assert warehouse_rows(home, "SELECT count(*) FROM meta.snapshots") == [(2,)]


# -- dataset build --------------------------------------------------------------------------

DATASET_ARGS = ("dataset", "build", "--name", "d", "--min-agents", "3", "--force")


def _dataset_files(home: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((home / "datasets" / "d").glob("*.parquet"))}


def _kill_dataset_build(tmp_path: Path, kill) -> None:
    home, reference = tmp_path / "home", tmp_path / "reference"
    factory_marts(home, windows=24, agents=8, filler=200)
    shutil.copytree(home, reference)
    ok(run(reference, *DATASET_ARGS))
    ok(run(home, *DATASET_ARGS, "--seed", "3"))  # an older dataset d that the killed --force build replaces
    killed = kill(start(home, *DATASET_ARGS), home)
    published = home / "datasets" / "d"
    if published.exists():  # the old dataset or the new one, never a half one (absent only mid-swap)
        manifest = json.loads((published / "manifest.json").read_text())
        assert set(_dataset_files(home)) == {"train.parquet", "validation.parquet", "eval.parquet", "contexts.parquet"}
        assert manifest["parameters"]["seed"] in (0, 3)

    ok(run(home, *DATASET_ARGS))
    assert json.loads((published / "manifest.json").read_text())["content_hash"] == \
        json.loads((reference / "datasets" / "d" / "manifest.json").read_text())["content_hash"]
    assert _dataset_files(home) == _dataset_files(reference)
    assert leftovers(home) == [], f"killed={killed}: stale temp directories left in datasets/"
    listed = ok(run(home, "dataset", "list")).stdout
    assert ".tmp-" not in listed and ".old-" not in listed and "│ d " in listed


def test_dataset_build_killed_while_writing_then_rerun(tmp_path: Path) -> None:
    def on_temp_dir(proc, home):
        return kill_when(proc, lambda: any(p.name.startswith(".tmp-") for p in (home / "datasets").iterdir()))

    _kill_dataset_build(tmp_path, on_temp_dir)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_dataset_build_killed_at_a_random_moment_then_rerun(tmp_path: Path, seed: int) -> None:
    _kill_dataset_build(tmp_path, lambda proc, home: kill_after(proc, 0.3, 2.0, seed))


class Killed(BaseException):
    """Stands for kill -9: no `except Exception` handler sees it."""


def _crash_on_rename_onto(monkeypatch: pytest.MonkeyPatch, destination: Path) -> None:
    """os.rename/os.replace (and pathlib, which calls them) die when they would write `destination`."""
    for attr in ("rename", "replace"):
        real = getattr(os, attr)

        def crashing(src, dst, *args, _real=real, _attr=attr, **kwargs):
            if Path(dst) == destination:
                raise Killed(f"killed at {_attr} onto {dst}")
            return _real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, attr, crashing)


def _scored_dataset(tmp_path: Path) -> tuple[Home, Path, bytes]:
    """Dataset d built with seed 3 and scored: the old dataset a --force build replaces."""
    from babylon_rl.dataset.build import build
    from babylon_rl.dataset.params import BuildParams
    from babylon_rl.judge.options import ScoreOptions
    from babylon_rl.judge.score import score_dataset

    home = Home.resolve(tmp_path / "home")
    factory_marts(home.root, windows=12, agents=6)
    build(home, BuildParams(name="d", min_agents=3, seed=3))
    score_dataset(home, "d", ScoreOptions(judge="heuristic"))
    published = home.datasets / "d"
    return home, published, (published / "scores.parquet").read_bytes()


def _assert_old_dataset_intact(published: Path, scores: bytes) -> None:
    assert json.loads((published / "manifest.json").read_text())["parameters"]["seed"] == 3
    assert (published / "scores.parquet").read_bytes() == scores
    assert {p.name for p in published.glob("*.parquet")} >= {"train.parquet", "validation.parquet", "eval.parquet", "contexts.parquet"}


def test_dataset_build_force_crashing_at_the_swap_keeps_the_old_dataset_and_its_scores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 item 5: the swap was two renames (target -> .old, staged -> target); a kill between lost both."""
    from babylon_rl.dataset.build import build
    from babylon_rl.dataset.params import BuildParams

    home, published, scores = _scored_dataset(tmp_path)
    with monkeypatch.context() as patch:
        _crash_on_rename_onto(patch, published)
        with pytest.raises(Killed):
            build(home, BuildParams(name="d", min_agents=3, seed=0), force=True)
    _assert_old_dataset_intact(published, scores)

    from babylon_rl.dataset.dataset import Dataset

    assert Dataset.open(home, "d").read_scores() is not None  # verified against its manifest, scores with it
    build(home, BuildParams(name="d", min_agents=3, seed=0), force=True)
    new = Dataset.open(home, "d")
    assert new.manifest["parameters"]["seed"] == 0 and not new.has_scores()  # a new version starts unscored
    assert leftovers(home.root) == []  # the old version and the crashed build's work are swept


def test_dataset_build_force_crashing_while_adopting_a_pre_version_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset published as a plain directory (before versions) moves into .versions/ and gets a link; a crash
    between the two leaves no name for a moment: the next open links it again, scores and all."""
    from babylon_rl.dataset.build import build
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.dataset.params import BuildParams

    home, published, scores = _scored_dataset(tmp_path)
    version = published.resolve()
    published.unlink()
    version.rename(published)  # the old layout: datasets/d is the directory itself
    with monkeypatch.context() as patch:
        _crash_on_rename_onto(patch, published)
        with pytest.raises(Killed):
            build(home, BuildParams(name="d", min_agents=3, seed=0), force=True)
    assert Dataset.open(home, "d").manifest["parameters"]["seed"] == 3
    _assert_old_dataset_intact(published, scores)
    build(home, BuildParams(name="d", min_agents=3, seed=0), force=True)
    assert Dataset.open(home, "d").manifest["parameters"]["seed"] == 0
    assert leftovers(home.root) == []


# -- score ----------------------------------------------------------------------------------


def test_score_killed_mid_run_resumes_from_the_cache(tmp_path: Path) -> None:
    home = tmp_path / "home"
    directory = make_dataset(home, windows=6, agents=4)
    env = cli_env(home, OPENAI_API_KEY="sk-test-kill")
    with JudgeServer(latency=0.3) as server:
        args = ("score", "--dataset", "demo", "--judge", "ruler", "--judge-model", "m",
                "--judge-base-url", server.base_url, "--concurrency", "1", "--timeout", "10")
        assert kill_when(start(home, *args, env=env), lambda: len(server.requests) >= 3, timeout=60)
        assert not (directory / "scores.parquet").exists()
        sent_before = len(server.requests)
        ok(run(home, *args, env=env))
        resent = len(server.requests) - sent_before
    assert resent <= 6 - 2  # at least the two groups answered before the kill came from the cache
    scores = pl.read_parquet(directory / "scores.parquet")
    frame = pl.concat([pl.read_parquet(directory / f"{s}.parquet") for s in ("train", "eval")])
    pnl = dict(zip(frame["trajectory_id"], frame["pnl"]))
    assert sorted(scores["trajectory_id"]) == sorted(pnl)  # every trajectory once
    for row in scores.iter_rows(named=True):
        assert row["score"] == pytest.approx(expected_score(pnl[row["trajectory_id"]]))


# -- train ----------------------------------------------------------------------------------

TRAIN_ARGS = ("train", "--dataset", "ds", "--base-model", "tiny", "--objective", "grpo", "--groups-per-step", "2", "--learning-rate", "1e-3",
              "--max-steps", "5", "--checkpoint-every", "2", "--run-name", "k")


def expected_batches(home: Home, run: str, steps: int) -> dict[str, list[str]]:
    data = load_scored_dataset(home, "ds")
    schedule = Schedule(len(data.train), 2, 0)
    out = {}
    for step in range(steps):
        ids = [s.trajectory_id for i in schedule.batch(step) if data.train[i].has_spread for s in data.train[i].samples]
        if ids:
            out[f"{run}:step-{step + 1}"] = ids
    return out


def insert_dataset_trajectories(url: str, home: Home) -> None:
    data = load_scored_dataset(home, "ds")
    ids = [s.trajectory_id for split in (data.train, data.validation) for g in split for s in g.samples]
    game_rows.insert(url, "trajectories", [game_rows.trajectory(t, "agent", "2025-01-15T00:00") for t in ids])


def assert_write_back_consistent(url: str, expected: dict[str, list[str]]) -> None:
    rows = pg_rows(url, 'SELECT "batchId", "trajectoryIds", status FROM training_batches')
    assert len(rows) == len({r[0] for r in rows})
    assert {r[0]: json.loads(r[1]) for r in rows} == expected
    assert {r[2] for r in rows} == {"completed"}
    marked = pg_rows(url, 'SELECT "trajectoryId", "trainedInBatch" FROM trajectories WHERE "usedInTraining"')
    trained = {t: batch for batch, ids in expected.items() for t in ids}
    assert {t for t, _ in marked} == set(trained)
    assert all(trained[t] == batch for t, batch in marked)


@pytest.mark.slow
@pytest.mark.postgres
def test_train_killed_mid_run_then_resumed(train_template: Path, tmp_path: Path, migrated_pg_url: str) -> None:
    home = install(train_template, tmp_path / "home")
    insert_dataset_trajectories(migrated_pg_url, home)
    url = ("--database-url", migrated_pg_url)
    completed = "SELECT count(*) FROM training_batches WHERE status = 'completed'"
    proc = start(home.root, *url, *TRAIN_ARGS)
    assert kill_when(proc, lambda: pg_rows(migrated_pg_url, completed)[0][0] >= 2, timeout=120)
    # the killed run may leave its current batch 'training'; no trajectory is marked for an unfinished batch
    unfinished = {r[0] for r in pg_rows(migrated_pg_url, "SELECT \"batchId\" FROM training_batches WHERE status <> 'completed'")}
    marked = {r[0] for r in pg_rows(migrated_pg_url, 'SELECT "trainedInBatch" FROM trajectories WHERE "usedInTraining"')}
    assert not marked & unfinished

    ok(run(home.root, *url, *TRAIN_ARGS, "--resume"))
    assert_write_back_consistent(migrated_pg_url, expected_batches(home, "k", 5))
    metrics = pl.read_csv(home.runs / "k" / "metrics.csv")
    assert metrics["step"].to_list() == [1, 2, 3, 4, 5]


# -- build ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_build_killed_mid_plan_then_rerun(migrated_pg_url: str, tmp_path: Path, seed: int) -> None:
    home, reference = tmp_path / "home", tmp_path / "reference"
    url = ("--database-url", migrated_pg_url)
    simulate_game(migrated_pg_url, home, windows=2, agents=5)
    ok(run(home, *url, "build"))
    simulate_game(migrated_pg_url, home, windows=1, agents=5, start=None)
    # kill it within a second of SQLMesh's first write to its state (the snapshot is done and the plan
    # is being applied; this small build has ~2 s left then): watching for the state's write-ahead log
    # takes no lock, where polling the warehouse would take DuckDB's file lock and block the build
    state_log = home / "sqlmesh_state.duckdb.wal"
    assert not state_log.exists()
    proc = start(home, *url, "build")
    assert wait_for(lambda: state_log.exists() or proc.poll() is not None, timeout=120)
    assert kill_after(proc, 0.0, 1.0, seed)
    ok(run(home, *url, "build"))
    ok(run(reference, *url, "build"))
    assert mart_rows(home) == mart_rows(reference)
    assert raw_counts(home) == source_counts(migrated_pg_url)



@pytest.mark.postgres
def test_dataset_build_refuses_the_marts_of_a_killed_build_until_a_build_finishes(migrated_pg_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = ("--database-url", migrated_pg_url)
    dataset = ("dataset", "build", "--name", "d", "--min-agents", "3")
    simulate_game(migrated_pg_url, home, windows=2, agents=5)
    ok(run(home, *url, "build"))
    simulate_game(migrated_pg_url, home, windows=1, agents=5, start=None)
    state_log = home / "sqlmesh_state.duckdb.wal"  # SQLMesh's first state write: the plan is being applied
    assert not state_log.exists()
    assert kill_when(start(home, *url, "build"), state_log.exists, timeout=120)
    one_line_error(run(home, *dataset), "the marts are half-built: build 2 ", "run `python cli.py build`")
    assert warehouse_rows(home, "SELECT build_id, finished_at FROM meta.builds ORDER BY 1") == [(1, ANY), (2, None)]
    ok(run(home, *url, "build"))
    ok(run(home, *dataset))
