"""`model export`: a run's checkpoint as a merged HF model or a PEFT adapter, with a model card, recorded in the game DB."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest

from babylon_rl.evaluate.prompts import decision_prompt
from babylon_rl.policy import prompt_text
from tests.serve_support import GAME_REQUEST


def _greedy_plain_transformers(path: Path) -> str:
    """The answer of a directory loaded with nothing but transformers: the same prompt, greedy generate."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    text = prompt_text(tokenizer, decision_prompt(GAME_REQUEST[1]["content"]))
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=32, do_sample=False, stop_strings=["}"], tokenizer=tokenizer)
    return '{"action": "' + tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


@pytest.fixture
def run_cli_at():
    """The real click group in-process, on a given home (the shared one with SmolLM2 and the run `demo`)."""
    from click.testing import CliRunner

    from cli import cli

    def invoke(home: Path, *args: str):
        return CliRunner().invoke(cli, ["--home", str(home), *args], catch_exceptions=False)

    return invoke


def test_hf_export_loads_in_plain_transformers_and_answers_as_the_checkpoint(smollm2_run_home, run_cli_at, tmp_path):
    from babylon_rl.evaluate.policies import LocalPolicy, resolve_model
    from babylon_rl.settings import Home

    target = tmp_path / "demo-hf"
    result = run_cli_at(smollm2_run_home, "model", "export", "demo@2", "--format", "hf", "--to", str(target))
    assert result.exit_code == 0, result.output
    assert f"exported demo@2 as hf to {target}" in result.output
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja", "README.md"} <= {
        p.name for p in target.iterdir()}
    assert not list(tmp_path.glob(".demo-hf.*"))  # written aside, then renamed: nothing left behind
    checkpoint = LocalPolicy(resolve_model(Home(smollm2_run_home), "runs/demo/checkpoints/step-2"), "demo").load()
    expected = checkpoint.generate([decision_prompt(GAME_REQUEST[1]["content"])])[0]
    assert _greedy_plain_transformers(target).startswith(expected)
    card = (target / "README.md").read_text()
    for fact in ("smollm2-135m", "| dataset | ds |", "sha256:feedbeef", "| objective | distill |", "0.61 [0.52, 0.7]"):
        assert fact in card, fact
    assert json.loads((target / "export.json").read_text())["model"] == "demo@2"


def test_adapter_export_loads_with_peft_on_its_base(smollm2_run_home, run_cli_at, tmp_path):
    from peft import PeftConfig

    target = tmp_path / "demo-adapter"
    result = run_cli_at(smollm2_run_home, "model", "export", "demo", "--format", "adapter", "--to", str(target))
    assert result.exit_code == 0, result.output
    assert "exported demo@2 as adapter" in result.output and "--lora-modules" in result.output
    config = PeftConfig.from_pretrained(target)
    assert Path(config.base_model_name_or_path).name == "smollm2-135m"
    assert (target / "adapter_model.safetensors").stat().st_size == (
        smollm2_run_home / "runs/demo/checkpoints/step-2/adapter_model.safetensors").stat().st_size
    assert not (target / "model.safetensors").exists() and (target / "README.md").exists()


def test_export_mistakes_are_one_line_with_exit_2(smollm2_run_home, run_cli_at, tmp_path):
    occupied = tmp_path / "mine"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("keep me")
    for args, says in ((["nope"], "no run 'nope'"), (["demo@9"], "demo@1, demo@2"),
                       (["demo", "--to", str(occupied)], "is not an earlier export")):
        result = run_cli_at(smollm2_run_home, "model", "export", *args, "--format", "adapter")
        assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
    assert (occupied / "notes.txt").read_text() == "keep me"


@pytest.mark.postgres
def test_the_export_path_is_recorded_in_the_game_database(smollm2_run_home, run_cli_at, migrated_pg_url, tmp_path):
    target = tmp_path / "rec"
    result = run_cli_at(smollm2_run_home, "--database-url", migrated_pg_url, "model", "export", "demo@1",
                        "--format", "adapter", "--to", str(target))
    assert result.exit_code == 0, result.output
    again = run_cli_at(smollm2_run_home, "--database-url", migrated_pg_url, "model", "export", "demo@1",
                       "--format", "adapter", "--to", str(target))
    assert again.exit_code == 0, again.output  # an earlier export is replaced, and its row updated, not doubled
    with psycopg.connect(migrated_pg_url) as conn:
        rows = conn.execute('SELECT "modelId", "format", "path", "sizeBytes" FROM model_exports').fetchall()
    assert len(rows) == 1 and rows[0][:3] == ("demo:step-1", "adapter", str(target)) and rows[0][3] > 0
    shutil.rmtree(target)
