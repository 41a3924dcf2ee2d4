"""The frozen part of the policy computed once: a decision's prompt and menu answers as one packed sequence.

LoRA sits on the top `train_layers` blocks only, so the blocks below compute the same thing at
every epoch, for every policy that shares the base model (the base, each checkpoint, the
imitation baseline). Their output, the hidden state entering the first trained block, is
computed once per sequence and kept (bf16); a training or scoring pass then runs the top
blocks alone from it, a fraction of a pass through the whole model (docs/TRAINING.md).

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
    (float32). The frozen blocks then run in bf16: their output is kept in bf16 anyway, and where bf16 is native they
    run in about half the float32 time (docs/TRAINING.md)."""
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

    def bottom(self, ids, positions, mask, shared: int = 0):
        """The hidden state entering the first trained block, without gradients. `shared`: how many first positions
        every row has alike (the same tokens at positions 0.., seeing only each other, as a batch of prompts that open
        with one system prompt): they run once, for row 0, and the other positions attend to their keys and values.
        The same states as without it (tests/test_learning.py); a third of the quickstart's prompt is its system prompt."""
        import torch

        if shared < 1:
            embed, layers = self._bottom_modules()
            with torch.no_grad():
                return self._blocks(embed(ids), positions, mask, layers)
        head, before = self.extend(ids[:1, :shared], positions[:1, :shared], mask[:1, :, :shared, :shared], keep=True)
        rest, _ = self.extend(ids[:, shared:], positions[:, shared:], mask[:, :, shared:, :], before)
        return torch.cat([head.expand(ids.shape[0], -1, -1), rest], 1)

    def extend(self, ids, positions, mask, before: list | None = None, keep: bool = False):
        """The frozen blocks over `ids` ([B, T] at `positions`) that also attend to `before`: each frozen block's rotated
        keys and values of P earlier tokens ([1 or B, kv heads, P, head dim]), which come first in `mask`'s columns
        ([B, 1, T, P + T]). Returns the states entering the first trained block and, with `keep`, each frozen block's
        keys and values of these tokens (what a later call's `before` takes; else []), without gradients."""
        import torch

        embed, layers = self._bottom_modules()
        with torch.no_grad():
            hidden = embed(ids)
            rotary = self.decoder.rotary_emb(hidden, position_ids=positions)
            rows, made = ids.shape[0], []
            for index, layer in enumerate(layers):
                prior = None if before is None else tuple(t.expand(rows, -1, -1, -1) for t in before[index])
                hidden, keys, values = _block(layer, hidden, rotary, mask, before=prior)
                if keep:
                    made.append((keys, values))
            return hidden, made

    def top(self, states, positions, mask):
        """The final (normed) hidden states from the bottom's output: the trained blocks, then the norm."""
        return self.decoder.norm(self._blocks(states, positions, mask, self.decoder.layers[self.split :]))

    def top_at_choices(self, states, positions, mask, packs: list[Packed]):
        """`top`'s hidden states where a menu choice can be read: each pack's last prompt token and its answer tree,
        [B, Q, hidden], row q of pack b being its packed position `prompt_len - 1 + q` (rows past a pack's end repeat
        its last). The trained blocks but the last run over every position; the last, which nothing follows, only
        over these rows, its keys and values still from every position. A pack's tree is ~12 of its ~330 tokens, so
        the last block costs ~25x less: exactly what `top` gives at these rows (tests/test_learning.py)."""
        import torch

        upper = self.decoder.layers[self.split :]
        hidden = self._blocks(states, positions, mask, upper[:-1])
        width = max(len(p) - p.prompt_len + 1 for p in packs)
        rows = torch.tensor([[min(p.prompt_len - 1 + q, len(p) - 1) for q in range(width)] for p in packs], device=states.device)
        rotary = self.decoder.rotary_emb(hidden, position_ids=positions)
        return self.decoder.norm(_block(upper[-1], hidden, rotary, mask, rows)[0])


def _block(layer, hidden, rotary, mask, rows=None, before=None):
    """A Llama decoder block over `hidden`; returns its output and its own keys and values (rotated: what later rows
    attend to). `rows` ([B, Q] indices into the sequence): the output at those rows only (queries, attention output and
    MLP there; keys and values from every position, under the rows' part of the additive `mask`). `before`: rotated keys
    and values the rows also attend to, which come first in `mask`'s columns."""
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

    attn = layer.self_attn
    batch = hidden.shape[0]

    def at_rows(x):
        return x if rows is None else x.gather(1, rows[..., None].expand(-1, -1, x.shape[-1]))

    def heads(x):
        return x.view(batch, x.shape[1], -1, attn.head_dim).transpose(1, 2)

    normed = layer.input_layernorm(hidden)
    cos, sin = rotary
    keys, values, queries = heads(attn.k_proj(normed)), heads(attn.v_proj(normed)), heads(attn.q_proj(at_rows(normed)))
    _, keys = apply_rotary_pos_emb(keys, keys, cos, sin)  # each call turns two tensors: here the keys at every position
    queries, _ = apply_rotary_pos_emb(queries, queries, at_rows(cos), at_rows(sin))
    mask = mask.to(hidden.dtype)
    if rows is not None:
        mask = mask.gather(2, rows[:, None, :, None].expand(-1, 1, -1, mask.shape[-1]))
    seen_keys, seen_values = (torch.cat([before[0], keys], 2), torch.cat([before[1], values], 2)) if before else (keys, values)
    attended = torch.nn.functional.scaled_dot_product_attention(
        queries, repeat_kv(seen_keys, attn.num_key_value_groups), repeat_kv(seen_values, attn.num_key_value_groups),
        attn_mask=mask, scale=attn.scaling)
    out = at_rows(hidden) + attn.o_proj(attended.transpose(1, 2).reshape(batch, queries.shape[2], -1))
    return out + layer.mlp(layer.post_attention_layernorm(out)), keys, values


def shared_prefix(packs: list[Packed]) -> int:
    """How many first tokens all `packs` share, within every one's prompt and short of its last token."""
    first = packs[0].ids
    limit = min(p.prompt_len for p in packs) - 1
    shared = 0
    while shared < limit and all(p.ids[shared] == first[shared] for p in packs):
        shared += 1
    return shared


def answer_logprobs(split: SplitModel, hidden, packs: list[Packed], at_choices: bool = False):
    """Each answer's log-probability under the menu-constrained policy ([B, width], -inf past a pack's answers): at each
    choice the softmax over the tokens the menu allows there, of logits projected for those tokens only. `hidden`:
    `top`'s, or with `at_choices` `top_at_choices`'s (row 0 at each pack's last prompt token)."""
    import torch

    device = hidden.device
    rows = torch.tensor([b for b, p in enumerate(packs) for _ in p.choices], device=device)
    cols = torch.tensor([c.position - (p.prompt_len - 1 if at_choices else 0) for p in packs for c in p.choices], device=device)
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
