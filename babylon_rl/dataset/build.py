"""`dataset build`: select, sample, split and write one immutable dataset."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from babylon_rl.dataset import sampling, selection, store
from babylon_rl.dataset.params import BuildParams
from babylon_rl.settings import Home

OUTPUT_COLUMNS = [
    "trajectory_id", "source_id", "window_id", "window_start", "agent_id", "messages",
    "pnl", "pnl_rank", "pnl_zscore", "win_rate", "actions", "trades", "errors", "llm_calls",
    "window_agents", "group_size", "no_signal", "split",
]  # fmt: skip
FORMAT_VERSION = 2  # 2: `files` maps each file to its size and sha256


@dataclass(frozen=True)
class DatasetBuildResult:
    path: Path
    manifest: dict


def build(home: Home, params: BuildParams, force: bool = False, gateway: str = "duckdb",
          database_url: str | None = None) -> DatasetBuildResult:
    """The dataset from the marts of `gateway` (selection.open_marts): the same rows from any of them."""
    params.validate()
    store.ensure_absent(home, params.name, force)
    conn = selection.open_marts(home, gateway, database_url)
    try:
        candidates = selection.load_candidates(conn, params)
        if candidates.frame.height == 0:
            raise selection.explain_empty(conn, params)
        snapshot_id, models = selection.source_versions(conn)
        chosen = sampling.plan(candidates.frame, params)
        kept = _kept_rows(candidates.frame, chosen)
        kept = kept.with_columns(selection.fetch_messages(conn, kept.select("trajectory_id", "window_start")).alias("messages"))
        contexts = selection.fetch_contexts(conn, kept["window_id"])
    finally:
        conn.close()
    anchor = _timestamp(candidates.anchor)
    frames = _split_frames(kept.select(OUTPUT_COLUMNS), chosen)
    staged = store.stage(home, frames, contexts, params.name)
    try:
        manifest = _manifest(params, chosen, frames, staged, snapshot_id, models, anchor, gateway)
    except Exception:
        store.discard(staged)
        raise
    return DatasetBuildResult(path=store.publish(home, staged, params.name, manifest, force), manifest=manifest)


def _timestamp(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%S") if value else None


def _kept_rows(candidates: pl.DataFrame, chosen: sampling.Plan) -> pl.DataFrame:
    """The kept rows in output order (train rows first) with their computed columns, still without messages."""
    return candidates.drop("sample_key")[chosen.rows["row"]].hstack(chosen.rows.drop("row"))


def _split_frames(kept: pl.DataFrame, chosen: sampling.Plan) -> dict[str, pl.DataFrame]:
    """Rows come ordered train, validation, eval (sampling._split): one slice each."""
    frames, start = {}, 0
    for split in store.SPLITS:
        n = int((chosen.rows["split"] == split).sum())
        frames[split] = kept.slice(start, n)
        start += n
    return frames


def _counts(frame: pl.DataFrame) -> dict:
    windows = frame.select("window_id", "no_signal").unique()
    return {
        "trajectories": frame.height,
        "windows": windows.height,
        "groups": windows.height,
        "no_signal_groups": int(windows["no_signal"].sum()),
        "agents": frame["agent_id"].n_unique(),
    }


def _manifest(
    params: BuildParams,
    chosen: sampling.Plan,
    frames: dict[str, pl.DataFrame],
    staged: store.Staged,
    snapshot_id: str | None,
    models: dict[str, str],
    anchor: str | None,
    gateway: str,
) -> dict:
    per_split = {split: _counts(frame) for split, frame in frames.items()}
    total = {key: sum(c[key] for c in per_split.values()) for key in ("trajectories", "windows", "groups", "no_signal_groups")}
    dropout = asdict(chosen.dropout) | {"removed_fraction": chosen.dropout.removed_fraction}
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": params.name,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": params.to_manifest(),
        "seed": params.seed,
        "newest_window": anchor,
        "counts": total | {"splits": per_split, "dropped": dropout["removed_by_cap"] + dropout["removed_by_dropout"]},
        # what is held out, by id: a test checks that nothing training or selection read is in it
        "split_windows": {split: sorted(frame["window_id"].unique().to_list()) for split, frame in frames.items()},
        "eval_trajectory_ids": sorted(frames["eval"]["trajectory_id"].to_list()),
        "dropout": dropout,
        "source_snapshot_id": snapshot_id,
        "source_gateway": gateway,  # whose marts it was read from
        "model_versions": models,
        "files": staged.digests,  # checked on every open (babylon_rl.dataset.verify)
        "content_hash": staged.content_hash,
        "polars_version": pl.__version__,
    }
    manifest["manifest_hash"] = store.manifest_hash(manifest)
    return manifest
