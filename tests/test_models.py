"""The SQLMesh models: YAML unit tests, a DuckDB build from hand-made raw rows, restatement,
and the same models planned and applied against PostgreSQL."""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path

import duckdb
import psycopg
import pytest
from sqlmesh import Context

from babylon_rl import db
from babylon_rl.build import plan_prod
from babylon_rl.settings import PROJECT_ROOT, Home
from babylon_rl.warehouse import connect, create_raw_schema
from tests.game_rows import STAGED_CALL_LOGS_SQL

COLUMNS = {
    "trajectories": ["id", "trajectoryId", "agentId", "startTime", "endTime", "durationMs", "windowId", "windowHours",
                     "stepsJson", "rewardComponentsJson", "metricsJson", "metadataJson", "totalReward", "episodeLength",
                     "finalStatus", "finalPnL", "isTrainingData", "isEvaluation", "usedInTraining", "createdAt", "updatedAt"],
    "llm_call_logs": ["id", "trajectoryId", "stepId", "callId", "timestamp", "model", "purpose", "systemPrompt",
                      "userPrompt", "response", "temperature", "maxTokens", "createdAt"],
    "market_outcomes": ["id", "windowId", "stockTicker", "startPrice", "endPrice", "changePercent", "sentiment",
                        "newsEvents", "predictionMarketId", "question", "outcome", "finalProbability", "createdAt"],
}
SECRET_HEADLINE = "ACME beats earnings, stock soars"


def _step(n: int, pnl: float, calls: list[dict], action: str = "HOLD", success: bool = True, trade_pnl: float | None = None) -> dict:
    step = {"stepNumber": n, "timestamp": 1736935200000 + n * 1000, "environmentState": {"agentBalance": 10000, "agentPnL": pnl, "openPositions": 0},
            "providerAccesses": [], "llmCalls": calls, "action": {"actionType": action, "parameters": {}, "success": success}, "reward": 0}
    if trade_pnl is not None:
        step["action"]["result"] = {"pnl": trade_pnl}
    return step


def _call(prompt: str, answer: str, system: str = "You are a trader") -> dict:
    return {"model": "m", "systemPrompt": system, "userPrompt": prompt, "response": answer, "temperature": 0.7, "maxTokens": 100, "purpose": "action"}


def _trajectory(id_: str, agent: str, window: str | None, start: str, steps, final_pnl: float | None, **extra) -> dict:
    row = {"id": id_, "trajectoryId": "traj-" + id_, "agentId": agent, "startTime": start, "endTime": start, "durationMs": 1000,
           "windowId": window, "windowHours": 1, "stepsJson": steps if isinstance(steps, str) else json.dumps(steps),
           "rewardComponentsJson": "{}", "metricsJson": "{}", "metadataJson": "{}", "totalReward": 0.5, "episodeLength": 2,
           "finalStatus": "completed", "finalPnL": final_pnl, "isTrainingData": True, "isEvaluation": False, "usedInTraining": False,
           "createdAt": start, "updatedAt": start}
    row.update(extra)
    return row


def raw_rows() -> dict[str, list[dict]]:
    w1, w2 = "2025-01-15T10:00", "2025-01-15T11:00"
    multi = [
        _step(0, 0.0, [_call("think about ACME", "thinking..."), _call("decide on ACME", '{"action": "buy", "ticker": "ACME", "shares": 10}')], "BUY_SHARES", True, 12.0),
        _step(1, 12.0, [_call("step one prompt", '{"action": "hold"}')]),
    ]
    plugin = [{"stepId": "0", "stepNumber": 0, "timestamp": 1736935200000, "observation": {}, "done": False,
               "environmentState": {"agentBalance": 1, "agentPnL": 3.0, "openPositions": 0, "agentPoints": 1},
               "llmCalls": [{"callId": "plug-call-1", "model": "m", "messages": [{"role": "system", "content": "You are a plugin trader"},
                                                                                    {"role": "user", "content": "Plugin sees ünïcödé ✓"}],
                              "response": '{"action": "sell", "ticker": "ACME", "shares": 1}'}],
               "action": {"actionName": "SELL_SHARES", "parameters": {}, "success": True, "result": {"pnl": -2.0}, "llmCallId": "plug-call-1", "immediateReward": 0}}]
    long_prompt = "x" * 200_000
    trajectories = [
        _trajectory("a", "agent-1", w1, "2025-01-15 10:05:00", multi, 10.0),
        _trajectory("b", "agent-2", w1, "2025-01-15 10:06:00", [_step(0, 0, [_call(long_prompt, "ok")]), _step(1, -4.5, [])], float("nan")),
        _trajectory("c", "agent-3", None, "2025-01-15 10:07:00", plugin, -2.0),
        _trajectory("d", "agent-4", "garbage", "2025-01-15 11:30:00", [_step(0, 1, [_call("p", "r")])], 7.0),
        _trajectory("e", "agent-5", w2, "2025-01-15 11:10:00", [_step(0, 2, [_call("p", "r")], "BUY_SHARES", True, 5.0)], 3.0),
        # dirty rows
        _trajectory("bad-json", "agent-6", w1, "2025-01-15 10:08:00", "{not json", 1.0),
        _trajectory("bad-array", "agent-7", w1, "2025-01-15 10:08:00", '{"steps": []}', 1.0),
        _trajectory("bad-shape", "agent-8", w1, "2025-01-15 10:08:00", [{"foo": 1}], 1.0),
        _trajectory("bad-step", "agent-9", w1, "2025-01-15 10:08:00", [42], 1.0),
        _trajectory("bad-pnl", "agent-10", w1, "2025-01-15 10:08:00", [{"stepNumber": 0, "action": {"actionType": "HOLD", "success": True}}], None),
        _trajectory("bad-calls", "agent-11", w1, "2025-01-15 10:08:00", [{"stepNumber": "x", "environmentState": {"agentPnL": "oops"}, "llmCalls": "nope"}], 1.0),
    ]
    logs = [
        {"id": "log-1", "trajectoryId": "traj-a", "stepId": "traj-a:0", "callId": "traj-a:0:1", "timestamp": "2025-01-15 10:05:01",
         "model": "m", "purpose": "action", "systemPrompt": "You are a trader", "userPrompt": "decide on ACME", "response": "dup", "temperature": 0.7, "maxTokens": 100, "createdAt": "2025-01-15 10:05:01"},
        # logged three days after its trajectory's window: not a call of that play (call_log_margin_hours is 24)
        {"id": "log-stray", "trajectoryId": "traj-e", "stepId": "traj-e:5", "callId": "stray-call", "timestamp": "2025-01-18 11:10:00",
         "model": "m", "purpose": "action", "systemPrompt": "s", "userPrompt": "u", "response": "r", "temperature": 0.7, "maxTokens": 100, "createdAt": "2025-01-18 11:10:00"},
        {"id": "log-orphan", "trajectoryId": "traj-nowhere", "stepId": "traj-nowhere:0", "callId": "orphan-call", "timestamp": "2025-01-15 10:05:01",
         "model": "m", "purpose": "action", "systemPrompt": "s", "userPrompt": "u", "response": "r", "temperature": 0.7, "maxTokens": 100, "createdAt": "2025-01-15 10:05:01"},
    ]
    news = json.dumps([{"headline": SECRET_HEADLINE, "sentiment": "BULLISH", "at": "2025-01-15T10:20"}])
    outcomes = [
        {"id": "mo-1", "windowId": w1, "stockTicker": "ACME", "startPrice": 100, "endPrice": 110, "changePercent": 10, "sentiment": "BULLISH", "newsEvents": news, "createdAt": "2025-01-15 11:00:00"},
        {"id": "mo-1-old", "windowId": w1, "stockTicker": "ACME", "startPrice": 100, "endPrice": 90, "changePercent": -10, "sentiment": "BEARISH", "newsEvents": None, "createdAt": "2025-01-15 10:59:00"},
        {"id": "mo-2", "windowId": w1, "stockTicker": "FLAT", "startPrice": 50, "endPrice": 50, "changePercent": 0, "sentiment": "BEARISH", "newsEvents": "[]", "createdAt": "2025-01-15 11:00:00"},
        {"id": "mo-3", "windowId": w1, "predictionMarketId": "pm-1", "question": "Will ACME close up?", "outcome": "YES", "finalProbability": 0.9, "createdAt": "2025-01-15 11:00:00"},
        {"id": "mo-bad", "windowId": w1, "createdAt": "2025-01-15 11:00:00"},
        {"id": "mo-badwin", "windowId": "someday", "stockTicker": "ACME", "createdAt": "2025-01-15 11:00:00"},
    ]
    return {"trajectories": trajectories, "llm_call_logs": logs, "market_outcomes": outcomes}


def insert(conn, table: str, rows: list[dict], placeholder: str = "?") -> None:
    cols = COLUMNS[table]
    sql = f'INSERT INTO {table} ({", ".join(chr(34) + c + chr(34) for c in cols)}) VALUES ({", ".join([placeholder] * len(cols))})'
    for row in rows:
        conn.execute(sql, [row.get(c) for c in cols])


# The days the hand-made rows below fall in (what `cli.py build` reads off raw).
DATA_DAYS = (datetime(2025, 1, 15), datetime(2025, 1, 16))


def build_duckdb(home: Path, rows: dict[str, list[dict]]) -> Context:
    conn = connect(Home.resolve(home))
    create_raw_schema(conn)
    conn.execute("SET schema = 'raw'")
    for table, table_rows in rows.items():
        insert(conn, table, table_rows)
    conn.close()
    context = Context(paths=str(PROJECT_ROOT))
    plan_prod(context, [], 1, DATA_DAYS)  # as `cli.py build` does: only the days that hold data are computed
    context.close()  # release the warehouse file for the checks
    return context


def query(home: Path, sql: str) -> list[tuple]:
    conn = connect(Home.resolve(home), read_only=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_sqlmesh_unit_tests_pass(home: Path) -> None:
    import yaml

    home.mkdir(parents=True, exist_ok=True)
    expected = sum(len(yaml.safe_load(path.read_text()) or {}) for path in (PROJECT_ROOT / "tests").glob("**/test*.yaml"))
    result = Context(paths=str(PROJECT_ROOT)).test()
    assert result.wasSuccessful(), [str(failure) for failure in result.failures + result.errors]
    assert expected > 0 and result.testsRun == expected


def test_columns_blocks_declare_what_the_queries_return(home: Path) -> None:
    # SQLMesh's optimizer is off (config.py): a model's `columns` block is all SQLMesh and the
    # YAML tests know of its types. A view is created with the block's names by position and an
    # incremental table with its types, so a block out of step with its query is silently wrong.
    build_duckdb(home, raw_rows())
    context = Context(paths=str(PROJECT_ROOT))
    adapter = context.engine_adapter
    try:
        for name, model in context.models.items():
            if model.kind.is_external:
                continue
            query = context.render(model, start=DATA_DAYS[0], end=DATA_DAYS[1])
            returned = [tuple(row[:2]) for row in adapter.fetchall(f"DESCRIBE {query.sql(dialect='duckdb')}")]
            declared_types = model.columns_to_types_ or {}
            typed = ", ".join(f"typeof(CAST(NULL AS {data_type.sql(dialect='duckdb')}))" for data_type in declared_types.values())
            declared = list(zip(declared_types, adapter.fetchone(f"SELECT {typed}") if typed else []))
            assert declared == returned, name
    finally:
        context.close()


def test_windows_and_agent_pnl_match_the_raw_rows(home: Path) -> None:
    rows = raw_rows()
    build_duckdb(home, rows)
    pnl = dict(query(home, "SELECT agent_id, pnl FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T10:00'"))
    # a: finalPnL 10; b: NaN finalPnL -> last step agentPnL -4.5; c: windowId NULL -> from startTime
    assert pnl == {"agent-1": 10.0, "agent-2": -4.5, "agent-3": -2.0}
    expected = [10.0, -4.5, -2.0]
    (agents, mean, std, lo, hi, trades, stocks, markets, ready, calls) = query(
        home, "SELECT agents, pnl_mean, pnl_std, pnl_min, pnl_max, trades, stock_count, prediction_market_count, ready, llm_calls "
              "FROM babylon.windows WHERE window_id = '2025-01-15T10:00'")[0]
    assert agents == 3 and mean == pytest.approx(statistics.mean(expected)) and std == pytest.approx(statistics.stdev(expected))
    assert (lo, hi, trades, stocks, markets, ready, calls) == (-4.5, 10.0, 2, 2, 1, False, 5)
    # 'garbage' windowId falls back to startTime 11:30 -> the 11:00 window
    assert dict(query(home, "SELECT agent_id, pnl FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T11:00'")) == {"agent-4": 7.0, "agent-5": 3.0}
    ranks = dict(query(home, "SELECT agent_id, pnl_rank FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T10:00'"))
    assert ranks == {"agent-1": 1, "agent-3": 2, "agent-2": 3}
    sentiments = dict(query(home, "SELECT ticker, sentiment FROM staging.market_outcomes WHERE ticker IS NOT NULL"))
    assert sentiments == {"ACME": "BULLISH", "FLAT": "NEUTRAL"}
    context = query(home, "SELECT context_text FROM babylon.window_market_context WHERE window_id = '2025-01-15T10:00'")[0][0]
    assert SECRET_HEADLINE in context and "Will ACME close up?" in context and "YES" in context


def test_rejected_rows_reconcile(home: Path) -> None:
    rows = raw_rows()
    build_duckdb(home, rows)
    rejected = dict(((t, s), r) for t, s, r in query(home, "SELECT source_table, source_id, reason FROM babylon.rejected_rows"))
    assert rejected[("trajectories", "bad-json")] == "steps_not_json"
    assert rejected[("trajectories", "bad-array")] == "steps_not_array"
    assert rejected[("trajectories", "bad-shape")] == "unknown_step_shape"
    assert rejected[("trajectories", "bad-step")] == "step_not_object"
    assert rejected[("trajectories", "bad-pnl")] == "no_pnl"
    assert rejected[("trajectories", "bad-calls")] == "llm_calls_not_array"
    assert rejected[("llm_call_logs", "log-orphan")] == "unknown_trajectory"
    assert rejected[("llm_call_logs", "log-stray")] == "call_outside_window"
    assert rejected[("market_outcomes", "mo-bad")] == "outcome_without_instrument"
    assert rejected[("market_outcomes", "mo-1-old")] == "superseded_duplicate"
    assert rejected[("market_outcomes", "mo-badwin")] == "bad_window_id"
    staged = {
        "trajectories": query(home, "SELECT COUNT(*) FROM staging.trajectories")[0][0],
        "llm_call_logs": query(home, STAGED_CALL_LOGS_SQL)[0][0],
        "market_outcomes": query(home, "SELECT COUNT(*) FROM staging.market_outcomes")[0][0],
    }
    for table, table_rows in rows.items():
        rejected_count = sum(1 for (t, _s) in rejected if t == table)
        assert len(table_rows) == staged[table] + rejected_count, table


def test_messages_hold_every_call_in_order_and_no_ground_truth(home: Path) -> None:
    build_duckdb(home, raw_rows())
    messages = json.loads(query(home, "SELECT messages FROM babylon.training_samples WHERE trajectory_id = 'traj-a'")[0][0])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert [m["content"] for m in messages if m["role"] == "user"] == ["think about ACME", "decide on ACME", "step one prompt"]
    assert messages[0]["content"] == "You are a trader"
    plugin = json.loads(query(home, "SELECT messages FROM babylon.training_samples WHERE trajectory_id = 'traj-c'")[0][0])
    assert plugin == [{"role": "system", "content": "You are a plugin trader"}, {"role": "user", "content": "Plugin sees ünïcödé ✓"},
                      {"role": "assistant", "content": '{"action": "sell", "ticker": "ACME", "shares": 1}'}]
    long = json.loads(query(home, "SELECT messages FROM babylon.training_samples WHERE trajectory_id = 'traj-b'")[0][0])
    assert len(long[1]["content"]) == 200_000
    for (text,) in query(home, "SELECT messages FROM babylon.training_samples"):
        assert SECRET_HEADLINE not in text and "Will ACME close up?" not in text


def test_restating_a_window_picks_up_a_late_row(home: Path) -> None:
    context = build_duckdb(home, raw_rows())
    late = _trajectory("late", "agent-99", "2025-01-15T10:00", "2025-01-15 10:30:00", [_step(0, 0, [_call("p", "r")])], 100.0)
    conn = connect(Home.resolve(home))
    conn.execute("SET schema = 'raw'")
    insert(conn, "trajectories", [late])
    conn.close()
    context = Context(paths=str(PROJECT_ROOT))
    models = [name for name, model in context.models.items() if not model.kind.is_external]
    context.plan(restate_models=models, start="2025-01-15 10:00:00", end="2025-01-15 10:59:59", auto_apply=True, no_prompts=True)
    context.close()
    assert query(home, "SELECT agents FROM babylon.windows WHERE window_id = '2025-01-15T10:00'")[0][0] == 4
    assert ("agent-99", 1) in query(home, "SELECT agent_id, pnl_rank FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T10:00'")
    assert query(home, "SELECT COUNT(*) FROM babylon.training_samples WHERE trajectory_id = 'traj-late'")[0][0] == 1
    assert models


@pytest.mark.parametrize(("trajectories", "batch_threads"), [(122_879, 3), (122_880, 1)])
def test_the_calls_parse_runs_on_one_thread_where_duckdb_would_parse_on_two(home: Path, trajectories: int, batch_threads: int) -> None:
    """staging.training_chats (which parses the calls) runs on one DuckDB thread from the size at which DuckDB would parse
    raw.trajectories' stepsJson on two (macros/threads.py), on the connection's threads below
    it, and its post-statement gives the connection back the count it had. (On PostgreSQL both
    render to nothing: test_models_plan_and_apply_on_postgres.)"""
    Home.resolve(home).ensure()
    model = Context(paths=str(PROJECT_ROOT)).get_model("staging.training_chats")
    conn = duckdb.connect(config={"threads": 3})
    conn.execute(f"CREATE SCHEMA raw; CREATE TABLE raw.trajectories AS SELECT range AS id FROM range({trajectories})")

    def threads() -> int:
        return int(conn.execute("SELECT current_setting('threads')").fetchone()[0])

    for statement in model.render_pre_statements():
        conn.execute(statement.sql("duckdb"))
    during = threads()
    for statement in model.render_post_statements():
        conn.execute(statement.sql("duckdb"))
    assert (during, threads()) == (batch_threads, 3)


@pytest.mark.postgres
def test_models_plan_and_apply_on_postgres(pg_url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db.migrate(pg_url)
    rows = raw_rows()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for table, table_rows in rows.items():
            for row in table_rows:
                if row.get("finalPnL") is not None and row["finalPnL"] != row["finalPnL"]:
                    row["finalPnL"] = float("nan")
            insert(conn, table, [r for r in table_rows if table != "market_outcomes" or r.get("windowId")], placeholder="%s")
    name = pg_url.rsplit("/", 1)[1]
    monkeypatch.setenv("BABYLON_RL_PG_DATABASE", name)
    monkeypatch.setenv("BABYLON_RL_PG_STATE_SCHEMA", "sqlmesh_state_test")
    context = Context(paths=str(PROJECT_ROOT), gateway="postgres")
    # the YAML unit tests name the duckdb gateway's raw.* inputs; they run in test_sqlmesh_unit_tests_pass
    plan_prod(context, [], 1, DATA_DAYS, skip_tests=True)
    with psycopg.connect(pg_url) as conn:
        pnl = dict(conn.execute("SELECT agent_id, pnl FROM babylon.agent_window_pnl WHERE window_id = '2025-01-15T10:00'").fetchall())
        assert pnl == {"agent-1": 10.0, "agent-2": -4.5, "agent-3": -2.0}
        messages = json.loads(conn.execute("SELECT messages FROM babylon.training_samples WHERE trajectory_id = 'traj-a'").fetchone()[0])
        assert [m["content"] for m in messages if m["role"] == "user"] == ["think about ACME", "decide on ACME", "step one prompt"]
        rejected = dict(((t, s), r) for t, s, r in conn.execute("SELECT source_table, source_id, reason FROM babylon.rejected_rows"))
        assert rejected[("trajectories", "bad-json")] == "steps_not_json"
        assert rejected[("market_outcomes", "mo-badwin")] == "bad_window_id"
        assert rejected[("llm_call_logs", "log-stray")] == "call_outside_window"
        context_text = conn.execute("SELECT context_text FROM babylon.window_market_context WHERE window_id = '2025-01-15T10:00'").fetchone()[0]
        assert SECRET_HEADLINE in context_text
