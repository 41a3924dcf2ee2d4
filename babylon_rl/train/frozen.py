"""The frozen part of the policy computed once: a decision's prompt and menu answers as one packed sequence.

LoRA sits on the top `train_layers` blocks only, so the blocks below compute the same thing at
every epoch, for every policy that shares the base model (the base, each checkpoint, the
imitation baseline). Their output, the hidden state entering the first trained block, is
computed once per sequence and kept (bf16); a training or scoring pass then runs the top
blocks alone from it: ~3x cheaper than a pass through the whole model (docs/TRAINING.md).

One decision is one *packed* sequence: its prompt (the chat template, the assistant's turn
opened, `ANSWER_PREFIX`) followed by every answer of its menu, each answer attending to the
prompt and to its own earlier tokens only, at the positions it would have after the prompt
(`attention_mask`). So one pass prices all of a decision's answers, exactly as separate
prompt + answer passes would (tests/test_frozen.py checks the loss and gradients against the
whole model).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from babylon_rl.evaluate.prompts import ANSWER_PREFIX, DecisionPrompt

NEG_INF = -1e9  # additive mask value: large and finite, so a fully masked row gives no NaN


@dataclass(frozen=True)
class Choice:
    """A point where the menu's answers part: the packed position whose next-token logits choose, and the tokens chosen among."""

    position: int
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Packed:
    """A prompt's tokens, then the menu's answers as a token tree (each node once), with the choices each answer makes."""

    ids: tuple[int, ...]
    positions: tuple[int, ...]
    parents: tuple[int, ...]  # each tree node's parent index in `ids` (-1 for the prompt's tokens)
    prompt_len: int
    choices: tuple[Choice, ...]
    paths: tuple[tuple[tuple[int, int], ...], ...]  # per answer: (choice index, which of its tokens) along its way

    def __len__(self) -> int:
        return len(self.ids)


def pack(tokenizer, request: DecisionPrompt, answers: list[str], prefix: str = ANSWER_PREFIX) -> Packed:
    """The prompt (opened with `prefix`, what every answer starts with) and the answers' token tree. Only the tokens up
    to an answer's last choice are kept: what follows is the format, the same whichever way it chose, and a
    menu-constrained policy's odds are its choices' odds."""
    prompt = tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False) + prefix
    ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    bodies = [a[len(prefix):] if a.startswith(prefix) else a for a in answers]
    sequences = [tuple(t) for t in tokenizer(bodies, add_special_tokens=False)["input_ids"]]
    prompt_len = len(ids)
    positions, parents = list(range(prompt_len)), [-1] * prompt_len
    node_of: dict[tuple[int, ...], int] = {(): prompt_len - 1}  # token prefix -> its index in ids

    def children(prefix: tuple[int, ...]) -> list[int]:
        return sorted({s[len(prefix)] for s in sequences if len(s) > len(prefix) and s[: len(prefix)] == prefix})

    choice_index: dict[tuple[int, ...], int] = {}
    choices: list[Choice] = []
    paths = []
    for sequence in sequences:
        path = []
        last_choice = max((d for d in range(len(sequence)) if len(children(sequence[:d])) > 1), default=-1)
        for depth in range(last_choice + 1):
            prefix = sequence[:depth]
            if prefix not in node_of:  # the node of this prefix's last token, under its parent's
                node_of[prefix] = len(ids)
                ids.append(prefix[-1])
                positions.append(prompt_len - 1 + depth)
                parents.append(node_of[prefix[:-1]])
            options = children(prefix)
            if len(options) > 1:
                if prefix not in choice_index:
                    choice_index[prefix] = len(choices)
                    choices.append(Choice(node_of[prefix], tuple(options)))
                path.append((choice_index[prefix], options.index(sequence[depth])))
        paths.append(tuple(path))
    return Packed(tuple(ids), tuple(positions), tuple(parents), prompt_len, tuple(choices), tuple(paths))


def layout(packs: list[Packed], device: str):
    """Right-padded ids [B, T], positions [B, T] and the additive attention mask [B, 1, T, T] of packed sequences:
    the prompt is causal, a tree node sees the prompt, its ancestors and itself."""
    import torch

    width = max(len(p) for p in packs)
    ids = torch.zeros(len(packs), width, dtype=torch.long)
    positions = torch.zeros(len(packs), width, dtype=torch.long)
    allowed = torch.zeros(len(packs), width, width, dtype=torch.bool)
    for b, p in enumerate(packs):
        ids[b, : len(p)] = torch.tensor(p.ids)
        positions[b, : len(p)] = torch.tensor(p.positions)
        allowed[b, : p.prompt_len, : p.prompt_len] = torch.ones(p.prompt_len, p.prompt_len, dtype=torch.bool).tril()
        for node in range(p.prompt_len, len(p)):
            parent = p.parents[node]
            allowed[b, node] = allowed[b, parent]
            allowed[b, node, node] = True
        padding = torch.arange(len(p), width)
        allowed[b, padding, padding] = True  # padding sees itself: no row without a key
    mask = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(~allowed, NEG_INF)[:, None]
    return ids.to(device), positions.to(device), mask.to(device)


@cache  # /proc/cpuinfo is read once a process, not by every trainer, plan and ranker
def bottom_dtype(device: str):
    """torch.bfloat16 where bf16 matmuls are native (a GPU that has them; a CPU with AVX512-BF16 or AMX), else None
    (float32). The frozen blocks then run in bf16: their output is kept in bf16 anyway, and on an AMD EPYC with
    AVX512-BF16 they took 0.29-0.30 s a decision against 0.54 s in float32 (docs/TRAINING.md)."""
    import torch

    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return torch.bfloat16 if "avx512_bf16" in flags or "amx_bf16" in flags else None


class SplitModel:
    """A causal LM (Llama-style, PEFT-wrapped or not) run as its frozen bottom blocks and its trained top blocks.

    With `bottom_dtype` the bottom runs on a copy of its blocks (and the embeddings) in that dtype, made on first
    use: the model's own weights, which a merged model is saved from, stay as they are.
    """

    def __init__(self, model, train_layers: int, bottom_dtype=None) -> None:
        causal = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.decoder = causal.get_decoder()
        self.head = causal.get_output_embeddings()
        self.split = len(self.decoder.layers) - train_layers
        self.bottom_dtype = bottom_dtype
        self._bottom_copy = None

    def _blocks(self, hidden, positions, mask, layers):
        rotary = self.decoder.rotary_emb(hidden, position_ids=positions)
        for layer in layers:
            hidden = layer(hidden, attention_mask=mask.to(hidden.dtype), position_ids=positions, position_embeddings=rotary)
        return hidden

    def _bottom_modules(self):
        """The embeddings and the frozen blocks, in `bottom_dtype` when one is set."""
        import copy

        modules = (self.decoder.embed_tokens, self.decoder.layers[: self.split])
        if self.bottom_dtype is None:
            return modules
        if self._bottom_copy is None:
            self._bottom_copy = tuple(copy.deepcopy(m).to(self.bottom_dtype) for m in modules)
        return self._bottom_copy

    def bottom(self, ids, positions, mask):
        """The hidden state entering the first trained block, without gradients."""
        import torch

        embed, layers = self._bottom_modules()
        with torch.no_grad():
            return self._blocks(embed(ids), positions, mask, layers)

    def top(self, states, positions, mask):
        """The final (normed) hidden states from the bottom's output: the trained blocks, then the norm."""
        return self.decoder.norm(self._blocks(states, positions, mask, self.decoder.layers[self.split :]))


def answer_logprobs(split: SplitModel, hidden, packs: list[Packed]):
    """Each answer's log-probability under the menu-constrained policy ([B, width], -inf past a pack's answers): at each
    choice the softmax over the tokens the menu allows there, of logits projected for those tokens only."""
    import torch

    device = hidden.device
    rows = torch.tensor([b for b, p in enumerate(packs) for _ in p.choices], device=device)
    cols = torch.tensor([c.position for p in packs for c in p.choices], device=device)
    fan = max(len(c.tokens) for p in packs for c in p.choices)
    tokens = torch.tensor([list(c.tokens) + [0] * (fan - len(c.tokens)) for p in packs for c in p.choices], device=device)
    real = torch.tensor([[j < len(c.tokens) for j in range(fan)] for p in packs for c in p.choices], device=device)
    weights = split.head.weight[tokens]  # [choices, fan, hidden]
    logits = torch.einsum("ch,cfh->cf", hidden[rows, cols].float(), weights.float()).masked_fill(~real, -torch.inf)
    choice_logp = torch.log_softmax(logits, 1)
    width = max(len(p.paths) for p in packs)
    picks, owners, present, first = [], [], torch.zeros(len(packs), width, dtype=torch.bool), 0
    for b, p in enumerate(packs):
        present[b, : len(p.paths)] = True
        for j, path in enumerate(p.paths):
            picks += [(first + c) * fan + k for c, k in path]
            owners += [b * width + j] * len(path)
        first += len(p.choices)
    flat = choice_logp.reshape(-1)[torch.tensor(picks, device=device)]
    total = torch.zeros(len(packs) * width, device=device).index_add(0, torch.tensor(owners, device=device), flat)
    return total.view(len(packs), width).masked_fill(~present.to(device), -torch.inf)
