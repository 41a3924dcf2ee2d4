"""The judge cache: `HOME/judge_cache/scores.sqlite3`, one row per judged trajectory.

A group's scores are written in one SQLite transaction (WAL journal), so a kill -9
leaves either the whole group or none of it; a re-run skips every cached group.
Relative judges score a trajectory against its group, so the cache key is the group key:
sha256 of (judge, judge model, rubric version, ground-truth context hash, and the
sorted content hashes of the group's trajectories); rows also keep each trajectory's
content hash and id.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from babylon_rl.judge.dataset import WindowGroup

SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
    group_key TEXT NOT NULL,
    trajectory_hash TEXT NOT NULL,
    trajectory_id TEXT NOT NULL,
    window_id TEXT NOT NULL,
    score REAL NOT NULL,
    explanation TEXT NOT NULL,
    judge TEXT NOT NULL,
    judge_model TEXT NOT NULL,
    rubric_version TEXT NOT NULL,
    context_hash TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    truncated INTEGER NOT NULL,
    judged_at TEXT NOT NULL,
    PRIMARY KEY (group_key, trajectory_hash)
)
"""


@dataclass(frozen=True)
class Score:
    trajectory_id: str
    score: float
    explanation: str
    truncated: bool = False


def group_key(group: WindowGroup, judge: str, judge_model: str, rubric_version: str) -> str:
    hashes = sorted(t.content_hash for t in group.trajectories)
    payload = "\x1f".join([judge, judge_model, rubric_version, group.context_hash, *hashes])
    return hashlib.sha256(payload.encode()).hexdigest()


class JudgeCache:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "scores.sqlite3"
        self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(SCHEMA)

    def close(self) -> None:
        self._conn.close()

    def get(self, key: str, group: WindowGroup) -> dict[str, Score] | None:
        """The cached scores of the group by trajectory_id, or None unless every trajectory is there."""
        rows = self._conn.execute(
            "SELECT trajectory_id, score, explanation, truncated FROM scores WHERE group_key = ?", (key,)
        ).fetchall()
        scores = {r[0]: Score(r[0], r[1], r[2], bool(r[3])) for r in rows}
        return scores if {t.trajectory_id for t in group.trajectories} <= scores.keys() else None

    def put(self, key: str, group: WindowGroup, scores: dict[str, Score], meta: dict[str, str], tokens: tuple[int, int]) -> None:
        now = datetime.now(timezone.utc).isoformat()
        rows = [
            (key, t.content_hash, t.trajectory_id, group.window_id, scores[t.trajectory_id].score,
             scores[t.trajectory_id].explanation, meta["judge"], meta["judge_model"], meta["rubric_version"],
             group.context_hash, tokens[0], tokens[1], int(scores[t.trajectory_id].truncated), now)
            for t in group.trajectories
        ]
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.executemany("INSERT OR REPLACE INTO scores VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
