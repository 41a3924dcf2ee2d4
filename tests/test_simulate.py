"""`cli.py simulate` against a real PostgreSQL and real DuckDB files."""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import duckdb
import numpy as np
import psycopg
import pytest

from babylon_rl.settings import Home
from babylon_rl.simulate import DirtRates, SimulationConfig, run_simulation
from babylon_rl.simulate.market import EPOCH, generate_market
from babylon_rl.simulate.sinks import DuckDBSink, PostgresSink
from babylon_rl.simulate.trajectories import WindowRows
from babylon_rl.simulate.window import simulate_window
from babylon_rl.warehouse import RAW_BY_NAME

START = datetime(2025, 1, 15, 10)
TABLES = ("trajectories", "llm_call_logs", "market_outcomes")
WRITE_TIME = {"createdAt", "updatedAt"}


def _columns(table: str) -> list[str]:
    return [c for c in RAW_BY_NAME[table].column_names if c not in WRITE_TIME]


def _select(table: str, prefix: str = "") -> str:
    columns = ", ".join(f'"{c}"' for c in _columns(table))
    return f'SELECT {columns} FROM {prefix}"{table}" ORDER BY "id"'


def _normalise(table: str, rows: list[tuple]) -> list[tuple]:
    """JSONB comes back as a parsed value from PostgreSQL and as text from DuckDB."""
    if table != "market_outcomes":
        return rows
    at = _columns(table).index("newsEvents")
    return [row[:at] + (json.loads(row[at]) if isinstance(row[at], str) else row[at],) + row[at + 1:] for row in rows]


def _pg_rows(url: str) -> dict[str, list[tuple]]:
    with psycopg.connect(url) as conn:
        return {t: _normalise(t, conn.execute(_select(t)).fetchall()) for t in TABLES}


def _duck_rows(path: Path) -> dict[str, list[tuple]]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return {t: _normalise(t, conn.execute(_select(t, "raw.")).fetchall()) for t in TABLES}


def _config(**overrides) -> SimulationConfig:
    values = dict(agents=5, windows=2, seed=3, start=START)
    values.update(overrides)
    return SimulationConfig(**values)


def _into_pg(url: str, config: SimulationConfig) -> None:
    sink = PostgresSink(url)
    try:
        run_simulation(config, sink)
    finally:
        sink.close()


def _into_duckdb(home: Path, config: SimulationConfig) -> Path:
    sink = DuckDBSink(Home.resolve(home))
    try:
        run_simulation(config, sink)
    finally:
        sink.close()
    return home / "warehouse.duckdb"


def _windows(config: SimulationConfig) -> list[WindowRows]:
    return [simulate_window(config, config.start + timedelta(hours=i)) for i in range(config.windows)]


def _expected_call_ids(trajectory_id: str, steps: list[dict]) -> dict[str, str]:
    """callId -> stepId, by the rules of docs/TABLES.md ("Call ids")."""
    ids = {}
    for step in steps:
        for index, call in enumerate(step["llmCalls"]):
            call_id = call.get("callId") or f"{trajectory_id}:{step['stepNumber']}:{index}"
            ids[call_id] = f"{trajectory_id}:{step['stepNumber']}"
    return ids


@pytest.fixture
def other_pg_url(pg_url: str) -> Iterator[str]:
    """A second empty, migrated database next to pg_url."""
    from babylon_rl import db

    name = f"brl_test_{uuid.uuid4().hex[:12]}"
    base, _, _ = pg_url.rpartition("/")
    admin_url = f"{base}/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        db.migrate(f"{base}/{name}")
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_done_when(run_cli, migrated_pg_url: str) -> None:
    result = run_cli("--database-url", migrated_pg_url, "simulate", "--agents", "8", "--windows", "6", "--seed", "1")
    assert result.exit_code == 0, result.output
    with psycopg.connect(migrated_pg_url) as conn:
        per_window = conn.execute(
            """SELECT coalesce("windowId", to_char(date_trunc('hour', "startTime"), 'YYYY-MM-DD"T"HH24:MI')) AS w,
                      count(DISTINCT "agentId"), count(*)
               FROM trajectories GROUP BY w ORDER BY w"""
        ).fetchall()
        trajectories = conn.execute('SELECT "trajectoryId", "stepsJson" FROM trajectories').fetchall()
        logs = dict(conn.execute('SELECT "callId", "stepId" FROM llm_call_logs').fetchall())
        outcome_windows = conn.execute('SELECT count(DISTINCT "windowId") FROM market_outcomes').fetchone()[0]
    assert len(per_window) == 6 and outcome_windows == 6
    assert all(agents == 8 and count == 8 for _, agents, count in per_window)
    expected: dict[str, str] = {}
    for trajectory_id, steps_json in trajectories:
        expected.update(_expected_call_ids(trajectory_id, json.loads(steps_json)))
    assert expected == logs
    again = run_cli("--database-url", migrated_pg_url, "db", "migrate")
    assert again.exit_code == 0 and "nothing to do" in again.output


@pytest.mark.postgres
def test_same_seed_and_start_give_the_same_rows(migrated_pg_url: str, other_pg_url: str, tmp_path: Path) -> None:
    _into_pg(migrated_pg_url, _config())
    _into_pg(other_pg_url, _config())
    first = _pg_rows(migrated_pg_url)
    assert first == _pg_rows(other_pg_url)
    other_seed = _windows(_config(seed=4))
    assert sorted(r[0] for r in other_seed[0].trajectories) != sorted(r[0] for r in first["trajectories"])
    assert other_seed[0].trajectories[0][11] != _windows(_config())[0].trajectories[0][11]


def test_a_window_does_not_depend_on_how_many_were_generated() -> None:
    alone = simulate_window(_config(windows=1), START + timedelta(hours=1))
    assert alone == _windows(_config(windows=2))[1]


@pytest.mark.postgres
def test_duckdb_target_writes_what_postgres_gets(migrated_pg_url: str, tmp_path: Path) -> None:
    config = _config(dirt_rate=0.3)
    _into_pg(migrated_pg_url, config)
    warehouse = _into_duckdb(tmp_path / "home", config)
    assert _duck_rows(warehouse) == _pg_rows(migrated_pg_url)


def _dirt_found(windows: list[WindowRows]) -> dict[str, int]:
    cols = _columns("trajectories")
    found = defaultdict(int)
    for rows in windows:
        for row in rows.trajectories:
            found["null_window_id"] += row[cols.index("windowId")] is None
            found["null_final_pnl"] += row[cols.index("finalPnL")] is None
            steps = json.loads(row[cols.index("stepsJson")])
            found["error_step"] += sum(not s["action"]["success"] and "error" in s["action"] for s in steps)
        stocks = [r for r in rows.outcomes if r[2] is not None]
        found["duplicate_outcome"] += len(stocks) - len({r[2] for r in stocks})
        found["zero_change_bearish"] += sum(r[5] == 0 and r[6] == "BEARISH" for r in stocks)
    return found


def test_every_kind_of_dirt_appears_at_a_high_rate_and_none_at_zero() -> None:
    dirty = _dirt_found(_windows(_config(agents=10, windows=3, dirt_rate=0.5)))
    assert all(dirty[kind] > 0 for kind in DirtRates().as_dict()), dirty
    clean = _dirt_found(_windows(_config(agents=10, windows=3, dirt_rate=0.0)))
    assert not any(clean.values()), clean


def test_dirt_is_configurable_per_kind() -> None:
    only = _dirt_found(_windows(_config(agents=10, windows=3, dirt=DirtRates(null_final_pnl=1.0))))
    assert only["null_final_pnl"] == 30
    assert only["null_window_id"] == only["error_step"] == only["duplicate_outcome"] == only["zero_change_bearish"] == 0


def test_dirty_rows_keep_their_start_time_in_the_window() -> None:
    cols = _columns("trajectories")
    for i, rows in enumerate(_windows(_config(windows=2, dirt_rate=0.5))):
        start = START + timedelta(hours=i)
        for row in rows.trajectories:
            assert start <= row[cols.index("startTime")] < start + timedelta(hours=1)
            assert row[cols.index("scenarioId")] == rows.window_id


def _moves_after_news(config: SimulationConfig, hours: int = 150) -> dict[str, list[float]]:
    after = defaultdict(list)
    for hour in range(hours):
        market = generate_market(config, START + timedelta(hours=hour))
        for event in market.news:
            path = market.prices[event.ticker]
            later = min(event.minute + 30, market.minutes)
            after[event.sentiment].append(path[later] / path[event.minute] - 1.0)
    return after


def test_news_leads_prices() -> None:
    after = _moves_after_news(_config(seed=11))
    assert np.mean(after["BULLISH"]) > 0.005 > -0.005 > np.mean(after["BEARISH"])
    assert abs(np.mean(after["NEUTRAL"])) < 0.005


def test_news_strength_zero_makes_headlines_say_nothing_about_prices() -> None:
    """The control for learning claims: same headlines, same noise, no news-driven drift."""
    strong, none = _config(seed=11), _config(seed=11, news_strength=0.0)
    after = _moves_after_news(none)
    assert abs(np.mean(after["BULLISH"]) - np.mean(after["BEARISH"])) < 0.002
    market, flat = generate_market(strong, START), generate_market(none, START)
    assert market.news == flat.news  # the agents see the very same headlines
    assert market.prices != flat.prices
    assert generate_market(_config(seed=11, news_strength=1.0), START).prices == market.prices  # 1.0 is the default market
    rows = _windows(_config(agents=3, windows=2, seed=2))
    assert [r.trajectories for r in rows] == [r.trajectories for r in _windows(_config(agents=3, windows=2, seed=2, news_strength=1.0))]


def test_the_news_trader_beats_the_random_trader() -> None:
    cols = _columns("trajectories")
    pnl = defaultdict(list)
    for rows in _windows(_config(agents=10, windows=40, seed=5, dirt_rate=0.0)):
        for row in rows.trajectories:
            pnl[json.loads(row[cols.index("metadataJson")])["persona"]].append(row[cols.index("finalPnL")])
    assert np.mean(pnl["news"]) > np.mean(pnl["random"]) + 20
    assert np.mean(pnl["news"]) > 0


def test_final_pnl_is_the_sum_of_trade_pnl() -> None:
    cols = _columns("trajectories")
    for rows in _windows(_config(agents=10, dirt_rate=0.0)):
        for row in rows.trajectories:
            steps = json.loads(row[cols.index("stepsJson")])
            trades = [s["action"]["result"]["pnl"] for s in steps if "pnl" in s["action"].get("result", {})]
            assert row[cols.index("finalPnL")] == pytest.approx(sum(trades), abs=0.05)
            assert row[cols.index("tradesExecuted")] == len(trades)


_HEADLINE_LINE = re.compile(r"^  \[(\d\d:\d\d)\] (\w+): (.+)$", re.MULTILINE)


def test_observations_never_show_future_headlines() -> None:
    config = _config(agents=10, windows=4, seed=9)
    cols = _columns("llm_call_logs")
    shown = 0
    for i, rows in enumerate(_windows(config)):
        market = generate_market(config, START + timedelta(hours=i))
        published = {(f"{(market.start + timedelta(minutes=e.minute)):%H:%M}", market.tickers[e.ticker], e.headline): e
                      for e in market.news}
        for row in rows.llm_calls:
            called = row[cols.index("timestamp")]
            seen = {m.groups() for m in _HEADLINE_LINE.finditer(row[cols.index("userPrompt")])}
            for key, event in published.items():
                at = market.start + timedelta(minutes=event.minute)
                assert (key in seen) == (at <= called), (key, called)
            shown += len(seen)
    assert shown > 0


def test_plugin_shape_when_rich_share_is_one() -> None:
    rows = simulate_window(_config(rich_share=1.0), START)
    steps = json.loads(rows.trajectories[0][_columns("trajectories").index("stepsJson")])
    step = steps[0]
    assert {"stepId", "observation", "done", "metadata"} <= step.keys()
    assert {"timestamp", "agentPoints", "portfolioValue", "custom"} <= step["environmentState"].keys()
    call = step["llmCalls"][-1]
    assert [m["role"] for m in call["messages"]] == ["system", "user"]
    assert {"callId", "timestamp", "topP", "promptTokens", "completionTokens"} <= call.keys()
    assert step["action"]["llmCallId"] == call["callId"] and "actionName" in step["action"]
    assert steps[-1]["done"] and not steps[0]["done"]
    assert all(row[_columns("llm_call_logs").index("messagesJson")] for row in rows.llm_calls)


def test_usage_errors(run_cli) -> None:
    for args in (["--agents", "0"], ["--agents", "-3"], ["--windows", "0"]):
        result = run_cli("simulate", *args)
        assert result.exit_code == 2 and "Invalid value" in result.output
    result = run_cli("simulate", "--news-strength", "-1", "--target", "duckdb")
    assert result.exit_code == 2 and "--news-strength must be between 0 and 10" in result.output and "Traceback" not in result.output


@pytest.mark.postgres
def test_missing_tables_say_migrate(run_cli, pg_url: str) -> None:
    result = run_cli("--database-url", pg_url, "simulate", "--agents", "1", "--windows", "1")
    assert result.exit_code == 2 and "cli.py db migrate" in result.output


def test_duckdb_runs_continue_after_the_newest_window(run_cli, home: Path) -> None:
    first = run_cli("simulate", "--agents", "2", "--windows", "2", "--start", "2025-01-15T10:00")
    second = run_cli("simulate", "--agents", "2", "--windows", "1")
    again = run_cli("simulate", "--agents", "2", "--windows", "1", "--start", "2025-01-15T11:00")
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert "2025-01-15T12:00" in second.output
    assert again.exit_code == 2 and "already in" in again.output
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        windows = [r[0] for r in conn.execute('SELECT DISTINCT "windowId" FROM raw.market_outcomes ORDER BY 1').fetchall()]
        # raw.* has no primary key index: the refused window wrote nothing (the sink checks the seeded ids itself)
        ids = conn.execute('SELECT count(*), count(DISTINCT "id") FROM raw.trajectories').fetchone()
    assert windows == ["2025-01-15T10:00", "2025-01-15T11:00", "2025-01-15T12:00"]
    assert ids == (6, 6)


def test_default_start_ends_the_history_now(run_cli, home: Path) -> None:
    result = run_cli("simulate", "--agents", "1", "--windows", "3")
    assert result.exit_code == 0, result.output
    hour = datetime.utcnow().replace(minute=0, second=0, microsecond=0)
    assert f"{hour - timedelta(hours=1):%Y-%m-%dT%H:%M}" in result.output


def test_write_time_columns_are_real_time(tmp_path: Path) -> None:
    before = datetime.utcnow() - timedelta(seconds=1)
    warehouse = _into_duckdb(tmp_path / "home", _config(windows=1))
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        oldest = conn.execute('SELECT min("updatedAt") FROM raw.trajectories').fetchone()[0]
    assert oldest >= before and EPOCH < oldest


def test_unreachable_database_is_one_masked_line(run_cli) -> None:
    url = "postgresql://postgres:s3cret@127.0.0.1:1/nowhere"
    result = run_cli("--database-url", url, "simulate", "--agents", "1", "--windows", "1")
    assert result.exit_code == 2
    assert "cannot connect to postgresql://postgres:***@127.0.0.1:1/nowhere" in result.output
    assert "s3cret" not in result.output and "Traceback" not in result.output


def _masked_headlines(config: SimulationConfig, starts: list[datetime]) -> list[str]:
    from babylon_rl.simulate.market import company_name

    out = []
    for start in starts:
        market = generate_market(config, start)
        for e in market.news:
            ticker = config.tickers[e.ticker]
            out.append(e.headline.replace(company_name(ticker), "{name}").replace(ticker, "{ticker}"))
    return out


def test_fresh_news_rarely_recurs_and_later_windows_read_phrasings_no_earlier_window_had() -> None:
    """The game writes every story afresh: nearly no headline text recurs (names masked), and the windows from
    `unseen_wording_from` on share no headline with the earlier ones; the market (stories and prices) is the templates'."""
    from babylon_rl.evaluate.rules import headline_sentiment

    split = START + timedelta(hours=100)
    config = _config(seed=3, unseen_wording_from=split)
    early = _masked_headlines(config, [START + timedelta(hours=h) for h in range(100)])
    late = _masked_headlines(config, [START + timedelta(hours=h) for h in range(100, 200)])
    assert len(set(early)) > 0.9 * len(early) and len(set(late)) > 0.9 * len(late)
    assert not set(early) & set(late)
    old = _masked_headlines(_config(seed=3, wording="templates"), [START + timedelta(hours=h) for h in range(100)])
    assert len(set(old)) == 14
    fresh, templated = generate_market(config, START + timedelta(hours=7)), generate_market(_config(seed=3, wording="templates"), START + timedelta(hours=7))
    assert fresh.prices == templated.prices
    assert [(e.minute, e.ticker, e.sentiment) for e in fresh.news if not e.echo] == [(e.minute, e.ticker, e.sentiment) for e in templated.news]
    # the news rule's oracle knows every phrasing the simulator writes, mixed stories included
    for start in (START + timedelta(hours=h) for h in range(0, 200, 5)):
        assert all(headline_sentiment(e.headline) == e.sentiment for e in generate_market(config, start).news)


def test_a_simulation_words_its_latest_half_from_the_unseen_phrasings() -> None:
    from babylon_rl.simulate.news import OUTLETS
    from babylon_rl.simulate.sinks import MemorySink

    sink = MemorySink()
    run_simulation(_config(windows=6, seed=1, dirt_rate=0.0), sink)
    families = []
    for rows in sink.windows:
        headlines = [n["headline"] for row in rows.outcomes if row[7] for n in json.loads(row[7])]
        families.append({next(i for i, outlets in enumerate(OUTLETS) if any(o in h for o in outlets)) for h in headlines})
    assert families == [{0}] * 3 + [{1}] * 3
