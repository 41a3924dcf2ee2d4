"""Training: a tiny local model, GRPO-style updates on scored datasets, write-back to the game.

Nothing here reaches the network unless the user asked for it: Hugging Face and W&B run
offline by default (set HF_HUB_OFFLINE=0 to let transformers download a base model,
WANDB_API_KEY to log online). Heavy imports (torch, transformers, art) happen inside the
modules that need them, so `import babylon_rl.train` is cheap.
"""

from __future__ import annotations

import os


def configure_offline() -> None:
    """Defaults that keep the toolkit off the network; explicit user settings win."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Hugging Face's own tqdm bars ("Writing model shards") print truncated lines beside ours
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if not os.environ.get("WANDB_API_KEY"):
        os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")


configure_offline()
