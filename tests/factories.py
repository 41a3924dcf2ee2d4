"""Deterministic mart tables for dataset tests and benchmarks, written into a real DuckDB file.

The tables have exactly the columns of docs/TABLES.md. Ground truth (headlines, future
prices) goes only into `babylon.window_market_context`; the `messages` are what an agent
saw (its system prompt, portfolio and market snapshot) and what it answered.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import duckdb
import polars as pl

# Text that exists only in the judge's ground truth: it must never reach a training message.
GROUND_TRUTH_MARKER = "ZEBRA-MOON secret merger revealed"

TRAINING_SAMPLES_DDL = """
CREATE TABLE babylon.training_samples (
    trajectory_id TEXT, source_id TEXT, window_id TEXT, window_start TIMESTAMP, agent_id TEXT,
    start_time TIMESTAMP, end_time TIMESTAMP, messages TEXT,
    llm_calls INTEGER, steps INTEGER, actions INTEGER, trades INTEGER, wins INTEGER, errors INTEGER,
    pnl DOUBLE, pnl_rank INTEGER, pnl_zscore DOUBLE, win_rate DOUBLE, window_agents INTEGER,
    total_reward DOUBLE, final_status TEXT, used_in_training BOOLEAN, trained_in_batch TEXT
)"""
WINDOWS_DDL = """
CREATE TABLE babylon.windows (
    window_id TEXT, window_start TIMESTAMP, window_end TIMESTAMP, agents INTEGER, trajectories INTEGER,
    steps INTEGER, llm_calls INTEGER, trades INTEGER, errors INTEGER,
    pnl_mean DOUBLE, pnl_std DOUBLE, pnl_min DOUBLE, pnl_max DOUBLE,
    stock_count INTEGER, prediction_market_count INTEGER, market_mean_change_pct DOUBLE, ready BOOLEAN
)"""
CONTEXT_DDL = """
CREATE TABLE babylon.window_market_context (
    window_id TEXT, window_start TIMESTAMP, stocks_json TEXT, prediction_markets_json TEXT,
    stock_count INTEGER, prediction_market_count INTEGER, context_text TEXT
)"""
META_DDL = (
    "CREATE SCHEMA IF NOT EXISTS meta",
    "CREATE TABLE meta.snapshots (snapshot_id TEXT, started_at TIMESTAMP, finished_at TIMESTAMP, source TEXT, full_copy BOOLEAN, tables_json TEXT)",
    "CREATE TABLE meta.model_versions (model TEXT, fingerprint TEXT, version TEXT, built_at TIMESTAMP)",
)

TICKERS = ("ACME", "GLOBX", "INITECH", "UMBRL", "HOOLI")
STRATEGIES = (
    "You are a momentum trader in Babylon. Buy what rises, cut losers fast.",
    "You are a value investor in Babylon. Buy below fair value, hold patiently.",
)


@dataclass
class WindowSpec:
    start: datetime
    agents: int
    pnl: list[float] | None = None  # per agent; random when None
    actions: list[int] | None = None  # per agent; 8 when None
    used: set[int] = field(default_factory=set)  # agent indexes whose trajectory was used in training
    extra_trajectories: int = 0  # the first agents get a second trajectory in the window


def window_id(start: datetime) -> str:
    return start.strftime("%Y-%m-%dT%H:%M")


def hourly(count: int, agents: int | list[int], start: datetime = datetime(2025, 1, 15, 0, 0)) -> list[WindowSpec]:
    sizes = agents if isinstance(agents, list) else [agents] * count
    return [WindowSpec(start + timedelta(hours=i), sizes[i]) for i in range(count)]


def messages(rng: random.Random, agent: int, steps: int, filler: int = 0) -> str:
    """The chat one agent saw and answered: system prompt, then one user/assistant pair per step."""
    turns = [{"role": "system", "content": STRATEGIES[agent % len(STRATEGIES)]}]
    for step in range(steps):
        ticker = rng.choice(TICKERS)
        price = round(rng.uniform(5, 200), 2)
        observation = (
            f"Step {step}. Balance ${rng.uniform(500, 5000):.2f}. {ticker} trades at ${price}. "
            f"Open positions: {rng.randint(0, 4)}. Active prediction markets: pm-{rng.randint(1, 9)}."
        )
        if filler:
            observation += " Order book: " + " ".join(f"{price + i * 0.01:.2f}x{rng.randint(1, 99)}" for i in range(filler))
        answer = rng.choice(
            [
                {"action": "buy", "ticker": ticker, "shares": rng.randint(1, 20)},
                {"action": "sell", "ticker": ticker, "shares": rng.randint(1, 20)},
                {"action": "bet", "market": f"pm-{rng.randint(1, 9)}", "side": rng.choice(["YES", "NO"]), "amount": 50},
                {"action": "hold"},
            ]
        )
        turns += [{"role": "user", "content": observation}, {"role": "assistant", "content": json.dumps(answer)}]
    return json.dumps(turns)


def sample_rows(specs: list[WindowSpec], seed: int = 0, filler: int = 0) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for spec in specs:
        wid = window_id(spec.start)
        for agent in range(spec.agents):
            copies = 2 if agent < spec.extra_trajectories else 1
            for copy in range(copies):
                rows.append(_row(rng, spec, wid, agent, copy, filler))
    frame = pl.DataFrame(rows, schema_overrides={"window_start": pl.Datetime("us")}, infer_schema_length=None)
    return _with_window_stats(frame)


def _row(rng: random.Random, spec: WindowSpec, wid: str, agent: int, copy: int, filler: int) -> dict:
    actions = spec.actions[agent] if spec.actions else 8
    pnl = spec.pnl[agent] if spec.pnl else round(rng.gauss(0, 100), 2)
    trades = max(0, actions - rng.randint(0, 2))
    wins = rng.randint(0, trades)
    tid = f"traj-{wid}-a{agent:03d}-{copy}"
    return {
        "trajectory_id": tid, "source_id": f"src-{tid}", "window_id": wid, "window_start": spec.start,
        "agent_id": f"agent-{agent:03d}", "start_time": spec.start, "end_time": spec.start + timedelta(minutes=59),
        "messages": messages(rng, agent, max(actions, 1), filler), "llm_calls": actions, "steps": actions,
        "actions": actions, "trades": trades, "wins": wins, "errors": rng.randint(0, 1), "pnl": pnl,
        "win_rate": wins / trades if trades else None, "total_reward": pnl / 100, "final_status": "completed",
        "used_in_training": agent in spec.used, "trained_in_batch": "batch-1" if agent in spec.used else None,
    }  # fmt: skip


def _with_window_stats(frame: pl.DataFrame) -> pl.DataFrame:
    pnl = pl.col("pnl")
    std = pnl.std().over("window_id").fill_null(0.0)
    return frame.with_columns(
        pnl_rank=pnl.rank("min", descending=True).over("window_id").cast(pl.Int32),
        pnl_zscore=pl.when(std > 0).then((pnl - pnl.mean().over("window_id")) / std).otherwise(0.0),
        window_agents=pl.col("agent_id").n_unique().over("window_id").cast(pl.Int32),
    )


def create_marts(conn: duckdb.DuckDBPyConnection, samples: pl.DataFrame, with_meta: bool = True) -> None:
    conn.execute("CREATE SCHEMA IF NOT EXISTS babylon")
    for ddl in (TRAINING_SAMPLES_DDL, WINDOWS_DDL, CONTEXT_DDL):
        conn.execute(ddl)
    conn.register("samples_frame", samples)
    conn.execute("INSERT INTO babylon.training_samples BY NAME SELECT * FROM samples_frame")
    conn.unregister("samples_frame")
    conn.execute(
        """
        INSERT INTO babylon.windows
        SELECT window_id, window_start, window_start + INTERVAL 1 HOUR, count(DISTINCT agent_id), count(*),
               sum(steps), sum(llm_calls), sum(trades), sum(errors),
               avg(pnl), coalesce(stddev_samp(pnl), 0), min(pnl), max(pnl), 5, 2, 0.4, count(DISTINCT agent_id) >= 5
        FROM babylon.training_samples GROUP BY window_id, window_start
        """
    )
    conn.execute(
        """
        INSERT INTO babylon.window_market_context
        SELECT window_id, window_start,
               '[{"ticker": "ACME", "start_price": 10, "end_price": 14, "news": [{"headline": "' || ? || '"}]}]',
               '[{"market_id": "pm-1", "question": "Will ACME merge?", "outcome": "YES"}]', 1, 1,
               'ACME rose 40%. Headline: ' || ? || '. pm-1 resolved YES.'
        FROM babylon.windows
        """,
        [GROUND_TRUTH_MARKER, GROUND_TRUTH_MARKER],
    )
    if with_meta:
        for ddl in META_DDL:
            conn.execute(ddl)
        conn.execute(
            "INSERT INTO meta.snapshots VALUES ('snap-1', '2025-01-01', '2025-01-01', 'postgresql://x', true, '{}'),"
            " ('snap-2', '2025-02-01', '2025-02-01', 'postgresql://x', false, '{}')"
        )
        conn.execute(
            "INSERT INTO meta.model_versions VALUES ('babylon.training_samples', 'fp-ts-1', 'v1', '2025-02-01'),"
            " ('babylon.windows', 'fp-w-1', 'v1', '2025-02-01')"
        )
