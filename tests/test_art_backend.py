"""The ART path up to the GPU: conversion to ART types, ART's own tokenizer, and the exact backend call.

The real LocalBackend needs an NVIDIA GPU (unsloth, vLLM) and ServerlessBackend needs W&B;
here a recording stand-in is injected through `train(..., art_factory=...)`.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from types import SimpleNamespace

import pytest

from tests.train_support import build_template, install

if importlib.util.find_spec("art") is None:
    pytest.skip("openpipe-art is not installed (the art extra)", allow_module_level=True)

from babylon_rl.train.art_backend import ArtOptions, import_art, messages_of, to_art_groups, train_kwargs  # noqa: E402
from babylon_rl.train.data import load_scored_dataset  # noqa: E402
from babylon_rl.train.loop import TrainConfig, train  # noqa: E402

art = import_art()  # never a bare `import art`: it breaks transformers 5 forward passes (see import_art)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("art-template"))


def test_conversion_round_trips_the_dataset_messages(template, home):
    data = load_scored_dataset(install(template, home), "ds")
    groups = to_art_groups(data.train)
    assert len(groups) == len(data.train)
    for group, art_group in zip(data.train, groups):
        assert isinstance(art_group, art.TrajectoryGroup)
        for sample, trajectory in zip(group.samples, art_group.trajectories):
            assert messages_of(trajectory) == sample.messages
            assert trajectory.reward == sample.reward
            assert trajectory.metadata["trajectory_id"] == sample.trajectory_id


class V4ChatTemplate:
    """The tokenizer with transformers 4's `apply_chat_template` default (a list of ids, not a dict).

    art 0.5.17's tokenize_trajectory calls `apply_chat_template(..., tokenize=True)` and
    indexes the result as a list; transformers 5 returns a BatchEncoding there, so ART's
    tokenizer code fails with any tokenizer under transformers 5 (ART's GPU install pins
    transformers 4). Everything else is passed through unchanged.
    """

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def apply_chat_template(self, *args, **kwargs):
        if kwargs.get("tokenize", True):
            kwargs.setdefault("return_dict", False)
        return self._tokenizer.apply_chat_template(*args, **kwargs)


def test_art_tokenizer_code_needs_transformers_4_chat_template_results(template, home):
    from art.preprocessing.tokenize import tokenize_trajectory_groups
    from transformers import AutoTokenizer

    h = install(template, home)
    tokenizer = AutoTokenizer.from_pretrained(h.models / "tiny")
    spread = [g for g in load_scored_dataset(h, "ds").train if g.has_spread][:1]
    with pytest.raises(AttributeError):
        list(tokenize_trajectory_groups(tokenizer, to_art_groups(spread), True, True))


def test_art_tokenizer_accepts_the_trajectories(template, home):
    from art.preprocessing.tokenize import tokenize_trajectory_groups
    from transformers import AutoTokenizer

    h = install(template, home)
    tokenizer = V4ChatTemplate(AutoTokenizer.from_pretrained(h.models / "tiny"))
    data = load_scored_dataset(h, "ds")
    spread = [g for g in data.train if g.has_spread][:2]
    results = list(tokenize_trajectory_groups(tokenizer, to_art_groups(spread), allow_training_without_logprobs=True,
                                              scale_rewards=True, shuffle_group_trajectories=False))
    assert results
    answers = {s.trajectory_id: [m["content"] for m in s.messages if m["role"] == "assistant"] for g in spread for s in g.samples}
    for result in results:
        trained = tokenizer.decode([t for t, m in zip(result.token_ids, result.assistant_mask) if m])
        for answer in answers[result.trajectory.metadata["trajectory_id"]]:
            assert answer in trained
        assert result.advantage != 0


class RecordingBackend:
    """Stands in for art.LocalBackend / art.ServerlessBackend and records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    async def register(self, model) -> None:
        self.calls.append(("register", (model,), {}))

    async def _prepare_backend_for_training(self, model, config=None):
        return "http://stand-in/v1", "stand-in-key"

    async def train(self, model, trajectory_groups, **kwargs):
        self.calls.append(("train", (model, list(trajectory_groups)), kwargs))
        return SimpleNamespace(step=len(self.calls) - 1, metrics={"loss": 0.25, "grad_norm": 1.0}, checkpoint_path="/gpu/ckpt")


@pytest.mark.parametrize("kind", ["art", "serverless"])
def test_backend_train_call(template, home, kind):
    from art.local import LocalBackend
    from art.serverless import ServerlessBackend

    h = install(template, home)
    backend = RecordingBackend()
    config = TrainConfig(dataset="ds", backend=kind, base_model="Qwen/Qwen2.5-0.5B-Instruct", run_name=f"art-{kind}",
                         max_steps=2, groups_per_step=2, learning_rate=2e-5, clip_eps=0.3)
    result = train(h, config, art_factory=lambda k: backend)
    assert result.steps == 2
    trains = [c for c in backend.calls if c[0] == "train"]
    assert [c[0] for c in backend.calls][0] == "register" and len(trains) == 2
    data = load_scored_dataset(h, "ds")
    expected_ids = set(result.trained_ids)
    sent_ids = set()
    for _, (model, groups), kwargs in trains:
        assert isinstance(model, art.TrainableModel) and model.base_model == "Qwen/Qwen2.5-0.5B-Instruct"
        assert all(isinstance(g, art.TrajectoryGroup) for g in groups)
        sent_ids |= {t.metadata["trajectory_id"] for g in groups for t in g.trajectories}
        assert kwargs == train_kwargs(kind, ArtOptions(2e-5, 0.0, 0.3))
        real = LocalBackend.train if kind == "art" else ServerlessBackend.train
        inspect.signature(real).bind(object(), model, groups, **kwargs)  # the real API accepts this call
    assert sent_ids == expected_ids
    flat = {s.trajectory_id for g in data.train if not g.has_spread for s in g.samples}
    assert not sent_ids & flat
    if kind == "art":
        assert trains[0][2]["allow_training_without_logprobs"] is True
    else:
        assert "allow_training_without_logprobs" not in trains[0][2]
    state = json.loads((result.checkpoints[-1] / "state.json").read_text())
    assert state["art_checkpoint"] == "/gpu/ckpt"
