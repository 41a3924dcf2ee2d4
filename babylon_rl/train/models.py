"""Loading a model (`babylon_rl/model_names.py` finds it) on its device, LoRA on it, and its answers' log-probabilities."""

from __future__ import annotations

import os

from babylon_rl.errors import ConfigError

SMALL_MODEL_PARAMETERS = 5_000_000  # below this one CPU thread is faster than several (no contention)
LOGPROB_CHUNK = 256  # answer positions projected onto the vocabulary at a time (answer_logprobs)


def hub_offline() -> bool:
    """Whether Hugging Face downloads are off (HF_HUB_OFFLINE): models load from the cache or a directory alone."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


DEVICES = ("auto", "cpu", "cuda")


def resolve_device(value: str = "auto") -> str:
    """`auto`: cuda when torch sees a GPU, else cpu; `cuda` without one is a one-line error."""
    import torch

    if value not in DEVICES:
        raise ConfigError(f"--device must be one of {', '.join(DEVICES)}, not {value!r}")
    if value == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if value == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: torch sees no CUDA GPU here; use --device cpu or auto")
    return value


def load_tokenizer(path: str):
    """The model's tokenizer alone (cheap: a trainer sizes its passes with it before the weights load)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=hub_offline())
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own rich progress bar is the one to watch
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=hub_offline(), dtype=torch.float32).to(device)
    set_threads(model)
    return model, tokenizer


def lora_model(base, rank: int, top_layers: int = 0):
    """A PEFT LoRA model on every linear layer of the top `top_layers` blocks (0: of every block).

    The blocks below hold no trainable weight, so autograd keeps none of their activations: a
    step's backward pass costs only the adapted blocks.
    """
    import warnings

    from peft import LoraConfig, get_peft_model

    import torch

    layers = base.config.num_hidden_layers
    chosen = list(range(layers - top_layers, layers)) if 0 < top_layers < layers else None
    # peft takes a block range only with module names: every linear layer inside the blocks
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in base.get_decoder().layers.named_modules()
                     if isinstance(module, torch.nn.Linear)})
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=linear, task_type="CAUSAL_LM",
                        layers_to_transform=chosen, layers_pattern="layers" if chosen else None)
    with warnings.catch_warnings():  # peft 0.21 calls a transformers 5 deprecated alias
        warnings.simplefilter("ignore", FutureWarning)
        return get_peft_model(base, config)


def set_threads(model) -> None:
    import torch

    wanted = os.environ.get("BABYLON_RL_TORCH_THREADS")
    if wanted:
        torch.set_num_threads(int(wanted))
    elif sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMETERS:
        torch.set_num_threads(1)


def answer_logits(model, ids, attention, answer_mask):
    """Next-token logits at the positions that predict an answer token, and those tokens, flat in row order.

    `answer_mask` marks the predicted tokens (`ids[:, 1:]`). The vocabulary projection runs on
    those positions alone, a few percent of a prompt's tokens: with a large vocabulary it is most
    of a training step's time and memory. `model` may be a PEFT model (its LoRA layers apply).
    """
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = causal.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
    answer = answer_mask.bool()
    return causal.get_output_embeddings()(hidden[answer]).float(), ids[:, 1:][answer]


def answer_logprobs(model, ids, attention, answer_mask, chunk: int = LOGPROB_CHUNK):
    """Log-probability of every answer token (`answer_mask` marks `ids[:, 1:]`), flat in row order.

    Only the answer positions' hidden states are projected onto the vocabulary, `chunk` at a time;
    under autograd each chunk is checkpointed (its logits are recomputed in the backward pass), so
    at most one chunk's [chunk, vocab] logits exist at once: never [batch, length, vocab].
    """
    import functools

    import torch
    from torch.utils.checkpoint import checkpoint

    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = causal.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
    answer = answer_mask.bool()
    selected, targets = hidden[answer], ids[:, 1:][answer]
    project = functools.partial(_chunk_logprobs, causal.get_output_embeddings())
    parts = []
    for start in range(0, len(targets), chunk):
        h, t = selected[start : start + chunk], targets[start : start + chunk]
        parts.append(checkpoint(project, h, t, use_reentrant=False) if torch.is_grad_enabled() else project(h, t))
    return torch.cat(parts) if parts else selected.new_zeros(0)


def _chunk_logprobs(head, hidden, targets):
    """log softmax(head(hidden))[target] as logit - logsumexp: no second vocabulary-sized tensor."""
    logits = head(hidden).float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
