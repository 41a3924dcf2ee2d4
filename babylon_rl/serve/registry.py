"""Which models a server holds, by the names clients send, and loading them.

A name is any model name (`babylon_rl/model_names.py`: a run's checkpoint, `promoted`, a model in HOME/models, a
directory); a model is served under the id that module gives it and answers to its aliases too (`RUN` to `RUN@7`, a
directory's path to its name: clients never see where the files are).

Adapters are served on one copy of their base model (PEFT, one adapter active per batch), and
their base is served too, under its directory's name, as `/v1/models` lists it as their `parent`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from babylon_rl.errors import ConfigError
from babylon_rl.model_names import ModelRef, resolve
from babylon_rl.settings import Home


@dataclass(frozen=True)
class Served:
    """One model as clients name it: `id` (and `aliases`), its files, the base it adapts (`parent`)."""

    id: str
    ref: ModelRef
    aliases: tuple[str, ...] = ()
    parent: str | None = None


def plan(home: Home, names: list[str]) -> list[Served]:
    """Every model to serve, adapters' bases added; a name given twice, or two models under one id, is an error."""
    served: dict[str, Served] = {}
    for name in names:
        ref = resolve(home, name)
        if ref.name in served:
            raise ConfigError(f"{name} is served as {ref.name}, a name already served; name each model once (a directory "
                              "is served under its directory's name)")
        served[ref.name] = Served(ref.name, ref, ref.aliases)
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
            served[base_id] = Served(base_id, resolve(home, str(base)))
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
