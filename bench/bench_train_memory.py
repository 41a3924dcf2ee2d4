"""Peak resident memory and seconds per step of every training path, with SmolLM2 and each path's defaults.

Each run also prints the peak the trainer estimated before it started (`memory.py`), which must
not be below the measured one.

Each path is one `cli.py train --max-steps 1` process under RLIMIT_AS (so nothing here can take the
machine down); its peak RSS comes from wait4, its step time from metrics.csv. The home needs a
scored dataset and HOME/models/smollm2-135m (python cli.py model init), e.g. the issue-44 data:

    python cli.py simulate --agents 8 --windows 12 --seed 3 --target duckdb && python cli.py build
    python cli.py dataset build --name t --min-agents 5 --target-trajectories 60 --seed 1
    python cli.py score --dataset t --judge heuristic && python cli.py model init
    python bench/bench_train_memory.py --home .babylon --dataset t
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = {
    "logged grpo": [],
    "logged awr": ["--objective", "awr"],
    "on-policy grpo": ["--on-policy"],
    "counterfactual": ["--objective", "counterfactual"],
    "imitation": ["--objective", "imitate"],
    # the menu objective keeps every decision's frozen states: one epoch, then validation, holds them all
    "menu": ["--objective", "menu", "--epochs", "1", "--groups-per-step", "64", "--keep-best"],
}


def run(home: Path, dataset: str, name: str, extra: list[str], limit: int) -> tuple[int, float, dict, str]:
    run_name = "bench-memory-" + name.replace(" ", "-")
    shutil.rmtree(home / "runs" / run_name, ignore_errors=True)
    args = [sys.executable, "cli.py", "--home", str(home), "train", "--dataset", dataset, "--max-steps", "1",
            "--run-name", run_name, *(extra if "--objective" in extra or "--on-policy" in extra else ["--objective", "grpo", *extra])]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    with (home / "runs" / run_name / "metrics.csv").open() as handle:
        step = list(csv.DictReader(handle))[-1]
    estimate = re.search(r"memory: about ([0-9.]+) GB", output)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024**2, step, estimate.group(1) if estimate else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--paths", nargs="*", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--limit-gb", type=float, default=8.0, help="RLIMIT_AS of each run (address space, not RSS)")
    parser.add_argument("--extra", default="", help="arguments added to every run, e.g. '--groups-per-step 1'")
    args = parser.parse_args()
    print("| path | extra arguments | exit | estimated peak (GB) | peak RSS (GB) | s/step | tokens/step | tokens/s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.paths:
        extra = PATHS[name] + args.extra.split()
        code, peak_gib, step, estimate = run(args.home.resolve(), args.dataset, name, extra, int(args.limit_gb * 1024**3))
        print(f"| {name} | {' '.join(extra) or '(defaults)'} | {code} | {estimate} | {peak_gib * 1024**3 / 1e9:.2f} | "
              f"{float(step['step_seconds']):.1f} | {step['tokens']} | {step['tokens_per_s']} |", flush=True)


if __name__ == "__main__":
    main()
