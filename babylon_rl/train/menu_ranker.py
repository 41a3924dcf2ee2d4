"""Answering from the menu with frozen states: each item's menu log-probabilities (`menu_logprobs`), the entry ranked
first (`ranked`), and `MenuRanker`, which ranks every decision of an evaluation under several adapters of one base
with the frozen blocks run once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from babylon_rl.train.decisions import Task
from babylon_rl.train.frozen import SplitModel, answer_logprobs, bottom_dtype, layout
from babylon_rl.train.menu_items import MenuItem, MenuOptions, make_items
from babylon_rl.train.state_cache import SharedStates, StatesOnDisk, cache_states

RANKED_CHUNK = 256  # decisions whose frozen states an evaluation holds at once (MenuRanker)


def menu_logprobs(split: SplitModel, items: list[MenuItem], device: str):
    """Each item's menu log-probabilities under the menu-constrained policy ([B, width]; -inf on padding), and where they are real."""
    import torch

    packs = [item.packed for item in items]
    ids, positions, mask = layout(packs, device)
    states = torch.zeros(len(items), ids.shape[1], items[0].states.shape[-1], device=device)
    for b, item in enumerate(items):
        states[b, : len(item.packed)] = item.states.to(device, torch.float32)
    logp = answer_logprobs(split, split.top_at_choices(states, positions, mask, packs), packs, at_choices=True)
    return logp, torch.isfinite(logp)


def ranked(split: SplitModel, items: list[MenuItem], device: str, batch: int = 16) -> list[int]:
    """The menu entry ranked first for each item (what greedy menu-constrained decoding answers), items of similar length batched."""
    import torch

    order = sorted((i for i in range(len(items)) if len(items[i].packed.paths) > 1), key=lambda i: len(items[i].packed))
    chosen = [0] * len(items)  # a menu of one entry (hold) needs no model
    with torch.no_grad():
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            logp, _ = menu_logprobs(split, [items[i] for i in part], device)
            for i, best in zip(part, logp.argmax(1).tolist()):
                chosen[i] = best
    return chosen


class MenuRanker:
    """Models that share one base answer decisions from their valid menus (`evaluate/menu.py`, as every decision path
    builds them: `babylon_rl/evaluate/decide.py`); the frozen blocks run once for all of them.

    The base model's blocks below the lowest adapted one are computed once for every decision
    (`cache_states`); each policy (the base itself, or a LoRA adapter on the blocks above) then
    runs only the top blocks. `RANKED_CHUNK` decisions at a time: a chunk's states are ranked under
    every policy, then dropped, so an evaluation's peak memory does not grow with its decisions.
    """

    def __init__(self, base_model: str, adapters: list[Path], shares: int, device: str = "cpu", states_dir: Path | None = None) -> None:
        """`states_dir`: where frozen states are kept across processes (`StatesOnDisk`); None computes them all."""
        from babylon_rl.train.models import load_causal_lm

        self.device = device
        self.disk = StatesOnDisk(states_dir, device) if states_dir else None
        self.adapters = list(adapters)
        self.model, self.tokenizer = load_causal_lm(base_model, device)
        self.model.eval()
        layers = self.model.config.num_hidden_layers
        lowest = min((lowest_adapted_layer(a) for a in adapters), default=layers - 1)  # no adapter: the last block alone
        self.train_layers = layers - lowest
        self.options = MenuOptions(shares=shares, train_layers=self.train_layers, device=device)
        self.bottom_dtype = bottom_dtype(device)
        self.split = SplitModel(self.model, self.train_layers, self.bottom_dtype)
        self._states_key = SharedStates.model_key(base_model, self.train_layers, self.bottom_dtype)
        self._answers: dict[Path | None, list[str]] = {}

    def prepare(self, tasks: list[Task], on_done: Callable[[int], None] = lambda n: None) -> None:
        """Every policy's answer to every task (the base's under None, each adapter's under its path)."""
        items = make_items(self.tokenizer, tasks, self.options, 0, np.random.default_rng(0))
        self._answers = {policy: [] for policy in (None, *self.adapters)}
        for start in range(0, len(items), RANKED_CHUNK):
            chunk = items[start : start + RANKED_CHUNK]
            if self.disk:
                on_done(self.disk.fill(self._states_key, chunk))
            cache_states(self.split, chunk, self.options.cache_batch, self.device, on_done)
            if self.disk:
                self.disk.keep(self._states_key, chunk)
            for policy, answers in self._answers.items():
                answers += [item.answers[i] for item, i in zip(chunk, self._ranked(policy, chunk))]
            for item in chunk:
                item.states = None

    def answers(self, adapter: Path | None) -> list[str]:
        """Each decision's highest-ranked menu answer under the base model with `adapter` on its top blocks (None: the base)."""
        return self._answers[adapter]

    def _ranked(self, adapter: Path | None, items: list[MenuItem]) -> list[int]:
        import warnings

        from peft import PeftModel

        if adapter is None:
            return ranked(self.split, items, self.device)
        with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias
            warnings.simplefilter("ignore", FutureWarning)
            adapted = PeftModel.from_pretrained(self.model, str(adapter)).eval()
        try:
            return ranked(SplitModel(adapted, self.train_layers), items, self.device)
        finally:
            self.model = adapted.unload()  # the base back, without the adapter's layers
            self.split = SplitModel(self.model, self.train_layers, self.bottom_dtype)


def lowest_adapted_layer(adapter: Path) -> int:
    """The lowest block a LoRA adapter changes (0 when it names none: every block)."""
    layers = json.loads((adapter / "adapter_config.json").read_text()).get("layers_to_transform")
    return min(layers) if layers else 0
