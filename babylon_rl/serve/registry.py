"""Which models a server holds, by the names clients send, and loading them.

A name is one of:
- `RUN@STEP` (a run's checkpoint, as ART names them), `RUN@best` (the one `--keep-best` chose),
  `RUN@merged` (the run's merged model), or `RUN` alone (its latest checkpoint, served as `RUN@N`
  and answering to `RUN` too);
- `promoted`: the model `improve` promoted last (HOME/improve/state.json's champion);
- anything `eval --model` takes: a model in HOME/models (`smollm2-135m`), a directory (served under its
  directory's name, answering to the path too: clients never see where the files are).

Adapters are served on one copy of their base model (PEFT, one adapter active per batch), and
their base is served too, under its directory's name, as `/v1/models` lists it as their `parent`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.policies import ModelRef, resolve_model
from babylon_rl.settings import Home
from babylon_rl.train.runs import RunDir

PROMOTED = "promoted"
RUN_AT = re.compile(r"^(?P<run>[A-Za-z0-9_.-]+)@(?P<which>\d+|best|merged|latest)$")


@dataclass(frozen=True)
class Served:
    """One model as clients name it: `id` (and `aliases`), its files, the base it adapts (`parent`)."""

    id: str
    ref: ModelRef
    aliases: tuple[str, ...] = ()
    parent: str | None = None


def checkpoint_path(home: Home, run: str, which: str) -> tuple[str, Path]:
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


def promoted_model(home: Home) -> str:
    """The champion `improve` recorded last (a path relative to the home, or the base model's name)."""
    state = home.root / "improve" / "state.json"
    if not state.exists():
        raise ConfigError(f"no model promoted yet ({state} is missing): run python cli.py improve first")
    return json.loads(state.read_text())["champion"]


def resolve_served(home: Home, name: str) -> tuple[str, ModelRef, tuple[str, ...]]:
    """A name -> (the id it is served as, its files, the other names it answers to)."""
    if name == PROMOTED:
        champion = promoted_model(home)
        return PROMOTED, resolve_model(home, champion), (champion,)
    match = RUN_AT.match(name)
    if match:
        canonical, path = checkpoint_path(home, match["run"], match["which"])
        return canonical, resolve_model(home, str(path)), (name,) if name != canonical else ()
    if (home.runs / name).is_dir() and not (home.models / name).exists():
        canonical, path = checkpoint_path(home, name, "latest")
        return canonical, resolve_model(home, str(path)), (name,)
    ref = resolve_model(home, name)
    return (ref.path.name, ref, (name,)) if is_path(name) else (name, ref, ())


def is_path(name: str) -> bool:
    """An absolute or home-relative filesystem path (served by its directory's name, never shown to clients)."""
    return name.startswith(("/", "~")) or "\\" in name


def plan(home: Home, names: list[str]) -> list[Served]:
    """Every model to serve, adapters' bases added; a name given twice, or two models under one id, is an error."""
    served: dict[str, Served] = {}
    for name in names:
        model_id, ref, aliases = resolve_served(home, name)
        if model_id in served:
            raise ConfigError(f"{name} is served as {model_id}, a name already served; name each model once (a directory "
                              "is served under its directory's name)")
        served[model_id] = Served(model_id, ref, aliases)
    by_path = {s.ref.path: s.id for s in served.values() if not s.ref.adapter}
    for item in list(served.values()):
        if not item.ref.adapter:
            continue
        base = Path(item.ref.base_model or "")
        if not (base / "config.json").exists():
            raise ConfigError(f"{item.id}: its base model {item.ref.base_model} is not a local model directory")
        base = base.resolve()
        if base not in by_path:
            base_id = base.name if base.name not in served else f"{base.name}-base"
            served[base_id] = Served(base_id, resolve_model(home, str(base)))
            by_path[base] = base_id
        served[item.id] = Served(item.id, item.ref, item.aliases, by_path[base])
    return list(served.values())


@dataclass
class Loaded:
    """A model ready to answer: the torch model (a PEFT model when adapters share it), its tokenizer, the adapter to
    switch on (None: the base itself, adapters off), and its context length."""

    served: Served
    model: object
    tokenizer: object
    adapter: str | None
    context: int


@dataclass
class Pool:
    models: dict[str, Loaded] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Loaded | None:
        return self.models.get(self.aliases.get(name, name))


def load_pool(plan_: list[Served], device: str) -> Pool:
    """Load every base once, then each adapter onto its base (named a0, a1...: PEFT names must be identifiers)."""
    import babylon_rl.train  # noqa: F401  (offline defaults before transformers loads)
    from transformers.utils import logging as hf_logging

    from babylon_rl.train.models import load_causal_lm, load_tokenizer

    hf_logging.disable_progress_bar()
    pool = Pool()
    bases = {s.id: load_causal_lm(str(s.ref.path), device) for s in plan_ if not s.ref.adapter}
    wrapped: dict[str, object] = {}
    for index, s in enumerate(x for x in plan_ if x.ref.adapter):
        wrapped[s.parent] = _attach(wrapped.get(s.parent) or bases[s.parent][0], str(s.ref.path), f"a{index}")
        pool.models[s.id] = Loaded(s, wrapped[s.parent], load_tokenizer(str(s.ref.path)), f"a{index}", 0)
    for s in plan_:
        if not s.ref.adapter:
            model, tokenizer = bases[s.id]
            pool.models[s.id] = Loaded(s, wrapped.get(s.id, model), tokenizer, None, 0)
    for loaded in pool.models.values():
        loaded.model.eval()
        loaded.context = int(getattr(_config(loaded.model), "max_position_embeddings", 2048))
        pool.aliases.update({alias: loaded.served.id for alias in loaded.served.aliases})
    return pool


def _config(model):
    return model.get_base_model().config if hasattr(model, "get_base_model") else model.config


def _attach(model, path: str, name: str):
    import warnings

    from peft import PeftModel

    with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias
        warnings.simplefilter("ignore", FutureWarning)
        if isinstance(model, PeftModel):
            model.load_adapter(path, adapter_name=name)
            return model
        return PeftModel.from_pretrained(model, path, adapter_name=name)
