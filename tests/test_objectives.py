"""The objectives' registry (train/objectives/): each objective one object, and `train`'s options, help and refusals made
from them."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from babylon_rl.train import objectives
from babylon_rl.train.loop import TrainConfig


def test_every_option_sets_a_config_field_and_every_mutable_knob_has_bounds():
    from babylon_rl.train.population import BOUNDS

    fields = set(TrainConfig.model_fields) | {"judge"}  # the judge scores the dataset first: the context's, not the config's
    assert {o.name for o in objectives.options()} <= fields
    for objective in objectives.REGISTRY.values():
        assert set(objective.mutable) <= set(BOUNDS), objective.name
        assert set(objective.recipe) <= fields, objective.name
        assert objective.mutable or objective.family != "menu", f"{objective.name}: a population trains every menu objective"


def test_the_help_has_a_section_per_objective_with_its_recipes_defaults(run_cli):
    result = run_cli("train", "--help")
    assert result.exit_code == 0
    text = result.output
    assert "Options of every objective:" in text and text.index("Options of every objective:") < text.index("\n--objective grpo:\n")
    positions = [text.index(f"\n--objective {name}:\n") for name in objectives.OBJECTIVES]
    assert positions == sorted(positions)  # the registry's order
    hindsight = text[text.index("\n--objective hindsight:\n"):]
    assert objectives.get("hindsight").help.split()[0] in hindsight and "--hold-weight" in hindsight
    assert f"[default: {objectives.RECIPES['hindsight']['hold_weight']:g}]" in " ".join(hindsight.split())
    distill = " ".join(text[text.index("\n--objective distill:\n"):text.index("\n--objective menu-imitate:\n")].split())
    assert f"[default: {objectives.RECIPES['distill']['hold_weight']:g}]" in distill and "[default: news]" in distill
    assert "distil the agents" not in text and "by default (torch) hindsight" in " ".join(text.split())


GIVEN = {"hold_weight": 0.5, "teacher_answers": "news", "population": 2, "trade_cost": 0.25, "anchor": 0.25}


@pytest.mark.parametrize("option", [o for o in objectives.options() if o.refusal], ids=lambda o: o.name)
def test_an_option_is_refused_in_one_line_by_every_objective_that_does_not_take_it(run_cli, option):
    """One generic check, driven by the objects: each option with a refusal, given to each objective that does not name it."""
    value = GIVEN[option.name]
    for objective in objectives.REGISTRY.values():
        takes = objectives.takes(objective, option.name)
        with nullcontext() if takes else pytest.raises(ValueError):
            TrainConfig(dataset="d", objective=objective.name, **{option.name: value})
        if not takes:
            result = run_cli("train", "--dataset", "nothing", "--objective", objective.name, option.flags[0], str(value))
            assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
            assert result.output.rstrip().endswith(objective.name), result.output


# -- imitate-paid: the objective docs/TRAINING.md#adding-an-objective adds --------------------------------------------
BUY_ACME, BUY_BOLT = '{"action": "buy", "ticker": "ACME", "shares": 50}', '{"action": "buy", "ticker": "BOLT", "shares": 50}'


def _decision(logged: str, trajectory_id: str = "t1"):
    """A decision whose window ACME rose in (220 -> 230) and BOLT fell (52 -> 50), answered `logged`."""
    from babylon_rl.evaluate.prompts import decision_prompt
    from babylon_rl.evaluate.scoring import GroundTruth, Stock, read_observation
    from babylon_rl.train.decisions import Task

    observation = ("It is 12:23 UTC; window 2025-01-01T12:00 closes in 37 min.\nPrices:\n  ACME $223.79 (+0.13% since your last look)\n"
                   "  BOLT $51.20 (-0.40% since your last look)\nNews so far this window:\n  [12:13] ACME: Acme Corp beats earnings "
                   "expectations\nYour portfolio: cash $20,000.00; positions: ACME 50 @ $220.00, BOLT 50 @ $51.00; open bets: none; "
                   "P&L so far $+0.00.")
    truth = GroundTruth("2025-01-01T12:00", {"ACME": Stock(220.0, 230.0), "BOLT": Stock(52.0, 50.0)}, {})
    return Task(trajectory_id, "2025-01-01T12:00", decision_prompt(observation), read_observation(observation), truth, logged)


def test_imitate_paid_fits_the_logged_trade_where_it_paid_and_hold_where_it_lost_or_held(small_llama):
    import numpy as np

    from babylon_rl.train.menu_items import MenuOptions, menu
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.objectives.paid import paid_index

    def target(logged: str) -> str:
        task = _decision(logged)
        answers = menu(task, 50)
        rewards = np.array([task.price(a)[0] for a in answers], dtype=np.float32)
        return answers[paid_index(task, answers, rewards)]

    hold = menu(_decision(BUY_ACME), 50)[0]
    assert target(BUY_ACME) == BUY_ACME  # ACME rose: the trade paid
    assert target(BUY_BOLT) == hold  # BOLT fell: the trade lost
    assert target('{"action": "sell", "ticker": "ACME", "shares": 50}') == hold
    assert target('{"action": "hold"}') == hold
    # through the registry: its recipe (its holds at full weight) and its targets on the trainer's items
    config = TrainConfig(dataset="d", objective="imitate-paid")
    assert (config.train_layers, config.learning_rate, config.max_steps, config.hold_weight) == (1, 3e-3, 192, 1.0)
    trainer = MenuTrainer(str(small_llama), MenuOptions(objective=objectives.MENU_OBJECTIVES["imitate-paid"], train_layers=1, variants=0))
    items = trainer.items_for([_decision(BUY_ACME), _decision(BUY_BOLT, "t2")], 0)
    assert [item.answers[item.target_index] for item in items] == [BUY_ACME, hold]
