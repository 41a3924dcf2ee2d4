"""`cli.py improve`: the closed loop on the tiny model: its stages, its resume after kill -9, its gate and its records;
with made-up stages (tests/improve_factory.py), its report, its pace (--every) and its resume after Ctrl-C or SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import psycopg
import pytest

from babylon_rl import improve
from babylon_rl.context import BabylonContext
from babylon_rl.improve import ImproveOptions, run_improve
from tests.improve_factory import record_stage
from tests.train_support import build_template, install

CHECKOUT = Path(__file__).resolve().parent.parent
SMALL = ["--windows", "8", "--agents", "5", "--policy-agents", "2", "--steps-per-window", "2", "--steps", "2",
         "--groups-per-step", "2", "--samples", "2", "--eval-decisions-per-window", "1", "--base-model", "tiny"]
SMALL_OPTIONS = ImproveOptions(windows=8, agents=5, policy_agents=2, steps_per_window=2, steps=2, groups_per_step=2,
                               samples=2, eval_decisions_per_window=1, base_model="tiny")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("improve-template"))


def _improve(home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "BABYLON_RL_HOME": str(home)}
    env.pop("DATABASE_URL", None)
    return subprocess.Popen([sys.executable, str(CHECKOUT / "cli.py"), "improve", *args, *SMALL], env=env, cwd=CHECKOUT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _state(home: Path) -> dict:
    return json.loads((home / "improve" / "state.json").read_text())


def _game_rows(home: Path) -> tuple[list, list]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        trajectories = conn.sql('SELECT "trajectoryId", "agentId", "finalPnL" FROM raw.trajectories ORDER BY 1').fetchall()
        calls = conn.sql('SELECT id, response FROM raw.llm_call_logs ORDER BY 1').fetchall()
    return trajectories, calls


def _comparable(state: dict) -> list[dict]:
    return [{k: v for k, v in it.items() if k != "seconds"} for it in state["iterations"]]


def test_improve_resumes_after_kill_9_with_the_same_champion_and_rows(template, tmp_path):
    whole, killed = install(template, tmp_path / "whole").root, install(template, tmp_path / "killed").root
    done = _improve(whole, "--iterations", "2")
    output = done.communicate(timeout=600)[0]
    assert done.returncode == 0, output
    assert "iteration 1 gate, candidate - champion" in output

    victim = _improve(killed, "--iterations", "2")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # kill it in iteration 1, while it builds
        state_file = killed / "improve" / "state.json"
        if state_file.exists() and len(_state(killed)["iterations"]) == 2 and "play" in _state(killed)["done"]:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    assert "gate" not in _state(killed)["done"]

    again = _improve(killed, "--iterations", "2")
    output = again.communicate(timeout=600)[0]
    assert again.returncode == 0, output
    assert _comparable(_state(killed)) == _comparable(_state(whole))
    assert _state(killed)["champion"] == _state(whole)["champion"]
    assert _game_rows(killed) == _game_rows(whole)

    # done is done: the same command again runs nothing and says where things stand
    again = _improve(killed, "--iterations", "2")
    output = again.communicate(timeout=120)[0]
    assert again.returncode == 0 and "iteration 0: play" not in output and "champion:" in output


def test_the_loop_plays_trains_and_records_each_iteration(template, home, run_cli):
    install(template, home)
    result = run_cli("improve", "--iterations", "1", *SMALL)
    assert result.exit_code == 0, result.output
    state = _state(home)
    (it,) = state["iterations"]
    assert it["champion"] == "tiny" and it["candidate"].endswith("runs/improve-000/merged") and it["promoted"] is False
    assert set(it["play"]) == {"policy", "news", "momentum", "contrarian", "random", "risk_averse"}
    # whether the gate could have told a news reader from the best constant on its held-out decisions
    # (None: no held-out decision had a fresh headline the rule reads, as in these 2 held-out windows)
    assert "could_recognise_news_rule" in it["gate"]
    powerless = "(this gate could not recognise even the news rule)" in result.output
    assert powerless == (it["gate"]["could_recognise_news_rule"] is False)
    assert state["done"] == ["play", "build", "dataset", "train", "gate"]
    # the candidate is `train`'s own objective (credit by meaning), its kept checkpoint merged into a whole model
    assert json.loads((home / "runs" / "improve-000" / "run.json").read_text())["objective"] == "hindsight"
    assert (home / "runs" / "improve-000" / "merged" / "config.json").exists()
    # the gate's own figures for each side, and the loop's page written after it
    assert set(it["gate"]["candidate"]) == set(it["gate"]["champion"]) == {"direction_accuracy", "pnl_per_decision"}
    page = (home / "improve" / "report.html").read_text()
    assert page.count("<svg") == 2 and "<td>0</td><td>tiny</td>" in page and "<td>kept the champion</td>" in page
    promotion = json.loads((home / "runs" / "improve-000" / "promotion.json").read_text())
    assert promotion["promoted"] is False and promotion["champion_after"] == "tiny"
    trajectories, _ = _game_rows(home)
    assert sum(1 for _, agent, _ in trajectories if agent.startswith("sim-policy-")) == 2 * 8
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        played_by = conn.sql("""SELECT DISTINCT model FROM raw.llm_call_logs l JOIN raw.trajectories t USING ("trajectoryId")
                                WHERE t."agentId" LIKE 'sim-policy-%'""").fetchall()
    assert played_by == [("models/tiny",)]

    # a second call with other options would mix two loops: refused in one line
    result = run_cli("improve", "--iterations", "2", *SMALL[:-2], "--base-model", "other")
    assert result.exit_code == 2 and "other options (base_model)" in result.output


def test_a_promoted_candidate_becomes_the_champion_that_plays_next(template, home, migrated_pg_url, monkeypatch):
    """The gate's decision, not the eval, is under test here: the eval is made to say the candidate wins."""
    install(template, home)
    ctx = BabylonContext.create(home=str(home), database_url=migrated_pg_url)
    ctx.db_migrate()
    real_evaluate = BabylonContext.evaluate

    def candidate_wins(self, options):
        result = real_evaluate(self, options)
        result.comparison["baseline"]["beats_outside_interval"] = True
        return result

    monkeypatch.setattr(BabylonContext, "evaluate", candidate_wins)
    state = run_improve(ctx, replace(SMALL_OPTIONS, iterations=2))
    first, second = state.iterations
    assert first.promoted and second.champion == first.candidate and state.champion == second.candidate
    with psycopg.connect(migrated_pg_url) as conn:
        rows = dict(conn.execute("""SELECT "modelId", "status" FROM trained_models WHERE "modelId" LIKE 'improve-%:merged'""").fetchall())
        gate = conn.execute("""SELECT "evalMetrics"->'gate'->>'against' FROM trained_models WHERE "modelId" = 'improve-001:merged'""").fetchone()[0]
        played = conn.execute("""SELECT DISTINCT model FROM llm_call_logs WHERE model LIKE 'runs/improve-000%'""").fetchall()
    assert rows == {"improve-000:merged": "archived", "improve-001:merged": "deployed"}
    assert gate == first.candidate
    assert played == [("runs/improve-000/merged",)]  # the promoted candidate played iteration 1


def test_a_second_loop_in_the_same_home_is_refused(home, run_cli):
    from babylon_rl import locks

    with locks.exclusive(home / "improve" / ".lock", 0):
        result = run_cli("improve", "--iterations", "1", *SMALL)
    assert result.exit_code == 2 and "another improve loop is running in this home" in result.output
    assert not (home / "improve" / "state.json").exists()


# -- made-up stages: the loop's own logic in no time -------------------------------------
class _Clock:
    """Stands in for the time module in babylon_rl/improve.py: sleeping moves the clock on, and each stage takes `stage_seconds`."""

    def __init__(self, stage_seconds: float = 0.0, stop_after_sleeps: int | None = None) -> None:
        self.now, self.stage_seconds, self.stop_after_sleeps = 1000.0, stage_seconds, stop_after_sleeps
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if self.stop_after_sleeps is not None and len(self.sleeps) >= self.stop_after_sleeps:
            raise KeyboardInterrupt  # Ctrl-C while the loop waits for the next iteration
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def made_up(monkeypatch):
    """Every stage only records made-up figures (and takes the clock's stage_seconds); returns the clock and the stages run."""
    clock, ran = _Clock(), []

    def stage(ctx, options, state, name):
        assert state.current.iteration < 20, "the loop did not stop"  # rather than hang when pacing breaks
        ran.append((state.current.iteration, name))
        clock.now += clock.stage_seconds
        record_stage(state.current, name)

    monkeypatch.setattr(improve, "_run_stage", stage)
    monkeypatch.setattr(improve, "time", clock)
    return clock, ran


def test_each_iteration_writes_the_report_of_the_loop_so_far(home, run_cli, made_up):
    result = run_cli("improve", "--iterations", "2", *SMALL)
    assert result.exit_code == 0, result.output
    report = home / "improve" / "report.html"
    assert result.output.count(f"wrote {report}") == 2  # after each iteration's gate
    text = report.read_text()
    assert text.count("<svg") == 2 and '<table id="iterations">' in text
    assert "<td>1</td><td>tiny</td><td>runs/improve-001/merged</td><td>kept the champion</td>" in text
    assert "<b>Verdict.</b> The policy agents&#x27; mean window P&amp;L went from +0.00 [-4.00, +4.00] in iteration 0" in text
    assert _state(home)["iterations"][1]["gate"]["candidate"]["direction_accuracy"]["value"] == 0.4


def test_every_starts_an_iteration_every_so_many_minutes_and_stops_after_iterations(home, run_cli, made_up):
    clock, _ = made_up
    result = run_cli("improve", "--iterations", "2", "--every", "1", *SMALL)
    assert result.exit_code == 0, result.output
    assert clock.sleeps == [60.0]  # between the two, none after the last
    assert "iteration 1 starts at" in result.output and len(_state(home)["iterations"]) == 2

    clock.stage_seconds, clock.sleeps = 20.0, []  # an iteration of 100 s ran over the minute: the next starts at once
    result = run_cli("improve", "--iterations", "4", "--every", "1", *SMALL)
    assert result.exit_code == 0, result.output
    assert clock.sleeps == [] and len(_state(home)["iterations"]) == 4

    clock.stage_seconds = 6.0  # 30 s an iteration: each waits the other 30 s
    result = run_cli("improve", "--iterations", "6", "--every", "1", *SMALL)
    assert result.exit_code == 0, result.output
    assert clock.sleeps == [30.0]


def test_every_alone_runs_until_interrupted_and_leaves_the_state_at_an_iteration_boundary(home, run_cli, made_up):
    clock, _ = made_up
    clock.stop_after_sleeps = 2
    result = run_cli("improve", "--every", "0.5", *SMALL)
    assert result.exit_code == 130 and "stopped before iteration 3 began: 3 done, the same command goes on" in result.output
    state = _state(home)
    assert len(state["iterations"]) == 3 and state["done"] == list(improve.STAGES)  # no 4th begun while it waited
    assert clock.sleeps == [30.0, 30.0]


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupt_inside_a_stage_resumes_at_that_stage(home, run_cli, made_up, monkeypatch, how):
    clock, ran = made_up
    record = improve._run_stage

    def interrupted_in_train(ctx, options, state, name):  # before the stage records anything
        if name == "train":
            if how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler raises in here
            raise KeyboardInterrupt
        record(ctx, options, state, name)

    monkeypatch.setattr(improve, "_run_stage", interrupted_in_train)
    result = run_cli("improve", "--iterations", "1", *SMALL)
    assert result.exit_code == 130
    assert "stopped in iteration 0's train: the same command resumes at that stage" in result.output
    assert _state(home)["done"] == ["play", "build", "dataset"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # given back

    monkeypatch.setattr(improve, "_run_stage", record)
    ran.clear()
    result = run_cli("improve", "--iterations", "1", *SMALL)
    assert result.exit_code == 0, result.output
    assert ran == [(0, "train"), (0, "gate")] and _state(home)["done"] == list(improve.STAGES)


@pytest.mark.parametrize("every", ["0", "-5", "nan", "inf"])
def test_a_pace_that_is_no_positive_number_of_minutes_is_refused_in_one_line(home, run_cli, every):
    result = run_cli("improve", "--every", every, *SMALL)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"Error: --every must be a positive number of minutes, not {float(every):g}"]
    assert not (home / "improve").exists()
