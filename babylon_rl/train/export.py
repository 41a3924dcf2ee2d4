"""`model export RUN[@STEP]`: a run's checkpoint in the shapes standard servers load, each with a model card.

- `hf`: the adapter merged into its base, saved as safetensors with the tokenizer and its chat
  template: `AutoModelForCausalLM.from_pretrained(DIR)` and `vllm serve DIR` load it;
- `adapter`: the PEFT adapter alone (adapter_config.json, adapter_model.safetensors, the tokenizer):
  `vllm serve BASE --enable-lora --lora-modules NAME=DIR`.

Each export is written to a temp directory and renamed into place, with README.md (`model_card`:
YAML metadata, base model, dataset and its content hash, objective, the held-out figures of the
run's eval.json when there is one, and the exact prompt recipe for vLLM and llama.cpp) and
export.json (the same, for programs). Weights are saved in `--dtype` (default: the dtype the base
was published in, bfloat16 for SmolLM2). The base is named by a portable id (its hub id,
`pretrained.base_source`; else its directory's name), never a local path: in the adapter's
adapter_config.json, the card and export.json. With a database URL, the export's path is
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
from babylon_rl.model_names import RUN_AT, ModelRef, resolve
from babylon_rl.settings import Home, safe_name
from babylon_rl.train.model_card import card_text
from babylon_rl.train.pretrained import base_source
from babylon_rl.train.runs import RunDir

FORMATS = ("hf", "adapter")
DTYPES = ("bfloat16", "float16", "float32")
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


def export_model(home: Home, name: str, fmt: str, to: Path | None, database_url: str | None = None,
                 dtype: str | None = None) -> ExportResult:
    """`dtype`: the weights' (None: the dtype the base was published in, else float32)."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r} (GGUF: see docs/TRAINING.md#exports)")
    if dtype is not None and dtype not in DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    started = time.monotonic()
    match = RUN_AT.match(name)
    run = match["run"] if match else safe_name(name, "run name")
    ref = resolve(home, name if match else f"{run}@latest")  # only a run's checkpoints are exported: RUN is RUN@latest
    canonical, run_dir = ref.name, RunDir.for_run(home, run).root
    target = (to or home.root / "exports" / "models" / f"{canonical}-{fmt}").expanduser().resolve()
    _check_target(target)
    card = model_card(canonical, run_dir, ref, fmt, home, dtype)
    with atomic.directory(target) as tmp:
        (_write_adapter if fmt == "adapter" else _write_merged)(ref, tmp, canonical, card)
        (tmp / "README.md").write_text(card_text(card, _tokenizer(ref.path), target.name))
        (tmp / MARKER).write_text(json.dumps(card, indent=2) + "\n")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    recorded = bool(database_url) and _record(database_url, canonical, fmt, target, card["base_model"], size)
    return ExportResult(canonical, fmt, target, size / 1e6, time.monotonic() - started, recorded, _hint(fmt, target, card))


def _check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / MARKER).exists())):
        raise ConfigError(f"{target} exists and is not an earlier export (no {MARKER}): name an empty or new directory with --to")


def _write_adapter(ref: ModelRef, out: Path, canonical: str, card: dict) -> None:
    """The adapter's files, its weights in the card's dtype, its config naming the portable base."""
    if not ref.adapter:
        raise ConfigError(f"{canonical} is a whole model, not an adapter (a full fine-tune or a merged model): use --format hf")
    for name in TOKENIZER_FILES:
        if (ref.path / name).exists():
            shutil.copy2(ref.path / name, out / name)
    config = json.loads((ref.path / "adapter_config.json").read_text())
    (out / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": card["base_model"]}, indent=2))
    _save_as(ref.path / "adapter_model.safetensors", out / "adapter_model.safetensors", card["dtype"])


def _save_as(source: Path, out: Path, dtype: str) -> None:
    """A safetensors file with its floating-point tensors in `dtype`."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(source))
    wanted = getattr(torch, dtype)
    save_file({k: t.to(wanted) if t.is_floating_point() else t for k, t in tensors.items()}, str(out), {"format": "pt"})


def _write_merged(ref: ModelRef, out: Path, canonical: str, card: dict) -> None:
    """The adapter folded into its base (or the whole model as it is), saved as safetensors in the card's dtype with the
    tokenizer; config.json names the portable base."""
    import warnings

    import torch
    from transformers import AutoTokenizer

    from babylon_rl.train.models import load_causal_lm

    model, _ = load_causal_lm(ref.base_model if ref.adapter else str(ref.path))
    if ref.adapter:
        from peft import PeftModel

        with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias
            warnings.simplefilter("ignore", FutureWarning)
            model = PeftModel.from_pretrained(model, str(ref.path)).merge_and_unload()
    model = model.to(getattr(torch, card["dtype"]))
    model.config._name_or_path = card["base_model"]
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(ref.path)).save_pretrained(out)


def _tokenizer(directory: Path):
    """The checkpoint's tokenizer (its chat template renders the card's recipe)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def model_card(canonical: str, run_dir: Path, ref: ModelRef, fmt: str, home: Home, dtype: str | None = None) -> dict:
    """What the card says, from run.json, the dataset's manifest, the run's eval.json (when present) and where the base
    comes from (`base_source`); no absolute path."""
    config = _read_json(run_dir / "run.json")
    dataset = config.get("dataset")
    manifest = _read_json(run_dir.parent.parent / "datasets" / str(dataset) / "manifest.json") if dataset else {}
    evaluation = _checkpoint_eval(run_dir, canonical, dataset)
    base_dir = Path(ref.base_model or config.get("base_model") or ref.path)
    source = base_source(base_dir)
    return {
        "model": canonical, "format": fmt, "source": _in_home(ref.path, home), "base_model": source.get("hub_id") or base_dir.name,
        "base_name": base_dir.name, "base_weights": source.get("weights"), "license": source.get("license"),
        "dtype": dtype or _published_dtype(source, base_dir),
        "dataset": dataset, "dataset_hash": manifest.get("content_hash"), "objective": config.get("objective"),
        "on_policy": config.get("on_policy"), "backend": config.get("backend"), "eval": _held_out(evaluation),
        "exported_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _published_dtype(source: dict, base_dir: Path) -> str:
    """The dtype the base was published in (its source, else its config), float32 when neither names one of `DTYPES`."""
    config = _read_json(base_dir / "config.json")
    for named in (source.get("dtype"), config.get("torch_dtype"), config.get("dtype")):
        if named in DTYPES:
            return named
    return "float32"


def _in_home(path: Path, home: Home) -> str:
    """A path as the home names it (runs/demo/checkpoints/step-2): an export tells no one where the files were."""
    return str(path.relative_to(home.root)) if path.is_relative_to(home.root) else path.name


def _checkpoint_eval(run_dir: Path, canonical: str, dataset: str | None) -> dict:
    """The newest evaluation of this very checkpoint (`canonical`, RUN@7), on the run's own dataset if it has one, from the
    copies every run eval keeps (`write_outputs`); {} when none: an eval of another checkpoint, or one from before
    2026-12-06 (which kept no copy and did not say which checkpoint it was of), is no figure of this one."""
    found = [e for e in map(_read_json, run_dir.glob("evals/*/*/eval.json")) if e.get("checkpoint") == canonical]
    return max(found, key=lambda e: (e.get("dataset") == dataset, e.get("created_at") or ""), default={})


def _held_out(evaluation: dict) -> dict | None:
    """The eval's figures per policy (model, baseline, references) with their intervals, and its claim."""
    if not evaluation:
        return None
    policies = {p["name"]: {"role": p["role"], **p["metrics"]} for p in evaluation.get("policies", [])}
    return {"dataset": evaluation.get("dataset"), "windows": evaluation.get("windows"), "decisions": evaluation.get("decisions"),
            "policies": policies, "learning_shown": evaluation.get("learning_shown"), "claim": evaluation.get("claim")}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _hint(fmt: str, target: Path, card: dict) -> str:
    if fmt == "adapter":
        return (f"load it ({card['dtype']}): vllm serve {card['base_model']} --dtype {card['dtype']} --enable-lora "
                f"--lora-modules {card['model'].replace('@', '-')}={target}; the prompt to send: {target / 'README.md'}")
    return (f"load it ({card['dtype']}): AutoModelForCausalLM.from_pretrained({str(target)!r}), or vllm serve {target} --dtype "
            f"{card['dtype']}; the prompt to send: {target / 'README.md'}")


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
