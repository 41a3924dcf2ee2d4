"""Does on-policy training find the news with a GPU's budget? Held-out curves of several objectives, run side by side.

The CPU budget of the quickstart (12 GRPO steps) teaches SmolLM2 the answer format, not the news
(docs/history/BENCHMARKS-learning.md). This bench asks what a few minutes of a GPU do, with the
trainer of `train --on-policy` (`train/grpo.py`, the same `GrpoTrainer`), in three steps:

1. `prepare` (here, CPU): simulate -> build -> dataset, as `bench_learning.py` does, then pack the
   train, validation and eval decisions (prompts and the ground truth that prices them) into one
   compressed file. Nothing of the eval split is read by anything that trains or chooses.
2. `run` (the GPU machine): convert SmolLM2 once, then one worker process per configuration
   (objective, LoRA layers, pack) trains from the base model until a shared deadline. At fixed
   steps each worker answers the validation and the eval decisions greedily and writes them out.
3. `score` (anywhere): for each configuration, the checkpoint with the best validation score
   (mean reward) is the chosen one; its eval answers are compared, paired by window with a
   95 % bootstrap over windows (`evaluate/stats.py`), with the base model, the best constant
   (chosen on train + validation), the logged agents and imitation (chosen the same way), and the
   rule that reads the news as the reference. "learning shown" as `cli.py eval` decides it.

    python bench/bench_learning_gpu.py prepare --home /tmp/brl-gpu --out .xfer2/news1.pack
    python bench/bench_learning_gpu.py prepare --home /tmp/brl-gpu0 --news-strength 0 --out .xfer2/news0.pack
    python bench/bench_learning_gpu.py run --packs .xfer2/news1.pack .xfer2/news0.pack --out $OUT --seconds 300
    python bench/bench_learning_gpu.py score --packs .xfer2/news1.pack .xfer2/news0.pack --results $OUT
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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

try:  # the trainer never calls polars; the GPU machine's image has none, and only evaluate/decisions.py imports it
    import polars  # noqa: F401
except ImportError:
    sys.modules["polars"] = types.ModuleType("polars")

import numpy as np  # noqa: E402

from babylon_rl.evaluate.stats import DEFAULT_RESAMPLES, difference_interval, ratio_interval, resample_indices  # noqa: E402

MILESTONES = (0, 25, 50, 75, 100, 150, 200, 300, 400, 600, 1000)  # each costs a greedy pass over validation and eval


@dataclass(frozen=True)
class Config:
    name: str
    pack: str  # which pack (news1 / news0) it trains on
    objective: str  # grpo | counterfactual | imitate
    train_layers: int  # LoRA on the top N blocks; 0 = all 30
    learning_rate: float


CONFIGS = {
    "grpo-top4": Config("grpo-top4", "news1", "grpo", 4, 3e-4),  # the quickstart's (CPU) settings
    "grpo-all": Config("grpo-all", "news1", "grpo", 0, 1e-4),
    "counterfactual": Config("counterfactual", "news1", "counterfactual", 0, 1e-4),
    "imitate": Config("imitate", "news1", "imitate", 0, 1e-4),
    "counterfactual-news0": Config("counterfactual-news0", "news0", "counterfactual", 0, 1e-4),
    "grpo-all-news0": Config("grpo-all-news0", "news0", "grpo", 0, 1e-4),
}


# -- 1. prepare -------------------------------------------------------------------------------
def prepare(args) -> None:
    from bench_learning import simulate_and_split

    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.evaluate.decisions import load_eval_set
    from babylon_rl.train.grpo import Task, load_decision_data

    started = time.monotonic()
    ctx = simulate_and_split(args, args.eval_fraction)
    data = load_decision_data(ctx.home, "learn")  # train + validation only
    eval_set = load_eval_set(Dataset.open(ctx.home, "learn"))  # read once, to pack; nothing here trains on it
    pack = {"news_strength": args.news_strength, "windows": args.windows, "agents": args.agents, "seed": args.seed,
            "train": data.train, "validation": data.validation,
            "eval": [Task.from_decision(d, eval_set.truths[d.window_id]) for d in eval_set.decisions]}
    ids = {split: {t.trajectory_id for t in pack[split]} for split in ("train", "validation", "eval")}
    assert not ids["eval"] & (ids["train"] | ids["validation"]), "an eval trajectory is in train or validation"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(args.out, "wb") as handle:
        pickle.dump(pack, handle)
    print(f"{args.out}: {len(pack['train'])} train, {len(pack['validation'])} validation, {len(pack['eval'])} eval decisions "
          f"({args.out.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - started:.0f} s")


def load_pack(path: Path) -> dict:
    with lzma.open(path, "rb") as handle:
        return pickle.load(handle)


# -- 2. run (one worker per configuration) ----------------------------------------------------
def run(args) -> None:
    from babylon_rl.settings import Home
    from babylon_rl.train.pretrained import init_default_model

    started = time.time()
    model = init_default_model(Home(Path(args.home))).path
    print(f"model at {model} after {time.time() - started:.0f} s", flush=True)
    packs = {Path(p).stem: p for p in args.packs}
    deadline = started + args.seconds
    workers = [subprocess.Popen([sys.executable, __file__, "worker", "--config", name, "--pack", packs[c.pack],
                                 "--model", str(model), "--out", str(args.out), "--deadline", str(deadline),
                                 "--groups-per-step", str(args.groups_per_step), "--samples", str(args.samples),
                                 "--micro-batch", str(args.micro_batch), "--device", args.device])
               for name, c in CONFIGS.items() if c.pack in packs and name in args.configs]
    for worker in workers:
        worker.wait()
    print(f"workers done after {time.time() - started:.0f} s", flush=True)


def worker(args) -> None:
    import torch

    from babylon_rl.policy import greedy_answers
    from babylon_rl.train.data import Schedule
    from babylon_rl.train.grpo import GrpoOptions, GrpoTrainer

    torch.backends.cuda.matmul.allow_tf32 = True
    config = CONFIGS[args.config]
    pack = load_pack(Path(args.pack))
    trainer = GrpoTrainer(args.model, GrpoOptions(
        learning_rate=config.learning_rate, samples=args.samples, kl_coef=0.02, lora_r=16, train_layers=config.train_layers,
        micro_batch=args.micro_batch, objective=config.objective, device=args.device, seed=0))
    schedule = Schedule(len(pack["train"]), args.groups_per_step, 0)
    record = {"config": config.__dict__, "groups_per_step": args.groups_per_step, "samples": args.samples,
              "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device, "steps": [], "checkpoints": []}
    out = Path(args.out) / f"{config.name}.json"

    def answers(tasks) -> list[str]:
        return greedy_answers(trainer.model, trainer.tokenizer, [t.request for t in tasks], args.device, 32, args.eval_batch)

    def checkpoint(step: int) -> None:
        began = time.time()
        record["checkpoints"].append({"step": step, "validation": answers(pack["validation"]), "eval": answers(pack["eval"]),
                                      "seconds": round(time.time() - began, 1)})
        out.write_text(json.dumps(record))
        print(f"{config.name}: checkpoint {step} in {time.time() - began:.1f} s", flush=True)

    step = 0
    checkpoint(0)
    eval_reserve = record["checkpoints"][0]["seconds"] * 1.5  # the last checkpoint must end before the deadline
    while time.time() + eval_reserve < args.deadline:
        result = trainer.train_step([pack["train"][i] for i in schedule.batch(step)])
        step += 1
        record["steps"].append({"step": step, "seconds": round(result.seconds, 3), "reward_mean": result.reward_mean,
                                "valid_rate": result.valid_rate, "correct_rate": result.correct_rate, "kl": result.kl,
                                "tokens": result.tokens})
        if step in MILESTONES:
            checkpoint(step)
    if step not in MILESTONES:
        checkpoint(step)
    record["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else None
    out.write_text(json.dumps(record))


# -- 3. score ---------------------------------------------------------------------------------
@dataclass
class Scored:
    """Per-window totals of one policy's answers to a pack's eval (or validation) decisions."""

    decisions: np.ndarray
    correct: np.ndarray
    pnl: np.ndarray
    valid: np.ndarray
    reward: float  # mean reward, what keep-best maximises on validation

    @classmethod
    def of(cls, tasks, answers: list[str]) -> "Scored":
        windows = sorted({t.window_id for t in tasks})
        index = {w: i for i, w in enumerate(windows)}
        totals = np.zeros((4, len(windows)))
        rewards = []
        for task, answer in zip(tasks, answers):
            reward, outcome = task.price(answer)
            rewards.append(reward)
            totals[:, index[task.window_id]] += (1, outcome.correct, outcome.pnl, outcome.valid)
        return cls(*totals, float(np.mean(rewards)))


def best_constant(tasks) -> str:
    """The answer that ignores the observation with the best direction accuracy on train + validation (constant.py)."""
    from babylon_rl.evaluate.constant import candidates

    menu = candidates({t.window_id: t.truth for t in tasks})
    accuracy = [np.mean([t.price(answer)[1].correct for t in tasks]) for answer in menu]
    return menu[int(np.argmax(accuracy))]


def score(args) -> None:
    from babylon_rl.evaluate.rules import news_rule

    results = {p.stem: json.loads(p.read_text()) for p in sorted(Path(args.results).glob("*.json"))}
    for pack_path in args.packs:
        pack = load_pack(Path(pack_path))
        tasks = pack["eval"]
        indices = resample_indices(len({t.window_id for t in tasks}), DEFAULT_RESAMPLES, 0)
        constant = best_constant(pack["train"] + pack["validation"])
        references = {"constant": Scored.of(tasks, [constant] * len(tasks)),
                      "logged": Scored.of(tasks, [t.logged_answer for t in tasks]),
                      "news rule": Scored.of(tasks, [news_rule(t.request, constant) for t in tasks])}
        runs = {name: r for name, r in results.items() if r["config"]["pack"] == Path(pack_path).stem}
        chosen = {name: choose(r, pack) for name, r in runs.items()}
        if "imitate" in chosen:
            references["imitation"] = chosen["imitate"][1]
        print(f"\n### {Path(pack_path).stem}: news strength {pack['news_strength']}, {len(tasks)} held-out decisions in "
              f"{len(indices[0])} windows; best constant {constant}\n")
        print("| policy | held-out direction accuracy [95 % CI] | P&L per decision [95 % CI] | valid |")
        print("|---|---:|---:|---:|")
        for name, scored in references.items():
            print(row(name, scored, indices))
        for name, r in runs.items():
            if name == next(iter(runs)):
                print(row("base model (step 0)", Scored.of(tasks, r["checkpoints"][0]["eval"]), indices))
            step, scored = chosen[name]
            print(row(f"{name}: step {step} (best on validation)", scored, indices))
        for name, r in runs.items():
            if name == "imitate":
                continue
            step, scored = chosen[name]
            versus = {"base": Scored.of(tasks, r["checkpoints"][0]["eval"])} | {
                k: v for k, v in references.items() if k != "news rule"}
            print(f"\n{name} (step {step}) against each reference, paired by window:")
            beats = []
            for other, reference in versus.items():
                acc = difference_interval(scored.correct, reference.correct, scored.decisions, indices)
                pnl = difference_interval(scored.pnl, reference.pnl, scored.decisions, indices)
                beats.append(acc.low > 0 and pnl.low > 0)
                print(f"- vs {other}: accuracy {acc.value:+.3f} [{acc.low:+.3f}, {acc.high:+.3f}], "
                      f"P&L {pnl.value:+.2f} [{pnl.low:+.2f}, {pnl.high:+.2f}] -> {'beats' if beats[-1] else 'not beyond the interval'}")
            print(f"- **learning {'shown' if all(beats) else 'NOT shown'}**")
        for name, r in runs.items():
            print(curve(name, r, tasks, indices))


def choose(record: dict, pack: dict) -> tuple[int, Scored]:
    """The checkpoint with the best mean reward on validation (as --keep-best), and its eval answers scored."""
    best = max(record["checkpoints"], key=lambda c: Scored.of(pack["validation"], c["validation"]).reward)
    return best["step"], Scored.of(pack["eval"], best["eval"])


def row(name: str, s: Scored, indices) -> str:
    acc = ratio_interval(s.correct, s.decisions, indices)
    pnl = ratio_interval(s.pnl, s.decisions, indices)
    return (f"| {name} | {acc.value:.3f} [{acc.low:.3f}, {acc.high:.3f}] | {pnl.value:+.2f} [{pnl.low:+.2f}, {pnl.high:+.2f}] "
            f"| {s.valid.sum() / s.decisions.sum():.2f} |")


def curve(name: str, record: dict, tasks, indices) -> str:
    steps = record["steps"]
    seconds = sorted(s["seconds"] for s in steps) or [0.0]
    lines = [f"\n{name} ({record['device']}, {record['groups_per_step']} decisions x k={record['samples']} a step): "
             f"{len(steps)} steps, median {seconds[len(seconds) // 2]:.2f} s a step, peak GPU memory "
             f"{record.get('peak_gpu_mb') or 0:.0f} MiB", "", "| step | held-out accuracy | P&L per decision | valid |",
             "|---:|---:|---:|---:|"]
    for c in record["checkpoints"]:
        s = Scored.of(tasks, c["eval"])
        lines.append(f"| {c['step']} | {s.correct.sum() / s.decisions.sum():.3f} | {s.pnl.sum() / s.decisions.sum():+.2f} | "
                     f"{s.valid.sum() / s.decisions.sum():.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("--home", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--windows", type=int, default=480)
    p.add_argument("--steps-per-window", type=int, default=3)
    p.add_argument("--eval-fraction", type=float, default=0.25)
    p.add_argument("--news-strength", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    r = commands.add_parser("run")
    r.add_argument("--packs", nargs="+", required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--home", default="/tmp/brl-gpu-home")
    r.add_argument("--seconds", type=float, default=300)
    r.add_argument("--configs", nargs="+", default=[name for name in CONFIGS if name != "grpo-top4"])
    r.add_argument("--device", default="cuda")
    w = commands.add_parser("worker")
    for name in ("--config", "--pack", "--model", "--out", "--device"):
        w.add_argument(name, required=True)
    w.add_argument("--deadline", type=float, required=True)
    w.add_argument("--eval-batch", type=int, default=256)
    for command in (r, w):
        command.add_argument("--groups-per-step", type=int, default=32)
        command.add_argument("--samples", type=int, default=8)
        command.add_argument("--micro-batch", type=int, default=8, help="decisions per forward pass (GPU memory)")
    s = commands.add_parser("score")
    s.add_argument("--packs", nargs="+", required=True)
    s.add_argument("--results", type=Path, required=True)
    args = parser.parse_args()
    {"prepare": prepare, "run": run, "worker": worker, "score": score}[args.command](args)
    if args.command in ("prepare", "score"):
        print(f"\nCommand: `python bench/bench_learning_gpu.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} cores, "
              f"{datetime.now():%Y-%m-%d %H:%M}, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
