"""ART back-ends (`pip install 'babylon-rl[art]'`): LocalBackend on an NVIDIA GPU, or ServerlessBackend on W&B.

The logged conversations become `art.Trajectory` objects whose `messages_and_choices` are
the dataset's plain-dict messages (the agent's system prompt, observations, answers) and
whose reward is the judge's score; one `art.TrajectoryGroup` per window. Training uses
ART 0.5's `backend.train(model, groups, learning_rate=..., ...)` (model.train is
deprecated). Logged answers carry no sampling log-probs, so LocalBackend needs
`allow_training_without_logprobs=True`; ServerlessBackend has no such option.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from babylon_rl import art_compat
from babylon_rl.errors import ConfigError
from babylon_rl.train.data import Group
from babylon_rl.train.checkpoints import STATE_JSON, CheckpointError
from babylon_rl.train.logged_trainer import StepStats

ART_KINDS = ("art", "serverless")
GPU_DEPS = ("unsloth", "vllm")


class BackendUnavailable(ConfigError):
    """The chosen ART back-end cannot run on this machine."""


def import_art():
    """ART through the shared import that undoes its side effects, or a one-line BackendUnavailable."""
    try:
        return art_compat.import_art()
    except ImportError as exc:
        raise BackendUnavailable(f"the ART back-ends need openpipe-art: pip install 'babylon-rl[art]' ({exc.name} missing)") from None


def check_available(kind: str) -> None:
    """Raise a one-line BackendUnavailable unless `kind` can run here."""
    if importlib.util.find_spec("art") is None:
        raise BackendUnavailable("the ART back-ends need openpipe-art: pip install 'babylon-rl[art]', or use --backend torch")
    if kind == "serverless":
        if not os.environ.get("WANDB_API_KEY"):
            raise BackendUnavailable("--backend serverless trains on W&B and needs WANDB_API_KEY; set it, or use --backend torch")
        return
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailable("--backend art (ART LocalBackend) needs an NVIDIA GPU and none is visible; use --backend torch on CPU or --backend serverless")
    missing = [name for name in GPU_DEPS if importlib.util.find_spec(name) is None]
    if missing:
        raise BackendUnavailable(f"--backend art needs ART's GPU extras ({', '.join(missing)} not installed): pip install 'openpipe-art[backend]'")


def default_backend_factory(kind: str):
    art = import_art()
    if kind == "serverless":
        return art.ServerlessBackend(api_key=os.environ["WANDB_API_KEY"])
    from art.local import LocalBackend

    return LocalBackend()


# -- conversion ------------------------------------------------------------------------
def to_art_groups(groups: list[Group]) -> list[Any]:
    art = import_art()
    out = []
    for group in groups:
        trajectories = [
            art.Trajectory(
                messages_and_choices=[dict(m) for m in sample.messages],
                reward=sample.reward,
                metadata={"trajectory_id": sample.trajectory_id, "window_id": sample.window_id},
            )
            for sample in group.samples
        ]
        out.append(art.TrajectoryGroup(trajectories, metadata={"window_id": group.window_id}))
    return out


def messages_of(trajectory) -> list[dict]:
    """The chat of an ART trajectory as {role, content} dicts (inverse of to_art_groups)."""
    from art.trajectories import get_messages

    return [{"role": m["role"], "content": m["content"]} for m in get_messages(trajectory.messages_and_choices)]


# -- trainer ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ArtOptions:
    learning_rate: float = 5e-6
    kl_coef: float = 0.0
    clip_eps: float = 0.2


def train_kwargs(kind: str, options: ArtOptions) -> dict:
    """Keyword arguments of backend.train for this back-end (ServerlessBackend takes fewer)."""
    kwargs: dict = {"learning_rate": options.learning_rate, "epsilon": options.clip_eps}
    if kind == "art":
        kwargs["allow_training_without_logprobs"] = True
        kwargs["kl_penalty_coef"] = options.kl_coef
    return kwargs


class ArtTrainer:
    """Runs each step through `backend.train`; ART stores the weights, our checkpoints record where."""

    plan = None  # no memory plan: the model trains on ART's machine, not in this process

    def __init__(self, kind: str, base_model: str, run_name: str, run_dir: Path, options: ArtOptions,
                 backend_factory: Callable[[str], Any] | None = None) -> None:
        art = import_art()
        self.kind = kind
        self.options = options
        self.backend = (backend_factory or default_backend_factory)(kind)
        self.model = art.TrainableModel(name=run_name, project=os.environ.get("WANDB_PROJECT", "babylon-rl"),
                                        base_model=base_model, base_path=str(run_dir / "art"))
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self.model.register(self.backend))
        self.last_result: Any = None

    def train_step(self, groups: list[Group]) -> StepStats:
        started = time.monotonic()
        art_groups = to_art_groups(groups)
        self.last_result = self._loop.run_until_complete(
            self.backend.train(self.model, art_groups, **train_kwargs(self.kind, self.options))
        )
        metrics = dict(getattr(self.last_result, "metrics", {}) or {})
        chars = sum(len(m["content"]) for g in groups for s in g.samples for m in s.messages)
        return StepStats(
            loss=float(metrics.get("loss", math.nan)), kl=float(metrics.get("kl_div", metrics.get("kl", 0.0))),
            grad_norm=float(metrics.get("grad_norm", math.nan)), tokens=chars // 4, trained_tokens=0,
            seconds=time.monotonic() - started,
        )

    def evaluate(self, groups: list[Group]) -> dict[str, float]:
        return {}  # ART evaluates by sampling from its served model; not done offline here

    def save(self, directory: Path, state: dict) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        where = getattr(self.last_result, "checkpoint_path", None) or getattr(self.last_result, "artifact_name", None)
        meta = {**state, "art_checkpoint": where, "art_step": getattr(self.last_result, "step", None), "files": {}}
        (directory / STATE_JSON).write_text(json.dumps(meta, indent=2, default=str))
        return directory

    def load(self, directory: Path) -> dict:
        state_file = directory / STATE_JSON
        try:
            return json.loads(state_file.read_text())
        except (OSError, ValueError):
            raise CheckpointError(f"checkpoint file {state_file} is missing or corrupted: delete {directory} or start a new run") from None

    def save_merged(self, directory: Path) -> Path:
        raise ConfigError("--merge is only available with --backend torch; ART keeps LoRA checkpoints")
