"""Scored datasets as GRPO groups: one group per window, advantages from the judge's scores.

A dataset (opened and verified by `babylon_rl.dataset.dataset.Dataset`) is its
train/validation/eval Parquet plus the `scores.parquet` `cli.py score` wrote into it. The policy sees only the logged `messages` (the agent's system prompt,
its observations, its answers); the score is the reward. Nothing else enters training.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from babylon_rl.dataset.dataset import Dataset
from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home

SPREAD_EPS = 1e-6  # a group whose reward std is below this gives no learning signal


@dataclass(frozen=True)
class Sample:
    trajectory_id: str
    window_id: str
    messages: list[dict]
    reward: float


@dataclass(frozen=True)
class Group:
    """The trajectories of one window: a fair comparison group."""

    window_id: str
    samples: tuple[Sample, ...]

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]

    @property
    def has_spread(self) -> bool:
        return len(self.samples) > 1 and float(np.std(self.rewards)) > SPREAD_EPS

    def advantages(self) -> list[float]:
        """Group-normalised advantages (r - mean) / std, std the population std as in GRPO/ART."""
        rewards = np.asarray(self.rewards, dtype=np.float64)
        std = float(rewards.std())
        if std <= SPREAD_EPS:
            return [0.0] * len(rewards)
        return [float(a) for a in (rewards - rewards.mean()) / (std + 1e-6)]


@dataclass
class ScoredDataset:
    name: str
    path: Path
    manifest: dict
    train: list[Group]
    validation: list[Group]  # what --eval-every and --keep-best read; the eval split is never loaded here

    @property
    def read_ids(self) -> list[str]:
        """Every trajectory id training and selection read (train and validation; never eval)."""
        return sorted({s.trajectory_id for g in self.train + self.validation for s in g.samples})


def _read_scores(dataset: Dataset) -> pl.DataFrame:
    scores = dataset.read_scores(columns=["trajectory_id", "score"])
    if scores is None:
        raise ConfigError(
            f"dataset {dataset.name!r} has no scores ({dataset.scores_path()} is missing): "
            f"score it first: python cli.py score --dataset {dataset.name} --judge heuristic"
        )
    return scores.select("trajectory_id", pl.col("score").cast(pl.Float64))


def _groups(frame: pl.DataFrame) -> list[Group]:
    groups: list[Group] = []
    ordered = frame.sort("window_id", "trajectory_id")
    for (window_id,), part in ordered.group_by("window_id", maintain_order=True):
        samples = tuple(
            Sample(row["trajectory_id"], window_id, json.loads(row["messages"]), float(row["score"]))
            for row in part.iter_rows(named=True)
        )
        groups.append(Group(window_id, samples))
    return groups


def load_scored_dataset(home: Home, name: str) -> ScoredDataset:
    dataset = Dataset.open(home, name)
    scores = _read_scores(dataset)
    splits = {}
    for split in ("train", "validation"):
        frame = dataset.read_split(split, ["trajectory_id", "window_id", "messages"])
        if frame is None or frame.is_empty():
            splits[split] = []
            continue
        joined = frame.join(scores, on="trajectory_id", how="left")
        unscored = joined.filter(pl.col("score").is_null())
        if unscored.height:
            raise ConfigError(
                f"{unscored.height} {split} trajectories of dataset {name!r} have no score (e.g. "
                f"{unscored['trajectory_id'][0]}): score it again: python cli.py score --dataset {name} --judge heuristic"
            )
        splits[split] = _groups(joined)
    if not splits["train"]:
        raise ConfigError(f"dataset {name!r} has no training trajectories in {dataset.split_path('train')}")
    return ScoredDataset(name, dataset.path, dataset.manifest, splits["train"], splits["validation"])


def dataset_texts(home: Home, name: str) -> list[list[dict]]:
    """The train split's conversations, for the tiny model's tokenizer and warm start (never eval, never validation)."""
    train = Dataset.open(home, name).read_split("train", ["messages"])
    return [] if train is None else [json.loads(m) for m in train["messages"]]


@dataclass(frozen=True)
class Schedule:
    """Which groups each step trains on: epoch-wise seeded permutations, `groups_per_step` at a time.

    The order depends only on (seed, step), so a resumed run sees exactly the batches an
    uninterrupted one would have seen.
    """

    n_groups: int
    groups_per_step: int
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.n_groups / self.groups_per_step))

    def total_steps(self, max_steps: int | None, epochs: int | None) -> int:
        if epochs:
            return epochs * self.steps_per_epoch
        return max_steps if max_steps else self.steps_per_epoch

    def _order(self, epoch: int) -> list[int]:
        return list(np.random.default_rng([self.seed, epoch]).permutation(self.n_groups))

    def batch(self, step: int) -> list[int]:
        """Group indices for step `step` (0-based)."""
        epoch, within = divmod(step, self.steps_per_epoch)
        order = self._order(epoch)
        return [int(i) for i in order[within * self.groups_per_step : (within + 1) * self.groups_per_step]]


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    assistant_mask: list[int]  # 1 on the tokens of the agent's answers (the chat template's generation spans)


def pad_encoded(encoded: list[Encoded], pad_id: int):
    """Right-padded tensors of a batch: token ids, attention mask, answer mask (all [batch, longest])."""
    import torch

    width = max(len(e.input_ids) for e in encoded)
    ids = torch.tensor([e.input_ids + [pad_id] * (width - len(e.input_ids)) for e in encoded])
    attention = torch.tensor([[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in encoded])
    answer = torch.tensor([e.assistant_mask + [0] * (width - len(e.assistant_mask)) for e in encoded])
    return ids, attention, answer


def encode_conversation(tokenizer, messages: list[dict], max_length: int) -> Encoded:
    """Token ids of the whole chat and a mask of the assistant answers, for any chat template.

    The answers are located as text: for assistant turn i, the template rendered up to turn i
    with the assistant's turn opened ends where the answer starts, and rendered through turn i
    ends where it ends (its end marker included, so the model learns to stop). Tokens whose
    characters lie inside an answer carry loss. This needs no `{% generation %}` tags (SmolLM2's
    and Qwen2.5's stock templates have none); it needs a template whose rendering of a prefix of
    the conversation is a prefix of the whole, as every chat template that appends turns is.
    Long conversations keep their first `max_length` tokens; `encode_chunks` splits them instead.
    """
    full, spans = assistant_spans(tokenizer, messages)
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(end > start and any(low <= start and end <= high for low, high in spans)) for start, end in encoded["offset_mapping"]]
    ids = list(encoded["input_ids"])[:max_length]
    mask = mask[:max_length]
    if not any(mask):
        raise ConfigError("the conversation has no assistant answer within the first "
                          f"{max_length} tokens: nothing to train on (raise the model's context or shorten the prompts)")
    return Encoded(ids, mask)


def assistant_spans(tokenizer, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered chat and the character span of every assistant answer in it (see `encode_conversation`)."""
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    spans = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or i == 0:
            continue
        before = tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
        through = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
        if not (through.startswith(before) and full.startswith(through)):
            raise ConfigError("the tokenizer's chat template does not render a conversation's prefix as a prefix of the whole, "
                              "so the answers cannot be located: use a template that appends turns (ChatML, Llama, ...)")
        spans.append((len(before), len(through.rstrip())))  # the end marker, not the newline after it
    return full, spans


TURN_OVERHEAD = 8  # ChatML tokens around a turn (<|im_start|>, role, newlines, <|im_end|>), with a margin


def exchanges(messages: list[dict]) -> tuple[list[dict], list[list[dict]]]:
    """The leading system turns and the rest cut after each assistant turn (input turns + answer)."""
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    parts: list[list[dict]] = []
    current: list[dict] = []
    for message in messages[head:]:
        current.append(message)
        if message.get("role") == "assistant":
            parts.append(current)
            current = []
    if current:
        parts.append(current)
    return messages[:head], parts


def turn_tokens(tokenizer, turns: list[dict]) -> int:
    """Estimated tokens of these turns in a ChatML-style template (one batched tokenizer call)."""
    if not turns:
        return 0
    ids = tokenizer([str(m.get("content", "")) for m in turns], add_special_tokens=False)["input_ids"]
    return sum(len(x) for x in ids) + TURN_OVERHEAD * len(turns)


def encode_chunks(tokenizer, messages: list[dict], max_length: int) -> list[Encoded]:
    """A conversation as chunks of at most `max_length` tokens that all carry answer tokens.

    A conversation that fits is one chunk. A longer one is cut between exchanges (input turns
    plus the answer); every chunk starts with the system prompt, so each answer is trained in a
    context that holds the system prompt and the latest exchanges. An exchange longer than the budget
    on its own keeps its first `max_length` tokens.
    """
    system, parts = exchanges(messages)
    costs = [turn_tokens(tokenizer, part) for part in parts]
    base = turn_tokens(tokenizer, system)
    if base + sum(costs) <= max_length:
        return [encode_conversation(tokenizer, messages, max_length)]
    chunks: list[list[dict]] = []
    current: list[dict] = []
    used = base
    for part, cost in zip(parts, costs):
        if current and used + cost > max_length:
            chunks.append(system + current)
            current, used = [], base
        current += part
        used += cost
    if current:
        chunks.append(system + current)
    encoded = []
    for chunk in chunks:
        if any(m.get("role") == "assistant" for m in chunk):
            try:
                encoded.append(encode_conversation(tokenizer, chunk, max_length))
            except ConfigError:  # an answer cut off by a single over-long exchange
                continue
    return encoded or [encode_conversation(tokenizer, messages, max_length)]
