"""What a model name means, for every command that takes one (train, eval, arena, simulate --policy, serve, model export
and improve).

A name is one of:
- `RUN@STEP` (a run's checkpoint, as ART names them), `RUN@best` (the one `--keep-best` chose), `RUN@merged` (the
  run's merged model), `RUN@latest`, or `RUN` alone (its latest checkpoint, served as `RUN@N` and answering to `RUN`
  too);
- `promoted`: the model `improve` promoted last (HOME/improve/state.json's champion);
- a model in HOME/models (`smollm2-135m`), or a directory: as given, or inside the home (`runs/demo/merged`). A path
  is served under its directory's name and answers to the path too: clients never see where the files are.

`resolve` turns a name into a `ModelRef`: its files, whether it is an adapter, its run, its base, and the id a server
shows with the other names it answers to. `resolve_base` finds a base model to train from: the same local names, or a
Hugging Face hub id. `in_home` is the way back: the name a local model is recorded under.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home
from babylon_rl.train.runs import RunDir

PROMOTED = "promoted"
# what a command's help says a model option takes: every name `resolve` reads
MODEL_NAMES_HELP = ("a checkpoint or model directory, a name in HOME/models, a run (its latest checkpoint), RUN@STEP, "
                    "RUN@best, RUN@latest, RUN@merged, or promoted (the model improve promoted last)")
RUN_AT = re.compile(r"^(?P<run>[A-Za-z0-9_.-]+)@(?P<which>\d+|best|merged|latest)$")
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json", "vocab.json")


@dataclass(frozen=True)
class ModelRef:
    """A resolved local model: a plain HF directory, or an adapter checkpoint on its base model, with its names."""

    path: Path
    adapter: bool
    run_dir: Path | None  # HOME/runs/RUN when the model is a checkpoint of a run
    base_model: str | None  # the adapter's base model (path or hub id)
    name: str  # the id a server shows: `RUN@7`, `promoted`, a directory's name, or the name as given
    aliases: tuple[str, ...] = ()  # the other names it answers to (`RUN`, `RUN@best`, the path given)

    @property
    def checkpoint_key(self) -> str | None:
        return self.path.name if self.run_dir and self.path.parent.name == "checkpoints" else None


def resolve(home: Home, name: str) -> ModelRef:
    """Any model name (see the module's docstring) -> its files and names; a one-line `ConfigError` when it names none."""
    if name == PROMOTED:
        champion = _champion(home)
        return replace(_named(home, champion), name=PROMOTED, aliases=(champion,))
    return _named(home, name)


def _named(home: Home, name: str) -> ModelRef:
    match = RUN_AT.match(name)
    if match:
        canonical, path = _checkpoint(home, match["run"], match["which"])
        return _describe(_located(home, str(path)), canonical, (name,) if name != canonical else ())
    latest = _latest(home, name)
    path = _located(home, name, latest[1] if latest else None)
    if is_path(name):
        return _describe(path, path.name, (name,))
    if latest and path == latest[1].resolve():
        return _describe(path, latest[0], (name,))
    return _describe(path, name)


def is_path(name: str) -> bool:
    """An absolute or home-relative filesystem path (served by its directory's name, never shown to clients)."""
    return name.startswith(("/", "~")) or "\\" in name


def _candidates(home: Home, name: str) -> list[Path]:
    """Where a local name may be, in order: a path as given, inside the home, a model in HOME/models."""
    return [Path(name).expanduser(), home.root / name, home.models / name]


def _located(home: Home, name: str, latest: Path | None = None) -> Path:
    """The first candidate that is a model directory (`latest`, a run's checkpoint, second)."""
    candidates = _candidates(home, name)
    if latest:
        candidates.insert(1, latest)
    for path in candidates:
        if path.is_dir() and ((path / "adapter_config.json").exists() or (path / "config.json").exists()):
            return path.resolve()
    if Path(name).expanduser().exists():
        raise ConfigError(f"{name} is not a model directory (no config.json or adapter_config.json)")
    raise ConfigError(
        f"model {name!r} is not a model directory, a model in {home.models} or a run with checkpoints in {home.runs}; "
        "for an OpenAI-compatible endpoint pass --base-url URL and the served model's name"
    )


def _latest(home: Home, name: str) -> tuple[str, Path] | None:
    """A run's latest checkpoint and its served name (`RUN@N`); None when `name` is no run with checkpoints."""
    run = RunDir(home.runs / name)
    steps = run.checkpoint_steps() if run.root.is_dir() else []
    return (f"{name}@{steps[-1]}", run.checkpoint(steps[-1])) if steps else None


def _checkpoint(home: Home, run: str, which: str) -> tuple[str, Path]:
    """`RUN@STEP|best|merged|latest` -> its canonical name (`RUN@7`) and directory; a one-line error when it is missing."""
    run_dir = RunDir.for_run(home, run)
    if not run_dir.root.is_dir():
        raise ConfigError(f"no run {run!r} in {home.runs}: name a run there (python cli.py train ... --run-name {run})")
    steps = run_dir.checkpoint_steps()
    if which == "merged":
        if not (run_dir.merged / "config.json").exists():
            raise ConfigError(f"run {run} has no merged model ({run_dir.merged}); train it with --merge")
        return f"{run}@merged", run_dir.merged
    if which == "best":
        if not run_dir.best.exists():
            raise ConfigError(f"run {run} has no chosen checkpoint ({run_dir.best}); train with --keep-best, or name RUN@STEP")
        which = str(json.loads(run_dir.best.read_text())["step"])
    if which == "latest":
        if not steps:
            raise ConfigError(f"run {run} has no checkpoint in {run_dir.checkpoints}")
        which = str(steps[-1])
    if int(which) not in steps:
        listed = ", ".join(f"{run}@{s}" for s in steps) or "none"
        raise ConfigError(f"run {run} has no checkpoint at step {which}; its checkpoints: {listed}")
    return f"{run}@{int(which)}", run_dir.checkpoint(int(which))


def _champion(home: Home) -> str:
    """The champion `improve` recorded last (a path relative to the home, or the base model's name)."""
    state = home.improve_state
    if not state.exists():
        raise ConfigError(f"no model promoted yet ({state} is missing): run python cli.py improve first")
    return json.loads(state.read_text())["champion"]


def _describe(path: Path, name: str, aliases: tuple[str, ...] = ()) -> ModelRef:
    if not any((path / marker).exists() for marker in TOKENIZER_MARKERS):
        raise ConfigError(f"model directory {path} has no tokenizer ({', '.join(TOKENIZER_MARKERS)}): save the tokenizer next to the weights")
    run_dir = path.parent.parent if path.parent.name == "checkpoints" and (path.parent.parent / "run.json").exists() else None
    if path.name == "merged" and (path.parent / "run.json").exists():
        run_dir = path.parent
    adapter = (path / "adapter_config.json").exists()
    base = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path") if adapter else None
    return ModelRef(path, adapter, run_dir, base, name, aliases)


def default_baseline(ref: ModelRef, home: Home) -> str | None:
    """The model a checkpoint was trained from; for a plain model, HOME/models/tiny when it exists."""
    if ref.base_model:
        return ref.base_model
    if ref.run_dir and (ref.run_dir / "run.json").exists():
        return json.loads((ref.run_dir / "run.json").read_text()).get("base_model")
    tiny = home.models / "tiny"
    return str(tiny) if (tiny / "config.json").exists() and tiny.resolve() != ref.path else None


def in_home(home: Home, path: Path | str) -> str:
    """The name a local model is recorded under: its path relative to the home (a moved home still resolves it), else
    its absolute path."""
    path = Path(path)
    return str(path.relative_to(home.root)) if path.is_relative_to(home.root) else str(path)


def resolve_base(home: Home, name: str) -> str:
    """A base model to train from: a directory path (or one inside the home), a name in HOME/models, else the hub id
    (checked to be loadable)."""
    for candidate in _candidates(home, name):
        if (candidate / "config.json").exists():
            return str(candidate.resolve())
    if Path(name).expanduser().exists():
        raise ConfigError(f"{name} has no config.json: it is not a Hugging Face model directory")
    _check_hub_id(home, name)
    return name


def _check_hub_id(home: Home, name: str) -> None:
    from transformers import AutoConfig

    from babylon_rl.train.models import hub_offline

    offline = hub_offline()
    try:
        AutoConfig.from_pretrained(name, local_files_only=offline)
    except (OSError, ValueError):
        where = "not in the Hugging Face cache and downloads are off (HF_HUB_OFFLINE=1)" if offline else "cannot be downloaded"
        raise ConfigError(
            f"base model {name!r} is not a local model directory, not in {home.models} and {where}: "
            "create a local one with python cli.py model init (SmolLM2-135M, offline) or "
            "python cli.py model init-tiny --dataset NAME (then --base-model tiny), "
            "or set HF_HUB_OFFLINE=0 on a machine with network"
        ) from None
