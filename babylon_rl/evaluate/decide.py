"""One decision path: what the agent saw goes in, one valid action comes out.

`eval`, `arena`, `simulate --policy`, `improve`'s gate and `serve`'s answer to a game action
request all decide here. The model does not write its answer: it chooses one entry of the menu of
actions the game would accept at that decision (`evaluate/menu.py`), as structured output does
in vLLM (`guided_choice`) and OpenAI (a JSON schema). Why a menu and not free writing:

- every answer is an action the game accepts, so the figures `eval` reports are those of the
  agent the game gets; a model whose writing drifted (the menu objectives train the ranking of
  answers, not their spelling) can no longer lose its decisions to answers that do not parse;
- one batched pass prices a whole menu (`train/frozen.py`'s packed sequence: the prompt once,
  the answers as a token tree), cheaper than writing ~15 tokens one at a time;
- it is the policy the menu objectives train: the softmax over the menu's answers.

A decision whose menu holds only hold gets hold without a model call. Greedy decisions take the
first-ranked entry; sampled ones (`serve` at temperature > 0) draw from the menu's softmax.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from babylon_rl.evaluate.menu import valid_menu
from babylon_rl.evaluate.prompts import ANSWER_PREFIX, DecisionPrompt

DEFAULT_SHARES = 50  # the menu's trade size when the model's run does not name one (train --shares)


@dataclass(frozen=True)
class Decided:
    """One decision: the chosen menu entry (in the prompt's names) and its token counts."""

    answer: str
    prompt_tokens: int
    answer_tokens: int


@dataclass
class _Choosing:
    packed: object  # train/frozen.py's Packed: the prompt, then the menu as a token tree
    states: object = None  # filled by cache_states


def run_shares(run_dir: Path | None) -> int:
    """The menu size a run was trained with (run.json's `shares`), else `DEFAULT_SHARES`."""
    config = run_dir / "run.json" if run_dir else None
    if config and config.exists():
        return int(json.loads(config.read_text()).get("shares") or DEFAULT_SHARES)
    return DEFAULT_SHARES


def top_layers(model, adapter: Path | None) -> int:
    """How many top blocks a policy runs from the frozen states: those its adapter changes, else one (a plain or merged
    model: every block below the last is then frozen work, which `serve`'s prefix cache keeps; what eval's MenuRanker
    runs for it too)."""
    from babylon_rl.train.menu_ranker import lowest_adapted_layer

    return model.config.num_hidden_layers - lowest_adapted_layer(adapter) if adapter else 1


class Decider:
    """A model (its adapter, if any, switched on by the caller) choosing each decision's answer from its valid menu."""

    def __init__(self, model, tokenizer, train_layers: int, device: str, shares: int = DEFAULT_SHARES,
                 batch: int = 16, prefix_cache=None) -> None:
        """`prefix_cache` (`evaluate/prefix_cache.PrefixCache`): the frozen blocks' work on earlier prompts, reused where a
        prompt opens as one of them did (`serve`); None runs every prompt whole, in batches of `batch`."""
        from babylon_rl.train.frozen import SplitModel, bottom_dtype

        self.tokenizer, self.device, self.shares, self.batch = tokenizer, device, shares, batch
        self.split = SplitModel(model, train_layers, bottom_dtype(device))
        self.prefix_cache = prefix_cache

    def menus(self, prompts: Sequence[DecisionPrompt]) -> list[list[str]]:
        return [valid_menu(p, self.shares) for p in prompts]

    def logprobs(self, prompts: Sequence[DecisionPrompt], menus: list[list[str]]) -> tuple[list[list[float]], list[int]]:
        """Each menu's log-probabilities under the menu-constrained policy, and each prompt's tokens as packed (the chat
        template, the opened answer); a hold-only menu is [0.0] and 0 tokens, without a model call."""
        import torch

        from babylon_rl.train.menu_ranker import menu_logprobs
        from babylon_rl.train.state_cache import cache_states
        from babylon_rl.train.frozen import pack

        asked = [i for i, m in enumerate(menus) if len(m) > 1]
        items = [_Choosing(pack(self.tokenizer, prompts[i], menus[i], ANSWER_PREFIX)) for i in asked]
        out: list[list[float]] = [[0.0] for _ in menus]
        prompt_tokens = [0] * len(menus)
        for i, item in zip(asked, items):
            prompt_tokens[i] = item.packed.prompt_len
        order = sorted(range(len(items)), key=lambda j: len(items[j].packed))
        with torch.no_grad():
            for start in range(0, len(order), self.batch):
                part = [items[j] for j in order[start : start + self.batch]]
                if self.prefix_cache is not None:
                    self.prefix_cache.fill(self.split, part, self.device)
                else:
                    cache_states(self.split, part, self.batch, self.device)
                logp, _ = menu_logprobs(self.split, part, self.device)
                for j, row in zip(order[start : start + self.batch], logp.tolist()):
                    out[asked[j]] = row[: len(menus[asked[j]])]
                for item in part:
                    item.states = None
        return out, prompt_tokens

    def decide(self, prompts: Sequence[DecisionPrompt], temperature: float = 0.0, samples: int = 1,
               generator=None) -> list[list[Decided]]:
        """`samples` decisions for each prompt: the first-ranked entry at temperature 0, else drawn from the menu's
        softmax at that temperature (with `generator`, a torch.Generator, for a seeded draw; or a list of one per prompt,
        so that a prompt's draws depend on its own generator alone)."""
        import torch

        menus = self.menus(prompts)
        logps, prompt_tokens = self.logprobs(prompts, menus)
        generators = generator if isinstance(generator, (list, tuple)) else [generator] * len(prompts)
        decided = []
        for menu, logp, tokens, drawn_by in zip(menus, logps, prompt_tokens, generators):
            if temperature > 0 and len(menu) > 1:
                probs = torch.softmax(torch.tensor(logp) / temperature, 0)
                picks = torch.multinomial(probs, samples, replacement=True, generator=drawn_by).tolist()
            else:
                picks = [max(range(len(menu)), key=logp.__getitem__)] * samples
            decided.append([Decided(menu[k], tokens, self._answer_tokens(menu[k])) for k in picks])
        return decided

    def _answer_tokens(self, answer: str) -> int:
        body = answer[len(ANSWER_PREFIX):] if answer.startswith(ANSWER_PREFIX) else answer
        return len(self.tokenizer(body, add_special_tokens=False)["input_ids"])
