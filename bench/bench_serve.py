"""`cli.py serve` under load: requests per second and p50/p95 latency at concurrency 1, 4 and 16, in four modes,
each a real server process: one request at a time (--max-batch 1) and batched (--max-batch 16), each without the
prefix cache (--prefix-cache-mb 0: every prompt whole, the server before it) and with it (the default).

    OMP_NUM_THREADS=1 python bench/bench_serve.py --home /tmp/sh --seconds 60

Each level is a closed loop: C clients send game action requests back to back for --seconds, then
the requests in flight are waited for (they count). The requests are the personas' own action
requests from simulated windows in their order (a system prompt and the long observation; the agents
of one tick one after another), answered greedily (temperature 0, max_tokens 32); none is sent twice to
one server, so a cached prompt is never an echo of the same request. "lost" = requests sent minus 200
answers. Peak memory is the server's VmHWM (peak resident set) at the end of its levels; "reused" is
the share of decision prompt tokens whose frozen-block work the cache gave (/health). Writes
bench/results/serve-cpu.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import click
import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
# (mode, --max-batch, --prefix-cache-mb; None: serve's default); the first is what the others are compared with
MODES = (("one at a time, no prefix cache", 1, 0), ("batched, no prefix cache", 16, 0), ("one at a time", 1, None),
         ("batched", 16, None))
sys.path.insert(0, str(ROOT))


def game_requests(count: int = 64) -> list[list[dict]]:
    """`count` distinct action requests of the personas, as the game sends them: simulated windows' in their order (the
    agents of one tick one after another), as many windows as it takes. None repeats, so no answer is a cache's echo."""
    from datetime import timedelta

    from babylon_rl.simulate.config import SimulationConfig
    from babylon_rl.simulate.window import simulate_window
    from babylon_rl.warehouse import RAW_BY_NAME

    columns = RAW_BY_NAME["llm_call_logs"].column_names
    first = datetime(2025, 1, 15, 10)
    config = SimulationConfig(agents=8, windows=max(1, count // 40 + 1), seed=11, start=first).validate()
    asks: list[list[dict]] = []
    for window in range(config.windows):
        rows = simulate_window(config, first + timedelta(hours=window))
        calls = [dict(zip(columns, row)) for row in rows.llm_calls]
        asks += [[{"role": "system", "content": c["systemPrompt"]}, {"role": "user", "content": c["userPrompt"]}]
                 for c in calls if c["userPrompt"] and "Prices:" in c["userPrompt"]]
        if len(asks) >= count:
            break
    assert len(asks) >= count, f"{config.windows} windows gave {len(asks)} requests, not {count}"
    return asks[:count]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, model: str, max_batch: int, prefix_cache_mb: int | None) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cache = [] if prefix_cache_mb is None else ["--prefix-cache-mb", str(prefix_cache_mb)]
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "--home", str(home), "serve", model, "--port", str(port),
                             "--max-batch", str(max_batch), "--max-queue", "64", *cache], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise click.ClickException("the server did not become ready in 120 s")


def status_mb(pid: int, field: str = "VmHWM") -> float:
    """A process's memory figure from /proc/PID/status in MB: VmHWM (its peak resident set), VmRSS (now)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def load(url: str, model: str, requests: Iterator[list[dict]], concurrency: int, seconds: float) -> dict:
    """`concurrency` clients, each sending the next of `requests` as its last is answered, for `seconds`."""
    latencies, failures, sent = [], 0, 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal failures, sent
        while time.perf_counter() < deadline:
            sent += 1
            began = time.perf_counter()
            body = {"model": model, "messages": next(requests), "temperature": 0, "max_tokens": 32}
            reply = await http.post(f"{url}/v1/chat/completions", json=body)
            if reply.status_code == 200:
                latencies.append(time.perf_counter() - began)
            else:
                failures += 1

    async with httpx.AsyncClient(timeout=900) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    values = np.array(latencies) if latencies else np.array([float("nan")])
    return {"concurrency": concurrency, "sent": sent, "answered": len(latencies), "lost": sent - len(latencies),
            "failed": failures, "seconds": round(elapsed, 1), "rps": round(len(latencies) / elapsed, 3),
            "p50_s": round(float(np.percentile(values, 50)), 2), "p95_s": round(float(np.percentile(values, 95)), 2)}


@click.command()
@click.option("--home", type=click.Path(path_type=Path), required=True, help="A home with HOME/models/smollm2-135m (model init).")
@click.option("--model", default="smollm2-135m", show_default=True)
@click.option("--seconds", type=float, default=60, show_default=True, help="Load per level.")
@click.option("--levels", default="1,4,16", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=ROOT / "bench" / "results" / "serve-cpu.json", show_default=True)
def main(home: Path, model: str, seconds: float, levels: str, out: Path) -> None:
    console = Console()
    requests = game_requests(2400)
    results = []
    for mode, max_batch, prefix_cache_mb in MODES:
        proc, url = start_server(home, model, max_batch, prefix_cache_mb)
        stream = iter(requests)  # each server sees the same requests, none twice
        try:
            asyncio.run(load(url, model, stream, 1, min(seconds, 5)))  # warm-up, not counted
            for concurrency in (int(x) for x in levels.split(",")):
                before = httpx.get(f"{url}/health").json()["work"]
                row = {"mode": mode, "max_batch": max_batch, **asyncio.run(load(url, model, stream, concurrency, seconds))}
                after = httpx.get(f"{url}/health").json()["work"]
                prompt = after["decision_prompt_tokens"] - before["decision_prompt_tokens"]
                row["reused"] = round((after["reused_prompt_tokens"] - before["reused_prompt_tokens"]) / max(prompt, 1), 3)
                row["peak_rss_mb"] = round(status_mb(proc.pid))
                results.append(row)
                console.print(row)
        finally:
            proc.terminate()
            proc.wait(120)
    table = Table("mode", "concurrency", "answered", "lost", "req/s", "p50 s", "p95 s", "reused", "server peak RSS MB")
    for r in results:
        table.add_row(r["mode"], str(r["concurrency"]), str(r["answered"]), str(r["lost"]), f"{r['rps']:.3f}",
                      f"{r['p50_s']:.2f}", f"{r['p95_s']:.2f}", f"{r['reused']:.2f}", str(r["peak_rss_mb"]))
    console.print(table)
    baseline = {r["concurrency"]: r["rps"] for r in results if r["mode"] == MODES[0][0]}
    for r in results[len(baseline):]:
        if baseline.get(r["concurrency"]):
            console.print(f"{r['mode']} / {MODES[0][0]} at concurrency {r['concurrency']}: "
                          f"{r['rps'] / baseline[r['concurrency']]:.2f}x")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": datetime.now().isoformat(timespec="seconds"), "seconds": seconds,
                               "threads": os.environ.get("OMP_NUM_THREADS"), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
