"""`cli.py serve`'s resident memory through a burst of hostile and vanishing clients beside honest ones.

    OMP_NUM_THREADS=1 python bench/bench_serve_hostile.py --home /tmp/sh --seconds 120

One real server process with its defaults (the prefix cache included). After its first answer, its resident set
(VmRSS) is the baseline; then, for --seconds, honest clients send distinct game action requests (the prefix cache fills)
while hostile ones send malformed bodies, bodies over the 4 MB limit (with a Content-Length and chunked), chat
requests at the bounds (n 8, max_tokens 512) that hang up after a second, game requests that hang up before their
turn, and streams read one chunk and dropped. VmRSS is read every half second. The issue's bound: within 300 MB of
the baseline. Every hostile request must get a 4xx or be dropped, and the honest ones answered 200.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import click
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_serve import game_requests, start_server, status_mb  # noqa: E402


async def burst(url: str, model: str, requests, seconds: float, codes: Counter) -> None:
    deadline = time.perf_counter() + seconds
    chat = [{"role": "user", "content": "Write a long story about a market."}]

    async def post(http: httpx.AsyncClient, label: str, timeout: float, **kwargs) -> None:
        try:
            reply = await http.post(f"{url}/v1/chat/completions", timeout=timeout, **kwargs)
            codes[(label, reply.status_code)] += 1
        except httpx.TimeoutException:
            codes[(label, "hung up")] += 1
        except httpx.TransportError:  # the server answered 413 and closed the connection while the body was still sent
            codes[(label, "closed by the server")] += 1

    async def honest(http):
        while time.perf_counter() < deadline:
            await post(http, "honest game request", 300, json={"model": model, "messages": next(requests), "temperature": 0})

    async def hostile(http):
        for turn in itertools.count():
            if time.perf_counter() >= deadline:
                return
            kind = turn % 6
            if kind == 0:
                await post(http, "malformed body", 30, content=b'{"model": ', headers={"content-type": "application/json"})
            elif kind == 1:
                await post(http, "4.1 MB body", 30, content=b" " * 4_100_000, headers={"content-type": "application/json"})
            elif kind == 2:
                async def chunks():
                    for _ in range(41):
                        yield b" " * 100_000
                await post(http, "chunked body over the limit", 30, content=chunks(), headers={"content-type": "application/json"})
            elif kind == 3:
                await post(http, "n 8, max_tokens 512, gone after 1 s", 1.0,
                           json={"model": model, "messages": chat, "n": 8, "max_tokens": 512, "temperature": 1.0})
            elif kind == 4:
                await post(http, "game request gone after 0.3 s", 0.3, json={"model": model, "messages": next(requests)})
            else:
                try:
                    async with http.stream("POST", f"{url}/v1/chat/completions", timeout=30,
                                           json={"model": model, "messages": chat, "max_tokens": 256, "stream": True}) as r:
                        async for _ in r.aiter_bytes():
                            break  # a slow reader that goes away
                    codes[("stream read once, dropped", r.status_code)] += 1
                except httpx.TransportError as exc:
                    codes[("stream read once, dropped", type(exc).__name__)] += 1

    async with httpx.AsyncClient() as http:
        await asyncio.gather(*(honest(http) for _ in range(4)), *(hostile(http) for _ in range(4)))


@click.command()
@click.option("--home", type=click.Path(path_type=Path), required=True, help="A home with HOME/models/smollm2-135m.")
@click.option("--model", default="smollm2-135m", show_default=True)
@click.option("--seconds", type=float, default=120, show_default=True)
@click.option("--prefix-cache-mb", type=int, help="serve's --prefix-cache-mb (default: serve's own).")
@click.option("--out", type=click.Path(path_type=Path), default=ROOT / "bench" / "results" / "serve-hostile.json", show_default=True)
def main(home: Path, model: str, seconds: float, prefix_cache_mb: int | None, out: Path) -> None:
    requests = iter(game_requests(2400))
    proc, url = start_server(home, model, 16, prefix_cache_mb)
    try:
        first = httpx.post(f"{url}/v1/chat/completions", timeout=300,
                           json={"model": model, "messages": next(requests), "temperature": 0})
        assert first.status_code == 200, first.text
        baseline = status_mb(proc.pid, "VmRSS")
        samples: list[float] = []
        codes: Counter = Counter()

        async def run():
            async def sample():
                while True:
                    samples.append(status_mb(proc.pid, "VmRSS"))
                    await asyncio.sleep(0.5)
            sampler = asyncio.create_task(sample())
            await burst(url, model, requests, seconds, codes)
            sampler.cancel()

        asyncio.run(run())
        time.sleep(2)
        health = httpx.get(f"{url}/health", timeout=30)
        after = status_mb(proc.pid, "VmRSS")
    finally:
        proc.terminate()
        proc.wait(120)
    result = {"date": datetime.now().isoformat(timespec="seconds"), "seconds": seconds, "prefix_cache_mb": prefix_cache_mb,
              "baseline_rss_mb": round(baseline),
              "max_rss_mb": round(max(samples)), "growth_mb": round(max(samples) - baseline), "after_rss_mb": round(after),
              "health_after": health.status_code, "work": health.json().get("work"),
              "answers": {f"{label}: {code}": n for (label, code), n in sorted(codes.items(), key=str)}}
    print(json.dumps(result, indent=2))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
