"""Importing OpenPipe ART (openpipe-art 0.5.17) without its side effects on this process.

On import, art 0.5.17 replaces `transformers.masking_utils._preprocess_mask_arguments`
with a wrapper written for transformers 4 (it takes a `cache_position` argument that
transformers 5 no longer passes), which breaks every later forward pass in the process,
the torch back-end's included. LiteLLM, which ART imports, fetches a price map from the
network unless told to use its local copy. Every stage imports ART through here.
"""

from __future__ import annotations

import os
from types import ModuleType


def import_art() -> ModuleType:
    """`import art`, with LiteLLM offline and transformers' mask function restored. ImportError if absent."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from transformers import masking_utils
    except ImportError:  # no transformers (no `train` extra): nothing to protect
        import art

        return art
    original = masking_utils._preprocess_mask_arguments
    try:
        import art
    finally:
        masking_utils._preprocess_mask_arguments = original
    return art
