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
