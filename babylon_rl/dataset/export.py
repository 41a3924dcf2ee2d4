"""`dataset export`: JSON lines for trainers outside the toolkit.

jsonl: one line per trajectory (train then eval):
    {"messages": [{role, content}...], "trajectory_id", "window_id", "split"}

dpo: one line per train window that has a signal, best vs worst trajectory by P&L, in
TRL's conversational preference format with an explicit prompt:
    {"prompt": [...], "chosen": [...], "rejected": [...], "window_id", "chosen_id", "rejected_id"}
The prompt part of a trajectory is its turns before the first assistant turn. The pair's
prompt is the longest common prefix of the two prompt parts; each side's `chosen` /
`rejected` is the rest of its own conversation, so when the agents' first observations
differ each side starts with its own user turn (the shared system prompt stays the
prompt). Pairs whose prompt parts share nothing (different system prompts) are skipped
and counted: a DPO pair needs one shared prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from babylon_rl import atomic
from babylon_rl.dataset.dataset import Dataset
from babylon_rl.dataset.params import FORMATS
from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home


@dataclass(frozen=True)
class ExportResult:
    path: Path
    lines: int
    skipped_no_signal: int = 0
    skipped_no_shared_prompt: int = 0


def export(home: Home, name: str, fmt: str, output: Path | None) -> ExportResult:
    dataset = Dataset.open(home, name)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    path = output or home.exports / f"{name}.{fmt}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        lines, result = _jsonl_lines(pl.concat(dataset.read_splits())), {}
    else:
        train = dataset.read_split("train")
        if train is None:
            raise dataset.damaged("train.parquet is missing")
        lines, result = _dpo_lines(train)
    _write_lines(path, lines)
    return ExportResult(path=path, lines=len(lines), **result)


def _write_lines(path: Path, lines: list[str]) -> None:
    with atomic.file(path) as tmp, tmp.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


def _jsonl_lines(frame: pl.DataFrame) -> list[str]:
    """The stored messages JSON is spliced in as is; the ids are JSON-encoded by Polars."""
    ids = pl.struct("trajectory_id", "window_id", "split").struct.json_encode().str.slice(1)
    line = pl.concat_str(pl.lit('{"messages": '), pl.col("messages"), pl.lit(", "), ids)
    return frame.select(line.alias("line"))["line"].to_list()


def _dpo_lines(train: pl.DataFrame) -> tuple[list[str], dict]:
    with_signal = train.filter(~pl.col("no_signal"))
    skipped_no_signal = train.filter(pl.col("no_signal"))["window_id"].n_unique()
    ordered = with_signal.sort("window_start", "window_id", pl.col("pnl"), "trajectory_id", descending=[False, False, True, False])
    best = ordered.group_by("window_id", maintain_order=True).first()
    worst = ordered.group_by("window_id", maintain_order=True).last()
    lines, skipped = [], 0
    for chosen, rejected in zip(best.iter_rows(named=True), worst.iter_rows(named=True)):
        pair = preference_pair(json.loads(chosen["messages"]), json.loads(rejected["messages"]))
        if pair is None:
            skipped += 1
            continue
        pair |= {"window_id": chosen["window_id"], "chosen_id": chosen["trajectory_id"], "rejected_id": rejected["trajectory_id"]}
        lines.append(json.dumps(pair, ensure_ascii=False))
    return lines, {"skipped_no_signal": skipped_no_signal, "skipped_no_shared_prompt": skipped}


def prompt_length(messages: list[dict]) -> int:
    """How many turns come before the first assistant turn."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return index
    return len(messages)


def preference_pair(chosen: list[dict], rejected: list[dict]) -> dict | None:
    """{"prompt", "chosen", "rejected"} sharing the longest common prompt prefix, or None if none is shared."""
    limit = min(prompt_length(chosen), prompt_length(rejected))
    shared = 0
    while shared < limit and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == 0 or shared == len(chosen) or shared == len(rejected):
        return None
    return {"prompt": chosen[:shared], "chosen": chosen[shared:], "rejected": rejected[shared:]}
