"""Population training's cost, and whether it pays, on the quickstart's world (made once in `--home`).

`cost`: `cli.py train --population N` for each N of `--sizes`, each in a process of its own (its peak RSS read from
wait4), `--steps` steps of `--batch` decisions and one evolution at the end. A population step costs the members'
own steps (members.csv `step_seconds`, summed per step); the frozen states are computed once whatever N and are
reported apart (`states_seconds`: the run's wall time less its steps, evolution and model load are in it too).

`pays`: at equal training items, a population of `--size` for `--steps` steps (evolving every `--evolve-every`)
against the hand-set default (`train` with no option but the same batch and learning rate) for size x steps steps,
both chosen on the same `--validation-decisions` validation decisions (their best.json), then each chosen checkpoint scored once on the held-out windows with `cli.py eval`. `--trained FILE`
scores two finished runs (the JSON line pays prints after training) without training them again.

    python bench/bench_population.py cost --home /tmp/brl-pop --out bench/results/population-cost.json
    python bench/bench_population.py pays --home /tmp/brl-pop --out bench/results/population-pays.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["cost", "pays"])
    parser.add_argument("--home", type=Path, default=Path("/tmp/brl-pop"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--evolve-every", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--trained", type=Path, help="pays: a JSON line of finished runs (what pays prints after training): only score them")
    parser.add_argument("--validation-decisions", type=int, default=64,
                        help="validation decisions each selection pass answers (an evolution, the hand-set run's --eval-every)")
    return parser.parse_args()


def cli(home: Path, *args: str) -> tuple[float, int, str]:
    """`cli.py --home HOME ARGS...` in a process of its own: wall seconds, its peak RSS in bytes, its output."""
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "--home", str(home), *args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"cli.py {' '.join(args)} failed ({child.returncode}):\n{output[-3000:]}")
    return time.monotonic() - started, usage.ru_maxrss * 1024, output


def member_steps(run: Path) -> list[float]:
    """Seconds of each population step: its members' own step times summed (members.csv)."""
    per_step: dict[int, float] = defaultdict(float)
    with (run / "members.csv").open() as handle:
        for row in csv.DictReader(handle):
            per_step[int(row["step"])] += float(row["step_seconds"])
    return [per_step[s] for s in sorted(per_step)]


def cost(args: argparse.Namespace) -> dict:
    rows = []
    for size in args.sizes:
        name = f"cost-{size}-{int(time.time())}"
        wall, peak, _ = cli(args.home, "train", "--dataset", "quickstart", "--run-name", name, "--population", str(size),
                            "--max-steps", str(args.steps), "--evolve-every", str(args.steps), "--groups-per-step", str(args.batch),
                            "--learning-rate", str(args.learning_rate), "--validation-decisions", str(args.validation_decisions))
        steps = member_steps(args.home / "runs" / name)
        rows.append({"population": size, "step_seconds": steps, "mean_step_seconds": sum(steps) / len(steps),
                     "wall_seconds": wall, "states_seconds": wall - sum(steps), "peak_rss_gb": peak / 1e9})
        print(json.dumps(rows[-1]), flush=True)
    one = next((r["mean_step_seconds"] for r in rows if r["population"] == 1), None)
    for row in rows:
        row["x_one_member"] = row["mean_step_seconds"] / one if one else None
    return {"rows": rows}


def held_out(home: Path, run: str) -> dict:
    """The run's chosen checkpoint (best.json's step: chosen on validation) scored once on the held-out windows."""
    chosen = json.loads((home / "runs" / run / "best.json").read_text())["step"]
    cli(home, "eval", "--model", str(home / "runs" / run / "checkpoints" / f"step-{chosen}"), "--dataset", "quickstart",
        "--baseline", "none", "--menu-shares", "50")
    saved = json.loads((home / "runs" / run / "eval.json").read_text())
    model = next(p for p in saved["policies"] if p["role"] == "model")
    return {key: model["metrics"][key] for key in ("pnl_per_decision", "trade_precision", "trade_share", "direction_accuracy")}


def pays(args: argparse.Namespace) -> dict:
    result = json.loads(args.trained.read_text()) if args.trained else train_both(args)
    for key in ("population", "hand_set"):  # held-out once, after both were chosen
        result[key]["held_out"] = held_out(args.home, result[key]["run"])
    return result


def train_both(args: argparse.Namespace) -> dict:
    """A population of `--size` for `--steps` steps and the hand-set default for size x steps steps, each chosen on
    validation (best.json); what they cost and chose, printed as one JSON line (what `--trained` reads back)."""
    stamp = int(time.time())
    population, single = f"pays-pop-{stamp}", f"pays-single-{stamp}"
    common = ("train", "--dataset", "quickstart", "--groups-per-step", str(args.batch), "--learning-rate", str(args.learning_rate),
              "--validation-decisions", str(args.validation_decisions))
    result = {}
    wall, peak, _ = cli(args.home, *common, "--run-name", population, "--population", str(args.size),
                        "--max-steps", str(args.steps), "--evolve-every", str(args.evolve_every))
    result["population"] = {"wall_seconds": wall, "peak_rss_gb": peak / 1e9, "steps": args.steps,
                            "validation": json.loads((args.home / "runs" / population / "best.json").read_text())}
    wall, peak, _ = cli(args.home, *common, "--run-name", single, "--max-steps", str(args.size * args.steps),
                        "--eval-every", str(args.evolve_every * args.size), "--keep-best")
    result["hand_set"] = {"wall_seconds": wall, "peak_rss_gb": peak / 1e9, "steps": args.size * args.steps,
                          "validation": json.loads((args.home / "runs" / single / "best.json").read_text())}
    result["population"]["run"], result["hand_set"]["run"] = population, single
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    args = arguments()
    os.environ.setdefault("WANDB_MODE", "offline")
    from bench_distill import world

    world(args.home)
    result = {"mode": args.mode, "date": datetime.now(timezone.utc).isoformat(timespec="minutes"), "cpus": os.cpu_count(),
              "load_before": os.getloadavg()[0], "args": {k: str(v) for k, v in vars(args).items()},
              **(cost(args) if args.mode == "cost" else pays(args)), "load_after": os.getloadavg()[0]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
