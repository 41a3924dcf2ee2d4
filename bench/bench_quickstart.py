"""The quickstart benchmark: the default `cli.py quickstart` in a fresh home, timed with /usr/bin/time -v.

Prints the wall time, the peak RSS, the machine and the eval table as Markdown for
docs/BENCHMARKS.md, and whether the trained model beats the warm-started tiny model and the
best constant action outside the bootstrap interval (the learning check of the quickstart).

    python bench/bench_quickstart.py --home /tmp/brl-quickstart [-- extra quickstart options]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    free = subprocess.run(["free", "-g"], capture_output=True, text=True).stdout.splitlines()[1].split()[1]
    return f"`nproc` = {os.cpu_count()}, `free -g` = {free} GiB total, CPU {cpu!r}, Python {platform.python_version()}"


def run(home: Path, extra: list[str]) -> tuple[float, int, str]:
    shutil.rmtree(home, ignore_errors=True)
    cmd = ["/usr/bin/time", "-v", sys.executable, str(ROOT / "cli.py"), "--home", str(home), "quickstart", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode:
        sys.exit(f"quickstart failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    hours, minutes, seconds = (float(g) if g else 0.0 for g in wall.groups())
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    return hours * 3600 + minutes * 60 + seconds, rss_kb, done.stdout


def table(evaluation: dict) -> str:
    lines = ["| policy | direction accuracy [95 % CI] | P&L per decision [95 % CI] | valid [95 % CI] | most frequent answer |",
             "|---|---:|---:|---:|---|"]
    for p in evaluation["policies"]:
        cells = [f"{m['value']:{f}} [{m['low']:{f}}, {m['high']:{f}}]" for m, f in (
            (p["metrics"]["direction_accuracy"], ".3f"), (p["metrics"]["pnl_per_decision"], "+.2f"), (p["metrics"]["valid_rate"], ".3f"))]
        lines.append(f"| {p['name']} | " + " | ".join(cells) + f" | {p['top_answer']} {p['top_answer_share']:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, default=Path("/tmp/brl-quickstart"))
    parser.add_argument("extra", nargs="*", help="options passed to quickstart after --")
    args = parser.parse_args()
    seconds, rss_kb, stdout = run(args.home, args.extra)
    evaluation = json.loads((args.home / "runs" / "quickstart" / "eval.json").read_text())
    print(stdout[-4000:])
    print(f"\nMachine: {machine()}\n")
    print(f"Command: `python cli.py --home {args.home} quickstart {' '.join(args.extra)}`\n")
    print(f"Wall time {seconds:.0f} s, peak RSS {rss_kb / 1024:,.0f} MB (/usr/bin/time -v)\n")
    print(f"{evaluation['windows']} held-out windows, {evaluation['decisions']} decisions\n")
    print(table(evaluation))
    for role, c in evaluation["comparison"].items():
        d = c["direction_accuracy_diff"]
        print(f"\nmodel - {role}: direction accuracy {d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], "
              f"beats it outside the interval: {c['beats_outside_interval']}")
    print(f"\nlearning shown (beats the warm-started model and the best constant action): {evaluation['learning_shown']}")


if __name__ == "__main__":
    main()
