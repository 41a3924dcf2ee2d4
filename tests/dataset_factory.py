"""A small deterministic dataset in the dataset stage's format (HOME/datasets/NAME/), for judge tests."""

from __future__ import annotations

import hashlib
import json
import statistics
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

SYSTEM_PROMPT = ("You are a trading agent in Babylon, a market game with stocks and prediction markets. "
                 "Each turn, answer with exactly one JSON action: buy, sell, bet or hold.")
START = datetime(2025, 1, 15, 10, 0)


def marker(window_id: str) -> str:
    """A string that appears only in the window's ground truth."""
    return f"GROUND-TRUTH-{window_id.replace(':', '')}-ACME-CLOSED-AT-104.20"


def context_text(window_id: str, index: int) -> str:
    return "\n".join([
        f"Window {window_id} UTC ground truth ({marker(window_id)}).",
        f"ACME: 100.00 -> 104.20 (+4.20%), BULLISH. News {window_id[11:13]}:20 'ACME wins contract' (BULLISH).",
        f"BOLT: 50.00 -> {48.5 - index:.2f} (-{(1.5 + index) / 50:.2%}), BEARISH.",
        "Prediction market pm-rates 'Will the bank cut rates?': resolved YES (final probability 0.91).",
    ])


def pnl_for(window: int, agent: int, flat: bool) -> float:
    return 0.0 if flat else round((agent - 1.5) * 13.37 + window * 1.1 + (agent % 2) * 0.25, 2)


def messages(agent: int, pnl: float, turns: int) -> list[dict]:
    chat = [{"role": "system", "content": SYSTEM_PROMPT}]
    for turn in range(turns):
        seen = round(pnl * turn / max(turns, 1), 2)
        chat.append({"role": "user", "content": (
            f"Time 10:{5 + 10 * turn:02d} UTC. Balance 10000.00, P&L {seen:+.2f}, open positions {turn}.\n"
            f"Prices: ACME {100 + turn * 0.7:.2f}, BOLT {50 - turn * 0.3:.2f}. pm-rates YES at 0.6{turn}.")})
        side = "buy" if (agent + turn) % 2 == 0 else "sell"
        chat.append({"role": "assistant", "content": json.dumps({"action": side, "ticker": "ACME", "shares": 5 + agent})})
    chat.append({"role": "user", "content": f"Window closed. Final P&L {pnl:+.2f}."})
    return chat


def _rank_and_z(pnls: list[float]) -> tuple[list[int], list[float]]:
    ranks = [1 + sum(other > p for other in pnls) for p in pnls]
    std = statistics.stdev(pnls) if len(pnls) > 1 else 0.0
    mean = statistics.fmean(pnls)
    return ranks, [0.0 if std == 0 else (p - mean) / std for p in pnls]


def rows(windows: int, agents: int, flat: set[int], turns: int) -> list[dict]:
    out = []
    for w in range(windows):
        start = START + timedelta(hours=w)
        window_id = start.strftime("%Y-%m-%dT%H:%M")
        pnls = [pnl_for(w, a, w in flat) for a in range(agents)]
        ranks, zs = _rank_and_z(pnls)
        for a in range(agents):
            trades = (a + w) % 4 + 1
            out.append({
                "trajectory_id": f"traj-{w:03d}-{a:02d}", "source_id": f"row-{w:03d}-{a:02d}",
                "window_id": window_id, "window_start": start, "agent_id": f"agent-{a:02d}",
                "messages": json.dumps(messages(a, pnls[a], turns)), "pnl": pnls[a], "pnl_rank": ranks[a],
                "pnl_zscore": zs[a], "win_rate": None if a == 0 else round((a % 3) / 3, 4), "actions": turns,
                "trades": trades, "errors": a % 2, "llm_calls": turns, "window_agents": agents, "group_size": agents,
                "no_signal": w in flat, "split": "eval" if w == windows - 1 and windows > 1 else "train",
            })
    return out


def make_dataset(home: Path, name: str = "demo", windows: int = 3, agents: int = 4, flat: set[int] | None = None,
                 turns: int = 3) -> Path:
    """Write HOME/datasets/NAME with train/eval/contexts parquet and a manifest; returns the directory."""
    directory = home / "datasets" / name
    directory.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame(rows(windows, agents, flat or set(), turns)).with_columns(
        pl.col("pnl_rank").cast(pl.Int32), pl.col("win_rate").cast(pl.Float64))
    for split in ("train", "eval"):
        frame.filter(pl.col("split") == split).write_parquet(directory / f"{split}.parquet")
    windows_frame = frame.select("window_id", "window_start").unique().sort("window_id")
    contexts = windows_frame.with_columns(
        pl.Series("context_text", [context_text(w, i) for i, w in enumerate(windows_frame["window_id"])]))
    contexts.write_parquet(directory / "contexts.parquet")
    digest = hashlib.sha256(frame.write_csv().encode()).hexdigest()
    manifest = {"name": name, "content_hash": digest, "seed": 0, "parameters": {"windows": windows, "agents": agents},
                "counts": {"trajectories": frame.height, "windows": windows}}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return directory
