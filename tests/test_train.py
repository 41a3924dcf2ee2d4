"""`cli.py train --backend torch` on factory data: artefacts, write-back, learning signal, resume, errors."""

from __future__ import annotations

import csv
import json
import shutil

import polars as pl
import psycopg
import pytest

from babylon_rl.settings import Home
from babylon_rl.train.data import Schedule, load_scored_dataset
from babylon_rl.train.loop import StepHooks, TrainConfig, train
from babylon_rl.train.checkpoints import generate_answer, load_for_generation
from babylon_rl.train.logged_trainer import TorchOptions, TorchTrainer
from tests import game_rows
from tests.train_factory import write_dataset
from tests.train_support import build_template, install

TRAIN_ARGS = ["--dataset", "ds", "--base-model", "tiny", "--objective", "grpo", "--groups-per-step", "2", "--learning-rate", "1e-3"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("train-template"))


def _insert_game_rows(url: str, h: Home) -> list[str]:
    ids = []
    for split in ("train", "validation"):
        for group in getattr(load_scored_dataset(h, "ds"), split):
            for sample in group.samples:
                ids.append(sample.trajectory_id)
    rows = [game_rows.trajectory(t, f"agent-{t[-1]}", "2025-01-15T00:00") for t in ids]
    game_rows.insert(url, "trajectories", rows + [game_rows.trajectory("not-in-dataset", "x", "2025-01-15T00:00")])
    return ids


def _expected_batches(h: Home, steps: int, groups_per_step: int = 2, seed: int = 0) -> dict[int, list[str]]:
    data = load_scored_dataset(h, "ds")
    schedule = Schedule(len(data.train), groups_per_step, seed)
    expected = {}
    for step in range(steps):
        groups = [data.train[i] for i in schedule.batch(step)]
        ids = [s.trajectory_id for g in groups if g.has_spread for s in g.samples]
        if ids:
            expected[step + 1] = ids
    return expected


def _query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def _metric_steps(run_dir) -> list[int]:
    with (run_dir / "metrics.csv").open() as handle:
        return [int(r["step"]) for r in csv.DictReader(handle)]


def test_train_torch_writes_artefacts_and_game_rows(template, home, run_cli, migrated_pg_url):
    h = install(template, home)
    _insert_game_rows(migrated_pg_url, h)
    result = run_cli("--database-url", migrated_pg_url, "train", *TRAIN_ARGS, "--max-steps", "5", "--run-name", "r1")
    assert result.exit_code == 0, result.output
    run_dir = h.runs / "r1"
    assert _metric_steps(run_dir) == [1, 2, 3, 4, 5]
    assert list((run_dir / "wandb").glob("offline-run-*"))
    assert "database_url" not in (run_dir / "run.json").read_text()

    model, tokenizer = load_for_generation(run_dir / "checkpoints" / "step-5")
    messages = json.loads(write_dataset(home / "scratch").rows[0]["messages"])[:2]
    assert generate_answer(model, tokenizer, messages)

    expected = _expected_batches(h, 5)
    flat = {s.trajectory_id for g in load_scored_dataset(h, "ds").train if not g.has_spread for s in g.samples}
    batches = _query(migrated_pg_url, 'SELECT "batchId", "trajectoryIds", "rewardsJson", "status" FROM training_batches')
    assert {b[0]: json.loads(b[1]) for b in batches} == {f"r1:step-{s}": ids for s, ids in expected.items()}
    assert all(b[3] == "completed" for b in batches)
    assert all(set(json.loads(b[2])) == set(json.loads(b[1])) for b in batches)
    trained = {t for ids in expected.values() for t in ids}
    assert trained and not trained & flat
    marked = _query(migrated_pg_url, 'SELECT "trajectoryId", "trainedInBatch" FROM trajectories WHERE "usedInTraining"')
    assert {m[0] for m in marked} == trained
    last_batch = {t: f"r1:step-{s}" for s, ids in sorted(expected.items()) for t in ids}
    assert dict(marked) == last_batch
    models = _query(migrated_pg_url, 'SELECT "modelId", status, "storagePath", "avgReward", "wandbRunId" FROM trained_models')
    assert [(m[0], m[1]) for m in models] == [("r1:step-5", "ready")]
    assert models[0][2] == str(run_dir / "checkpoints" / "step-5") and models[0][3] is not None and models[0][4]

    # the same run id again (its local directory lost): rows are updated, never inserted twice
    shutil.rmtree(run_dir)
    again = run_cli("--database-url", migrated_pg_url, "train", *TRAIN_ARGS, "--max-steps", "5", "--run-name", "r1")
    assert again.exit_code == 0, again.output
    assert _query(migrated_pg_url, "SELECT count(*) FROM training_batches")[0][0] == len(expected)
    assert _query(migrated_pg_url, "SELECT count(*) FROM trained_models")[0][0] == 1


def _train_keep_best(template, home, run_cli, url: str, run_name: str, *options: str) -> Home:
    """Four steps with --keep-best and `options`, written back to `url`'s trained_models."""
    h = install(template, home)
    _insert_game_rows(url, h)
    result = run_cli("--database-url", url, "train", *TRAIN_ARGS, "--max-steps", "4", "--run-name", run_name, *options, "--keep-best")
    assert result.exit_code == 0, result.output
    return h


def test_keep_best_archives_checkpoints_with_their_metrics(template, home, run_cli, migrated_pg_url):
    """Archived checkpoint rows keep avgReward and evalMetrics; benchmarkScore is left to `cli.py eval` (held-out accuracy)."""
    _train_keep_best(template, home, run_cli, migrated_pg_url, "kb", "--checkpoint-every", "1")
    rows = _query(migrated_pg_url, 'SELECT "modelId", status, "avgReward", "evalMetrics", "benchmarkScore" FROM trained_models')
    archived = [r for r in rows if r[1] == "archived"]
    assert archived and len(rows) == 4
    assert all(r[2] is not None and r[3] and "score" in r[3] for r in archived)
    assert all(r[4] is None for r in rows)


def test_keep_best_chooses_among_every_evaluated_step(template, home, run_cli, migrated_pg_url):
    """--eval-every 2 --keep-best with the default --checkpoint-every (50): steps 2 and 4 are both checkpoints it could
    keep, not only the last."""
    h = _train_keep_best(template, home, run_cli, migrated_pg_url, "ev", "--eval-every", "2")
    rows = _query(migrated_pg_url, 'SELECT "modelId", "evalMetrics" FROM trained_models ORDER BY "modelId"')
    assert [r[0] for r in rows] == ["ev:step-2", "ev:step-4"] and all("score" in r[1] for r in rows)
    assert json.loads((h.runs / "ev" / "best.json").read_text())["step"] in (2, 4)


@pytest.mark.parametrize("objective", ["grpo", "awr"])
def test_high_scored_answers_gain_log_probability(template, home, objective):
    h = install(template, home)
    data = load_scored_dataset(h, "ds")
    spread = [g for g in data.train if g.has_spread]
    trainer = TorchTrainer(str(h.models / "tiny"), TorchOptions(learning_rate=5e-3, seed=0, objective=objective))

    def margin() -> float:
        best = [max(g.samples, key=lambda s: s.reward).messages for g in spread]
        worst = [min(g.samples, key=lambda s: s.reward).messages for g in spread]
        return sum(b - w for b, w in zip(trainer.sequence_logprobs(best), trainer.sequence_logprobs(worst))) / len(spread)

    before = margin()
    margins = []
    for _ in range(5):
        trainer.train_step(spread[:3])
        margins.append(margin())
    # the best-scored answers gain log-probability relative to the worst at every step after the first
    # (Adam's first update can dip), and clearly over the five
    assert all(b > a for a, b in zip(margins, margins[1:])), (before, margins)
    assert margins[-1] - before > 0.001, (before, margins)


def test_answer_logprobs_match_the_full_vocabulary_projection(template, home):
    """The trainer projects only the answer positions onto the vocabulary; the numbers must not change."""
    import torch

    h = install(template, home)
    trainer = TorchTrainer(str(h.models / "tiny"), TorchOptions())
    samples = [s for g in load_scored_dataset(h, "ds").train[:2] for s in g.samples]
    ids, attention, mask = trainer._batch([e for s in samples for e in trainer.encode_sample(s)])
    with torch.no_grad():
        full = trainer.model(input_ids=ids, attention_mask=attention).logits[:, :-1].log_softmax(-1)
        expected = full.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)[mask.bool()]
        got = trainer._token_logprobs(ids, attention, mask)
    assert got.shape == expected.shape and int(mask.sum()) == got.numel() > 0
    assert torch.allclose(got, expected, atol=1e-5)


def test_awr_weights_favour_high_advantages_and_are_capped(template, home):
    h = install(template, home)
    trainer = TorchTrainer(str(h.models / "tiny"), TorchOptions(objective="awr", awr_beta=0.5, awr_max_weight=5.0))
    weights = trainer.awr_weights([-1.0, 0.0, 1.0, 3.0])
    assert abs(sum(weights) / len(weights) - 1.0) < 1e-9  # mean 1: the learning rate keeps its SFT meaning
    assert weights[0] < weights[1] < weights[2] <= weights[3]
    assert weights[3] / weights[1] == pytest.approx(5.0)  # exp(3 / 0.5) capped at 5 (weights[1] = exp(0) = 1 before scaling)


def test_interrupt_then_resume_ends_like_an_uninterrupted_run(template, home, run_cli, migrated_pg_url):
    h = install(template, home)
    _insert_game_rows(migrated_pg_url, h)

    def ctrl_c(step: int) -> None:
        if step == 4:
            raise KeyboardInterrupt

    config = TrainConfig(dataset="ds", base_model="tiny", objective="grpo", groups_per_step=2, learning_rate=1e-3, max_steps=5,
                         run_name="r2", checkpoint_every=2)
    with pytest.raises(KeyboardInterrupt):
        train(h, config, database_url=migrated_pg_url, hooks=StepHooks(before_update=ctrl_c))
    expected = _expected_batches(h, 5)
    status = dict(_query(migrated_pg_url, 'SELECT "batchId", status || coalesce(\':\' || error, \'\') FROM training_batches'))
    assert status["r2:step-4"] == "failed:interrupted"
    run_dir = h.runs / "r2"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-2", "step-3"]
    marked = {r[0] for r in _query(migrated_pg_url, 'SELECT "trajectoryId" FROM trajectories WHERE "usedInTraining"')}
    assert marked == {t for s in (1, 2, 3) for t in expected.get(s, [])}

    resumed = run_cli("--database-url", migrated_pg_url, "train", "--dataset", "ds", "--run-name", "r2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming r2 from step 3 of 5" in resumed.output
    assert "trained 2 steps this time (resumed at step 3; 5/5 in all)" in " ".join(resumed.output.split())
    assert _metric_steps(run_dir) == [1, 2, 3, 4, 5]
    rows = _query(migrated_pg_url, 'SELECT "batchId", "trajectoryIds", status FROM training_batches')
    assert {r[0]: json.loads(r[1]) for r in rows} == {f"r2:step-{s}": ids for s, ids in expected.items()}
    assert {r[2] for r in rows} == {"completed"}
    state = json.loads((run_dir / "checkpoints" / "step-5" / "state.json").read_text())
    assert state["step"] == 5
    again = run_cli("train", "--dataset", "ds", "--run-name", "r2", "--resume")
    assert again.exit_code == 0, again.output
    assert "nothing to train: r2 had already done all 5 steps" in " ".join(again.output.split())
    longer = run_cli("train", "--dataset", "ds", "--run-name", "r2", "--resume", "--max-steps", "6")  # a new length extends it
    assert longer.exit_code == 0, longer.output
    assert "resuming r2 from step 5 of 6" in longer.output and _metric_steps(run_dir) == [1, 2, 3, 4, 5, 6]
    assert json.loads((run_dir / "run.json").read_text())["max_steps"] == 6  # a later --resume keeps the new length


def test_keep_best_merge_and_corrupted_checkpoint(template, home, run_cli):
    h = install(template, home)
    args = [*TRAIN_ARGS, "--max-steps", "3", "--run-name", "r3", "--checkpoint-every", "1", "--eval-every", "1"]
    result = run_cli("train", *args, "--keep-best", "--merge")
    assert result.exit_code == 0, result.output
    run_dir = h.runs / "r3"
    best = json.loads((run_dir / "best.json").read_text())
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == sorted({f"step-{best['step']}", "step-3"})
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(run_dir / "merged") is not None

    adapter = run_dir / "checkpoints" / "step-3" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:100])
    refused = run_cli("train", "--dataset", "ds", "--run-name", "r3", "--resume")
    assert refused.exit_code == 2
    assert str(adapter) in refused.output and "Traceback" not in refused.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--run-name", "../escape"], "invalid run name"),
        (["--base-model", "Qwen/Qwen2.5-0.5B-Instruct"], "python cli.py model init-tiny"),
        (["--backend", "art"], "needs an NVIDIA GPU"),
        (["--backend", "serverless"], "needs WANDB_API_KEY"),
        (["--run-name", "fresh", "--resume"], "nothing to resume"),
    ],
)
def test_bad_input_is_one_line(template, home, run_cli, monkeypatch, args, message):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    install(template, home)
    result = run_cli("train", "--dataset", "ds", "--objective", "grpo", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (home / "runs" / "escape").exists() and not (home.parent / "escape").exists()


def test_dataset_without_scores_is_scored_first(template, home, run_cli):
    install(template, home)
    (home / "datasets" / "ds" / "scores.parquet").unlink()
    result = run_cli("train", "--dataset", "ds", "--objective", "grpo", "--run-name", "x", "--max-steps", "1", "--learning-rate", "1e-3")
    assert result.exit_code == 0, result.output
    assert "no scores yet: scoring it with the heuristic judge first" in result.output
    scores = pl.read_parquet(home / "datasets" / "ds" / "scores.parquet")
    assert set(scores["judge"]) == {"heuristic"}
    assert (home / "runs" / "x" / "metrics.csv").exists()


def test_full_fine_tune_with_kl_checkpoints_and_resumes(template, home):
    """lora_r 0 trains the whole model against a frozen copy (KL > 0), saves it whole and resumes exactly."""
    h = install(template, home)
    config = TrainConfig(dataset="ds", base_model="tiny", objective="grpo", groups_per_step=2, learning_rate=1e-3, max_steps=4,
                         run_name="full", checkpoint_every=2, lora_r=0, kl_coef=0.1)
    result = train(h, config)
    step2, step4 = (h.runs / "full" / "checkpoints" / f"step-{s}" for s in (2, 4))
    assert (step4 / "model.safetensors").exists() and (step4 / "config.json").exists()
    assert not (step4 / "adapter_model.safetensors").exists()
    kls = [float(r["kl"]) for r in csv.DictReader((result.run_dir / "metrics.csv").open())]
    assert kls[0] == 0.0 and kls[-1] > 0.0  # the policy moves away from the frozen reference, and KL sees it

    import torch
    from safetensors.torch import load_file

    trainer = TorchTrainer(str(h.models / "tiny"), TorchOptions(learning_rate=1e-3, lora_r=0, kl_coef=0.1))
    assert trainer.load(step2)["step"] == 2
    data = load_scored_dataset(h, "ds")
    schedule = Schedule(len(data.train), 2, 0)
    for step in (2, 3):
        trainer.train_step([g for g in (data.train[i] for i in schedule.batch(step)) if g.has_spread])
    final = load_file(str(step4 / "model.safetensors"))
    for name, value in trainer.model.state_dict().items():
        if name in final:
            assert torch.allclose(value, final[name], atol=1e-6), name
