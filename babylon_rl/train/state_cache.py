"""The frozen states of menu items: computed once (`cache_states`), handed to the next trainer of the process
(`SharedStates`) and kept on disk for the next process (`StatesOnDisk`).

What is frozen (`frozen.py`): the hidden state entering the top `train_layers` blocks, for each packed prompt +
menu, in bf16. It is most of what a menu run costs on a CPU, paid once per decision and naming.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from babylon_rl.train.frozen import Packed, SplitModel, layout, shared_prefix

if TYPE_CHECKING:
    from babylon_rl.train.menu_items import MenuItem

# Frozen states are computed in batches of prompts that open alike: this many first tokens hold the system prompt with its
# example ticker (evaluate/prompts.py: 32 tokens in), one of as many variants as the game has stocks
OPENING = 64
SHARED_STATES_BYTES = 512 << 20  # the most frozen states `SharedStates` keeps for the next trainer of a process (~1,300 decisions)
STATES_ON_DISK_BYTES = 8 << 30  # the most `StatesOnDisk` keeps (~20,000 decisions of SmolLM2's ~340 packed tokens)


def cache_states(split: SplitModel, items: list[MenuItem], batch: int, device: str, on_done: Callable[[int], None] = lambda n: None) -> None:
    """Fill each item's `states`: the frozen blocks run once over its packed sequence. Items are batched by their opening
    (`OPENING` tokens: the system prompt up to its example ticker), then by length, and a batch's shared opening runs once
    (`SplitModel.bottom`)."""
    import torch

    todo = sorted((i for i, item in enumerate(items) if item.states is None),
                  key=lambda i: (items[i].packed.ids[:OPENING], len(items[i].packed)))
    for start in range(0, len(todo), batch):
        chunk = [items[i] for i in todo[start : start + batch]]
        packs = [c.packed for c in chunk]
        ids, positions, mask = layout(packs, device)
        states = split.bottom(ids, positions, mask, shared_prefix(packs) if len(packs) > 1 else 0)
        for row, item in zip(states, chunk):
            item.states = row[: len(item.packed)].to(torch.bfloat16).clone()  # where they were computed: a GPU keeps them
        on_done(len(chunk))


class SharedStates:
    """The frozen states the menu trainers of one process computed, by content, for the next trainer on the same base.

    Two trainers on one base, dataset and seed (the quickstart's imitation baseline, then its menu
    run) see the same decisions under the same renamings, so the same packed sequences: the second
    takes the first's states instead of running the frozen blocks again. The key is the base model
    (its directory and files' times), the number of trained blocks, the bottom's dtype and the
    packed sequence itself, so a state is reused only where it is exactly what would be computed.
    The oldest go first beyond `SHARED_STATES_BYTES`.
    """

    def __init__(self, budget: int = SHARED_STATES_BYTES) -> None:
        self.budget = budget
        self._states: OrderedDict[tuple, object] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def model_key(base_model: str, train_layers: int, dtype) -> tuple:
        path = Path(base_model)
        stamps = tuple(sorted((f.name, f.stat().st_mtime_ns) for f in path.iterdir() if f.is_file())) if path.is_dir() else ()
        return str(path.resolve()) if path.exists() else base_model, stamps, train_layers, str(dtype)

    def fill(self, model: tuple, items: list[MenuItem]) -> None:
        """Each item without states takes the ones kept for its packed sequence, if any."""
        for item in items:
            if item.states is None:
                item.states = self._states.get((model, item.packed))

    def clear(self) -> None:
        """Let go of every kept state (no trainer of this process will ask for them again)."""
        self._states.clear()
        self._bytes = 0

    def keep(self, model: tuple, items: list[MenuItem]) -> None:
        for item in items:
            key = (model, item.packed)
            if key not in self._states:
                self._states[key] = item.states
                self._bytes += item.states.numel() * item.states.element_size()
        while self._bytes > self.budget and self._states:
            _, dropped = self._states.popitem(last=False)
            self._bytes -= dropped.numel() * dropped.element_size()


SHARED_STATES = SharedStates()


class StatesOnDisk:
    """Frozen states kept across processes, one file per packed sequence, under `HOME/.cache/frozen-states`.

    The frozen blocks are most of what a run on a CPU costs the first time it sees a decision (docs/TRAINING.md, its
    opening), and a user reruns `train` on the same dataset with other settings, then `eval`s,
    again and again. Keyed as `SharedStates` is (the base model's files and times, the trained blocks, the bottom's
    dtype, the packed sequence) and by the device kind and torch version, so a state is read back only where it is
    exactly what would be computed. Written to a temporary name, then renamed: a kill leaves a whole file or none.
    The least recently used go first beyond `budget` bytes.
    """

    def __init__(self, directory: Path, device: str, budget: int = STATES_ON_DISK_BYTES) -> None:
        self.directory = directory
        self.device = device.split(":")[0]  # cpu or cuda: their kernels' results differ in the last bits
        self.budget = budget

    def _path(self, model: tuple, packed: Packed) -> Path:
        import hashlib

        import torch

        key = repr((model, self.device, torch.__version__, packed.ids, packed.positions, packed.parents))
        return self.directory / f"{hashlib.sha256(key.encode()).hexdigest()}.pt"

    def fill(self, model: tuple, items: list[MenuItem]) -> int:
        """Each item without states takes the ones on disk for its packed sequence, if any; how many did."""
        import torch

        found = 0
        for item in items:
            if item.states is not None:
                continue
            path = self._path(model, item.packed)
            try:
                states = torch.load(path, weights_only=True)
            except (OSError, RuntimeError, EOFError):  # not there, or not a whole file: computed again
                continue
            if states.shape[0] == len(item.packed):
                item.states, found = states, found + 1
                path.touch()  # recently used: evicted last
        return found

    def keep(self, model: tuple, items: list[MenuItem]) -> None:
        import torch

        self.directory.mkdir(parents=True, exist_ok=True)
        for item in items:
            path = self._path(model, item.packed)
            if item.states is None or path.exists():
                continue
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(item.states.cpu(), tmp)
            tmp.replace(path)
        self._evict()

    def _evict(self) -> None:
        files = sorted(self.directory.glob("*.pt"), key=lambda f: f.stat().st_mtime)
        total = sum(f.stat().st_size for f in files)
        for f in files:
            if total <= self.budget:
                break
            total -= f.stat().st_size
            f.unlink(missing_ok=True)


def fill_states(split: SplitModel, model: tuple, items: list[MenuItem], batch: int, device: str, disk: StatesOnDisk | None) -> None:
    """Each item's frozen states: from this process's earlier trainers, else from disk, else computed (and kept for both)."""
    SHARED_STATES.fill(model, items)
    if disk is not None:
        disk.fill(model, items)
    cache_states(split, items, batch, device)
    SHARED_STATES.keep(model, items)
    if disk is not None:
        disk.keep(model, items)


def save_states(items: list[MenuItem], path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save([item.states for item in items], tmp)
    tmp.replace(path)


def load_states(items: list[MenuItem], path: Path) -> bool:
    """Restore cached states saved for exactly these items; False (nothing restored) when there are none or they do not fit."""
    import torch

    if not path.exists():
        return False
    states = torch.load(path)
    if len(states) != len(items) or any(s is not None and s.shape[0] != len(i.packed) for s, i in zip(states, items)):
        return False
    for item, s in zip(items, states):
        item.states = s
    return True
