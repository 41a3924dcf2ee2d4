"""`model export RUN[@STEP]`: a run's checkpoint in the shapes standard servers load, each with a model card.

- `hf`: the adapter merged into its base, saved as safetensors with the tokenizer and its chat
  template: `AutoModelForCausalLM.from_pretrained(DIR)` and `vllm serve DIR` load it;
- `adapter`: the PEFT adapter alone (adapter_config.json, adapter_model.safetensors, the tokenizer):
  `vllm serve BASE --enable-lora --lora-modules NAME=DIR`.

Each export is written to a temp directory and renamed into place, with README.md (base model,
dataset and its content hash, objective, and the held-out figures of the run's eval.json when
there is one) and export.json (the same, for programs). With a database URL, the export's path is
recorded in `model_exports` (migration 0006) beside the checkpoint's trained_models row.
GGUF is not written: see docs/TRAINING.md#exports.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.policies import ModelRef, resolve_model
from babylon_rl.settings import Home, safe_name
from babylon_rl.train.runs import RunDir

FORMATS = ("hf", "adapter")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "vocab.json", "merges.txt")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
MARKER = "export.json"  # an export's own file: only a directory holding it is replaced


@dataclass(frozen=True)
class ExportResult:
    model_id: str  # RUN@STEP
    format: str
    path: Path
    size_mb: float
    seconds: float
    recorded: bool
    hint: str


def parse_run(home: Home, name: str) -> tuple[str, Path, ModelRef]:
    """RUN, RUN@STEP, RUN@best or RUN@merged -> its canonical name, its run directory and its checkpoint."""
    from babylon_rl.serve.registry import RUN_AT, checkpoint_path

    match = RUN_AT.match(name)
    run, which = (match["run"], match["which"]) if match else (safe_name(name, "run name"), "latest")
    canonical, path = checkpoint_path(home, run, which)
    return canonical, RunDir.for_run(home, run).root, resolve_model(home, str(path))


def export_model(home: Home, name: str, fmt: str, to: Path | None, database_url: str | None = None) -> ExportResult:
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r} (GGUF: see docs/TRAINING.md#exports)")
    started = time.monotonic()
    canonical, run_dir, ref = parse_run(home, name)
    target = (to or home.root / "exports" / "models" / f"{canonical}-{fmt}").expanduser().resolve()
    _check_target(target)
    card = model_card(canonical, run_dir, ref, fmt)
    with atomic.directory(target) as tmp:
        (_write_adapter if fmt == "adapter" else _write_merged)(ref, tmp, canonical)
        (tmp / "README.md").write_text(card_text(card))
        (tmp / MARKER).write_text(json.dumps(card, indent=2) + "\n")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    recorded = bool(database_url) and _record(database_url, canonical, fmt, target, card["base_model"], size)
    return ExportResult(canonical, fmt, target, size / 1e6, time.monotonic() - started, recorded, _hint(fmt, target, card))


def _check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / MARKER).exists())):
        raise ConfigError(f"{target} exists and is not an earlier export (no {MARKER}): name an empty or new directory with --to")


def _write_adapter(ref: ModelRef, out: Path, canonical: str) -> None:
    if not ref.adapter:
        raise ConfigError(f"{canonical} is a whole model, not an adapter (a full fine-tune or a merged model): use --format hf")
    for name in ADAPTER_FILES + TOKENIZER_FILES:
        if (ref.path / name).exists():
            shutil.copy2(ref.path / name, out / name)


def _write_merged(ref: ModelRef, out: Path, canonical: str) -> None:
    """The adapter folded into its base (or the whole model as it is), saved as safetensors with the tokenizer."""
    import warnings

    from transformers import AutoTokenizer

    from babylon_rl.train.models import load_causal_lm

    model, _ = load_causal_lm(ref.base_model if ref.adapter else str(ref.path))
    if ref.adapter:
        from peft import PeftModel

        with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias
            warnings.simplefilter("ignore", FutureWarning)
            model = PeftModel.from_pretrained(model, str(ref.path)).merge_and_unload()
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(ref.path)).save_pretrained(out)


def model_card(canonical: str, run_dir: Path, ref: ModelRef, fmt: str) -> dict:
    """What the card says, from run.json, the dataset's manifest and the run's eval.json (when present)."""
    config = _read_json(run_dir / "run.json")
    dataset = config.get("dataset")
    manifest = _read_json(run_dir.parent.parent / "datasets" / str(dataset) / "manifest.json") if dataset else {}
    evaluation = _read_json(run_dir / "eval.json")
    base = ref.base_model or config.get("base_model")
    return {
        "model": canonical, "format": fmt, "source": str(ref.path), "base_model": str(base),
        "dataset": dataset, "dataset_hash": manifest.get("content_hash"), "objective": config.get("objective"),
        "on_policy": config.get("on_policy"), "backend": config.get("backend"), "eval": _held_out(evaluation),
        "exported_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _held_out(evaluation: dict) -> dict | None:
    """The eval's figures per policy (model, baseline, references) with their intervals, and its claim."""
    if not evaluation:
        return None
    policies = {p["name"]: {"role": p["role"], **p["metrics"]} for p in evaluation.get("policies", [])}
    return {"dataset": evaluation.get("dataset"), "windows": evaluation.get("windows"), "decisions": evaluation.get("decisions"),
            "policies": policies, "learning_shown": evaluation.get("learning_shown"), "claim": evaluation.get("claim")}


def card_text(card: dict) -> str:
    lines = [f"# {card['model']} ({card['format']})", "",
             "A Babylon trading policy trained by babylon-rl. It answers the compact decision prompt of",
             "babylon_rl/evaluate/prompts.py with one JSON action; `cli.py serve` builds that prompt from the game's request.", "",
             "| | |", "|---|---|",
             f"| base model | {card['base_model']} |", f"| dataset | {card['dataset']} |",
             f"| dataset content hash | {card['dataset_hash']} |", f"| objective | {card['objective']} |",
             f"| on-policy | {card['on_policy']} |", f"| checkpoint | {card['source']} |",
             f"| exported | {card['exported_at']} |", ""]
    evaluation = card["eval"]
    if not evaluation:
        return "\n".join(lines + ["No held-out evaluation yet: `python cli.py eval --model RUN --dataset NAME` writes eval.json.", ""])
    lines += [f"## Held-out evaluation ({evaluation['windows']} windows, {evaluation['decisions']} decisions of "
              f"{evaluation['dataset']})", "", "| policy | role | " + " | ".join(_metric_names(evaluation)) + " |",
              "|---|---|" + "---|" * len(_metric_names(evaluation))]
    for name, figures in evaluation["policies"].items():
        lines.append(f"| {name} | {figures['role']} | " + " | ".join(_figure(figures.get(m)) for m in _metric_names(evaluation)) + " |")
    lines += ["", f"Claim: {evaluation['claim']}; learning shown: {evaluation['learning_shown']}.", ""]
    return "\n".join(lines)


def _metric_names(evaluation: dict) -> list[str]:
    first = next(iter(evaluation["policies"].values()), {})
    return [k for k in first if k != "role"]


def _figure(value) -> str:
    """A figure with its 95 % interval, as eval.json holds it ({"value", "low", "high"})."""
    if isinstance(value, dict) and "value" in value:
        return f"{value['value']:.4g} [{value['low']:.4g}, {value['high']:.4g}]"
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _hint(fmt: str, target: Path, card: dict) -> str:
    if fmt == "adapter":
        return f"load it: vllm serve {card['base_model']} --enable-lora --lora-modules {card['model'].replace('@', '-')}={target}"
    return f"load it: AutoModelForCausalLM.from_pretrained({str(target)!r}), or vllm serve {target}"


def _record(url: str, canonical: str, fmt: str, target: Path, base_model: str, size: int) -> bool:
    from babylon_rl import db

    run, _, which = canonical.partition("@")
    model_id = f"{run}:{'merged' if which == 'merged' else f'step-{which}'}"
    with db.connect(url) as conn, conn.transaction():
        if conn.execute("SELECT to_regclass('model_exports') IS NULL").fetchone()[0]:
            raise ConfigError("the game database has no model_exports table: run python cli.py db migrate first")
        conn.execute(
            """INSERT INTO "model_exports" ("modelId", "format", "path", "baseModel", "sizeBytes") VALUES (%s, %s, %s, %s, %s)
               ON CONFLICT ("modelId", "format", "path") DO UPDATE SET "sizeBytes" = EXCLUDED."sizeBytes",
                 "baseModel" = EXCLUDED."baseModel", "createdAt" = CURRENT_TIMESTAMP""",
            (model_id, fmt, str(target), base_model, size))
    return True
