"""What the objectives on replayed decisions share (`--on-policy` grpo, imitate, counterfactual: whole prompts and
answers through the model, `grpo.GrpoTrainer`): the trainer each objective's step reads, and the mean over answer tokens.

Each objective's step is in a module of its own (`grpo.py`, `imitate_step.py`, `counterfactual_step.py`); the trainer
that owns the model, its memory plan and its validation answers is `grpo.GrpoTrainer`, typed here as the steps read it so
that no step module imports it.
"""

from __future__ import annotations

from typing import Any, Protocol


class ReplayTrainer(Protocol):
    """What a step on replayed decisions reads of its trainer (`grpo.GrpoTrainer`)."""

    model: Any  # the LoRA model
    tokenizer: Any
    optimizer: Any
    params: list  # the trained parameters, clipped together
    options: Any  # `grpo.GrpoOptions`


def masked_mean(values, mask):
    return (values * mask).sum(1) / mask.sum(1).clamp(min=1)
