"""A training step's peak memory, estimated before the model loads, against the memory this process can use.

The estimate is an upper bound from the settings alone (so it holds for any data): the model's
weights, the optimizer's state, the activations autograd keeps for the trained blocks of the
largest micro-batch (`max(micro_batch, max_length)` tokens), one chunk of vocabulary logits and
the runtime (python, torch, transformers). Constants were fitted to SmolLM2-135M on CPU
(docs/TRAINING.md, "Memory"); they over-estimate rather than under-. A run whose estimate does not fit is
refused with one line before anything heavy starts: a kill by the kernel says nothing.
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass
from pathlib import Path

from babylon_rl.errors import ResourceError
from babylon_rl.train.models import LOGPROB_CHUNK

GB = 1e9
RUNTIME_BYTES = 700_000_000  # python + torch + transformers + peft + tokenizer and data: set to keep every path's estimate
# above its measured peak (docs/TRAINING.md#memory-memorypy)
VIRTUAL_SLACK = 1_500_000_000  # address space beyond resident memory (mmapped weights file, thread stacks): RLIMIT_AS only
CHECKPOINT_ABOVE = 2_500_000_000  # a plan above this turns gradient checkpointing on (slower, far less memory)
MMAP_THRESHOLD = 128 * 1024  # glibc: larger allocations are mmapped and returned on free (see bound_allocator)
# The menu objectives' transients are one block's at a time: a low threshold there only turns every tensor into an
# mmap and its first touch into page faults, and the kernel's time swamped the run's; 256 MiB ends that for a little
# more peak memory (docs/TRAINING.md#memory-memorypy)
MENU_MMAP_THRESHOLD = 256 * 1024 * 1024


@dataclass(frozen=True)
class ModelShape:
    parameters: int
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int

    @classmethod
    def of(cls, config) -> "ModelShape":
        """From a transformers config (no weights loaded): parameters counted as a decoder-only transformer's."""
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        hidden, layers, vocab = text.hidden_size, text.num_hidden_layers, text.vocab_size
        heads = text.num_attention_heads
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        intermediate = getattr(text, "intermediate_size", None) or 4 * hidden
        kv = hidden * kv_heads // heads
        per_layer = hidden * (2 * hidden + 2 * kv) + 3 * hidden * intermediate + 2 * hidden
        embeddings = vocab * hidden * (1 if getattr(text, "tie_word_embeddings", True) else 2)
        return cls(layers * per_layer + embeddings, vocab, hidden, intermediate, layers, heads, kv_heads)


@dataclass(frozen=True)
class Plan:
    """What one training process will hold at its peak, in bytes."""

    weights: int
    optimizer: int
    activations: int
    logits: int
    checkpointing: bool
    cached: int = 0  # frozen states held for reuse (the menu objective)

    @property
    def total(self) -> int:
        return RUNTIME_BYTES + self.weights + self.optimizer + self.activations + self.logits + self.cached


def plan(shape: ModelShape, tokens: int, lora_r: int, trained_layers: int,
         checkpointing: bool, reference_copy: bool = False) -> Plan:
    """Peak of a step on `tokens` padded tokens; `trained_layers` blocks (0: all) keep activations."""
    trained_layers = trained_layers or shape.layers
    kv = shape.hidden * shape.kv_heads // shape.heads
    lora = 0 if lora_r == 0 else trained_layers * lora_r * (7 * shape.hidden + 2 * kv + 3 * shape.intermediate)
    trainable = shape.parameters if lora_r == 0 else lora
    weights = 4 * shape.parameters * (2 if reference_copy else 1) + 4 * lora
    optimizer = 4 * 3 * trainable  # gradient, Adam's two moments
    # saved for backward per token and block, fitted (~54 KB for SmolLM2); SDPA's kernels keep no [T, T] scores
    per_token_layer = 4 * (10 * shape.hidden + 5 * shape.intermediate)
    if checkpointing:  # block inputs kept; one block recomputed at a time
        activations = 4 * shape.hidden * tokens * trained_layers + per_token_layer * tokens
    else:
        activations = per_token_layer * tokens * trained_layers
    logits = 4 * 4 * LOGPROB_CHUNK * shape.vocab  # one chunk's logits, their exp and gradient
    return Plan(weights, optimizer, activations, logits, checkpointing)


def decision_plan(shape: ModelShape, prompts: int, prompt_tokens: int, answers: int, answer_tokens: int,
                  lora_r: int, trained_layers: int) -> Plan:
    """Peak of a decision path's pass (`grpo.py`): `prompts` prompts of `prompt_tokens`, each with `answers`
    answers of `answer_tokens`. The prompt runs once and its KV cache is repeated per answer (kept for the
    backward pass), so the cache and the answers' vocabulary logits grow with `answers`, not the prompt pass."""
    tokens = prompts * (prompt_tokens + answers * answer_tokens)
    step = plan(shape, tokens, lora_r, trained_layers, False)
    kv = shape.hidden * shape.kv_heads // shape.heads
    repeated_cache = 2 * 4 * 2 * kv * shape.layers * prompts * answers * (prompt_tokens + answer_tokens)
    logits = 4 * 3 * prompts * answers * answer_tokens * shape.vocab  # logits, their log-softmax and gradient
    return Plan(step.weights, step.optimizer, step.activations + repeated_cache, logits, False)


def cached_plan(shape: ModelShape, items: int, mean_tokens: float, longest: int, micro_batch: int, lora_r: int,
                trained_layers: int, bf16_bottom: bool = False, adapters: int = 1) -> Plan:
    """Peak of the menu objective (`menu_trainer.py`): every item's frozen states in bf16 (kept for reuse), and a pass
    of the trained blocks over `micro_batch` items of `longest` tokens (its logits are the menu's tokens only).
    `bf16_bottom`: the frozen blocks and the embeddings also run from a bf16 copy (frozen.SplitModel). `adapters`:
    a population's members, each with its own adapter, averaged copy, gradient and Adam moments (the states shared)."""
    step = plan(shape, micro_batch * longest, lora_r, trained_layers, False)
    states = int(2 * shape.hidden * mean_tokens * items)
    embeddings = shape.vocab * shape.hidden
    per_layer = (shape.parameters - embeddings) / shape.layers
    bottom_copy = int(2 * (embeddings + per_layer * (shape.layers - trained_layers))) if bf16_bottom else 0
    members = (adapters - 1) * 5 * (step.optimizer // 3)  # another adapter: its weights, average, gradient, two moments
    return Plan(step.weights + bottom_copy, step.optimizer + members, step.activations, 0, False, states)


def choose(shape: ModelShape, tokens: int, lora_r: int, trained_layers: int, reference_copy: bool,
           target: int) -> Plan:
    """Without gradient checkpointing when that fits `target` bytes (it is faster), else with it (it pays)."""
    plain = plan(shape, tokens, lora_r, trained_layers, False, reference_copy)
    return plain if plain.total <= target else plan(shape, tokens, lora_r, trained_layers, True, reference_copy)


def _status() -> dict[str, int]:
    """VmRSS and VmSize of this process, in bytes."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmSize"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def _cgroup_headroom() -> int | None:
    """memory.max - memory.current of this process's cgroup (v2), or v1's limit - usage; None without a limit."""
    for limit_file, usage_file in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
        for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")):
            try:
                limit = (root / limit_file).read_text().strip()
                usage = int((root / usage_file).read_text())
            except (OSError, ValueError):
                continue
            if limit.isdigit() and int(limit) < 1 << 60:
                return int(limit) - usage
    return None


def headroom() -> tuple[int, str]:
    """Bytes this process can still allocate, and what bounds them: MemAvailable, a cgroup limit or RLIMIT_AS."""
    meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    bounds = [(meminfo.get("MemAvailable", meminfo["MemFree"]), "available memory (/proc/meminfo)")]
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        bounds.append((cgroup, "the cgroup's memory limit"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        bounds.append((soft - _status()["VmSize"] - VIRTUAL_SLACK, "the address-space limit (ulimit -v)"))
    return min(bounds)


LOGGED_REMEDY = "lower --micro-batch (tokens per pass) or --max-length (tokens per chunk)"


def check(step: Plan, what: str, remedy: str = LOGGED_REMEDY) -> None:
    """Refuse, in one line, a plan whose peak exceeds what this process can still get; `remedy` says which options lower it."""
    room, bound = headroom()
    needed = step.total - _status()["VmRSS"]
    if needed > room:
        raise ResourceError(
            f"{what} needs about {step.total / GB:.1f} GB at its peak but {bound} leaves {max(room, 0) / GB:.1f} GB more: "
            f"{remedy}, or free memory")


def bound_allocator(threshold: int = MMAP_THRESHOLD) -> None:
    """glibc keeps freed blocks under its (growing) mmap threshold in its heaps, so a step's transient tensors
    pile up as resident memory (GBs at SmolLM2's first steps: docs/TRAINING.md#memory-memorypy); a fixed threshold
    returns them."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, threshold)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc
