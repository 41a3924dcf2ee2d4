"""The soak's short variant (bench/soak_kills.py runs the long one): `build --every` while rows arrive
every game minute and the builder is killed with SIGKILL at random moments; the marts at the end equal
a fresh full build's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak_kills import soak
from tests.conftest import ADMIN_URL

pytestmark = pytest.mark.postgres


def test_build_every_killed_at_random_moments_ends_equal_to_a_fresh_build(pg_url: str, tmp_path: Path) -> None:
    # pg_url: skipped (or failed in CI) like every PostgreSQL test when the server is down
    result = soak(ADMIN_URL, tmp_path, game_minutes=36, windows=4, agents=5, tick_seconds=2.0, every_minutes=0.05,
                  kill_every=(4, 7), late_share=0.3, seed=2, log=lambda line: None)
    assert result.kills >= 3 and result.late_rows >= 1, result
    assert result.builds_completed >= 1, result  # builds ran between the kills, not only the final one
    assert result.raw_missing == {"trajectories": 0, "llm_call_logs": 0, "market_outcomes": 0}, result
    assert result.differences == {"windows": 0, "agent_window_pnl": 0, "training_samples": 0, "rejected_rows": 0}, result
