"""The learning curve: held-out direction accuracy and P&L per decision against GRPO steps, in one command.

Runs the quickstart's pipeline at a longer budget in a fresh home (simulate -> build -> dataset
-> SmolLM2 -> imitation baseline -> GRPO with a checkpoint every `--checkpoint-every` steps),
then replays the held-out windows for the base model (step 0) and every checkpoint. The eval
split is read only here, after training, to draw the curve: no checkpoint is chosen by it.
Next to the curve: the best constant action (chosen on train + validation) and the rule that
reads the news (`evaluate/rules.py`: buy the ticker of the latest bullish headline of the last 30 minutes, sell on a
bearish one, else the best constant), the reference a learner could reach.

Writes HOME/runs/RUN/curve.json (the report draws it) and prints Markdown for docs/BENCHMARKS.md:
seconds per GRPO step, tokens/s, peak RSS, k and decisions per step.

    python bench/bench_learning.py --home /tmp/brl-learn --steps 60 --checkpoint-every 10
    python bench/bench_learning.py --home /tmp/brl-learn0 --news-strength 0 --steps 60   # the control
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from babylon_rl.context import BabylonContext  # noqa: E402
from babylon_rl.dataset.params import BuildParams  # noqa: E402
from babylon_rl.evaluate import EvalOptions  # noqa: E402
from babylon_rl.evaluate.rules import news_rule  # noqa: E402
from babylon_rl.evaluate.run import score_answers  # noqa: E402

def simulate_and_split(args, eval_fraction: float) -> BabylonContext:
    """A fresh home with the simulated world (`args`: home, agents, windows, steps_per_window, news_strength, seed)
    built and split by time into the dataset `learn`: train, validation 10 %, eval (the newest) `eval_fraction`."""
    shutil.rmtree(args.home, ignore_errors=True)
    ctx = BabylonContext.create(str(args.home))
    ctx.simulate(agents=args.agents, windows=args.windows, steps_per_window=args.steps_per_window, seed=args.seed,
                 start=datetime(2025, 1, 1), target="duckdb", news_strength=args.news_strength)
    ctx.build()
    ctx.dataset_build(BuildParams(name="learn", lookback_hours=args.windows + 1, target_trajectories=100_000,
                                  max_group_size=max(args.agents, 5), min_actions=min(args.steps_per_window, 5),
                                  validation_fraction=0.1, eval_fraction=eval_fraction, seed=args.seed), force=True)
    return ctx


def point(step: int, result) -> dict:
    model = result.model_result.metrics
    row = {"step": step}
    for key in ("direction_accuracy", "pnl_per_decision", "valid_rate"):
        row |= {key: model[key].value, f"{key}_low": model[key].low, f"{key}_high": model[key].high}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=Path("/tmp/brl-learn"))
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--windows", type=int, default=160)
    parser.add_argument("--steps-per-window", type=int, default=3)
    parser.add_argument("--news-strength", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--groups-per-step", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--kl-coef", type=float, default=0.02)
    parser.add_argument("--eval-decisions-per-window", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    started = time.monotonic()
    ctx = simulate_and_split(args, eval_fraction=0.2)
    common = dict(dataset="learn", backend="torch", on_policy=True, learning_rate=args.learning_rate, groups_per_step=args.groups_per_step,
                  max_steps=args.steps, seed=args.seed, device=args.device, checkpoint_every=args.checkpoint_every)
    imitation_started = time.monotonic()
    ctx.train(run_name="imitation", objective="imitate", **common)
    imitation_seconds = time.monotonic() - imitation_started
    grpo_started = time.monotonic()
    trained = ctx.train(run_name="learn", samples=args.samples, kl_coef=args.kl_coef, inner_epochs=2, **common)
    grpo_seconds = time.monotonic() - grpo_started

    options = dict(dataset="learn", seed=args.seed, device=args.device, max_decisions_per_window=args.eval_decisions_per_window)
    base = ctx.evaluate(EvalOptions(model="smollm2-135m", baseline="none", **options))
    curve = [point(0, base)]
    for checkpoint in trained.checkpoints:
        step = int(checkpoint.name.split("-")[1])
        last = step == trained.steps
        result = ctx.evaluate(EvalOptions(model=str(checkpoint), imitation="imitation" if last else None,
                                          baseline=None if last else "none", **options))
        curve.append(point(step, result))
    constant = result.constant.answer if result.constant else json.dumps({"action": "hold"})
    decisions = result.eval_set.decisions
    references = {name: {key: scored.metrics[key].value for key in ("direction_accuracy", "pnl_per_decision")}
                  for name, scored in (("constant", score_answers("constant", [constant] * len(decisions), result)),
                                       ("news_rule", score_answers("news rule", [news_rule(d.request, constant) for d in decisions], result)))}
    for row in curve:
        for name, metrics in references.items():
            row |= {f"{name}_{key}": value for key, value in metrics.items()}
    (trained.run_dir / "curve.json").write_text(json.dumps(curve, indent=1))
    ctx.report("learn")

    rows = list(csv.DictReader((trained.run_dir / "metrics.csv").open()))
    step_seconds = [float(r["step_seconds"]) for r in rows]
    tokens_per_s = [float(r["tokens_per_s"]) for r in rows]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nCommand: `python bench/bench_learning.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} cores, "
          f"{datetime.now():%Y-%m-%d %H:%M}, load {os.getloadavg()[0]:.1f}\n")
    print(f"- whole run {time.monotonic() - started:.0f} s, peak RSS {peak_mb:.0f} MB; GRPO {grpo_seconds:.0f} s for {args.steps} steps "
          f"({args.groups_per_step} decisions x k={args.samples}); imitation {imitation_seconds:.0f} s for the same steps")
    print(f"- seconds per GRPO step: median {sorted(step_seconds)[len(step_seconds) // 2]:.1f} (min {min(step_seconds):.1f}, "
          f"max {max(step_seconds):.1f}); tokens/s median {sorted(tokens_per_s)[len(tokens_per_s) // 2]:.0f}\n")
    print("| step | held-out direction accuracy [95 % CI] | held-out P&L per decision [95 % CI] | valid |")
    print("|---:|---:|---:|---:|")
    for row in curve:
        print(f"| {row['step']} | {row['direction_accuracy']:.3f} [{row['direction_accuracy_low']:.3f}, {row['direction_accuracy_high']:.3f}] | "
              f"{row['pnl_per_decision']:+.2f} [{row['pnl_per_decision_low']:+.2f}, {row['pnl_per_decision_high']:+.2f}] | {row['valid_rate']:.2f} |")
    for name, metrics in references.items():
        print(f"| {name} | {metrics['direction_accuracy']:.3f} | {metrics['pnl_per_decision']:+.2f} | |")
    print(f"\nlearning shown at the last step: {result.learning_shown}")


if __name__ == "__main__":
    main()
