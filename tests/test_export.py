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

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


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
    from babylon_rl.evaluate.policies import LocalPolicy
    from babylon_rl.model_names import resolve
    from babylon_rl.settings import Home

    target = tmp_path / "demo-hf"
    result = run_cli_at(smollm2_run_home, "model", "export", "demo@2", "--format", "hf", "--to", str(target),
                        "--dtype", "float32")  # the checkpoint's own precision: the same greedy answer
    assert result.exit_code == 0, result.output
    assert f"exported demo@2 as hf to {target}" in result.output
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja", "README.md"} <= {
        p.name for p in target.iterdir()}
    assert not list(tmp_path.glob(".demo-hf.*"))  # written aside, then renamed: nothing left behind
    checkpoint = LocalPolicy(resolve(Home(smollm2_run_home), "runs/demo/checkpoints/step-2"), "demo").load()
    expected = checkpoint.generate([decision_prompt(GAME_REQUEST[1]["content"])])[0]
    assert _greedy_plain_transformers(target).startswith(expected)
    assert _tensor_dtypes(target / "model.safetensors") == {"F32"}
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
    assert config.base_model_name_or_path == HUB_ID  # a base any server can fetch, not this machine's directory
    assert f"vllm serve {HUB_ID} --dtype bfloat16" in result.output
    assert _tensor_dtypes(target / "adapter_model.safetensors") == {"BF16"}  # SmolLM2 was published in bfloat16
    _assert_close_to(target / "adapter_model.safetensors",
                     smollm2_run_home / "runs/demo/checkpoints/step-2/adapter_model.safetensors")
    assert not (target / "model.safetensors").exists() and (target / "README.md").exists()
    for name in ("adapter_config.json", "README.md", "export.json"):  # no local path travels with the export
        text = (target / name).read_text()
        assert str(smollm2_run_home) not in text and str(tmp_path) not in text, name
    assert not any(str(v).startswith(("/", "~")) for v in json.loads((target / "adapter_config.json").read_text()).values())


def test_hf_export_defaults_to_the_bases_bfloat16_with_a_card_that_has_metadata_and_the_recipe(smollm2_run_home, run_cli_at,
                                                                                                 tmp_path):
    import torch
    import yaml
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from babylon_rl.train.model_card import EXAMPLE_OBSERVATION

    target = tmp_path / "demo-bf16"
    result = run_cli_at(smollm2_run_home, "model", "export", "demo@2", "--format", "hf", "--to", str(target))
    assert result.exit_code == 0, result.output
    assert _tensor_dtypes(target / "model.safetensors") == {"BF16"}
    assert str(AutoConfig.from_pretrained(target).dtype).endswith("bfloat16")
    assert next(AutoModelForCausalLM.from_pretrained(target).parameters()).dtype == torch.bfloat16  # loads as it is
    card = (target / "README.md").read_text()
    _, front, body = card.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["base_model"] == HUB_ID and meta["library_name"] == "transformers" and meta["license"] == "apache-2.0"
    assert "babylon-rl" in meta["tags"] and meta["pipeline_tag"] == "text-generation"
    exact = prompt_text(AutoTokenizer.from_pretrained(target), decision_prompt(EXAMPLE_OBSERVATION))
    assert f"```\n{exact}\n```" in body  # the exact text it continues: the compact prompt, the opened answer
    for step in ('"continue_final_message": true', '"stop": ["}"]', "M1", "pm-75cb2-83304c56-0", "vllm serve demo-bf16",
                 "convert_hf_to_gguf.py demo-bf16 --outtype bf16", "llama-server"):
        assert step in body, step
    assert str(smollm2_run_home) not in card and str(tmp_path) not in card
    assert json.loads((target / "export.json").read_text())["base_model"] == HUB_ID


def test_a_base_without_source_json_is_named_from_its_config_and_an_unknown_one_by_its_directory(smollm2_run_home, tmp_path):
    from babylon_rl.train.pretrained import DEFAULT_SOURCE, base_source

    converted = tmp_path / "smollm2-135m"
    converted.mkdir()
    shutil.copy(smollm2_run_home / "models" / "smollm2-135m" / "config.json", converted)  # a home made before source.json
    assert base_source(converted) == DEFAULT_SOURCE and DEFAULT_SOURCE["hub_id"] == HUB_ID
    assert base_source(smollm2_run_home / "models" / "smollm2-135m")["dtype"] == "bfloat16"
    assert base_source(tmp_path / "tiny") == {}


def _tensor_dtypes(path: Path) -> set[str]:
    """The dtypes a safetensors file holds, read from its header."""
    header = path.read_bytes()[8 : 8 + int.from_bytes(path.read_bytes()[:8], "little")]
    return {t["dtype"] for name, t in json.loads(header).items() if name != "__metadata__"}


def _assert_close_to(exported: Path, checkpoint: Path) -> None:
    import torch
    from safetensors.torch import load_file

    mine, theirs = load_file(str(exported)), load_file(str(checkpoint))
    assert mine.keys() == theirs.keys()
    for name, tensor in theirs.items():
        torch.testing.assert_close(mine[name].float(), tensor.float(), rtol=1e-2, atol=1e-2)


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


def test_the_card_quotes_only_an_evaluation_of_the_checkpoint_it_exports(smollm2_run_home):
    """The run's eval.json is of demo@2: demo@1's card says it has none (and how to make one), not demo@2's figures."""
    from babylon_rl.model_names import resolve
    from babylon_rl.settings import Home
    from babylon_rl.train.export import model_card
    from babylon_rl.train.model_card import _evaluation

    home = Home(smollm2_run_home)
    run_dir = smollm2_run_home / "runs" / "demo"
    assert model_card("demo@2", run_dir, resolve(home, "demo@2"), "adapter", home)["eval"]["policies"]["demo@2"]
    card = model_card("demo@1", run_dir, resolve(home, "demo@1"), "adapter", home)
    assert card["eval"] is None
    assert _evaluation(None, "demo@1", "ds")[0].startswith(
        "No held-out evaluation of this checkpoint yet: `python cli.py eval --model demo@1 --dataset ds`")
