"""Judge throughput: N groups against the local test server with artificial latency.

    python bench/bench_judge.py --groups 1000 --agents 5 --concurrency 16 --latency 0.1

Reports the cold run (every group sent once) against the ideal groups/concurrency x latency,
the warm re-run (all groups from the cache, zero requests) and prompt tokens per trajectory.
The cold run includes the one-off import of the openai SDK (the judge imports it lazily);
that import is also timed on its own, in a fresh process, and reported beside it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from babylon_rl.judge.options import ScoreOptions  # noqa: E402
from babylon_rl.judge.score import score_dataset  # noqa: E402
from babylon_rl.settings import Home  # noqa: E402
from tests.dataset_factory import make_dataset  # noqa: E402


def sdk_import_seconds() -> float:
    """Wall time of importing the RULER judge (the openai SDK and its aiohttp transport) in a fresh process."""
    code = "import time, babylon_rl.judge; t = time.perf_counter(); import babylon_rl.judge.ruler; print(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.1)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-judge-"))
    make_dataset(home, windows=args.groups, agents=args.agents)
    # The server runs in its own process so that it does not share the judge's GIL.
    server = subprocess.Popen([sys.executable, "-m", "tests.judge_server", str(args.latency)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()  # type: ignore[union-attr]
        options = ScoreOptions(judge="ruler", judge_model="bench", base_url=base_url, api_key="sk-bench",
                               concurrency=args.concurrency, timeout=30)
        started = time.perf_counter()
        cold = score_dataset(Home(home), "demo", options)
        cold_s = time.perf_counter() - started
        sent = cold.requests
        started = time.perf_counter()
        warm = score_dataset(Home(home), "demo", options)
        warm_s = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait()
    sdk_s = sdk_import_seconds()
    ideal = args.groups / args.concurrency * args.latency
    print(f"groups {args.groups} x {args.agents} trajectories, concurrency {args.concurrency}, latency {args.latency}s")
    print(f"cold: {cold_s:.2f}s for {sent} requests (ideal {ideal:.2f}s, ratio {cold_s / ideal:.2f}x)")
    print(f"  of which importing the openai SDK (one-off, timed in a fresh process): {sdk_s:.2f}s; "
          f"without it {cold_s - sdk_s:.2f}s, ratio {(cold_s - sdk_s) / ideal:.2f}x")
    print(f"warm: {warm_s:.2f}s, {warm.requests} requests, {warm.cached_groups} groups from the cache")
    print(f"prompt tokens per trajectory: {cold.tokens_in / cold.trajectories:.0f} (server count, chars/4)")


if __name__ == "__main__":
    main()
