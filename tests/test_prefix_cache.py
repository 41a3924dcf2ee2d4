"""The frozen blocks' work kept across decision prompts (`evaluate/prefix_cache.py`): what it gives is what running the
prompt whole gives, it reuses what prompts share, and it keeps to its budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from babylon_rl.evaluate.decide import _Choosing
from babylon_rl.evaluate.menu import valid_menu
from babylon_rl.evaluate.prefix_cache import PrefixCache
from babylon_rl.evaluate.prompts import decision_prompt

PRICES = ("It is 10:04 UTC; window 2025-01-15T10:00 closes in 56 min.\nPrices:\n"
          "  ACME $197.34 (+0.38% since your last look)\n  BOLT $103.07 (-0.32% since your last look)\n"
          "News so far this window:\n  [10:03] BOLT: Regulators open a probe into Bolt Motors\n")


def _observation(cash: int, holding: str = "none", prices: str = PRICES) -> str:
    return (f"{prices}Your portfolio: cash ${cash:,}.00; positions: {holding}; open bets: none; P&L so far $+0.00.\n"
            "What do you do?")


@pytest.fixture(scope="module")
def split_and_tokenizer(small_llama: Path):
    from babylon_rl.train.frozen import SplitModel
    from babylon_rl.train.models import load_causal_lm

    model, tokenizer = load_causal_lm(str(small_llama), "cpu")
    return SplitModel(model, 1), tokenizer  # float32 throughout: the comparison is exact up to rounding


def _items(tokenizer, observations: list[str]) -> list[_Choosing]:
    from babylon_rl.train.frozen import pack

    prompts = [decision_prompt(o) for o in observations]
    return [_Choosing(pack(tokenizer, p, valid_menu(p, 50))) for p in prompts]


def _whole(split, items: list[_Choosing]) -> list:
    from babylon_rl.train.state_cache import cache_states

    fresh = [_Choosing(item.packed) for item in items]
    cache_states(split, fresh, 1, "cpu")
    return [item.states for item in fresh]


def test_a_prompt_that_opens_as_a_kept_one_runs_only_the_rest_and_gets_the_same_states(split_and_tokenizer):
    import torch

    split, tokenizer = split_and_tokenizer
    observations = [_observation(10_000), _observation(9_000, "ACME x10"), _observation(10_000),
                    _observation(10_000, prices=PRICES.replace("10:04", "10:09"))]
    items = _items(tokenizer, observations)
    cache = PrefixCache()
    reused = []
    for item in items:
        before = cache.stats.reused_tokens
        cache.fill(split, [item], "cpu")
        reused.append(cache.stats.reused_tokens - before)
    for item, whole in zip(items, _whole(split, items)):
        assert item.states.shape == whole.shape and torch.allclose(item.states.float(), whole.float(), atol=2e-2, rtol=1e-2)
    prompt_len = [item.packed.prompt_len for item in items]
    system_turn = len(tokenizer.apply_chat_template(decision_prompt(observations[0]).messages[:1], tokenize=False))
    assert reused[0] == 0
    assert prompt_len[1] - 40 < reused[1] < prompt_len[1]  # the same tick: it parts at the portfolio, the last lines
    assert reused[2] == prompt_len[2] - 1  # the same prompt again: all but the last token, and nothing new kept
    assert 0 < reused[3] < system_turn  # another tick parts in the first line of the observation (at the latest)
    assert len(cache._kept) == 3 and cache.stats.prompt_tokens == sum(prompt_len)
    second = [k for k in cache._kept.values() if k.parent is not None]
    assert len(second) == 2, "what a prompt shares with a kept one is held once, by the kept one"


def test_the_cache_keeps_to_its_budget_and_never_drops_a_prompt_another_extends(split_and_tokenizer):
    import torch

    split, tokenizer = split_and_tokenizer
    observations = [_observation(cash, prices=PRICES.replace("10:04", f"10:{minute:02d}")) for minute in range(10, 20)
                    for cash in (10_000, 8_000)]
    items = _items(tokenizer, observations)
    probe = PrefixCache()
    probe.fill(split, items[:1], "cpu")
    budget = 3 * probe.stats.kept_bytes  # room for about three whole prompts
    cache = PrefixCache(budget)
    for item in items:
        cache.fill(split, [item], "cpu")
        assert cache.stats.kept_bytes <= budget
        kept = set(cache._kept)
        assert all(k.parent is None or k.parent.key in kept for k in cache._kept.values())
        assert cache.stats.kept_bytes == sum(k.nbytes() for k in cache._kept.values())
    assert 2 <= len(cache._kept) < len(items)
    last = items[-1]
    assert torch.allclose(last.states.float(), _whole(split, [last])[0].float(), atol=2e-2, rtol=1e-2)
    nothing = PrefixCache(1)  # too small for any prompt: it keeps none, and still answers
    nothing.fill(split, items[:2], "cpu")
    assert not nothing._kept and nothing.stats.reused_tokens == 0


def test_the_decider_with_a_cache_chooses_as_without(small_llama: Path):
    from babylon_rl.evaluate.decide import Decider
    from babylon_rl.train.frozen import pack, shared_prefix
    from babylon_rl.train.models import load_causal_lm

    model, tokenizer = load_causal_lm(str(small_llama), "cpu")
    prompts = [decision_prompt(_observation(cash, holding)) for cash in (10_000, 500) for holding in ("none", "BOLT x20")]
    plain, cached = Decider(model, tokenizer, 1, "cpu"), Decider(model, tokenizer, 1, "cpu", prefix_cache=PrefixCache())
    plain.split.bottom_dtype = cached.split.bottom_dtype = None  # float32, so that the comparison is exact up to rounding
    want, _ = plain.logprobs(prompts, plain.menus(prompts))
    got, tokens = cached.logprobs(prompts, cached.menus(prompts))
    assert [len(row) for row in got] == [len(row) for row in want] and min(len(row) for row in got) > 1
    for a, b in zip(got, want):
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
    opening = shared_prefix([pack(tokenizer, p, valid_menu(p, 50)) for p in prompts])  # up to the example ticker at least
    assert opening > 20 and cached.prefix_cache.stats.reused_tokens >= 3 * opening  # every prompt after the first
