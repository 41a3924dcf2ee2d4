"""Benchmark `dataset build` against DuckDB alone COPYing the same rows to Parquet.

    python bench/bench_dataset.py --rows 100000 --rows 1000000 --workdir /tmp/brl-bench

For each size, a warehouse with `babylon.training_samples` and `babylon.windows` is
generated once in DuckDB (synthetic chats of 2-4 KB per trajectory). Each measured
case runs in its own subprocess, which reports its wall time and peak RSS
(getrusage RUSAGE_SELF ru_maxrss): `build` is babylon_rl.dataset.build over all
windows, `copy` is DuckDB's `COPY (SELECT the same eligible rows) TO x.parquet`.
Two window layouts per size (10 and 100 agents per window) show whether memory
grows with the number of windows.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ELIGIBLE_SQL = """
    SELECT trajectory_id, source_id, window_id, window_start, agent_id, messages, pnl, win_rate,
           actions, trades, errors, llm_calls, window_agents
    FROM babylon.training_samples
    WHERE NOT coalesce(used_in_training, false) AND coalesce(actions, 0) >= 5
"""

GENERATE_SQL = """
CREATE SCHEMA babylon;
CREATE TABLE babylon.training_samples AS
WITH base AS (
    SELECT i, i // {agents} AS w, i % {agents} AS a, 6 + (hash(i) % 5)::INT AS steps
    FROM range({rows}) t(i)
)
SELECT
    'traj-' || i AS trajectory_id, 'src-' || i AS source_id,
    strftime(TIMESTAMP '2024-01-01' + to_hours(w), '%Y-%m-%dT%H:%M') AS window_id,
    TIMESTAMP '2024-01-01' + to_hours(w) AS window_start,
    'agent-' || a AS agent_id,
    TIMESTAMP '2024-01-01' + to_hours(w) AS start_time,
    TIMESTAMP '2024-01-01' + to_hours(w) + INTERVAL 59 MINUTE AS end_time,
    '[{{"role": "system", "content": "You are a momentum trader in Babylon, agent ' || a || '. Buy what rises, cut losers fast, answer in JSON."}}' ||
    array_to_string(list_transform(range(steps), s ->
        ', {{"role": "user", "content": "Step ' || s || '. Balance $' || (1000 + hash(i, s) % 4000) ||
        '. ACME trades at $' || (10 + hash(s, i) % 190) || '. Open positions: ' || (hash(i + s) % 5) ||
        '. Order book: ' || md5(i || ':' || s) || ' ' || md5(s || ':' || i) || ' ' || md5(i || '/' || s) ||
        ' ' || md5(s || '/' || i) || ' ' || md5(i || '-' || s) || '"}}, {{"role": "assistant", "content": "{{\\"action\\": \\"buy\\", \\"ticker\\": \\"ACME\\", \\"shares\\": ' ||
        (1 + hash(i * s) % 20) || '}}"}}'), '') || ']' AS messages,
    steps AS llm_calls, steps, steps AS actions, steps - 1 AS trades, (steps - 1) // 2 AS wins, 0 AS errors,
    ((hash(i) % 20000)::DOUBLE - 10000) / 100 AS pnl, 1 AS pnl_rank, 0.0 AS pnl_zscore, 0.5 AS win_rate,
    {agents} AS window_agents, 0.0 AS total_reward, 'completed' AS final_status,
    (i % 50 = 0) AS used_in_training, NULL::TEXT AS trained_in_batch
FROM base;
CREATE TABLE babylon.windows AS
SELECT window_id, window_start, window_start + INTERVAL 1 HOUR AS window_end, count(DISTINCT agent_id) AS agents,
       count(*) AS trajectories, true AS ready
FROM babylon.training_samples GROUP BY ALL;
CREATE TABLE babylon.window_market_context AS
SELECT window_id, window_start, 'ACME opened at $100.00 and closed at $101.50 (+1.50%, BULLISH).' AS context_text, '[]' AS stocks_json, '[]' AS prediction_markets_json
FROM babylon.windows;
"""


def warehouse_home(workdir: Path, rows: int, agents: int) -> Path:
    import duckdb

    home = workdir / f"rows{rows}-agents{agents}"
    db = home / "warehouse.duckdb"
    if not db.exists():
        home.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        conn = duckdb.connect(str(db))
        conn.execute(GENERATE_SQL.format(rows=rows, agents=agents))
        size = conn.execute("SELECT avg(strlen(messages))::INT FROM babylon.training_samples").fetchone()[0]
        conn.close()
        print(f"generated {rows} rows ({agents} agents/window, mean messages {size} bytes) in {time.perf_counter() - started:.1f}s", flush=True)
    return home


def measure(case: str, home: Path, rows: int) -> dict:
    """Run one case in this (fresh) process and return time and peak memory."""
    started = time.perf_counter()
    if case == "copy":
        import duckdb

        target = home / "copy.parquet"
        conn = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
        quoted = str(target).replace("'", "''")
        conn.execute(f"COPY ({ELIGIBLE_SQL}) TO '{quoted}' (FORMAT parquet, COMPRESSION zstd)")
        conn.close()
    else:
        from babylon_rl.dataset.build import build
        from babylon_rl.dataset.params import BuildParams
        from babylon_rl.settings import Home
        from datetime import datetime

        if case == "build":
            # Every eligible row is written (no cap, no dropout), so both sides write the same rows.
            params = BuildParams(name="bench", since=datetime(2000, 1, 1), target_trajectories=rows, max_group_size=1000)
        else:
            # The everyday case: the default target of 1,000 trajectories sampled from all windows.
            params = BuildParams(name="sample", since=datetime(2000, 1, 1))
        build(Home.resolve(home), params, force=True)
    elapsed = time.perf_counter() - started
    return {"case": case, "seconds": round(elapsed, 2), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def run_case(case: str, home: Path, rows: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", case, "--home", str(home), "--rows", str(rows)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, action="append")
    parser.add_argument("--agents", type=int, action="append", help="agents per window (default 10 and 100)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/brl-bench"))
    parser.add_argument("--measure", choices=["build", "copy", "sample"])
    parser.add_argument("--home", type=Path)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.home, args.rows[0])))
        return
    results = []
    for rows in args.rows or [100_000]:
        for agents in args.agents or [10, 100]:
            home = warehouse_home(args.workdir, rows, agents)
            for case in ("copy", "build", "sample"):
                result = run_case(case, home, rows) | {"rows": rows, "windows": -(-rows // agents)}
                print(json.dumps(result), flush=True)
                results.append(result)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("POLARS_MAX_THREADS", str(os.cpu_count() or 2))
    main()
