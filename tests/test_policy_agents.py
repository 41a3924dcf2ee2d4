"""Models that play: `simulate --policy` (agents deciding with a model, logged in the game's schema) and `arena`."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import duckdb
import polars as pl
import psycopg
import pytest

from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.decision_points import COLUMNS, read_decisions, read_truths
from babylon_rl.evaluate.policies import Reply
from babylon_rl.evaluate.prompts import DecisionPrompt
from babylon_rl.evaluate.rules import news_rule
from babylon_rl.settings import Home
from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.window import simulate_window
from babylon_rl.warehouse import RAW_BY_NAME
from tests.judge_server import JudgeServer
from tests.train_support import build_template, install

START = datetime(2025, 1, 15, 10)
TRAJECTORY = RAW_BY_NAME["trajectories"].column_names
CALL = RAW_BY_NAME["llm_call_logs"].column_names
HOLD = '{"action": "hold"}'


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("policy-template"))


class ScriptedPlayer:
    """Answers each step's prompts from a list of texts (one per step, every agent alike) and records the batches."""

    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.batches: list[list[DecisionPrompt]] = []

    def replies(self, prompts):
        answer = self.script[len(self.batches) % len(self.script)]
        self.batches.append(list(prompts))
        return [Reply(answer, 100 + i, 7, 250) for i in range(len(prompts))]


def _config(**overrides) -> SimulationConfig:
    config = SimulationConfig(agents=6, windows=1, steps_per_window=6, seed=5, start=START, dirt_rate=0.2,
                              policy_agents=3, policy_model="models/scripted")
    return replace(config, **overrides).validate()


def test_personas_play_the_same_with_or_without_policy_agents():
    alone = simulate_window(_config(policy_agents=0, policy_model=""), START)
    player = ScriptedPlayer(['{"action": "buy", "ticker": "ACME", "shares": 5}', HOLD])
    beside = simulate_window(_config(), START, player)
    personas = [r for r in beside.trajectories if not r[2].startswith("sim-policy-")]
    assert personas == alone.trajectories
    assert beside.llm_calls[:len(alone.llm_calls)] == alone.llm_calls
    assert len(beside.trajectories) == 6 + 3
    # one batch per step holding every policy agent's prompt
    assert [len(batch) for batch in player.batches] == [3] * 6


def test_policy_answers_are_executed_under_the_game_rules_and_logged_as_answered():
    script = [
        '{"action": "buy", "ticker": "ACME", "shares": 5}',
        "I would rather wait and see.",  # no action: a failed step, the answer logged as it was
        '{"action": "sell", "ticker": "ACME", "shares": 2}',  # a partial sell of what it holds
        '{"action": "sell", "ticker": "BOLT", "shares": 1}',  # holds no BOLT: refused
        '{"action": "buy", "ticker": "ACME", "shares": 100000}',  # more than its cash: refused
        '{"action": "bet", "market": "M1", "side": "YES", "amount": 50}',  # M1: the prompt's name of the first market
    ]
    rows = simulate_window(_config(), START, ScriptedPlayer(script))
    trajectory = next(r for r in rows.trajectories if r[2] == "sim-policy-0000")
    steps = json.loads(trajectory[TRAJECTORY.index("stepsJson")])
    actions = [s["action"] for s in steps]
    assert [a["success"] for a in actions] == [True, False, True, False, False, True]
    assert [a["actionName"] for a in actions] == ["BUY_SHARES", "HOLD", "SELL_SHARES", "SELL_SHARES", "BUY_SHARES", "BUY_PREDICTION"]
    assert actions[1]["error"] == "could not parse the model's answer as a JSON action"
    assert actions[3]["error"] == "cannot sell 1 BOLT: holding 0"
    assert actions[4]["error"].startswith("not enough cash: 100000 ACME cost $")
    assert actions[5]["parameters"]["marketId"].startswith("pm-")
    assert steps[3]["environmentState"]["openPositions"] == 1  # 3 ACME left after selling 2 of 5
    metadata = json.loads(trajectory[TRAJECTORY.index("metadataJson")])
    assert metadata["persona"] == "policy" and metadata["policyModel"] == "models/scripted"
    assert rows.agent_pnl["sim-policy-0000"] == ("policy", trajectory[TRAJECTORY.index("finalPnL")])

    trajectory_id = trajectory[TRAJECTORY.index("trajectoryId")]
    calls = [c for c in rows.llm_calls if c[CALL.index("trajectoryId")] == trajectory_id]
    assert len(calls) == 6  # one action call a step, no reasoning call
    first = dict(zip(CALL, calls[0]))
    assert first["model"] == "models/scripted" and first["response"] == script[0]
    assert first["userPrompt"].startswith("10:") and "Your analysis" not in first["userPrompt"]  # the compact observation
    assert first["systemPrompt"].startswith("You trade in the Babylon market game.")
    assert (first["promptTokens"], first["completionTokens"], first["latencyMs"]) == (100, 7, 250)
    assert dict(zip(CALL, calls[1]))["response"] == script[1]
    messages = json.loads(first["messagesJson"])
    assert messages[1]["content"] == first["userPrompt"]


def test_simulate_with_a_local_model_writes_rows_the_build_reads(template, home, run_cli):
    install(template, home)
    result = run_cli("simulate", "--target", "duckdb", "--agents", "5", "--windows", "2", "--steps-per-window", "4",
                     "--start", "2025-01-15T10:00", "--policy", "tiny", "--policy-agents", "3")
    assert result.exit_code == 0, result.output
    assert "3 playing models/tiny" in result.output and "seconds/window" in result.output
    result = run_cli("build")
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        models = conn.sql("""SELECT DISTINCT model FROM raw.llm_call_logs WHERE "trajectoryId" IN
                             (SELECT "trajectoryId" FROM raw.trajectories WHERE "agentId" LIKE 'sim-policy-%')""").fetchall()
        built = conn.sql("SELECT count(*) FROM babylon.agent_window_pnl WHERE agent_id LIKE 'sim-policy-%'").fetchone()[0]
    assert models == [("models/tiny",)]
    assert built == 3 * 2

    # in a dataset, their trajectories are there, but their turns are no decisions to replay or train on:
    # their logged observation is already compact, so the scorer could not price it
    result = run_cli("dataset", "build", "--name", "played", "--min-actions", "1", "--lookback-hours", "10")
    assert result.exit_code == 0, result.output
    dataset = Dataset.open(Home(home), "played")
    rows = pl.concat([dataset.read_split(split, COLUMNS) for split in ("train", "validation", "eval")])
    assert rows.filter(pl.col("agent_id").str.starts_with("sim-policy-")).height > 0
    decisions = read_decisions(rows, read_truths(dataset))
    assert decisions and not [d for d in decisions if d.agent_id.startswith("sim-policy-")]


def test_simulate_with_an_endpoint_into_postgres(migrated_pg_url, home, run_cli):
    with JudgeServer() as server:
        server.reply = lambda body: news_rule(DecisionPrompt(body["messages"], {}), HOLD)
        result = run_cli("--database-url", migrated_pg_url, "simulate", "--agents", "5", "--windows", "2",
                         "--steps-per-window", "3", "--start", "2025-01-15T10:00", "--policy", "reader",
                         "--base-url", server.base_url, "--policy-agents", "2")
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 2 * 3 * 2
        assert all(r["body"]["model"] == "reader" and r["body"]["temperature"] == 0 for r in server.requests)
    with psycopg.connect(migrated_pg_url) as conn:
        agents = conn.execute("""SELECT count(*) FROM trajectories WHERE "agentId" LIKE 'sim-policy-%'""").fetchone()[0]
        calls = conn.execute("""SELECT count(*), min("promptTokens") FROM llm_call_logs WHERE model = 'reader'""").fetchone()
    assert agents == 2 * 2
    assert calls[0] == 2 * 3 * 2 and calls[1] > 0


def test_simulate_policy_errors_are_one_line(home, run_cli):
    result = run_cli("simulate", "--target", "duckdb", "--windows", "1", "--policy", "no-such-model")
    assert result.exit_code == 2 and "no-such-model" in result.output and "Traceback" not in result.output
    result = run_cli("simulate", "--target", "duckdb", "--windows", "1", "--policy-agents", "2")
    assert result.exit_code == 2 and "--policy-agents needs --policy MODEL" in result.output


def _serve_reader_and_holder(body: dict) -> str:
    if body["model"] == "reader":
        return news_rule(DecisionPrompt(body["messages"], {}), HOLD)
    return HOLD


@pytest.mark.parametrize("news_strength, verdict", [("1", "better"), ("0", "not told apart")])
def test_arena_tells_a_model_that_reads_the_news_only_when_the_news_tells(home, run_cli, news_strength, verdict):
    with JudgeServer() as server:
        server.reply = _serve_reader_and_holder
        result = run_cli("arena", "--model", "reader", "--against", "holder", "--base-url", server.base_url,
                         "--windows", "24", "--agents", "5", "--policy-agents", "3", "--steps-per-window", "6",
                         "--news-strength", news_strength, "--resamples", "500")
    assert result.exit_code == 0, result.output
    report = json.loads((home / "arena" / "reader-vs-holder" / "arena.json").read_text())
    head = report["comparisons"][0]
    assert (head["a"], head["b"], head["verdict"]) == ("reader", "holder", verdict)
    holder = next(s for s in report["sides"] if s["model"] == "holder")
    assert holder["mean_window_pnl"]["value"] == 0.0 and holder["actions"] == {"HOLD": 1.0}
    assert set(report["personas"]) == {"news", "momentum", "contrarian", "random", "risk_averse"}
    assert "reader - holder" in result.output


def test_arena_with_local_models(template, home, run_cli):
    install(template, home)
    result = run_cli("arena", "--model", "tiny", "--windows", "2")
    assert result.exit_code == 2 and "pass --against MODEL" in result.output  # a model of no run has no base
    result = run_cli("arena", "--model", "tiny", "--against", str(home / "models" / "tiny"), "--windows", "2",
                     "--agents", "2", "--policy-agents", "2", "--steps-per-window", "2", "--resamples", "100")
    assert result.exit_code == 0, result.output
    report = json.loads((home / "arena" / "tiny-vs-tiny" / "arena.json").read_text())
    first, second = report["sides"]
    assert first["model"] == second["model"] == "models/tiny"
    assert first["mean_window_pnl"] == second["mean_window_pnl"]  # greedy: the same model plays the same game
    assert first["valid_share"] == second["valid_share"] == 1.0  # decided from the menu: the game accepts every one
    assert "valid" in result.output
    assert report["comparisons"][0]["verdict"] == "not told apart"
