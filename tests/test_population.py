"""Population training (train/population.py): members over one set of frozen states, evolved on validation only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from babylon_rl.settings import Home
from babylon_rl.train.menu_items import MenuOptions
from babylon_rl.train.loop import StepHooks, TrainConfig, train
from babylon_rl.train.population import BOUNDS, Hyper, PopulationOptions, PopulationTrainer, _carried
from tests.test_learning import _menu_task

WORLD = (("simulate", "--agents", "10", "--windows", "120", "--steps-per-window", "3", "--seed", "0", "--start", "2025-01-01T00:00",
          "--dirt-rate", "0"),
         ("build",),
         ("dataset", "build", "--name", "d", "--lookback-hours", "121", "--min-actions", "3", "--max-group-size", "10",
          "--target-trajectories", "100000", "--validation-fraction", "0.2", "--eval-fraction", "0.2"))


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A home with the simulated world's dataset `d` (train, validation and eval windows), built once for the module."""
    from cli import cli

    home = tmp_path_factory.mktemp("population-home")
    for args in WORLD:
        result = CliRunner().invoke(cli, ["--home", str(home), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    return home


def _cli(home: Path, *args: str):
    from cli import cli

    return CliRunner().invoke(cli, ["--home", str(home), *args], catch_exceptions=False)


def _trainer(small_llama: Path, size: int = 3, **population) -> PopulationTrainer:
    options = MenuOptions(train_layers=1, learning_rate=1e-2, variants=0, seed=1)
    return PopulationTrainer(str(small_llama), options, PopulationOptions(size, 2, "menu", **population), 2)


TASKS = [_menu_task("ACME: Acme Corp beats earnings expectations"), _menu_task("ACME: Acme Corp misses, shares slide")]


def test_an_evolution_keeps_the_elite_unmutated_and_fills_the_other_places_with_mutated_winners(small_llama):
    import torch

    trainer = _trainer(small_llama, 4)
    assert len({m.hyper.line() for m in trainer.members}) == 4  # each member its own setting
    for _ in range(2):
        trainer.train_step(TASKS)
    scores = trainer._scores(TASKS)
    elite_name = max(trainer.members, key=lambda m: scores[m.name]["score"]).name
    elite = trainer._member(elite_name)
    weights, hyper = [p.detach().clone() for p in elite.params], elite.hyper

    evolution = trainer.evolve(TASKS, 2)

    assert evolution["member"] == elite_name and trainer.elite == elite_name
    kept = trainer._member(elite_name)
    assert kept.hyper == hyper and all(torch.equal(a, b) for a, b in zip(kept.params, weights))
    clones = [e for e in trainer.lineage if e["step"] == 2]
    assert sorted(e["member"] for e in clones) == sorted(m.name for m in trainer.members if m.name != elite_name)
    for event in clones:
        member = trainer._member(event["member"])
        low, high = trainer.limits[event["mutated"]]
        assert low <= event["to"] <= high and getattr(member.hyper, event["mutated"]) == event["to"]
        assert member.parent == event["parent"] and member.fitness[-1]["step"] == 2
    assert all(len(m.fitness) == 1 for m in trainer.members)


def test_a_distill_members_hold_weight_is_the_one_its_loss_uses(small_llama):
    options = MenuOptions(objective="imitate", train_layers=1, learning_rate=1e-2, variants=0, seed=1, hold_weight=0.8)
    trainer = PopulationTrainer(str(small_llama), options, PopulationOptions(3, 2, "distill"), 2)
    weights = [m.hyper.hold_weight for m in trainer.members]
    assert weights[0] == 0.8 and all(0.2 <= w <= 0.8 for w in weights) and len(set(weights)) == 3
    for member in trainer.members:
        with trainer._as(member):
            assert trainer.options.hold_weight == member.hyper.hold_weight


def test_replace_bottom_replaces_only_the_bottom_share_from_the_top(small_llama):
    trainer = _trainer(small_llama, 4, replace_bottom=0.25)
    trainer.train_step(TASKS)
    before = {m.name: m for m in trainer.members}
    trainer.evolve(TASKS, 1)
    ranked = sorted(before.values(), key=lambda m: m.fitness[-1]["score"], reverse=True)
    replaced = [e for e in trainer.lineage if e["step"] == 1]
    assert [e["member"] for e in replaced] == [ranked[-1].name] and replaced[0]["parent"] == ranked[0].name
    assert all(trainer._member(name) is member for name, member in before.items() if name != ranked[-1].name)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(BOUNDS)), st.integers(0, 2**32 - 1), st.integers(1, 30))
def test_mutation_never_leaves_the_bounds(name, seed, times):
    rng = np.random.default_rng(seed)
    bounds = dict(BOUNDS) | {"batch": (4, 32)}
    hyper = Hyper(2e-4, 16, 32.0, 32, 0.98, 0.3, 1.0)
    for _ in range(times):
        hyper = hyper.mutated(name, rng, bounds)
        low, high = bounds[name]
        assert low <= getattr(hyper, name) <= high
    assert isinstance(hyper.lora_r, int) and isinstance(hyper.batch, int)


def test_a_rank_change_keeps_the_adapters_product():
    import torch

    torch.manual_seed(0)
    a, b = torch.randn(4, 10), torch.randn(6, 4)
    product = 2.0 * b @ a
    grown_a, grown_b = _carried(a, b, 2.0, torch.randn(8, 10), 0.5)  # rank 4 -> 8 and another alpha: exact
    assert torch.allclose(0.5 * grown_b @ grown_a, product, atol=1e-5)
    shrunk_a, shrunk_b = _carried(a, b, 2.0, torch.randn(2, 10), 1.0)  # rank 4 -> 2: the best rank-2 approximation
    u, s, vh = torch.linalg.svd(product)
    assert torch.allclose(shrunk_b @ shrunk_a, (u[:, :2] * s[:2]) @ vh[:2], atol=1e-4)
    fresh_a = torch.randn(2, 10)  # an untrained adapter (B = 0) keeps a live A, or it could never learn again
    dead_a, dead_b = _carried(a, torch.zeros(6, 4), 2.0, fresh_a, 1.0)
    assert torch.equal(dead_a, fresh_a) and not dead_b.any()


def test_the_members_share_one_set_of_frozen_states(small_llama, monkeypatch):
    from babylon_rl.train import frozen, state_cache

    monkeypatch.setattr(state_cache, "SHARED_STATES", state_cache.SharedStates())  # none kept from an earlier test's trainers
    rows = []
    original = frozen.SplitModel.bottom
    monkeypatch.setattr(frozen.SplitModel, "bottom", lambda self, ids, *a: rows.append(len(ids)) or original(self, ids, *a))
    trainer = _trainer(small_llama, 4)
    for _ in range(3):
        trainer.train_step(TASKS)
    trainer.evolve(TASKS, 3)
    assert sum(rows) == len(TASKS)  # each decision's states once (variants 0), for every member's steps and scoring


def test_a_saved_population_resumes_with_every_member_and_the_lineage(small_llama, tmp_path):
    import torch

    trainer = _trainer(small_llama, 3, bounds={"lora_r": (2, 64)})
    for step in (1, 2):
        trainer.train_step(TASKS)
    trainer.evolve(TASKS, 2)
    trainer.save(tmp_path / "ckpt", {"step": 2})
    resumed = _trainer(small_llama, 3, bounds={"lora_r": (2, 64)})
    resumed.load(tmp_path / "ckpt")
    assert resumed.lineage == trainer.lineage and resumed.elite == trainer.elite
    for mine, theirs in zip(resumed.members, trainer.members):
        assert mine.hyper == theirs.hyper and mine.fitness == theirs.fitness and mine.parent == theirs.parent
        assert all(torch.equal(a, b) for a, b in zip(mine.params, theirs.params))
    trainer.train_step(TASKS)
    resumed.train_step(TASKS)
    for mine, theirs in zip(resumed.members, trainer.members):
        assert all(torch.allclose(a, b) for a, b in zip(mine.params, theirs.params))
    config = json.loads((tmp_path / "ckpt" / "adapter_config.json").read_text())
    assert config["r"] == trainer._member(trainer.elite).hyper.lora_r  # the elite as a plain adapter: what eval loads
    with pytest.raises(Exception, match="population of 3, not 4"):
        _trainer(small_llama, 4).load(tmp_path / "ckpt")


def test_train_population_evolves_on_validation_only_and_the_report_shows_its_lineage(world, small_llama, monkeypatch):
    from babylon_rl.train import population

    scored = set()
    original = population.PopulationTrainer._scores
    monkeypatch.setattr(population.PopulationTrainer, "_scores",
                        lambda self, tasks: scored.update(t.trajectory_id for t in tasks) or original(self, tasks))
    result = _cli(world, "train", "--dataset", "d", "--base-model", str(small_llama), "--run-name", "pop", "--population", "3",
                  "--evolve-every", "2", "--max-steps", "4", "--groups-per-step", "4", "--train-layers", "1",
                  "--bound", "batch=2:4", "--learning-rate", "1e-2")
    assert result.exit_code == 0, result.output
    assert result.output.count("evolution at step") == 2 and "elite m" in result.output
    run = world / "runs" / "pop"
    manifest = json.loads((world / "datasets" / "d" / "manifest.json").read_text())
    eval_ids = set(manifest["eval_trajectory_ids"])
    inputs = set(json.loads((run / "inputs.json").read_text())["trajectory_ids"])
    assert scored and scored <= inputs and not (scored | inputs) & eval_ids
    assert len((run / "members.csv").read_text().splitlines()) == 1 + 4 * 3
    saved = json.loads((run / "checkpoints" / "step-4" / "population.json").read_text())
    assert len(saved["members"]) == 3 and all(len(m["fitness"]) == 2 for m in saved["members"])
    best = json.loads((run / "best.json").read_text())
    assert best["score"] == max(max(m["fitness"][i]["score"] for m in saved["members"]) for i in range(2))
    evaluation = _cli(world, "eval", "--model", "pop", "--dataset", "d", "--menu-shares", "50")
    assert evaluation.exit_code == 0, evaluation.output
    report = _cli(world, "report", "pop")
    assert report.exit_code == 0, report.output
    page = (run / "report.html").read_text()
    assert "Population lineage" in page and "The elite&#x27;s curve" in page and page.count("<svg") >= 4


def test_a_killed_population_resumes_into_the_same_lineage(world, small_llama):
    import torch
    from safetensors.torch import load_file

    home = Home(world)
    common = dict(dataset="d", base_model=str(small_llama), population=3, evolve_every=2, max_steps=5, groups_per_step=4,
                  train_layers=1, learning_rate=1e-2, variants=0, bounds={"batch": (2, 4)})

    def ctrl_c(step: int) -> None:
        if step == 4:
            raise KeyboardInterrupt

    train(home, TrainConfig(run_name="whole", **common))
    with pytest.raises(KeyboardInterrupt):
        train(home, TrainConfig(run_name="killed", **common), hooks=StepHooks(before_update=ctrl_c))
    assert [p.name for p in sorted((world / "runs" / "killed" / "checkpoints").iterdir())] == ["step-2", "step-3"]
    result = _cli(world, "train", "--dataset", "d", "--run-name", "killed", "--resume")
    assert result.exit_code == 0, result.output
    whole, killed = (json.loads((world / "runs" / r / "checkpoints" / "step-5" / "population.json").read_text()) for r in ("whole", "killed"))
    assert killed["lineage"] == whole["lineage"] and killed["elite"] == whole["elite"]
    a, b = (load_file(str(world / "runs" / r / "checkpoints" / "step-5" / "adapter_model.safetensors")) for r in ("whole", "killed"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_bad_population_settings_get_one_line_and_write_nothing(world, small_llama):
    common = ("train", "--dataset", "d", "--base-model", str(small_llama), "--train-layers", "1", "--groups-per-step", "4")
    refused = {
        "crossed bounds": _cli(world, *common, "--population", "2", "--bound", "learning_rate=1e-2:1e-4", "--run-name", "b1"),
        "unknown bound": _cli(world, *common, "--population", "2", "--bound", "momentum=0:1", "--run-name", "b2"),
        "never evolves": _cli(world, *common, "--population", "2", "--max-steps", "2", "--evolve-every", "3", "--run-name", "b3"),
        "batch above the step": _cli(world, *common, "--population", "2", "--bound", "batch=2:8", "--max-steps", "1", "--run-name", "b4"),
        "not a menu objective": _cli(world, *common, "--population", "2", "--objective", "grpo", "--run-name", "b5"),
    }
    for why, result in refused.items():
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, (why, result.output)
        assert "Traceback" not in result.output
    assert not any((world / "runs" / f"b{i}").exists() for i in range(1, 6))
    assert _cli(world, *common, "--population", "0", "--run-name", "b6").exit_code == 2

    assert _cli(world, *common, "--population", "2", "--max-steps", "1", "--evolve-every", "1", "--run-name", "p2").exit_code == 0
    before = sorted(p.name for p in (world / "runs" / "p2" / "checkpoints").iterdir())
    for args, words in ((("--population", "3"), "population of 2, not 3"), (("--dataset", "other"), "trained on dataset 'd'")):
        result = _cli(world, *common, "--run-name", "p2", "--resume", *args)
        assert result.exit_code == 2 and words in result.output, result.output
    assert sorted(p.name for p in (world / "runs" / "p2" / "checkpoints").iterdir()) == before
