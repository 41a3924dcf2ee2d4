"""Agent standing (`cli.py agents`, babylon_rl/standing.py) and the teachers distillation chooses from it."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from babylon_rl.errors import DatasetError
from babylon_rl.standing import standing


def _windows(values: dict[str, list[float]]) -> pl.DataFrame:
    """(window, agent) rows: agent -> its P&L in windows 0, 1, ..."""
    return pl.DataFrame([{"window_id": f"2025-01-01T{i:02d}:00" if i < 24 else f"2025-01-02T{i - 24:02d}:00", "agent_id": agent,
                          "pnl": pnl, "decisions": 3} for agent, pnls in values.items() for i, pnl in enumerate(pnls)])


def test_one_heavy_loser_lifts_nobody_above_the_median():
    """Against the window's mean, a heavy loser would put every other agent "above"; against the median, only the agent
    that really earns more stands out."""
    rng = np.random.default_rng(0)
    n = 48
    agents = {f"a{i}": list(rng.normal(0, 5, n)) for i in range(6)}
    agents["good"] = list(rng.normal(20, 5, n))
    agents["loser"] = list(rng.normal(-400, 50, n))
    result = standing(_windows(agents), "synthetic", resamples=1000)
    assert [a.agent_id for a in result.above] == ["good"]
    assert result.get("loser").standing == "below"
    assert all(result.get(f"a{i}").standing == "within" for i in range(6))
    assert result.get("good").pnl_per_decision == pytest.approx(result.get("good").pnl_per_window / 3)
    # the interval is corrected for the 8 agents compared
    assert result.corrected_level == pytest.approx(1 - 0.05 / 8)


def test_the_corrected_interval_is_wider_and_the_same_for_a_seed():
    rng = np.random.default_rng(1)
    agents = {f"a{i}": list(rng.normal(0, 10, 30)) for i in range(10)}
    few = standing(_windows({k: agents[k] for k in ("a0", "a1")}), "two", resamples=2000)
    many = standing(_windows(agents), "ten", resamples=2000)
    width = lambda r: r.get("a0").vs_peers.high - r.get("a0").vs_peers.low  # noqa: E731
    assert width(many) > width(few)
    assert standing(_windows(agents), "ten", resamples=2000).to_dict() == many.to_dict()


def test_nothing_to_rank_is_one_line():
    with pytest.raises(DatasetError, match="no windows with agents"):
        standing(pl.DataFrame(schema={"window_id": pl.Utf8, "agent_id": pl.Utf8, "pnl": pl.Float64, "decisions": pl.Int64}), "empty")
    with pytest.raises(DatasetError, match="no window with two or more agents"):
        standing(_windows({"alone": [1.0, 2.0]}), "alone")


@pytest.fixture(scope="module")
def market(tmp_path_factory):
    """A simulated game (the production schema's agent ids, no persona anywhere) with its marts and a dataset."""
    from click.testing import CliRunner

    from cli import cli

    home = tmp_path_factory.mktemp("standing") / "home"
    for args in (("simulate", "--agents", "10", "--windows", "120", "--steps-per-window", "3", "--seed", "0",
                  "--start", "2025-01-01T00:00", "--dirt-rate", "0"), ("build",),
                 ("dataset", "build", "--name", "d", "--lookback-hours", "121", "--min-actions", "3", "--max-group-size", "10",
                  "--target-trajectories", "100000", "--validation-fraction", "0.2", "--eval-fraction", "0.2")):
        result = CliRunner().invoke(cli, ["--home", str(home), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return home


def _agents(home, *args: str):
    from click.testing import CliRunner

    from cli import cli

    return CliRunner().invoke(cli, ["--home", str(home), "agents", *args])


def test_agents_ranks_the_marts_and_a_dataset_split(market):
    result = _agents(market, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["windows"] == 120 and len(report["agents"]) == 10
    assert report["corrected_level"] == pytest.approx(0.995)
    assert all(a["agent_id"].startswith("sim-agent-") and "persona" not in a for a in report["agents"])
    above = [a for a in report["agents"] if a["standing"] == "above"]
    assert above and all(a["vs_peers"]["low"] > 0 for a in above)
    values = [a["vs_peers"]["value"] for a in report["agents"]]
    assert values == sorted(values, reverse=True)

    ranged = json.loads(_agents(market, "--since", "2025-01-02T00:00", "--until", "2025-01-03T00:00", "--json").output)
    assert ranged["windows"] == 24 and ranged["first_window"] == "2025-01-02T00:00" and ranged["last_window"] == "2025-01-02T23:00"

    table = _agents(market, "--dataset", "d", "--split", "train")
    assert table.exit_code == 0, table.output
    assert "the train windows of dataset 'd'" in table.output and "stand above their peers" in table.output
    # one line per agent, readable at 80 columns (CliRunner's terminal)
    assert all(len(line) <= 80 for line in table.output.splitlines() if line.startswith(" sim-agent-"))


def test_agents_errors_are_one_line_and_exit_2(market, tmp_path):
    empty = _agents(market, "--since", "2030-01-01")
    assert empty.exit_code == 2 and "has no windows with agents" in empty.output and "Traceback" not in empty.output
    unknown = _agents(market, "--dataset", "nope")
    assert unknown.exit_code == 2 and "nope" in unknown.output
    nowhere = _agents(tmp_path / "nothing")
    assert nowhere.exit_code == 2 and "no warehouse" in nowhere.output


def test_teachers_are_chosen_on_train_and_checked_on_validation_only(market, monkeypatch):
    """The chosen stand above on train, hold on validation, and trade well: their logged trades are right more often than
    the other agents'. The eval split is never read."""
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.settings import Home
    from babylon_rl.train.decisions import load_decision_data
    from babylon_rl.train.teachers import choose, taught

    dataset = Dataset.open(Home.resolve(str(market)), "d")
    read = []
    original = Dataset.read_split
    monkeypatch.setattr(Dataset, "read_split", lambda self, split, columns=None: read.append(split) or original(self, split, columns))
    teachers = choose(dataset)
    assert set(read) == {"train", "validation"}
    assert teachers.chosen and all(teachers.train.get(a).vs_peers.low > 0 for a in teachers.chosen)
    assert all(teachers.validation.get(a).vs_peers.value > 0 for a in teachers.chosen)
    assert "teachers (" in teachers.line() and teachers.to_dict()["teachers"][0]["train"]["standing"] == "above"

    data = taught(load_decision_data(Home.resolve(str(market)), "d"), teachers)
    assert data.train and {t.agent_id for t in data.train} <= set(teachers.chosen)
    assert set(data.read_ids) > {t.trajectory_id for t in data.train}  # the standing read every train decision

    news = taught(load_decision_data(Home.resolve(str(market)), "d"), teachers, "news")
    assert 0 < len(news.train) < len(data.train) and news.teacher_answers == "news"
    assert news.read_ids == data.read_ids  # the filter read every teacher decision's prompt: all count as read
    from babylon_rl.evaluate.rules import fresh_headlines
    from babylon_rl.evaluate.actions import parse_action

    for task in news.train:
        action, latest = parse_action(task.logged_answer), next(fresh_headlines(task.request), None)
        assert action.kind == "hold" or (action.kind in ("buy", "sell") and action.ticker == latest[0])


def _decision(clock: str, answer: str, headline: str | None = "ACME: Acme Corp beats earnings expectations"):
    """A decision at `clock` (12:MM) of window 12:00 whose only headline came at 12:13, answered `answer`."""
    from babylon_rl.evaluate.prompts import decision_prompt
    from babylon_rl.evaluate.scoring import GroundTruth, Stock, read_observation
    from babylon_rl.train.decisions import Task

    news = f"News so far this window:\n  [12:13] {headline}\n" if headline else "News so far this window: none\n"
    observation = (f"It is {clock} UTC; window 2025-01-01T12:00 closes in 10 min.\nPrices:\n  ACME $223.79 (+0.13% since your "
                   f"last look)\n  BOLT $51.20 (-0.40% since your last look)\n{news}Your portfolio: cash $9,507.17; positions: none; "
                   "open bets: none; P&L so far $+0.00.")
    truth = GroundTruth("2025-01-01T12:00", {"ACME": Stock(220.0, 230.0), "BOLT": Stock(52.0, 50.0)}, {})
    return Task(f"t-{clock}-{answer}", "2025-01-01T12:00", decision_prompt(observation), read_observation(observation), truth,
                answer, "a1")


@pytest.mark.parametrize("clock, answer, follows", [
    ("12:23", '{"action": "buy", "ticker": "ACME", "shares": 10}', True),  # the fresh headline's stock, either way
    ("12:23", '{"action": "sell", "ticker": "ACME", "shares": 10}', True),
    ("12:23", '{"action": "buy", "ticker": "BOLT", "shares": 10}', False),  # another stock than the news names
    ("12:23", '{"action": "hold"}', True),  # a hold beside fresh news: the headline was not worth a trade to them
    ("12:50", '{"action": "hold"}', True),  # 37 minutes on: no fresh headline, the hold is taught
    ("12:50", '{"action": "buy", "ticker": "ACME", "shares": 10}', False),  # a trade on stale news is not
    ("12:23", "I am not sure", False),
])
def test_news_answers_follow_from_the_prompts_latest_fresh_headline(clock, answer, follows):
    from babylon_rl.train.teachers import follows_news

    assert follows_news(_decision(clock, answer)) is follows


def test_news_answers_without_a_trade_that_follows_a_headline_are_refused_in_one_line():
    from babylon_rl.errors import ConfigError
    from babylon_rl.train.decisions import DecisionData
    from babylon_rl.train.teachers import Teachers, taught

    tasks = [_decision("12:50", '{"action": "hold"}'), _decision("12:23", '{"action": "buy", "ticker": "BOLT", "shares": 5}')]
    data = DecisionData("d", None, {}, tasks, [])
    teachers = Teachers("d", None, None, ["a1"], {})
    assert len(taught(data, teachers).train) == 2
    with pytest.raises(ConfigError, match="--teacher-answers all") as refused:
        taught(data, teachers, "news")
    assert "\n" not in str(refused.value)
