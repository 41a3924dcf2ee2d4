"""The frozen blocks' work on prompts kept across decisions: a prompt that opens as an earlier one did runs only the rest.

Every decision prompt opens with the same system turn (one of a few: it names one of the observation's stocks as its
example), and the agents of one game tick see the same prices and news, their prompts parting at their portfolios.
`PrefixCache` keeps, for prompts it has seen, each frozen block's keys and values and the states entering the first
trained block; a new prompt looks up the longest opening it shares with a kept one, and the frozen blocks run over the
rest of it (and its menu) alone, attending to the kept keys and values (`SplitModel.extend`), as vLLM's and SGLang's
prefix caches do. The trained blocks, which an adapter changes, run as before: a cache serves every adapter on one base.

A kept prompt is stored as the part it added to the one it extended (a tree of prompts), so the shared system turn is
held once, not once a prompt. What does not fit `budget` bytes goes, the least recently used first (a prompt others
extend goes only after them). One thread uses a cache at a time (`cli.py serve` runs the model on one).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import count

DEFAULT_PREFIX_CACHE_MB = 128  # SmolLM2-135M keeps ~23 KB a token in bf16: ~5,700 tokens (README: serve)


@dataclass(eq=False)
class _Kept:
    """A kept prompt: its tokens, and the work of those from `start` on (the part before is its `parent`'s)."""

    ids: object  # torch.LongTensor [L]: the whole prompt's tokens
    parent: "_Kept | None"
    start: int
    kv: list  # per frozen block (keys, values), [1, kv heads, L - start, head dim]
    states: object  # [L - start, hidden]: what enters the first trained block
    children: int = 0
    key: int = field(default_factory=count().__next__)

    def nbytes(self) -> int:
        tensors = [t for pair in self.kv for t in pair] + [self.states, self.ids]
        return sum(t.nelement() * t.element_size() for t in tensors)

    def chain(self) -> list["_Kept"]:
        """From the first kept prompt this one extends to itself."""
        return ([*self.parent.chain()] if self.parent else []) + [self]

    def opening(self, length: int):
        """Each frozen block's keys and values and the states of this prompt's first `length` tokens."""
        import torch

        chain = self.chain()
        ends = [k.start for k in chain[1:]] + [len(self.ids)]  # each kept prompt's part ends where the next one starts
        parts = [(k, min(length, end) - k.start) for k, end in zip(chain, ends) if k.start < length]
        kv = [tuple(torch.cat([k.kv[block][side][:, :, :n] for k, n in parts], 2) for side in (0, 1))
              for block in range(len(self.kv))]
        return kv, torch.cat([k.states[:n] for k, n in parts], 0)


@dataclass
class CacheStats:
    """Prompt tokens looked up and found kept; kept bytes now."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    kept_bytes: int = 0


class PrefixCache:
    """The kept prompts of one base model's frozen blocks (one `Decider`'s), within `budget` bytes."""

    def __init__(self, budget: int = DEFAULT_PREFIX_CACHE_MB << 20) -> None:
        self.budget = budget
        self._kept: OrderedDict[int, _Kept] = OrderedDict()
        self.stats = CacheStats()

    def fill(self, split, items: list, device: str) -> None:
        """Fill each item's `states` (as `train/state_cache.cache_states` does), one item at a time: the frozen blocks run
        over what follows the longest kept opening of its prompt, and its prompt is kept for the next ones. One at a
        time, so that an item reuses the one before it; on a CPU a batch saves nothing over its rows' own matmuls."""
        import torch

        from babylon_rl.train.frozen import layout

        for item in items:
            packed = item.packed
            ids = torch.tensor(packed.ids[: packed.prompt_len])
            found, shared = self._longest(ids)
            reused = min(shared, packed.prompt_len - 1)  # the last prompt token runs: something must
            owner = _owner(found, reused)
            before, opening = owner.opening(reused) if owner else (None, None)
            all_ids, positions, mask = layout([packed], device)
            states, kv = split.extend(all_ids[:, reused:], positions[:, reused:], mask[:, :, reused:, :], before, keep=True)
            states = states[0].to(torch.bfloat16)
            item.states = (torch.cat([opening.to(states.device), states]) if opening is not None else states).clone()
            self.stats.prompt_tokens += packed.prompt_len
            self.stats.reused_tokens += reused
            if shared < packed.prompt_len:  # else a kept prompt already opens with all of it
                own = packed.prompt_len - reused
                work = [(k[:, :, :own].clone(), v[:, :, :own].clone()) for k, v in kv]
                self._keep(_Kept(ids, owner, reused, work, states[:own].clone()))

    def _longest(self, ids) -> tuple[_Kept | None, int]:
        """The kept prompt that shares the longest opening with `ids`, and that opening's length (marked as used)."""
        best, best_length = None, 0
        for kept in self._kept.values():
            width = min(len(kept.ids), len(ids))
            differ = (kept.ids[:width] != ids[:width]).nonzero()
            length = int(differ[0]) if len(differ) else width
            if length > best_length:
                best, best_length = kept, length
        if best is not None:
            for kept in best.chain():
                self._kept.move_to_end(kept.key)
        return best, best_length

    def _keep(self, kept: _Kept) -> None:
        """Keep `kept` within the budget, dropping the least recently used prompts no other extends; or not at all."""
        size = kept.nbytes()
        if size > self.budget:
            return
        while self.stats.kept_bytes + size > self.budget and self._drop_oldest_leaf(avoid=kept.parent):
            pass
        if self.stats.kept_bytes + size > self.budget:
            return
        if kept.parent is not None:
            kept.parent.children += 1
        self._kept[kept.key] = kept
        self.stats.kept_bytes += size

    def _drop_oldest_leaf(self, avoid: _Kept | None) -> bool:
        """Drop the least recently used kept prompt that none extends and `avoid` does not stand on; False if none."""
        pinned = {k.key for k in avoid.chain()} if avoid else set()
        for key, kept in self._kept.items():
            if kept.children == 0 and key not in pinned:
                del self._kept[key]
                self.stats.kept_bytes -= kept.nbytes()
                if kept.parent is not None:
                    kept.parent.children -= 1
                return True
        return False


def _owner(found: _Kept | None, length: int) -> _Kept | None:
    """The kept prompt of `found`'s chain that holds the work of token `length - 1` (None when `length` is 0): what a
    prompt sharing `length` tokens with `found` extends."""
    if found is None or length < 1:
        return None
    return [k for k in found.chain() if k.start < length][-1]
