"""Small hand-made rows in the game's production schema, inserted with psycopg."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import psycopg

# The llm_call_logs rows a build stages: one per call id of a staged trajectory, stamped within
# call_log_margin_hours (a day) of its window. Worked out here from the raw rows, to check
# babylon.rejected_rows against: raw rows = staged rows + rejected rows.
STAGED_CALL_LOGS_SQL = """
    SELECT count(DISTINCT l."callId") FROM raw.llm_call_logs AS l
    JOIN staging.trajectories AS t ON t.trajectory_id = l."trajectoryId"
    WHERE l."callId" <> '' AND (l."timestamp" IS NULL OR l."timestamp" >= t.window_start - INTERVAL 1 DAY
                                AND l."timestamp" < t.window_end + INTERVAL 1 DAY)"""


def trajectory(
    traj_id: str,
    agent: str,
    window: str,
    pnl: float | None = 10.0,
    updated: datetime | None = None,
    window_id_known: bool = True,
) -> dict:
    start = datetime.strptime(window, "%Y-%m-%dT%H:%M") + timedelta(minutes=1)
    steps = [
        {
            "stepNumber": 0,
            "timestamp": int(start.timestamp() * 1000),
            "environmentState": {"agentBalance": 10000, "agentPnL": 0, "openPositions": 0},
            "providerAccesses": [],
            "llmCalls": [
                {
                    "model": "m",
                    "systemPrompt": f"You are agent {agent}.",
                    "userPrompt": "ACME 100.00 (+0.0%)",
                    "response": '{"action": "buy", "ticker": "ACME", "shares": 1}',
                    "temperature": 0.7,
                    "maxTokens": 100,
                    "purpose": "action",
                    "actionType": "BUY_SHARES",
                }
            ],
            "action": {"actionType": "BUY_SHARES", "parameters": {"ticker": "ACME", "shares": 1}, "success": True, "result": {"pnl": pnl}},
            "reward": 0.0,
        }
    ]
    return {
        "id": f"row-{traj_id}",
        "trajectoryId": traj_id,
        "agentId": agent,
        "startTime": start,
        "endTime": start + timedelta(minutes=50),
        "durationMs": 50 * 60 * 1000,
        "windowId": window if window_id_known else None,
        "stepsJson": json.dumps(steps),
        "rewardComponentsJson": "{}",
        "metricsJson": "{}",
        "metadataJson": "{}",
        "totalReward": 0.0,
        "episodeLength": 1,
        "finalStatus": "completed",
        "finalPnL": pnl,
        "updatedAt": updated or datetime(2025, 1, 15, 12, 0),
    }


def stock_outcome(outcome_id: str, window: str, ticker: str, change: float, headline: str) -> dict:
    return {
        "id": outcome_id,
        "windowId": window,
        "stockTicker": ticker,
        "startPrice": 100.0,
        "endPrice": round(100.0 * (1 + change / 100), 2),
        "changePercent": change,
        "sentiment": "BULLISH" if change > 0 else "BEARISH",
        "newsEvents": json.dumps([{"headline": headline, "sentiment": "BULLISH", "at": f"{window}:30Z"}]),
    }


def insert(url: str, table: str, rows: list[dict]) -> None:
    with psycopg.connect(url) as conn:
        for row in rows:
            columns = ", ".join(f'"{name}"' for name in row)
            placeholders = ", ".join(["%s"] * len(row))
            conn.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({placeholders})', list(row.values()))


def execute(url: str, sql: str, params: tuple = ()) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(sql, params)
