"""The one decision path (babylon_rl/evaluate/decide.py, evaluate/menu.py): a model's decision is always an action the
game accepts, in eval, arena, `simulate --policy` and `serve` alike."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.menu import HOLD_ANSWER, read_portfolio, valid_menu
from babylon_rl.evaluate.policies import Reply
from babylon_rl.evaluate.prompts import decision_prompt
from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.window import simulate_window
from babylon_rl.warehouse import RAW_BY_NAME
from tests.train_support import build_template, install

START = datetime(2025, 1, 15, 10)
TRAJECTORY = RAW_BY_NAME["trajectories"].column_names
OBSERVATION = ("It is 10:12 UTC; window 2025-01-15T10:00 closes in 48 min.\nPrices:\n"
               "  ACME $196.40 (-0.20% since your last look)\n  CRUX $28.10 (-0.40% since your last look)\n"
               "  EVRG $127.90 (+0.30% since your last look)\nNews so far this window:\n"
               "  [10:08] CRUX: Regulators open a probe into Crux Biotech\n"
               "Your portfolio: cash {cash}; positions: {positions}; open bets: none; P&L so far $+22.00.\nWhat do you do?")


def _prompt(cash: str = "$3,650.00", positions: str = "EVRG 50 @ $127.00, CRUX 7 @ $30.00"):
    return decision_prompt(OBSERVATION.format(cash=cash, positions=positions))


def _trade(kind: str, ticker: str, shares: int) -> str:
    return json.dumps({"action": kind, "ticker": ticker, "shares": shares})


def _policy_steps(rows) -> list[dict]:
    steps = []
    for row in rows.trajectories:
        record = dict(zip(TRAJECTORY, row))
        if record["agentId"].startswith("sim-policy-"):
            steps += [step["action"] for step in json.loads(record["stepsJson"])]
    return steps


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("decide-template"))


def test_the_menu_is_read_from_what_the_agent_saw():
    """Buys the cash covers (a share taken to cost a dollar more than its compact price shows), sells of what is held."""
    assert read_portfolio(_prompt().messages[1]["content"]).holdings == {"EVRG": 50, "CRUX": 7}
    assert valid_menu(_prompt(), 50) == [
        HOLD_ANSWER, _trade("buy", "ACME", 18), _trade("buy", "CRUX", 50), _trade("buy", "EVRG", 28),
        _trade("sell", "CRUX", 7), _trade("sell", "EVRG", 50)]
    assert valid_menu(_prompt(), 5)[1:4] == [_trade("buy", t, 5) for t in ("ACME", "CRUX", "EVRG")]
    assert valid_menu(_prompt(cash="$12.00", positions="none"), 50) == [HOLD_ANSWER]  # nothing to buy or sell
    unread = decision_prompt(OBSERVATION.format(cash="$1.00", positions="none").replace("Your portfolio", "Holdings"))
    assert len(valid_menu(unread, 50)) == 7  # no portfolio in the game's layout: every trade of every listed stock


class MenuPicker:
    """Answers each prompt with a random entry of its valid menu."""

    def __init__(self, shares: int, seed: int) -> None:
        self.shares, self.rng = shares, np.random.default_rng(seed)
        self.menus: list[list[str]] = []

    def replies(self, prompts):
        menus = [valid_menu(p, self.shares) for p in prompts]
        self.menus += menus
        return [Reply(menu[self.rng.integers(len(menu))], 100, 10, 5) for menu in menus]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), shares=st.integers(1, 120))
def test_every_menu_entry_is_an_action_the_game_accepts(seed, shares):
    """The simulator executes answers under the game's rules (cash for a buy, shares for a sell): every entry of every
    menu, picked at random while the portfolios change, is accepted."""
    picker = MenuPicker(shares, seed)
    config = SimulationConfig(agents=2, windows=1, steps_per_window=8, seed=seed, start=START, policy_agents=3,
                              policy_model="models/picker").validate()
    steps = _policy_steps(simulate_window(config, START, picker))
    assert len(steps) == 24 and all(step["success"] for step in steps), [s for s in steps if not s["success"]]
    assert any(parse_action(a).kind == "sell" for menu in picker.menus for a in menu)  # sells appear once shares are held


def test_a_hold_only_menu_is_answered_without_a_model_call(template, tmp_path):
    from babylon_rl.evaluate.policies import LocalPolicy
    from babylon_rl.model_names import resolve

    policy = LocalPolicy(resolve(install(template, tmp_path), "tiny"), "tiny").load()
    policy._decider.split = None  # any model call would fail
    reply = policy.replies([_prompt(cash="$12.00", positions="none")])[0]
    assert (reply.text, reply.prompt_tokens) == (HOLD_ANSWER, 0)  # no prompt was run


def test_a_model_that_cannot_write_an_action_still_plays_only_valid_ones(template, tmp_path):
    """A model of random weights writes no action the game could parse; deciding from the menu, every one of its
    decisions is accepted (it holds: no trade stands out to it). The warm-started tiny model trades, and every one of
    its trades is accepted too."""
    from babylon_rl.evaluate.policies import LocalPolicy
    from babylon_rl.model_names import resolve
    from babylon_rl.simulate.policy_play import open_player
    from babylon_rl.train.models import load_tokenizer
    from babylon_rl.train.tiny import TinySpec, build_model

    home = install(template, tmp_path)
    scrambled = home.models / "scrambled"
    tokenizer = load_tokenizer(str(home.models / "tiny"))
    build_model(tokenizer, TinySpec(seed=3)).save_pretrained(scrambled)
    tokenizer.save_pretrained(scrambled)
    config = SimulationConfig(agents=2, windows=1, steps_per_window=6, seed=11, start=START, policy_agents=3,
                              policy_model="(set below)").validate()

    def played(model: str) -> list[dict]:
        player, model_id = open_player(home, model, None, "cpu", 3)
        return _policy_steps(simulate_window(replace(config, policy_model=model_id), START, player))

    for model in ("scrambled", "tiny"):
        steps = played(model)
        assert len(steps) == 18 and all(step["success"] for step in steps), model
    assert {"BUY_SHARES", "SELL_SHARES"} & {step["actionName"] for step in steps}  # tiny's trades, accepted

    writer = LocalPolicy(resolve(home, "scrambled"), "scrambled").load()
    written = writer.generate([_prompt(), _prompt(cash="$9,000.00", positions="none")])
    assert not any(parse_action(text) for text in written)  # what the old path (free writing) would have played
