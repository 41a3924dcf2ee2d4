"""Damaged source rows next to clean simulated ones: snapshot + build + dataset build never crash,
every raw row is staged or rejected with a reason, and the clean windows' aggregates do not move."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from babylon_rl import db
from babylon_rl.context import BabylonContext
from babylon_rl.dataset.params import BuildParams
from tests.conftest import _admin_connection, database_url
from tests.game_rows import STAGED_CALL_LOGS_SQL, insert, trajectory
from tests.reliability.conftest import simulate_game
from tests.reliability.support import warehouse_rows

pytestmark = pytest.mark.postgres

CLEAN_START = datetime(2025, 1, 15, 0, 0)
CLEAN_WINDOWS = ["2025-01-15T00:00", "2025-01-15T01:00"]
DIRTY_HOUR = datetime(2025, 2, 1, 3, 0)  # damaged rows live here, far from the clean windows
TABLES = ("trajectories", "llm_call_logs", "market_outcomes")
WINDOW_SQL = "SELECT * FROM babylon.windows WHERE window_id IN ('2025-01-15T00:00', '2025-01-15T01:00') ORDER BY window_id"
PNL_SQL = "SELECT * FROM babylon.agent_window_pnl WHERE window_id IN ('2025-01-15T00:00', '2025-01-15T01:00') ORDER BY ALL"

text_junk = st.one_of(
    st.text(max_size=20),  # unicode, control characters (no NUL: PostgreSQL text cannot hold it)
    st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x1F), max_size=10),
    st.just("x" * 200_000),
    st.just("😀 ‮ \u200b ünïcödé"),
).map(lambda s: s.replace("\x00", ""))
numbers = st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -0.0, None])
window_ids = st.sampled_from([None, "", "garbage", "2025-02-01 03:00", "2025/02/01T03:00", "2025-02-01T03:00:00Z",
                              "1738378800000", "2025-02-01T03", "2025-02-01T03:00"])


@st.composite
def damaged_steps(draw) -> str:
    step = json.loads(trajectory("x", "a", "2025-02-01T03:00")["stepsJson"])[0]
    kind = draw(st.sampled_from(["truncate", "wrong_type", "missing_key", "extra_key", "huge", "nan", "order", "junk_text"]))
    steps = [dict(step, stepNumber=i, timestamp=step["timestamp"] + 1000 * i) for i in range(3)]
    if kind == "truncate":
        text = json.dumps(steps)
        return text[: draw(st.integers(0, len(text) - 1))]
    if kind == "wrong_type":
        return json.dumps(draw(st.sampled_from([42, "steps", {"steps": steps}, [1, 2], [None], True])))
    if kind == "missing_key":
        key = draw(st.sampled_from(sorted(step)))
        steps = [{k: v for k, v in s.items() if k != key} for s in steps]
    if kind == "extra_key":
        steps = [dict(s, unexpected={"deep": [1, {"x": None}]}) for s in steps]
    if kind == "huge":
        steps[0]["llmCalls"][0]["response"] = "y" * 300_000
    if kind == "nan":
        steps[-1]["environmentState"]["agentPnL"] = draw(numbers)
        steps[0]["action"]["result"]["pnl"] = draw(numbers)
    if kind == "order":
        steps = [dict(s, timestamp=s["timestamp"] - 10_000 * i) for i, s in enumerate(steps)][::-1]
    if kind == "junk_text":
        steps[0]["llmCalls"][0]["userPrompt"] = draw(text_junk)
        steps[0]["llmCalls"][0]["systemPrompt"] = draw(text_junk)
    return json.dumps(steps)  # NaN/Infinity become the non-standard JSON tokens


@st.composite
def damaged_trajectory(draw, index: int) -> dict:
    row = trajectory(f"dirty-{index}", draw(st.one_of(st.just(f"agent-d{index}"), text_junk.filter(bool))),
                     "2025-02-01T03:00", pnl=draw(st.one_of(st.floats(-1e3, 1e3), numbers)))
    row["stepsJson"] = draw(st.one_of(damaged_steps(), st.just(row["stepsJson"])))
    row["windowId"] = draw(window_ids)
    if draw(st.booleans()):  # timestamps out of order
        row["endTime"] = row["startTime"] - timedelta(hours=draw(st.integers(1, 48)))
    row["metadataJson"] = draw(st.sampled_from(["{}", "{not json", "[]", "null"]))
    return row


@st.composite
def damage(draw) -> dict[str, list[dict]]:
    n = draw(st.integers(1, 4))
    trajectories = [draw(damaged_trajectory(i)) for i in range(n)]
    calls = [{
        "id": f"dirty-call-{i}", "trajectoryId": draw(st.sampled_from([t["trajectoryId"] for t in trajectories] + ["nobody"])),
        "stepId": draw(text_junk), "callId": f"dirty-call-{i}", "timestamp": DIRTY_HOUR,
        "model": "m", "purpose": draw(st.sampled_from(["action", "weird", ""])), "systemPrompt": draw(text_junk),
        "userPrompt": draw(text_junk), "response": draw(text_junk), "temperature": draw(st.sampled_from([0.7, float("nan")])),
        "maxTokens": 100, "messagesJson": draw(st.sampled_from([None, "[", '[{"role": 1}]', "{}"])),
    } for i in range(draw(st.integers(0, 3)))]
    outcomes = [{
        "id": f"dirty-mo-{i}", "windowId": draw(st.sampled_from(["2025-02-01T03:00", "garbage", "2025-02-01 03:00"])),
        "stockTicker": draw(st.sampled_from(["ACME", None, "ÜNI"])), "startPrice": 100, "endPrice": draw(st.sampled_from([0, 101, None])),
        "changePercent": draw(st.sampled_from([0, 999.99, -999.99, None])), "sentiment": draw(st.sampled_from(["BEARISH", "??", None])),
        "newsEvents": draw(st.sampled_from(["[]", '[{"headline": null}]', '{"x": 1}'])),
    } for i in range(draw(st.integers(0, 3)))]  # same window and ticker: duplicates
    return {"trajectories": trajectories, "llm_call_logs": calls, "market_outcomes": outcomes}


def fresh_game(home: Path) -> str:
    name = f"brl_dirty_{uuid.uuid4().hex[:10]}"
    with _admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    db.migrate(url)
    simulate_game(url, home, windows=2, agents=5, start=CLEAN_START)
    with psycopg.connect(url) as conn:  # the simulator's own dirt is off here: clean rows only
        conn.execute("""UPDATE trajectories SET "updatedAt" = "updatedAt" """)
    return url


def drop(url: str) -> None:
    with _admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


def build_all(home: Path, url: str) -> None:
    ctx = BabylonContext.create(home=str(home), database_url=url)
    ctx.console.quiet = True
    ctx.build()
    ctx.dataset_build(BuildParams(name="d", min_agents=3, min_actions=0, windows=tuple(CLEAN_WINDOWS)), force=True)


def reconcile(home: Path) -> dict[str, tuple[int, int, int]]:
    staged = {"trajectories": "SELECT count(*) FROM staging.trajectories",
              "llm_call_logs": STAGED_CALL_LOGS_SQL,
              "market_outcomes": "SELECT count(*) FROM staging.market_outcomes"}
    out = {}
    for table in TABLES:
        raw = warehouse_rows(home, f"SELECT count(*) FROM raw.{table}")[0][0]
        rejected = warehouse_rows(home, f"SELECT count(*) FROM babylon.rejected_rows WHERE source_table = '{table}'")[0][0]
        out[table] = (raw, warehouse_rows(home, staged[table])[0][0], rejected)
    return out


@pytest.fixture(scope="module")
def clean_baseline(tmp_path_factory) -> tuple[list, list]:
    home = tmp_path_factory.mktemp("clean") / "home"
    url = fresh_game(home)
    try:
        build_all(home, url)
        return warehouse_rows(home, WINDOW_SQL), warehouse_rows(home, PNL_SQL)
    finally:
        drop(url)


def _rounded(row: tuple) -> tuple:
    """Floats to 9 significant digits: sums over rows may add in another order."""
    return tuple(float(f"{v:.9g}") if isinstance(v, float) else v for v in row)


def check_dirty(home: Path, rows: dict[str, list[dict]], baseline) -> None:
    url = fresh_game(home)
    try:
        for table, table_rows in rows.items():
            insert(url, table, table_rows)
        build_all(home, url)
        for table, (raw, staged, rejected) in reconcile(home).items():
            assert raw == staged + rejected, (table, raw, staged, rejected)
        reasons = warehouse_rows(home, "SELECT count(*) FROM babylon.rejected_rows WHERE coalesce(reason, '') = ''")
        assert reasons == [(0,)]
        for got, want in zip((warehouse_rows(home, WINDOW_SQL), warehouse_rows(home, PNL_SQL)), baseline):
            assert [_rounded(r) for r in got] == [_rounded(r) for r in want]
    finally:
        drop(url)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate], derandomize=True)
@given(rows=damage())
def test_damaged_rows_are_staged_or_rejected_and_clean_windows_do_not_move(rows, clean_baseline, tmp_path_factory) -> None:
    check_dirty(tmp_path_factory.mktemp("dirty") / "home", rows, clean_baseline)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(rows=damage())
def test_damaged_rows_many_examples(rows, clean_baseline, tmp_path_factory) -> None:
    check_dirty(tmp_path_factory.mktemp("dirty") / "home", rows, clean_baseline)
