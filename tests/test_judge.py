"""The score command: judges, cache, resume, faults, errors, report and write-back, against a local server."""

from __future__ import annotations

from dataclasses import replace

import json
from pathlib import Path

import polars as pl
import psycopg
import pytest

from babylon_rl.judge.options import ScoreOptions
from babylon_rl.judge.score import ensure_scores, score_dataset
from babylon_rl.judge.heuristic import heuristic_score, terms
from babylon_rl.dataset.dataset import Dataset
from babylon_rl.judge.dataset import load_groups
from babylon_rl.settings import Home
from tests import game_rows
from tests.dataset_factory import make_dataset, marker
from tests.judge_server import JudgeServer, expected_score

KEY = "sk-test-SECRET123"


@pytest.fixture
def server():
    with JudgeServer() as srv:
        yield srv


@pytest.fixture
def dataset(home: Path) -> Path:
    return make_dataset(home, windows=3, agents=4, flat={1})


@pytest.fixture(autouse=True)
def llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for name in ("OPENAI_BASE_URL", "JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)


def ruler_args(server: JudgeServer, *extra: str) -> list[str]:
    return ["score", "--dataset", "demo", "--judge", "ruler", "--judge-model", "judge-m",
            "--judge-base-url", server.base_url, "--timeout", "2", *extra]


def dataset_pnl(directory: Path) -> dict[str, float]:
    frame = pl.concat([pl.read_parquet(directory / f) for f in ("train.parquet", "eval.parquet")])
    return dict(zip(frame["trajectory_id"], frame["pnl"]))


def assert_scores_match_pnl(directory: Path) -> pl.DataFrame:
    scores = pl.read_parquet(directory / "scores.parquet")
    pnl = dataset_pnl(directory)
    assert sorted(scores["trajectory_id"]) == sorted(pnl)
    for row in scores.iter_rows(named=True):
        assert row["score"] == pytest.approx(expected_score(pnl[row["trajectory_id"]])), row
    return scores


@pytest.mark.parametrize("mode, extra_requests", [("ok", 0), ("shuffled", 0), ("429", 1), ("malformed", 1),
                                                  ("missing", 1), ("extra", 1), ("duplicate", 1), ("reject_schema", 1)])
def test_ruler_scores_land_on_the_right_trajectory(run_cli, server, dataset, mode, extra_requests):
    server.mode = mode
    result = run_cli(*ruler_args(server))
    assert result.exit_code == 0, result.output
    scores = assert_scores_match_pnl(dataset)
    if mode == "reject_schema":  # every group's first request may race the switch to JSON mode
        schema = [r for r in server.requests if r["body"].get("response_format", {}).get("type") == "json_schema"]
        assert 1 <= len(schema) <= 3 and len(server.requests) == 3 + len(schema)
    else:
        assert len(server.requests) == 3 + extra_requests
    assert set(scores.columns) >= {"trajectory_id", "window_id", "split", "score", "explanation", "judge",
                                   "judge_model", "rubric_version", "no_signal"}
    assert scores.filter(pl.col("no_signal"))["window_id"].unique().to_list() == ["2025-01-15T11:00"]
    summary = json.loads((dataset / "scores.json").read_text())
    assert summary["groups_scored"] == 3 and summary["groups_failed"] == 0 and summary["tokens_in"] > 0
    if mode == "reject_schema":
        assert server.requests[-1]["body"]["response_format"] == {"type": "json_object"}


def test_second_run_is_served_from_the_cache(run_cli, server, dataset):
    assert run_cli(*ruler_args(server)).exit_code == 0
    assert len(server.requests) == 3
    first = pl.read_parquet(dataset / "scores.parquet")
    result = run_cli(*ruler_args(server))
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 3
    assert pl.read_parquet(dataset / "scores.parquet").equals(first)


def test_failed_group_blocks_scores_and_rerun_resumes(run_cli, server, dataset):
    server.mode, server.fault_windows = "missing", {"2025-01-15T12:00"}
    result = run_cli(*ruler_args(server, "--attempts", "3"))
    assert result.exit_code == 2
    assert "scored 2 of 3 groups" in result.output and "resume" in result.output
    assert "Traceback" not in result.output
    assert not (dataset / "scores.parquet").exists()
    assert len([r for r in server.requests if r["window"] == "2025-01-15T12:00"]) == 3  # bounded attempts
    sent = len(server.requests)
    server.mode = "ok"
    assert run_cli(*ruler_args(server)).exit_code == 0
    assert [r["window"] for r in server.requests[sent:]] == ["2025-01-15T12:00"]
    assert_scores_match_pnl(dataset)


@pytest.mark.parametrize("mode", ["500", "timeout"])
def test_transport_errors_are_retried_a_bounded_number_of_times(run_cli, server, home, mode):
    make_dataset(home, windows=1, agents=3)
    server.mode, server.sleep_seconds = mode, 1.5
    result = run_cli(*ruler_args(server, "--max-retries", "1", "--timeout", "0.4"))
    assert result.exit_code == 2
    assert "scored 0 of 1 groups" in result.output
    assert ("timed out" if mode == "timeout" else "HTTP 500") in result.output
    assert len(server.requests) == 2
    assert KEY not in result.output


def test_endpoint_down_fails_with_counts(run_cli, dataset):
    result = run_cli("score", "--dataset", "demo", "--judge", "ruler", "--judge-model", "m",
                     "--judge-base-url", "http://127.0.0.1:9/v1", "--max-retries", "1", "--timeout", "1")
    assert result.exit_code == 2
    assert "scored 0 of 3 groups" in result.output and "cannot reach" in result.output
    assert "Traceback" not in result.output


def test_ground_truth_goes_to_the_judge_never_to_training_messages(run_cli, server, dataset):
    assert run_cli(*ruler_args(server)).exit_code == 0
    for request in server.requests:
        assert marker(request["window"]) in request["prompt"]
        assert request["prompt"].count("You are a trading agent in Babylon") == 1  # shared prefix once
    for split in ("train", "eval"):
        for text in pl.read_parquet(dataset / f"{split}.parquet")["messages"]:
            assert "GROUND-TRUTH" not in text


def test_api_key_never_written_or_printed(run_cli, server, dataset, home):
    server.mode = "500"
    failed = run_cli(*ruler_args(server, "--max-retries", "0"))
    server.mode = "ok"
    done = run_cli(*ruler_args(server))
    assert done.exit_code == 0
    assert KEY not in failed.output + done.output
    for path in home.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_long_transcripts_are_cut_in_the_middle(home, server):
    make_dataset(home, windows=1, agents=4, turns=60)
    run = score_dataset(Home(home), "demo", ScoreOptions(judge="ruler", judge_model="m", base_url=server.base_url,
                                                          api_key=KEY, max_judge_tokens=2000))
    assert run.truncated == 4
    prompt = server.requests[0]["prompt"]
    assert "[truncated:" in prompt and "shortened in the middle" in prompt
    assert len(prompt) < 2000 * 4 + 1000
    scores = assert_scores_match_pnl(home / "datasets" / "demo")
    assert all("shortened" in text for text in scores["explanation"])
    assert json.loads((home / "datasets" / "demo" / "scores.json").read_text())["truncated_trajectories"] == 4


def test_concurrency_sends_groups_in_parallel(home):
    make_dataset(home, windows=8, agents=3)
    with JudgeServer(latency=0.3) as srv:
        run = score_dataset(Home(home), "demo", ScoreOptions(judge="ruler", judge_model="m", base_url=srv.base_url,
                                                              api_key=KEY, concurrency=8))
    assert run.requests == 8 and run.judged_groups == 8


def test_heuristic_follows_the_formula_and_flags_no_signal(run_cli, dataset):
    result = run_cli("score", "--dataset", "demo", "--judge", "heuristic")
    assert result.exit_code == 0, result.output
    scores = pl.read_parquet(dataset / "scores.parquet")
    by_id = dict(zip(scores["trajectory_id"], scores["score"]))
    flags = dict(zip(scores["trajectory_id"], scores["no_signal"]))
    for group in load_groups(Dataset.open(Home.resolve(dataset.parent.parent), "demo")):
        for traj in group.trajectories:
            if group.window_id == "2025-01-15T11:00":
                assert by_id[traj.trajectory_id] == 0.5 and flags[traj.trajectory_id]
            else:
                size = len(group.trajectories)
                assert by_id[traj.trajectory_id] == heuristic_score(traj, size) and not flags[traj.trajectory_id]
    best = scores.filter(pl.col("window_id") == "2025-01-15T10:00").sort("score")["trajectory_id"][-1]
    assert best == "traj-000-03"
    summary = json.loads((dataset / "scores.json").read_text())
    assert summary["no_signal_groups"] == 1 and summary["judge"] == "heuristic"


def test_heuristic_formula_by_hand(home):
    make_dataset(home, windows=1, agents=4)
    traj = load_groups(Dataset.open(Home.resolve(home), "demo"))[0].trajectories[3]  # rank 1 of 4, 4 trades, 1 error in 3 actions
    import math

    expected = 0.45 * 1 + 0.30 * (0.5 + 0.5 * math.tanh(traj.pnl_zscore / 2)) + 0.15 * traj.win_rate \
        + 0.10 * min(traj.trades, 5) / 5 - 0.25 * traj.errors / traj.actions
    assert heuristic_score(traj, 4) == round(expected, 6)


def test_heuristic_rank_is_relative_to_the_kept_group_not_the_window(home):
    """dataset build ranks inside the kept group; a window of 20 agents sampled down to 4 still spans 0..1."""
    make_dataset(home, windows=1, agents=4)
    group = load_groups(Dataset.open(Home.resolve(home), "demo"))[0]
    best = replace(min(group.trajectories, key=lambda t: t.pnl_rank), window_agents=20)
    worst = replace(max(group.trajectories, key=lambda t: t.pnl_rank), window_agents=20)
    assert (terms(best, 4)["rank"], terms(worst, 4)["rank"]) == (1.0, 0.0)


def test_ensure_scores_is_the_training_entry_point(home, server):
    make_dataset(home, windows=2, agents=3)
    frame = ensure_scores(home, "demo", judge="ruler", judge_model="m", base_url=server.base_url, api_key=KEY)
    assert frame.height == 6 and frame["score"].is_between(0, 1).all()
    again = ensure_scores(home, "demo", judge="ruler", judge_model="m", base_url=server.base_url, api_key=KEY)
    assert again.equals(frame) and len(server.requests) == 2


def test_report_compares_judges(run_cli, server, dataset):
    assert run_cli(*ruler_args(server)).exit_code == 0
    assert run_cli("score", "--dataset", "demo", "--judge", "heuristic").exit_code == 0
    result = run_cli("score", "--report", "demo", "--json")
    assert result.exit_code == 0, result.output
    rows = {(r["left"], r["right"]): r for r in json.loads(result.output)}
    assert rows[("ruler", "pnl")]["mean_spearman"] == pytest.approx(1.0)
    assert rows[("ruler", "pnl")]["windows"] == 2  # the flat window has no defined correlation
    assert ("heuristic", "ruler") in rows or ("ruler", "heuristic") in rows
    table = run_cli("score", "--report", "demo")
    assert "mean Spearman" in table.output


@pytest.mark.postgres
def test_write_back_updates_the_game_rows(home, run_cli, migrated_pg_url, dataset):
    ids = sorted(dataset_pnl(dataset))
    rows = [game_rows.trajectory(tid, f"agent-{i}", "2025-01-15T10:00") for i, tid in enumerate(ids)]
    rows.append(game_rows.trajectory("not-in-dataset", "agent-x", "2025-01-15T10:00"))
    game_rows.insert(migrated_pg_url, "trajectories", rows)
    result = run_cli("--database-url", migrated_pg_url, "score", "--dataset", "demo", "--judge", "heuristic",
                     "--write-back")
    assert result.exit_code == 0, result.output
    assert f"wrote {len(ids)} score(s)" in result.output
    scores = pl.read_parquet(dataset / "scores.parquet")
    expected = dict(zip(scores["trajectory_id"], scores["score"]))
    with psycopg.connect(migrated_pg_url) as conn:
        got = conn.execute('SELECT "trajectoryId", "aiJudgeReward", "aiJudgeReasoning", "judgedAt", "updatedAt" '
                           'FROM trajectories').fetchall()
    for tid, reward, reasoning, judged, updated in got:
        if tid == "not-in-dataset":
            assert reward is None and judged is None
        else:
            assert reward == pytest.approx(expected[tid]) and reasoning and judged is not None
            assert updated > game_rows.datetime(2025, 1, 15, 12, 0)


def test_art_ruler_maps_shuffled_replies_by_id(run_cli, server, dataset):
    server.mode = "shuffled"
    result = run_cli("score", "--dataset", "demo", "--judge", "art-ruler", "--judge-model", "judge-m",
                     "--judge-base-url", server.base_url, "--timeout", "5")
    assert result.exit_code == 0, result.output
    scores = assert_scores_match_pnl(dataset)
    assert set(scores["judge"]) == {"art-ruler"}
    assert len(server.requests) == 3
    assert server.requests[0]["body"]["model"] == "judge-m"
    assert marker(server.requests[0]["window"]) in server.requests[0]["prompt"]


def test_missing_endpoint_and_model_and_dataset_errors(run_cli, dataset, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    no_endpoint = run_cli("score", "--dataset", "demo", "--judge", "ruler", "--judge-model", "m")
    assert no_endpoint.exit_code == 2
    assert "OPENAI_API_KEY" in no_endpoint.output and "--judge heuristic" in no_endpoint.output
    no_model = run_cli("score", "--dataset", "demo", "--judge", "ruler", "--judge-base-url", "http://127.0.0.1:9/v1")
    assert no_model.exit_code == 2 and "--judge-model" in no_model.output
    unknown = run_cli("score", "--dataset", "nope", "--judge", "heuristic")
    assert unknown.exit_code == 2 and "unknown dataset 'nope'" in unknown.output and "demo" in unknown.output
    for result in (no_endpoint, no_model, unknown):
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
