"""A small deterministic scored dataset in the dataset stage's format, for the training tests.

Each window has `agents` trajectories. Observations carry prices and news; the answers are
the game's JSON actions. Good answers follow the news (buy on bullish, sell on bearish) and
get high scores; bad answers go against it and get low scores. Every `flat_every`-th window
gives all its agents the same score (no reward spread: the trainer must skip it).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

TICKERS = ["ACME", "GLOBX", "INITECH", "UMBRL"]
BULLISH = ["{t} beats earnings estimates", "{t} wins a large contract", "Analysts upgrade {t}"]
BEARISH = ["{t} misses revenue targets", "{t} CEO resigns unexpectedly", "Regulators probe {t}"]
SYSTEM = "You are {agent}, a trading agent in Babylon. Answer with one JSON action: buy, sell, hold or bet."


@dataclass(frozen=True)
class FactoryResult:
    path: Path
    train_ids: list[str]
    eval_ids: list[str]
    rows: list[dict]


def _observation(rng: random.Random, ticker: str, bullish: bool, balance: float) -> str:
    price = round(rng.uniform(20, 200), 2)
    change = round(rng.uniform(0.5, 4.0) * (1 if bullish else -1), 2)
    headline = rng.choice(BULLISH if bullish else BEARISH).format(t=ticker)
    return (
        f"Balance: ${balance:,.2f}\nPrices: {ticker} {price:.2f} ({change:+.2f}%)\n"
        f"News: {headline} ({'BULLISH' if bullish else 'BEARISH'})\n"
        "Markets: pm-1 'Will ACME close up?' YES 0.55\nWhat do you do?"
    )


def _answer(rng: random.Random, ticker: str, bullish: bool, good: bool) -> str:
    buy = bullish == good
    return json.dumps({"action": "buy" if buy else "sell", "ticker": ticker, "shares": rng.choice([5, 10, 20])})


def _trajectory(rng: random.Random, window: int, agent: int, quality: float, turns: int) -> tuple[list[dict], float]:
    name = f"agent-{agent}"
    messages = [{"role": "system", "content": SYSTEM.format(agent=name)}]
    good_count = 0
    for turn in range(turns):
        ticker = TICKERS[(window + turn) % len(TICKERS)]
        bullish = rng.random() < 0.5
        good = rng.random() < quality
        good_count += good
        messages.append({"role": "user", "content": _observation(rng, ticker, bullish, 10000.0 - 100 * turn)})
        messages.append({"role": "assistant", "content": _answer(rng, ticker, bullish, good)})
    return messages, good_count / turns


def write_dataset(
    home: Path,
    name: str = "ds",
    windows: int = 8,
    eval_windows: int = 2,
    agents: int = 4,
    turns: int = 2,
    flat_every: int = 4,
    seed: int = 7,
    with_scores: bool = True,
) -> FactoryResult:
    rng = random.Random(seed)
    path = home / "datasets" / name
    path.mkdir(parents=True, exist_ok=True)
    rows, scores = [], []
    start = datetime(2025, 1, 15, 0, 0)
    for w in range(windows + 2 * eval_windows):  # train, then `eval_windows` validation windows, then as many eval ones
        window_start = start + timedelta(hours=w)
        window_id = window_start.strftime("%Y-%m-%dT%H:%M")
        split = "train" if w < windows else "validation" if w < windows + eval_windows else "eval"
        flat = flat_every and (w % flat_every == flat_every - 1) and split == "train"
        for a in range(agents):
            quality = 0.5 if flat else (a + 0.5) / agents
            messages, good = _trajectory(rng, w, a, quality, turns)
            score = 0.5 if flat else round(0.05 + 0.9 * good, 4)
            tid = f"traj-{w:02d}-{a}"
            rows.append({
                "trajectory_id": tid, "source_id": f"row-{tid}", "window_id": window_id, "window_start": window_start,
                "agent_id": f"agent-{a}", "messages": json.dumps(messages), "pnl": 100.0 * (good - 0.5),
                "pnl_rank": 0, "pnl_zscore": 0.0, "win_rate": good, "actions": turns, "trades": turns, "errors": 0,
                "llm_calls": turns, "window_agents": agents, "group_size": agents, "no_signal": bool(flat), "split": split,
            })
            scores.append({
                "trajectory_id": tid, "window_id": window_id, "split": split, "score": score,
                "explanation": "follows the news" if good > 0.5 else "trades against the news",
                "judge": "factory", "judge_model": "none", "rubric_version": "test-1", "no_signal": bool(flat),
            })
    frame = pl.DataFrame(rows)
    for split in ("train", "validation", "eval"):
        frame.filter(pl.col("split") == split).write_parquet(path / f"{split}.parquet")
    if with_scores:
        pl.DataFrame(scores).write_parquet(path / "scores.parquet")
    manifest = {"name": name, "content_hash": f"factory-{seed}", "seed": seed,
                "parameters": {"windows": windows, "agents": agents}, "counts": {"trajectories": len(rows)}}
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))
    train_ids = [r["trajectory_id"] for r in rows if r["split"] == "train"]
    eval_ids = [r["trajectory_id"] for r in rows if r["split"] == "eval"]
    return FactoryResult(path, train_ids, eval_ids, rows)
