"""A small eval dataset in the simulator's observation format, with its ground truth (contexts.parquet).

Each window has two stocks: ACME rises 100 -> 102, BOLT falls 50 -> 49 (so hold is never
right), and one prediction market that resolves YES. Each agent makes `turns` decisions;
its answers are fixed per agent (buy ACME, sell BOLT, a YES bet, hold) so the expected
scores are known.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

SYSTEM = "You are {agent}, an autonomous trader in the Babylon market game. Answer with exactly one JSON object."
ANSWERS = [
    '{"action": "buy", "ticker": "ACME", "shares": 10}',
    '{"action": "sell", "ticker": "BOLT", "shares": 10}',
    '{"action": "bet", "market": "pm-1", "side": "YES", "amount": 50}',
    '{"action": "hold"}',
]


def observation(minute: int) -> str:
    return (
        f"It is 00:{minute:02d} UTC; window closes in {60 - minute} min.\nPrices:\n"
        "  ACME $101.00 (+1.00% since your last look)\n  BOLT $50.00 (+0.00% since your last look)\n"
        "News so far this window:\n  [00:00] ACME: Acme Corp beats earnings expectations\n"
        'Prediction markets:\n  pm-1 "Will ACME close the hour above $100.50?" YES at 50%\n'
        "Your portfolio: cash $10,000.00; positions: ACME 10 @ $100.00, BOLT 10 @ $50.00; open bets: none; P&L so far $+0.00.\n"
        'What do you do?\nAnswer with one JSON action, e.g. {"action": "hold"}.'
    )


def contexts_row(window_id: str, window_start: datetime) -> dict:
    stocks = [
        {"ticker": "ACME", "start_price": 100.0, "end_price": 102.0, "change_pct": 2.0, "sentiment": "BULLISH", "news": []},
        {"ticker": "BOLT", "start_price": 50.0, "end_price": 49.0, "change_pct": -2.0, "sentiment": "BEARISH", "news": []},
    ]
    markets = [{"market_id": "pm-1", "question": "Will ACME close the hour above $100.50?", "outcome": "YES",
                "final_probability": 0.99, "volume": 100.0}]
    return {"window_id": window_id, "window_start": window_start, "context_text": "ground truth",
            "stocks_json": json.dumps(stocks), "prediction_markets_json": json.dumps(markets)}


def write_eval_dataset(home: Path, name: str = "ev", windows: int = 3, agents: int = 4, turns: int = 2,
                       eval_windows: bool = True) -> Path:
    path = home / "datasets" / name
    path.mkdir(parents=True, exist_ok=True)
    rows, contexts = [], []
    start = datetime(2025, 1, 15)
    for w in range(windows):
        window_start = start + timedelta(hours=w)
        window_id = window_start.strftime("%Y-%m-%dT%H:%M")
        contexts.append(contexts_row(window_id, window_start))
        for a in range(agents):
            messages = [{"role": "system", "content": SYSTEM.format(agent=f"agent-{a}")}]
            for t in range(turns):
                messages += [{"role": "user", "content": observation(5 + 10 * t)},
                             {"role": "assistant", "content": ANSWERS[a % len(ANSWERS)]}]
            rows.append({"trajectory_id": f"t-{w}-{a}", "window_id": window_id, "window_start": window_start,
                         "agent_id": f"agent-{a}", "messages": json.dumps(messages), "pnl": 0.0, "window_agents": agents,
                         "split": "eval"})
    frame = pl.DataFrame(rows)
    (frame if eval_windows else frame.clear()).write_parquet(path / "eval.parquet")
    frame.clear().with_columns(pl.lit("train").alias("split")).write_parquet(path / "train.parquet")
    pl.DataFrame(contexts).write_parquet(path / "contexts.parquet")
    (path / "manifest.json").write_text(json.dumps({"name": name}))
    return path


def news_observation(bullish: bool) -> str:
    headline = "Acme Corp beats earnings expectations" if bullish else "Acme Corp misses revenue guidance"
    return observation(5).replace("Acme Corp beats earnings expectations", headline)


def write_news_dataset(home: Path, name: str = "news", train_rises: tuple[bool, ...] = (True,) * 6 + (False,) * 2,
                       eval_rises: tuple[bool, ...] = (True, False) * 6, agents: int = 2) -> Path:
    """Windows where the headline tells where ACME goes (BOLT does not move): a bullish headline and
    ACME rises 100 -> 102, or a bearish one and it falls 100 -> 98. The train windows come first."""
    path = home / "datasets" / name
    path.mkdir(parents=True, exist_ok=True)
    start = datetime(2025, 1, 15)
    splits: dict[str, list[dict]] = {"train": [], "eval": []}
    contexts = []
    for w, (split, rises) in enumerate([("train", r) for r in train_rises] + [("eval", r) for r in eval_rises]):
        window_start = start + timedelta(hours=w)
        window_id = window_start.strftime("%Y-%m-%dT%H:%M")
        stocks = [{"ticker": "ACME", "start_price": 100.0, "end_price": 102.0 if rises else 98.0},
                  {"ticker": "BOLT", "start_price": 50.0, "end_price": 50.0}]
        contexts.append({"window_id": window_id, "window_start": window_start, "context_text": "ground truth",
                         "stocks_json": json.dumps(stocks), "prediction_markets_json": "[]"})
        for a in range(agents):
            messages = [{"role": "system", "content": SYSTEM.format(agent=f"agent-{a}")},
                        {"role": "user", "content": news_observation(rises)}, {"role": "assistant", "content": ANSWERS[3]}]
            splits[split].append({"trajectory_id": f"t-{w}-{a}", "window_id": window_id, "window_start": window_start,
                                  "agent_id": f"agent-{a}", "messages": json.dumps(messages), "pnl": 0.0,
                                  "window_agents": agents, "split": split})
    for split, rows in splits.items():
        pl.DataFrame(rows).write_parquet(path / f"{split}.parquet")
    pl.DataFrame(contexts).write_parquet(path / "contexts.parquet")
    (path / "manifest.json").write_text(json.dumps({"name": name}))
    return path
