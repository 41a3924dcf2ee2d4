"""Does training make the agent better? The held-out learning curve, with the frozen part computed once. Resumable.

One command, on the quickstart's world (10 agents, 480 windows, 3 decisions a window; `--news-strength`
1 by default, 0 for the control):
1. simulate -> build -> dataset `learn` (train, validation 10 %, eval: the newest 25 % of windows);
2. take `--train-decisions` train decisions (seeded), every validation decision up to `--validation-decisions`,
   and `--eval-per-window` decisions of each eval window; price every answer of each decision's menu
   (hold; buy or sell `--shares` of each stock) against its window's ground truth;
3. compute the frozen blocks' output once for every packed prompt + menu (train: `--variants` renamed copies);
4. train LoRA on the top blocks from those states (`babylon_rl/train/menu_trainer.py`): the counterfactual menu
   objective, and imitation of the logged answers for the same steps (the baseline); every
   `--eval-every` steps both answer validation (the checkpoint is chosen there: highest mean reward),
   and the counterfactual policy also answers the held-out decisions, for the curve only;
5. at the chosen checkpoints: the trained policy against its base, the best constant (chosen on train +
   validation, at the same size), the logged agents and imitation, paired over eval windows, bootstrap 95 %.

A policy answers by ranking its menu (the JSON action it rates most likely of the menu's, what
constrained decoding returns), and that exact action is priced. A kill leaves the states and the last
checkpoint on disk; the same command continues from them. Writes HOME/runs/learn-cached/: curve.json
(the report draws it), result.json (the comparisons, timings, every trajectory id read per split).

    python bench/bench_learning.py --home /tmp/brl-learn
    python bench/bench_learning.py --home /tmp/brl-learn0 --news-strength 0     # the control

On 2 cores two one-thread processes train faster than one of two threads: `--only states` first, then
`--only counterfactual` and `--only imitate` side by side (BABYLON_RL_TORCH_THREADS=1), then the command alone
for the comparisons (`--compare-now` compares the checkpoints as they are; `--summary` writes what the
quickstart quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:  # imported where used: the GPU machine (bench_learning_gpu.py) trains without duckdb or polars
    from babylon_rl.context import BabylonContext

TODAYS_TRAINER_SECONDS = (1.2, 1.7)  # the counterfactual trainer's seconds per training decision before the cache (issue 43)
RUN = "learn-cached"
# what the frozen states depend on: another --tag may change anything else (learning rate, epochs, ...) and reuse them
DATA_SETTINGS = ["home", "agents", "windows", "steps_per_window", "news_strength", "train_decisions", "validation_decisions",
                 "eval_per_window", "variants", "shares", "seed", "train_layers", "answer_order"]
INVOCATION_ONLY = {"only", "compare_now", "summary"}  # shape one invocation, not the run: never compared between invocations


def simulate_and_split(args, eval_fraction: float) -> BabylonContext:
    """A fresh home with the simulated world (`args`: home, agents, windows, steps_per_window, news_strength, seed)
    built and split by time into the dataset `learn`: train, validation 10 %, eval (the newest) `eval_fraction`."""
    from babylon_rl.context import BabylonContext
    from babylon_rl.dataset.params import BuildParams

    shutil.rmtree(args.home, ignore_errors=True)
    ctx = BabylonContext.create(str(args.home))
    ctx.simulate(agents=args.agents, windows=args.windows, steps_per_window=args.steps_per_window, seed=args.seed,
                 start=datetime(2025, 1, 1), target="duckdb", news_strength=args.news_strength)
    ctx.build()
    ctx.dataset_build(BuildParams(name="learn", lookback_hours=args.windows + 1, target_trajectories=100_000,
                                  max_group_size=max(args.agents, 5), min_actions=min(args.steps_per_window, 5),
                                  validation_fraction=0.1, eval_fraction=eval_fraction, seed=args.seed), force=True)
    return ctx


def world(args) -> BabylonContext:
    """The simulated world and the base model, made once (a re-run finds them)."""
    from babylon_rl.context import BabylonContext

    marker = args.home / "world.json"
    wanted = {k: getattr(args, k) for k in ("agents", "windows", "steps_per_window", "news_strength", "seed")}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return BabylonContext.create(str(args.home))
    ctx = simulate_and_split(args, eval_fraction=0.25)
    ctx.model_init("smollm2-135m")
    marker.write_text(json.dumps(wanted))
    return ctx


def splits(ctx: BabylonContext, args):
    """Train and validation tasks (train.grpo: never the eval split), then the eval decisions, opened last."""
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.evaluate.decision_points import load_eval_set
    from babylon_rl.train.menu_items import next_look
    from babylon_rl.train.decisions import Task, load_decision_data

    data = load_decision_data(ctx.home, "learn")
    rng = np.random.default_rng(args.seed)
    priced_train = next_look(data.train) if args.horizon == "next-look" else data.train
    train = [priced_train[i] for i in sorted(rng.choice(len(data.train), min(args.train_decisions, len(data.train)), replace=False))]
    validation = [data.validation[i] for i in sorted(rng.choice(len(data.validation), min(args.validation_decisions, len(data.validation)), replace=False))]
    eval_set = load_eval_set(Dataset.open(ctx.home, "learn")).sample(args.eval_per_window, args.seed)
    held_out = [Task.from_decision(d, eval_set.truths[d.window_id]) for d in eval_set.decisions]
    return data, train, validation, eval_set, held_out


def teachers_train(ctx: BabylonContext) -> tuple[dict, list]:
    """The agents `train --objective distill` would distill on dataset `learn` (chosen on its train windows, checked on
    validation) with their figures, and their train decisions; ({"none": why}, []) where no agent stands out."""
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.train.decisions import load_decision_data
    from babylon_rl.train.teachers import NoTeachers, choose

    try:
        teachers = choose(Dataset.open(ctx.home, "learn"))
    except NoTeachers as none:
        return {"none": str(none)}, []
    return teachers.to_dict(), load_decision_data(ctx.home, "learn").taught_by(teachers).train


def cached(name: str, items, trainer, run_dir: Path, args, log) -> float:
    """Fill the items' frozen states, from disk where an earlier run saved them; seconds per item computed."""
    from babylon_rl.train.state_cache import cache_states, load_states, save_states

    started = time.monotonic()
    if args.device != "cpu":  # a GPU computes them in seconds: kept on it, never saved
        cache_states(trainer.split, items, args.cache_batch, args.device)
        return (time.monotonic() - started) / len(items)
    path = run_dir / f"states-{name}.pt"
    load_states(items, path)
    todo = sum(item.states is None for item in items)
    if not todo:
        return float("nan")
    for start in range(0, len(items), 400):  # saved as it goes: a kill loses at most one chunk
        part = items[start : start + 400]
        if any(item.states is None for item in part):
            cache_states(trainer.split, part, args.cache_batch, args.device)
            save_states(items, path)
            log(f"  {name}: frozen states {min(start + 400, len(items))}/{len(items)} ({time.monotonic() - started:.0f} s)")
    return (time.monotonic() - started) / todo


def train_policy(objective: str, trainer, train_items, validation_items, held_out_items, run_dir: Path, args, log,
                 deadline: float | None = None) -> dict:
    """Steps over shuffled epochs of the train items; every `eval_every` steps a checkpoint answers validation (and, for
    the curve, the held-out decisions); returns the state of the one with the best validation reward. With a `deadline`
    (time.time()), it stops early enough for a last checkpoint to end before it."""
    import torch

    path = run_dir / f"{objective}.pt"
    saved = torch.load(path, weights_only=False) if path.exists() else None
    rng = np.random.default_rng(args.seed + 1)
    order = np.concatenate([rng.permutation(len(train_items)) for _ in range(args.epochs)])
    total = len(order) // args.batch
    curve, seconds, best = [], [], None
    if saved:
        trainer.restore(saved["state"])
        curve, seconds, best = saved["curve"], saved["seconds"], saved["best"]
        log(f"  {objective}: resumed at step {trainer.steps}/{total}")

    def checkpoint() -> None:
        nonlocal best
        began = time.time()
        _, val = trainer.scored(validation_items, 2 * trainer.options.micro_batch)
        row = {"step": trainer.steps, "decisions_seen": trainer.steps * args.batch, "validation": val,
               "seconds": time.time() - began}
        if objective != "imitate":  # plain imitation answers the held-out decisions once, at its chosen checkpoint
            row["held_out_answers"], row["held_out"] = trainer.scored(held_out_items, 2 * trainer.options.micro_batch)
            row["seconds"] = time.time() - began
        curve.append(row)
        if best is None or val["reward"] > best["validation"]["reward"]:
            best = row | {"state": {k: v for k, v in trainer.state().items() if k != "optimizer"}}
        torch.save({"state": trainer.state(), "curve": curve, "seconds": seconds, "best": best}, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
        log(f"  {objective} step {trainer.steps}/{total}: validation {val['direction_accuracy']:.3f} acc, {val['reward']:+.3f} reward"
            + (f"; held-out {row['held_out']['direction_accuracy']:.3f} acc, {row['held_out']['pnl_per_decision']:+.2f} P&L"
               if "held_out" in row else "") + (f" ({np.median(seconds):.3f} s/step)" if seconds else ""))

    def time_left() -> bool:
        reserve = 2 * curve[-1].get("seconds", 0) + 2 * (seconds[-1] if seconds else 0) if curve else 0
        return deadline is None or time.time() + reserve < deadline

    if not curve:
        checkpoint()  # step 0: the base model's answers
    while trainer.steps < total and time_left():
        start = trainer.steps * args.batch
        seconds.append(trainer.step([train_items[i] for i in order[start : start + args.batch]])["seconds"])
        if trainer.steps % args.eval_every == 0 or trainer.steps == total:
            checkpoint()
    if curve[-1]["step"] != trainer.steps:
        checkpoint()
    return {"curve": curve, "seconds": seconds, "best": best, "planned_steps": total}


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=Path("/tmp/brl-learn"))
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--windows", type=int, default=480)
    parser.add_argument("--steps-per-window", type=int, default=3)
    parser.add_argument("--news-strength", type=float, default=1.0)
    parser.add_argument("--train-decisions", type=int, default=2000)
    parser.add_argument("--validation-decisions", type=int, default=400)
    parser.add_argument("--eval-per-window", type=int, default=10)
    parser.add_argument("--variants", type=int, default=2, help="renamed copies of each train decision (0: real names)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=40)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--reward-temperature", type=float, default=0.3)
    parser.add_argument("--shares", type=int, default=50)
    parser.add_argument("--horizon", choices=["window-end", "next-look"], default="window-end",
                        help="what prices the train targets: the window's end, or the agent's next look (menu_items.next_look); "
                             "validation and eval always price to the window's end")
    parser.add_argument("--answer-order", choices=["action-first", "ticker-first"], default="action-first",
                        help="how the menu's trades are written for the policy: the game's direction first, or the stock first "
                             "(menu_items.shown_answer; the same actions are priced either way)")
    parser.add_argument("--ema", type=float, default=0.98)
    parser.add_argument("--hold-weight", type=float, default=1.0, help="a logged hold's weight in the imitation losses (distillation's)")
    parser.add_argument("--distill-share", type=float, default=0.5,
                        help="distill-improve: the share of the time to the deadline spent distilling before improving")
    parser.add_argument("--train-layers", type=int, default=4, help="LoRA on the top N blocks; the frozen states enter the lowest")
    parser.add_argument("--cache-batch", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=8, help="items per forward and backward pass (and twice that per answering pass)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", choices=["states", "counterfactual", "imitate", "distill-improve"],
                        help="compute the frozen states only, or train this policy only, then stop (run the command again without "
                        "it for the comparisons; distill-improve runs on a GPU, bench_learning_gpu.py)")
    parser.add_argument("--compare-now", action="store_true", help="compare the checkpoints as they are, training no further "
                        "(result.json and the output say how many of its planned steps each policy trained)")
    parser.add_argument("--summary", type=Path, help="write what the quickstart quotes of the result here, under this world's "
                        "news strength (bench/results/learning-cpu.json)")
    parser.add_argument("--tag", default="", help="train again on the same frozen states with other training settings, "
                        "into HOME/runs/learn-cached-TAG (choose between tags on validation, never on the held-out curve)")
    return parser


def main() -> None:
    args = arguments().parse_args()

    started = time.monotonic()
    run_dir = args.home / "runs" / RUN
    log_path = run_dir / "bench.log"

    def log(line: str) -> None:
        print(line, flush=True)
        with log_path.open("a") as f:
            f.write(f"{datetime.now():%H:%M:%S} {line}\n")

    ctx = world(args)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    out_dir = run_dir.with_name(f"{RUN}-{args.tag}") if args.tag else run_dir  # the frozen states stay in run_dir, for every tag
    out_dir.mkdir(parents=True, exist_ok=True)
    train_settings = sorted(set(settings) - INVOCATION_ONLY)
    for path, keys in ((run_dir / "settings.json", DATA_SETTINGS), (out_dir / "train-settings.json", train_settings)):
        wanted = {k: settings[k] for k in keys}
        if path.exists() and {k: v for k, v in json.loads(path.read_text()).items() if k in keys} != wanted:
            sys.exit(f"{path.parent} holds a run with other settings ({path}): use another --home or --tag, or remove it")
        path.with_suffix(f".{os.getpid()}").write_text(json.dumps(wanted, indent=1))  # atomic: --only runs start side by side
        path.with_suffix(f".{os.getpid()}").replace(path)
    log(f"bench_learning {' '.join(sys.argv[1:])}")

    if args.only == "distill-improve":
        sys.exit("--only distill-improve trains against a deadline on a GPU machine: bench/bench_learning_gpu.py")
    data, train, validation, eval_set, held_out = splits(ctx, args)
    record = train_both(args, train, validation, held_out, str(ctx.home.models / "smollm2-135m"), run_dir, out_dir, log,
                        deadline=time.time() if args.compare_now else None)
    if args.only:
        return
    compare(ctx, args, data, eval_set, record, out_dir, started)
    if args.summary:
        write_summary(args.summary, args, record, json.loads((out_dir / "result.json").read_text()))


def cpu_name() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "CPU")
    return f"{os.cpu_count()} cores ({model})"


def training_arguments() -> str:
    """This command's arguments less the INVOCATION_ONLY ones: the command that reproduces the run."""
    kept, skip_value = [], False
    for arg in sys.argv[1:]:
        if skip_value:
            skip_value = False
        elif arg == "--compare-now":
            continue
        elif arg in ("--only", "--summary"):
            skip_value = True
        else:
            kept.append(arg)
    return " ".join(kept)


def verdict_figures(result: dict) -> dict:
    """What both benchmarks' summaries quote of a result.json: the verdict, each policy's held-out figures, what it beats."""
    return {"learning_shown": result["learning_shown"],
            "held_out": {p["role"]: {k: p["metrics"][k]["value"] for k in ("direction_accuracy", "pnl_per_decision")}
                         for p in result["policies"]},
            "beats": {role: c["beats_outside_interval"] for role, c in result["comparison"].items()}}


def write_summary(path: Path, args, record: dict, result: dict) -> None:
    """What the quickstart and the docs quote of this run, under its world (`news1`, `news0`) in `path`, beside the
    other world's: the chosen checkpoint's items and the minutes that reached it, the held-out figures, the verdict."""
    trained = record["results"]["counterfactual"]
    best = trained["best"]
    reached = [row for row in trained["curve"] if row["step"] <= best["step"]]
    minutes = (sum(trained["seconds"][: best["step"]]) + sum(row["seconds"] for row in reached)) / 60
    summary = json.loads(path.read_text()) if path.exists() else {}
    summary[f"news{args.news_strength:g}"] = {
        "date": time.strftime("%Y-%m-%d"), "device": cpu_name(), "command": f"python bench/bench_learning.py {training_arguments()}",
        "chosen_step": best["step"], "train_items_seen": best["decisions_seen"], "minutes_to_chosen": round(minutes, 1),
        **verdict_figures(result)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.replace(path)


def distill_then_improve(trainer, teachers_items, train_items, validation_items, held_out_items, out_dir: Path, args, log,
                         deadline: float) -> dict:
    """Distillation of the teachers' logged answers until `args.distill_share` of the time to `deadline`, then the
    counterfactual menu objective from the distilled checkpoint chosen on validation (the improve curve's step 0, with a
    fresh optimizer) until `deadline`. Both curves answer validation and the held-out decisions at every checkpoint."""
    import torch

    switch = time.time() + args.distill_share * (deadline - time.time())
    trainer.options = replace(trainer.options, objective="imitate")
    distilled = train_policy("distill", trainer, teachers_items, validation_items, held_out_items, out_dir, args, log, switch)
    chosen = distilled["best"]["state"]["averaged"]  # the weights that answered validation
    with torch.no_grad():
        for p, value in zip(trainer.params, chosen):
            p.copy_(value)
    trainer.averaged = [value.clone() for value in chosen]
    trainer.optimizer = torch.optim.AdamW(trainer.params, lr=trainer.options.learning_rate, weight_decay=0.0)
    trainer.steps = 0
    trainer.options = replace(trainer.options, objective="counterfactual")
    log(f"  improving from the distilled step {distilled['best']['step']} (validation reward {distilled['best']['validation']['reward']:+.3f})")
    improved = train_policy("improve", trainer, train_items, validation_items, held_out_items, out_dir, args, log, deadline)
    return {"distill": distilled, "improve": improved | {"from_distill_step": distilled["best"]["step"]}}


def train_both(args, train, validation, held_out, base_model: str, run_dir: Path, out_dir: Path, log,
               deadline: float | None = None, teachers: list = ()) -> dict:
    """Everything that trains or answers, from tasks alone (what the GPU machine runs, bench_learning_gpu.py): the frozen
    states, each policy's training with its checkpoints' answers, the base's (step 0) and the chosen imitation's.
    `--only distill-improve` trains `distill_then_improve` on the `teachers`' train decisions, then on `train`."""
    from babylon_rl.train.menu_items import MenuOptions, make_items
    from babylon_rl.train.menu_trainer import MenuTrainer

    options = MenuOptions(learning_rate=args.learning_rate, reward_temperature=args.reward_temperature, shares=args.shares,
                          variants=args.variants, answer_order=args.answer_order, ema=args.ema, train_layers=args.train_layers,
                          hold_weight=args.hold_weight,
                          cache_batch=args.cache_batch, micro_batch=args.micro_batch, seed=args.seed, device=args.device)
    trainer = MenuTrainer(base_model, options)
    rng = np.random.default_rng(args.seed + 2)
    train_items = make_items(trainer.tokenizer, train, options, args.variants, rng)
    validation_items = make_items(trainer.tokenizer, validation, options, 0, rng)
    held_out_items = make_items(trainer.tokenizer, held_out, options, 0, rng)
    teachers_items = make_items(trainer.tokenizer, list(teachers), options, args.variants, rng)
    log(f"{len(train)} train decisions x {max(args.variants, 1)} namings = {len(train_items)} items; {len(validation_items)} validation; "
        f"{len(held_out_items)} held-out decisions; {len(teachers_items)} of the teachers' items")
    cache_seconds = {name: cached(name, items, trainer, run_dir, args, log) for name, items in (
        ("train", train_items), ("validation", validation_items), ("eval", held_out_items), ("teachers", teachers_items)) if items}
    results = {}
    if args.only == "distill-improve":
        results = distill_then_improve(trainer, teachers_items, train_items, validation_items, held_out_items, out_dir, args, log, deadline)
    # --only: one policy's training alone (two processes of one thread each use 2 cores better than one of two)
    trained = {None: ("counterfactual", "imitate"), "states": (), "distill-improve": ()}.get(args.only, (args.only,))
    for name in trained:
        policy = trainer if name == "counterfactual" else MenuTrainer(base_model, replace(options, objective="imitate"))
        results[name] = train_policy(name, policy, train_items, validation_items, held_out_items, out_dir, args, log, deadline)
        if name == "imitate":  # the chosen imitation checkpoint's held-out answers
            policy.restore(results[name]["best"]["state"])
            results[name]["best"]["held_out_answers"], _ = policy.scored(held_out_items, 2 * policy.options.micro_batch)
    for result in results.values():
        result["best"] = {k: v for k, v in result["best"].items() if k != "state"}
    tokens = {name: float(np.mean([len(i.packed) for i in items])) for name, items in
              (("train", train_items), ("validation", validation_items), ("eval", held_out_items))}
    return {"results": results, "seconds_per_item_cached": cache_seconds, "tokens_per_packed_decision": tokens,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def compare(ctx: BabylonContext, args, data, eval_set, record: dict, out_dir: Path, started: float) -> bool:
    """The chosen checkpoint against the base, the best constant, the logged agents and imitation on the eval windows;
    writes curve.json, eval.json, run.json, result.json and the report page, prints the tables; True when learning shows."""
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.evaluate import EvalOptions
    from babylon_rl.evaluate.constant import best_constant
    from babylon_rl.evaluate.decision_points import load_train_decisions
    from babylon_rl.evaluate.rules import news_rule
    from babylon_rl.evaluate.run import EvalResult, compare_results, resized, scored_answers, write_outputs

    results = record["results"]
    counterfactual = results["counterfactual"]["curve"]
    base_answers, base_validation = counterfactual[0]["held_out_answers"], counterfactual[0]["validation"]
    best, imitation = results["counterfactual"]["best"], results["imitate"]["best"]

    # the references: the best constant (train + validation decisions only, at the menu's size) and the news rule
    chosen_on = load_train_decisions(Dataset.open(ctx.home, "learn"))
    choice = best_constant(chosen_on.decisions, chosen_on.truths, 0.5)
    constant = resized(choice.answer, args.shares)
    decisions = eval_set.decisions
    eval_options = EvalOptions(model=RUN, dataset="learn", seed=args.seed)
    policies = [scored_answers(role, name, answers, eval_set, eval_options) for role, name, answers in (
        ("logged", "logged agents", [d.logged_answer for d in decisions]),
        ("constant", f"best constant: {constant}", [constant] * len(decisions)),
        ("reader", "news rule", [news_rule(d.request, constant, args.shares) for d in decisions]),
        ("baseline", "base SmolLM2-135M", base_answers),
        ("imitation", f"imitation (step {imitation['step']})", imitation["held_out_answers"]),
        ("model", f"trained (step {best['step']})", best["held_out_answers"]))]
    comparison, design = compare_results(policies, eval_set, eval_options)
    learning = all(c["beats_outside_interval"] for role, c in comparison.items() if role != "reader")
    references = {p.role: {k: p.metrics[k].value for k in ("direction_accuracy", "pnl_per_decision")} for p in policies}

    def point(items_seen: int, answers: list[str]) -> dict:
        scored = scored_answers("model", "checkpoint", answers, eval_set, eval_options)
        compare_results([scored], eval_set, eval_options)
        return {"step": items_seen} | {f"{key}{end}": getattr(scored.metrics[key], attr) for key in ("direction_accuracy", "pnl_per_decision")
                                       for end, attr in (("", "value"), ("_low", "low"), ("_high", "high"))}

    curve = [point(row["decisions_seen"], row["held_out_answers"]) | {"validation_accuracy": row["validation"]["direction_accuracy"]}
             for row in counterfactual]
    for row in curve:
        row |= {f"{name}_{key}": references[role][key] for name, role in (("constant", "constant"), ("news_rule", "reader"))
                for key in ("direction_accuracy", "pnl_per_decision")}
    step_seconds = float(np.median(results["counterfactual"]["seconds"]))
    timings = {k: record[k] for k in ("seconds_per_item_cached", "tokens_per_packed_decision", "peak_rss_mb")} | {
        "train_seconds_per_step_median": step_seconds, "train_seconds_per_decision_epoch": step_seconds / args.batch,
        "factor_vs_todays_trainer": [t / (step_seconds / args.batch) for t in TODAYS_TRAINER_SECONDS],
        "whole_run_seconds": record.get("whole_run_seconds", time.monotonic() - started)}
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    (out_dir / "curve.json").write_text(json.dumps(curve, indent=1))
    # eval.json and run.json as a training run has them, so that `cli.py report` draws this run's page with its curve
    write_outputs(EvalResult(eval_options, eval_set, policies, comparison, replace(choice, answer=constant), out_dir, None,
                             datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), design_check=design))
    (out_dir / "run.json").write_text(json.dumps({"dataset": "learn", "bench_learning": settings}, indent=1))
    ctx.report(out_dir.name)
    (out_dir / "result.json").write_text(json.dumps({
        "settings": settings, "learning_shown": learning, "chosen_step": best["step"], "chosen_validation": best["validation"],
        "base_validation": base_validation, "comparison": comparison, "design_check": design,
        "policies": [p.to_dict() for p in policies], "timings": timings,
        "read_ids": {"train_and_validation": data.read_ids, "eval": sorted({d.trajectory_id for d in decisions})},
        "validation_curves": {k: [{"step": r["step"], **r["validation"]} for r in v["curve"]] for k, v in results.items()},
        "steps": {k: {"trained": v["curve"][-1]["step"], "planned": v.get("planned_steps")} for k, v in results.items()},
    }, indent=1))
    report(args, policies, comparison, curve, timings, learning, best, len(eval_set.windows), results)
    return learning


def report(args, policies, comparison, curve, timings, learning, best, windows, results) -> None:
    print(f"\nCommand: `python bench/{Path(sys.argv[0]).name} {' '.join(sys.argv[1:])}` on {os.cpu_count()} cores, "
          f"{datetime.now():%Y-%m-%d %H:%M}, load {os.getloadavg()[0]:.1f}\n")
    t = timings
    print(f"- whole run {t['whole_run_seconds']:.0f} s, peak RSS {t['peak_rss_mb']:.0f} MB; frozen states "
          + ", ".join(f"{k} {v:.3f} s/item" for k, v in t["seconds_per_item_cached"].items() if v == v)
          + f"; tokens per packed decision {t['tokens_per_packed_decision']['train']:.0f}")
    print(f"- a training step of {args.batch} items: median {t['train_seconds_per_step_median']:.2f} s = "
          f"{t['train_seconds_per_decision_epoch']:.3f} s per decision and epoch, "
          f"{t['factor_vs_todays_trainer'][0]:.0f}-{t['factor_vs_todays_trainer'][1]:.0f}x fewer than today's trainer (1.2-1.7 s)\n")
    print(f"Held-out curve ({windows} eval windows; x = train items seen):\n")
    print("| items seen | direction accuracy | P&L per decision | validation accuracy |\n|---:|---:|---:|---:|")
    for row in curve:
        print(f"| {row['step']} | {row['direction_accuracy']:.3f} [{row['direction_accuracy_low']:.3f}, {row['direction_accuracy_high']:.3f}] | "
              f"{row['pnl_per_decision']:+.2f} [{row['pnl_per_decision_low']:+.2f}, {row['pnl_per_decision_high']:+.2f}] | "
              f"{row.get('validation_accuracy', float('nan')):.3f} |")
    print("\n| policy | direction accuracy [95 % CI] | P&L per decision [95 % CI] |\n|---|---:|---:|")
    for p in policies:
        a, m = p.metrics["direction_accuracy"], p.metrics["pnl_per_decision"]
        print(f"| {p.name} | {a.value:.3f} [{a.low:.3f}, {a.high:.3f}] | {m.value:+.2f} [{m.low:+.2f}, {m.high:+.2f}] |")
    print(f"\nThe trained policy (step {best['step']}, chosen on validation) against each reference, paired over windows:\n")
    for role, c in comparison.items():
        acc, pnl = c["direction_accuracy_diff"], c["pnl_per_decision_diff"]
        print(f"- vs {role}: accuracy {acc['value']:+.3f} [{acc['low']:+.3f}, {acc['high']:+.3f}], P&L {pnl['value']:+.2f} "
              f"[{pnl['low']:+.2f}, {pnl['high']:+.2f}]: {'beats it' if c['beats_outside_interval'] else 'does not beat it'}")
    for name, result in results.items():
        if result.get("planned_steps") and result["curve"][-1]["step"] < result["planned_steps"]:
            print(f"- {name} trained {result['curve'][-1]['step']} of its {result['planned_steps']} planned steps (--compare-now)")
    print(f"\nlearning shown: {learning}")


if __name__ == "__main__":
    main()
