"""Every trainer's checkpoints: the files a checkpoint holds, saving and restoring a trainer's model, optimizer and RNG
state (`Checkpoints`), checking a checkpoint's files against their recorded hashes, and loading one to generate.

A checkpoint is a directory written to a temporary name and renamed into place: the adapter (or, with `lora_r = 0`,
the whole model), the tokenizer, `trainer_state.pt` (optimizer, RNG, a trainer's own extra state) and `state.json`
(the loop's state, the options and every file's sha256, which `read_checkpoint_state` checks before anything loads).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.hashing import file_sha256 as sha256

ADAPTER_FILE = "adapter_model.safetensors"
FULL_MODEL_FILE = "model.safetensors"  # lora_r = 0: the whole model is the checkpoint
TRAINER_STATE = "trainer_state.pt"
STATE_JSON = "state.json"


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used; the message names the file."""


class Checkpoints:
    """Saving and restoring a trainer's model (adapter or whole model), tokenizer, optimizer and RNG state.

    The base of the torch back-end's trainers (`logged_trainer.TorchTrainer`, `grpo.GrpoTrainer`, `menu_trainer.MenuTrainer`):
    each has `model`, `tokenizer`, `optimizer`, `options` (with `lora_r`) and `base_model`.
    """

    @property
    def full(self) -> bool:
        return self.options.lora_r == 0

    def save(self, directory: Path, state: dict, extra: dict | None = None) -> Path:
        """Adapter + tokenizer + optimizer/RNG state (and a trainer's own `extra`), written to a temp dir and renamed into place."""
        import torch

        with atomic.directory(directory) as tmp:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
            torch.save({"optimizer": self.optimizer.state_dict(), "rng": rng, "extra": extra}, tmp / TRAINER_STATE)
            files = {p.name: sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
            meta = {**state, "base_model": self.base_model, "options": asdict(self.options), "files": files}
            (tmp / STATE_JSON).write_text(json.dumps(meta, indent=2, default=str))
        return directory

    def load(self, directory: Path) -> dict:
        """Restore adapter, optimizer and RNG from a checkpoint; refuse a damaged one, naming the file."""
        import torch
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        state = read_checkpoint_state(directory)
        adapter = directory / (FULL_MODEL_FILE if self.full else ADAPTER_FILE)
        try:
            if self.full:
                missing, unexpected = self.model.load_state_dict(load_file(str(adapter)), strict=False)
                if unexpected or any(not k.endswith("lm_head.weight") for k in missing):
                    raise ValueError(f"weights do not match the model: {unexpected or missing}")
            else:
                set_peft_model_state_dict(self.model, load_file(str(adapter)))
        except Exception as exc:  # safetensors/torch raise several types for damaged files
            raise CheckpointError(f"checkpoint file {adapter} cannot be loaded ({type(exc).__name__}): delete the checkpoint or start a new run") from None
        trainer_file = directory / TRAINER_STATE
        try:
            saved = torch.load(trainer_file, weights_only=False)
            self.optimizer.load_state_dict(saved["optimizer"])
        except Exception as exc:
            raise CheckpointError(f"checkpoint file {trainer_file} cannot be loaded ({type(exc).__name__}): delete the checkpoint or start a new run") from None
        if saved.get("extra") is not None:
            self.restore(saved["extra"])
        torch.set_rng_state(saved["rng"]["torch"])
        random.setstate(saved["rng"]["python"])
        np.random.set_state(saved["rng"]["numpy"])
        return state

    def save_merged(self, directory: Path) -> Path:
        """The base model with the adapter folded in (a plain HF model), next to the checkpoints."""
        merged = self.model if self.full else self.model.merge_and_unload()
        with atomic.directory(directory) as tmp:
            merged.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
        return directory


def read_checkpoint_state(directory: Path) -> dict:
    """state.json of a checkpoint after checking every file against its recorded sha256."""
    state_file = directory / STATE_JSON
    try:
        state = json.loads(state_file.read_text())
        files = state["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise CheckpointError(f"checkpoint file {state_file} is missing or corrupted: delete {directory} or start a new run") from None
    for name, digest in files.items():
        path = directory / name
        if not path.exists() or sha256(path) != digest:
            raise CheckpointError(f"checkpoint file {path} is corrupted (checksum mismatch or missing): delete {directory} or start a new run")
    return state


def load_for_generation(checkpoint: Path):
    """A saved adapter on its base model, with the checkpoint's tokenizer, ready to generate."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = PeftConfig.from_pretrained(str(checkpoint))
    base = AutoModelForCausalLM.from_pretrained(config.base_model_name_or_path)
    model = PeftModel.from_pretrained(base, str(checkpoint))
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(checkpoint))


def generate_answer(model, tokenizer, messages: list[dict], max_new_tokens: int = 48) -> str:
    """Greedy answer of the model to a chat ending with a user turn."""
    import torch

    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    return tokenizer.decode(out[0, len(ids):], skip_special_tokens=True).strip()


def load_adapter(model, adapter: Path) -> None:
    """The adapter's weights into `model`'s LoRA (the same rank and blocks: `loop.warm_start` checked them)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(adapter / ADAPTER_FILE)))
