"""A tiny Qwen2-architecture model trained from the dataset itself, for the quickstart and tests.

`init_tiny` trains a byte-level BPE tokenizer on the dataset's conversations with Qwen2's
own pre-tokenizer (so transformers reloads it unchanged), gives it a ChatML template with
`{% generation %}` tags (assistant masks), builds a ~100k-1M parameter Qwen2 model from
config and warm-starts it with supervised fine-tuning on the logged assistant answers so
that it already answers in the game's JSON action format. Saved to HOME/models/NAME/.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home, safe_name
from babylon_rl.train.data import dataset_texts, encode_chunks, pad_encoded
from babylon_rl.train.models import answer_logits, set_threads
from babylon_rl.train.step import optimizer_step

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML as Qwen2 uses it; the assistant answer and its end marker are the trainable span.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{%- else %}"
    "{{- message['content'] + '<|im_end|>' }}"
    "{%- endif %}"
    "{{- '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    vocab_size: int = 512
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    max_positions: int = 1024
    warmup_steps: int = 150
    warmup_lr: float = 3e-3
    batch_size: int = 8
    max_length: int = 1024  # training chunk length (encode_chunks); at most max_positions
    seed: int = 0


@dataclass(frozen=True)
class TinyResult:
    path: Path
    parameters: int
    vocab_size: int
    warmup_loss: float
    seconds: float


def conversation_text(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def train_tokenizer(conversations: list[list[dict]], vocab_size: int):
    """A Qwen2Tokenizer whose BPE vocabulary and merges are learnt from the conversations."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator((conversation_text(c) for c in conversations), trainer=trainer)
    spec = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=spec["vocab"],
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer, spec: TinySpec):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForCausalLM(config)


def supervised_fine_tune(model, tokenizer, examples: list, steps: int, lr: float, batch_size: int, seed: int,
                         on_step=None) -> float:
    """`steps` AdamW steps on random batches of encoded examples, loss on the answer tokens only; returns the last loss.

    `on_step(step, loss)` is called after every step.
    """
    import torch

    def loss_of(batch: list) -> torch.Tensor:
        ids, attention, mask = pad_encoded(batch, tokenizer.pad_token_id)
        logits, targets = answer_logits(model, ids, attention, mask[:, 1:])
        return torch.nn.functional.cross_entropy(logits, targets)

    rng = random.Random(seed)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    loss_value = float("nan")
    for step in range(steps):
        batch = rng.sample(examples, min(batch_size, len(examples)))
        loss_value, _ = optimizer_step(model, optimizer, params, 1.0, [batch], loss_of)
        if on_step:
            on_step(step + 1, loss_value)
    return loss_value


def warm_start(model, tokenizer, conversations: list[list[dict]], spec: TinySpec, on_step=None) -> float:
    """Supervised fine-tuning on the logged assistant answers; returns the last loss."""
    encoded = [e for c in conversations for e in encode_chunks(tokenizer, c, spec.max_length)]
    return supervised_fine_tune(model, tokenizer, encoded, spec.warmup_steps, spec.warmup_lr, spec.batch_size, spec.seed, on_step)


def init_tiny(home: Home, dataset: str, name: str, spec: TinySpec, on_step=None) -> TinyResult:
    safe_name(name, "model name")
    started = time.monotonic()
    conversations = dataset_texts(home, dataset)
    if not conversations:
        raise ConfigError(f"dataset {dataset!r} has no conversations to learn from")
    tokenizer = train_tokenizer(conversations, spec.vocab_size)
    model = build_model(tokenizer, spec)
    set_threads(model)
    loss = warm_start(model, tokenizer, conversations, spec, on_step)
    target = home.models / name
    with atomic.directory(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "babylon_tiny.json").write_text(json.dumps({"dataset": dataset, "spec": spec.__dict__, "warmup_loss": loss}, indent=2))
    params = sum(p.numel() for p in model.parameters())
    return TinyResult(target, params, len(tokenizer), loss, time.monotonic() - started)
