"""`cli.py eval`: action parser, scoring on hand-made ground truth, bootstrap, local model and endpoint, errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from babylon_rl.evaluate import GroundTruth, parse_action, read_observation, score_action
from babylon_rl.evaluate.actions import Action
from babylon_rl.evaluate.constant import best_constant
from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.decision_points import load_eval_set, load_train_decisions
from babylon_rl.evaluate.decision_points import decision_points
from babylon_rl.settings import Home
from babylon_rl.evaluate.stats import ratio_interval, resample_indices
from tests.eval_factory import ANSWERS, contexts_row, observation, write_eval_dataset, write_news_dataset
from tests.judge_server import JudgeServer
from tests.train_support import build_template, install


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("eval-template"))


def _truth() -> GroundTruth:
    row = contexts_row("2025-01-15T00:00", None)
    return GroundTruth.from_json(row["window_id"], row["stocks_json"], row["prediction_markets_json"])


# -- parser ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ('{"action": "buy", "ticker": "acme", "shares": 10}', Action("buy", ticker="ACME", shares=10)),
    ('Sure! ```json\n{"action": "sell", "ticker": "BOLT", "shares": "5"}\n```', Action("sell", ticker="BOLT", shares=5)),
    ('{"action": "bet", "market": "pm-1", "side": "yes", "amount": 12.5}', Action("bet", market="pm-1", side="YES", amount=12.5)),
    ('{"action": "HOLD"}', Action("hold")),
    ('{"note": 1} then {"action": "hold"}', Action("hold")),
])
def test_parse_valid_actions(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("text", [
    "", None, "I think the market looks interesting right now, maybe buy something.", "{not json",
    '{"action": "buy", "ticker": "ACME"}', '{"action": "buy", "ticker": "ACME", "shares": 0}',
    '{"action": "buy", "ticker": "ACME", "shares": 2.5}', '{"action": "buy", "ticker": "ACME", "shares": true}',
    '{"action": "bet", "market": "pm-1", "side": "MAYBE", "amount": 5}', '{"action": "short", "ticker": "ACME"}',
    '{"action": "buy", "ticker": 7, "shares": 1}', "\x00\xff{{{{", '{"action": "sell", "ticker": "ACME", "shares": NaN}',
])
def test_parse_garbage_is_invalid(text):
    assert parse_action(text) is None


# -- scoring ----------------------------------------------------------------------------------
def test_direction_and_counterfactual_pnl():
    obs, truth = read_observation(observation(5)), _truth()
    assert obs.prices == {"ACME": 101.0, "BOLT": 50.0} and obs.probabilities == {"pm-1": 0.5} and obs.cash == 10_000.0
    buy = score_action(parse_action(ANSWERS[0]), obs, truth)
    assert (buy.valid, buy.correct, buy.pnl) == (True, True, 10.0)  # 10 * (102 - 101)
    sell = score_action(parse_action(ANSWERS[1]), obs, truth)
    assert (sell.correct, sell.pnl) == (True, 10.0)  # 10 * (50 - 49)
    bet = score_action(parse_action(ANSWERS[2]), obs, truth)
    assert (bet.correct, bet.pnl) == (True, 50.0)  # 50 * (1 - 0.5) / 0.5
    lost = score_action(Action("bet", market="pm-1", side="NO", amount=50), obs, truth)
    assert (lost.correct, lost.pnl) == (False, -50.0)
    assert score_action(Action("hold"), obs, truth).correct is False  # both stocks moved > 0.5 %
    wrong = score_action(Action("buy", ticker="BOLT", shares=10), obs, truth)
    assert (wrong.correct, wrong.pnl) == (False, -10.0)
    assert score_action(Action("buy", ticker="NOPE", shares=1), obs, truth).valid is False
    assert score_action(None, obs, truth).kind == "invalid"


def test_price_fallback_threshold_and_the_games_rules():
    truth = GroundTruth.from_json("w", json.dumps([{"ticker": "ACME", "start_price": 100.0, "end_price": 100.3}]), "[]")
    unreadable = read_observation("no prices here")
    assert score_action(Action("hold"), unreadable, truth).correct is True  # 0.3 % from the start price
    assert score_action(Action("buy", ticker="ACME", shares=1), unreadable, truth).correct is False
    capped = score_action(Action("buy", ticker="ACME", shares=10**9), unreadable, truth, game_rules=True)
    assert capped.pnl == pytest.approx(100 * 0.3)  # the cash not shown: floor(STARTING_CASH / 100) shares
    shown = read_observation("Your portfolio: cash $1,000.00; positions: ACME 7 @ $99.00; open bets: none; P&L so far $+0.00.")
    assert shown.holdings == {"ACME": 7}
    assert score_action(Action("buy", ticker="ACME", shares=10), shown, truth, game_rules=True).pnl == pytest.approx(10 * 0.3)
    assert score_action(Action("buy", ticker="ACME", shares=11), shown, truth, game_rules=True).kind == "invalid"  # $1,100
    assert score_action(Action("sell", ticker="ACME", shares=7), shown, truth, game_rules=True).pnl == pytest.approx(-7 * 0.3)
    assert score_action(Action("sell", ticker="ACME", shares=8), shown, truth, game_rules=True).kind == "invalid"  # 7 held
    nothing = read_observation("Your portfolio: cash $1,000.00; positions: none; open bets: none; P&L so far $+0.00.")
    assert nothing.holdings == {} and not score_action(Action("sell", ticker="ACME", shares=1), nothing, truth, game_rules=True).valid
    # without the rules (training prices valid menus only): the cash caps a buy, a sell is priced as it would pay
    assert score_action(Action("buy", ticker="ACME", shares=11), shown, truth).pnl == pytest.approx(10 * 0.3)
    assert score_action(Action("sell", ticker="ACME", shares=8), shown, truth).pnl == pytest.approx(-8 * 0.3)


def test_decision_points_skip_reasoning_turns():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Think it through."},
                {"role": "assistant", "content": "Bullish news."}, {"role": "user", "content": "Answer with one JSON action."},
                {"role": "assistant", "content": "garbage"}, {"role": "user", "content": "next"},
                {"role": "assistant", "content": '{"action": "hold"}'}]
    points = decision_points("w", "t", "a", messages)
    assert [p.turn for p in points] == [4, 6]
    assert points[0].prompt == tuple(messages[:4]) and points[0].logged_answer == "garbage"


def test_bootstrap_is_deterministic_for_a_seed():
    num, den = np.array([1, 5, 3, 0, 2.0]), np.array([4, 6, 5, 3, 4.0])
    a = ratio_interval(num, den, resample_indices(5, 500, seed=3))
    b = ratio_interval(num, den, resample_indices(5, 500, seed=3))
    c = ratio_interval(num, den, resample_indices(5, 500, seed=4))
    assert a == b and a != c
    assert a.value == pytest.approx(11 / 22) and a.low <= a.value <= a.high


# -- end to end -------------------------------------------------------------------------------
def test_eval_local_model_path(template, home, run_cli):
    h = install(template, home)
    write_eval_dataset(home)
    model = h.models / "tiny"
    result = run_cli("eval", "--model", str(model), "--dataset", "ev", "--baseline", "none", "--resamples", "200")
    assert result.exit_code == 0, result.output
    report = json.loads((home / "evals" / "tiny-ev" / "eval.json").read_text())
    logged = next(p for p in report["policies"] if p["role"] == "logged")
    assert report["windows"] == 3 and report["decisions"] == 24
    assert logged["metrics"]["direction_accuracy"]["value"] == pytest.approx(0.75)  # buy, sell, bet right; hold wrong
    assert logged["metrics"]["valid_rate"]["value"] == 1.0
    assert [p["role"] for p in report["policies"]] == ["logged", "model"]
    assert (home / "evals" / "tiny-ev" / "eval.csv").read_text().startswith("policy,role,model")
    assert "precision" in result.output and "valid" in result.output


def test_eval_endpoint_counts_garbage_as_invalid(home, run_cli):
    write_eval_dataset(home)
    answers = iter(["not an action", '{"action": "buy", "ticker": "ACME", "shares": 3}'] * 100)
    with JudgeServer() as server:
        server.reply = lambda body: next(answers)
        result = run_cli("eval", "--model", "policy-x", "--base-url", server.base_url, "--dataset", "ev", "--resamples", "200")
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 24
        assert server.requests[0]["body"]["messages"][0]["role"] == "system"
        assert server.requests[0]["body"]["temperature"] == 0
    report = json.loads((home / "evals" / "policy-x-ev" / "eval.json").read_text())
    model = next(p for p in report["policies"] if p["role"] == "model")
    assert model["metrics"]["valid_rate"]["value"] == pytest.approx(0.5)
    assert model["action_shares"]["invalid"] == pytest.approx(0.5)


def test_eval_errors_exit_2(template, home, run_cli):
    h = install(template, home)
    write_eval_dataset(home, name="empty", eval_windows=False)
    result = run_cli("eval", "--model", "tiny", "--dataset", "empty")
    assert result.exit_code == 2 and "no eval windows" in result.output
    write_eval_dataset(home)
    bare = home / "bare"
    shutil.copytree(h.models / "tiny", bare)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json"):
        (bare / name).unlink(missing_ok=True)
    result = run_cli("eval", "--model", str(bare), "--dataset", "ev")
    assert result.exit_code == 2 and "has no tokenizer" in result.output
    with JudgeServer() as server:
        server.mode = "500"
        result = run_cli("eval", "--model", "m", "--base-url", server.base_url, "--dataset", "ev", "--concurrency", "16")
    assert result.exit_code == 2 and "every request" in result.output


# -- the learning check: the best constant action --------------------------------------------
def test_best_constant_is_chosen_on_the_training_windows(home):
    path = write_news_dataset(home)  # train: ACME rises in 6 of 8 windows; eval: in half of them
    dataset = Dataset.open(Home.resolve(home), "news")
    assert dataset.path == path.resolve()
    eval_set = load_eval_set(dataset)
    chosen_on = load_train_decisions(dataset)
    train = chosen_on.decisions
    assert len(train) == 16 and not {d.window_id for d in train} & set(eval_set.windows)
    assert not set(chosen_on.truths) & set(eval_set.windows)  # the eval windows' ground truth is not even read
    choice = best_constant(train, chosen_on.truths, 0.5)
    assert parse_action(choice.answer) == Action("buy", ticker="ACME", shares=10)
    assert choice.train_accuracy == pytest.approx(0.75)


def _reader(body: dict) -> str:
    """A policy that reads the headline; under the name `hold-model`, one that always holds."""
    if body["model"] == "hold-model":
        return '{"action": "hold"}'
    kind = "buy" if "beats" in body["messages"][-1]["content"] else "sell"
    return json.dumps({"action": kind, "ticker": "ACME", "shares": 5})


@pytest.mark.parametrize("policy, shown", [("reader", True), ("constant", False)])
def test_learning_is_shown_only_by_a_policy_that_reads_the_observation(home, run_cli, policy, shown):
    write_news_dataset(home)
    constant = '{"action": "buy", "ticker": "ACME", "shares": 5}'
    with JudgeServer() as server:
        server.reply = lambda body: _reader(body) if policy == "reader" or body["model"] == "hold-model" else constant
        result = run_cli("eval", "--model", policy, "--base-url", server.base_url, "--baseline", "hold-model",
                         "--dataset", "news", "--resamples", "500")
    assert result.exit_code == 0, result.output
    report = json.loads((home / "evals" / f"{policy}-news" / "eval.json").read_text())
    roles = {p["role"]: p for p in report["policies"]}
    assert list(roles) == ["logged", "constant", "reader", "baseline", "model"]
    assert roles["constant"]["metrics"]["direction_accuracy"]["value"] == pytest.approx(0.5)
    assert roles["model"]["metrics"]["direction_accuracy"]["value"] == pytest.approx(1.0 if shown else 0.5)
    # both are more often right than "always hold"; only the reader also makes money beyond the interval
    assert report["comparison"]["baseline"]["direction_accuracy_diff"]["low"] > 0
    assert report["comparison"]["baseline"]["beats_outside_interval"] is shown
    assert report["comparison"]["constant"]["beats_outside_interval"] is shown
    assert report["learning_shown"] is shown
    assert ("learning shown" if shown else "learning NOT shown") in result.output
    # the news rule is shown beside them, never a reference the model must beat (the reader ties it: learning still shown)
    assert roles["reader"]["metrics"]["direction_accuracy"]["value"] == pytest.approx(1.0)
    assert not report["comparison"]["reader"]["beats_outside_interval"]
    assert report["design_check"]["beats_outside_interval"] is True
    assert "this evaluation can recognise a policy that reads the news" in result.output
    # --baseline named another model than the trained one's base: the report says which, never "its base model"
    assert report["named_baseline"] == "hold-model"
    assert f"model {'BEATS' if shown else 'does NOT beat'} the baseline hold-model:" in result.output
    assert "its base" not in result.output


def test_a_reader_whose_answers_the_game_cannot_always_act_on_has_not_shown_learning(home, run_cli):
    """It reads the headlines and beats every reference, but one answer in eight is no action: under 95 % valid."""
    write_news_dataset(home)
    asked = iter(range(10_000))

    def reply(body: dict) -> str:
        if body["model"] == "hold-model":
            return '{"action": "hold"}'
        return "I would buy, probably" if next(asked) % 8 == 0 else _reader(body)

    with JudgeServer() as server:
        server.reply = reply
        result = run_cli("eval", "--model", "sloppy", "--base-url", server.base_url, "--baseline", "hold-model",
                         "--dataset", "news", "--resamples", "500")
    assert result.exit_code == 0, result.output
    report = json.loads((home / "evals" / "sloppy-news" / "eval.json").read_text())
    model = next(p for p in report["policies"] if p["role"] == "model")
    assert model["metrics"]["valid_rate"]["value"] < 0.95
    assert report["comparison"]["baseline"]["beats_outside_interval"] and report["comparison"]["constant"]["beats_outside_interval"]
    assert report["learning_shown"] is False
    assert "learning NOT shown (under 95% of its answers were valid actions)" in result.output
    assert "valid" in result.output  # the table's column


def test_the_logged_agents_answer_every_held_out_decision_and_stay_paired_by_window(home, run_cli):
    """With --max-decisions-per-window the models answer a sample, but the logged agents (priced without a model) count
    every held-out decision of the same windows: their heavy tail is averaged over all of them, and the comparison is
    the difference of the two means over the same resampled windows."""
    write_eval_dataset(home)  # 3 windows x 4 agents x 2 decisions
    with JudgeServer() as server:
        server.reply = lambda body: '{"action": "buy", "ticker": "ACME", "shares": 3}'
        result = run_cli("eval", "--model", "policy-x", "--base-url", server.base_url, "--dataset", "ev", "--resamples", "200",
                         "--max-decisions-per-window", "1")
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 3
    report = json.loads((home / "evals" / "policy-x-ev" / "eval.json").read_text())
    roles = {p["role"]: p for p in report["policies"]}
    assert report["decisions"] == 3 and roles["model"]["decisions"] == 3 and roles["logged"]["decisions"] == 24
    model_pnl, logged_pnl = (roles[r]["metrics"]["pnl_per_decision"]["value"] for r in ("model", "logged"))
    assert report["comparison"]["logged"]["pnl_per_decision_diff"]["value"] == pytest.approx(model_pnl - logged_pnl)


def test_a_reference_on_every_decision_of_the_windows_narrows_a_heavy_tailed_comparison():
    """One agent's bet paying thousands lands in a one-decision-a-window sample or not, and swings its mean; over every
    decision of each window the same reference's interval is several times narrower, still paired by window."""
    import numpy as np

    from babylon_rl.evaluate.decision_points import Decision, EvalSet
    from babylon_rl.evaluate.run import EvalOptions, PolicyResult, compare_results
    from babylon_rl.evaluate.scoring import Outcome

    rng = np.random.default_rng(1)
    windows = [f"2025-01-{1 + i // 24:02d}T{i % 24:02d}:00" for i in range(200)]
    every = EvalSet("d", [Decision(w, f"t{w}{k}", f"a{k}", 0, (), "") for w in windows for k in range(20)], {})
    sample = every.sample(1, 0)
    logged_pnl = {d.trajectory_id: (5000.0 if rng.random() < 0.01 else rng.normal(5, 20)) for d in every.decisions}

    def logged(decisions: EvalSet, own: bool) -> PolicyResult:
        outcomes = [Outcome(True, True, logged_pnl[d.trajectory_id], "buy") for d in decisions.decisions]
        return PolicyResult("logged agents", "logged", "logged", outcomes, decisions=decisions if own else None)

    model = PolicyResult("m", "model", "m", [Outcome(True, True, 30.0, "buy") for _ in sample.decisions])
    options = EvalOptions(model="m", dataset="d", resamples=500)
    widths = {}
    for own in (False, True):
        comparison, _ = compare_results([logged(every if own else sample, own), model], sample, options)
        diff = comparison["logged"]["pnl_per_decision_diff"]
        widths[own] = diff["high"] - diff["low"]
        mean = np.mean([logged_pnl[d.trajectory_id] for d in (every if own else sample).decisions])
        assert diff["value"] == pytest.approx(30.0 - mean)
    assert widths[True] < widths[False] / 2


def test_the_claim_reads_trade_precision_so_holding_is_not_punished():
    """A policy that holds on half its decisions and trades well beats an always-trading constant on P&L and trade
    precision, though direction accuracy (a hold is right only when nothing moves) cannot tell them apart; against a
    reference that never trades, precision cannot be estimated and P&L alone decides."""
    import numpy as np

    from babylon_rl.evaluate.decision_points import Decision, EvalSet
    from babylon_rl.evaluate.run import EvalOptions, PolicyResult, compare_results
    from babylon_rl.evaluate.scoring import Outcome

    rng = np.random.default_rng(0)
    windows = [f"2025-01-{1 + i // 24:02d}T{i % 24:02d}:00" for i in range(80)]
    decisions = [Decision(w, f"t{w}{k}", "a", k, (), "") for w in windows for k in range(2)]
    eval_set = EvalSet("d", decisions, {})

    def trade(p_right: float) -> Outcome:
        right = bool(rng.random() < p_right)
        return Outcome(True, right, 50.0 if right else -50.0, "buy")

    hold = Outcome(True, False, 0.0, "hold")
    reader = PolicyResult("reader", "model", "m", [hold if k == 0 else trade(0.75) for _ in windows for k in range(2)])
    constant = PolicyResult("constant", "constant", "c", [trade(0.35) for _ in decisions])
    holder = PolicyResult("holder", "baseline", "b", [hold for _ in decisions])
    comparison, _ = compare_results([constant, holder, reader], eval_set, EvalOptions(model="m", dataset="d", resamples=500))
    assert reader.metrics["trade_share"].value == pytest.approx(0.5)
    assert reader.metrics["trade_precision"].value > 0.65 and constant.metrics["trade_precision"].value < 0.45
    assert abs(reader.metrics["direction_accuracy"].value - constant.metrics["direction_accuracy"].value) < 0.1
    assert comparison["constant"]["beats_outside_interval"] and comparison["constant"]["precision_estimable"]
    assert comparison["constant"]["trade_precision_diff"]["low"] > 0
    assert not comparison["baseline"]["precision_estimable"] and comparison["baseline"]["reference_trades"] == 0
    assert comparison["baseline"]["beats_outside_interval"]  # P&L alone

