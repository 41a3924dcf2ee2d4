"""Distillation's validation curve: several epochs over the teachers' train decisions, their frozen states computed once.

On the quickstart's world (10 agents, 480 windows of 3 decisions, seed 0, news strength 1), made once in `--home`:
the teachers are chosen as `train --objective distill` chooses them (train windows, checked on validation),
`--train` of their train decisions (seeded) are trained on for `--minutes` of wall time with the menu's imitation loss
(raw weights, no averaging), and every `--eval-every` steps the student answers from its menu:
- `--val-per-window` decisions of every validation window (any agent): trade share, trade precision, P&L a decision;
- every validation decision of the teachers: the same, and how often it answers as the teacher did.
The eval split is never opened. Step 0 is the base model. One JSON line per checkpoint goes to `--out`.

`--hold-weight 0` fits only the teachers' trades (their holds, 57 % of their answers, weigh nothing, so only their
trade decisions are drawn): does a student that learns which trade, never whether, trade precisely?
`--right-only` keeps only those of their train trades that were right in direction: are the
teachers' labels too noisy (their trades are right ~65 % of the time), where 320 clean labels once taught?

`--fresh-only` keeps only the teachers' train trades of the stock the latest telling headline of the last 30 minutes
names (labels that follow from the prompt, as the news rule's do, but the teachers' own); `--fresh-holds` adds their
holds where no such headline is fresh; `--any-headline` counts any headline as fresh news (no simulator template read).
`--fresh-only --fresh-holds --any-headline` keeps what the first version of `train --teacher-answers news` kept (it now
keeps every hold: `teachers.follows_news`).

`--age` is an experiment on the prompt: each headline's clock time replaced by its age (`4 min ago ACME: ...`), so
that the news persona's rule (buy within 12 minutes of a bullish headline) needs no clock arithmetic.

    python bench/bench_distill.py --home /tmp/brl-distill --out /tmp/distill.jsonl
    python bench/bench_distill.py --home /tmp/brl-distill --out /tmp/distill-age.jsonl --age
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=Path("/tmp/brl-distill"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--age", action="store_true", help="headline ages instead of clock times in the prompt (experiment)")
    parser.add_argument("--answer-order", choices=["action-first", "ticker-first"], default="action-first")
    parser.add_argument("--train", type=int, default=400, help="teacher train decisions trained on")
    parser.add_argument("--hold-weight", type=float, default=1.0,
                        help="a logged hold's weight in the loss (train --hold-weight); at 0 only the teachers' trades are drawn")
    parser.add_argument("--right-only", action="store_true",
                        help="only the teachers' train trades that were right in direction (no holds)")
    parser.add_argument("--fresh-only", action="store_true",
                        help="only the teachers' train trades of the stock of a fresh telling headline (no holds)")
    parser.add_argument("--fresh-holds", action="store_true",
                        help="with --fresh-only, also the teachers' holds on decisions with no fresh telling headline")
    parser.add_argument("--any-headline", action="store_true",
                        help="with --fresh-only, any headline of the last 30 minutes counts, telling or not (no template read)")
    parser.add_argument("--minutes", type=float, default=35.0, help="wall time for training and its checkpoints")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=6)
    parser.add_argument("--val-per-window", type=int, default=2)
    parser.add_argument("--teachers-validation", type=int, default=0, help="the teachers' validation decisions read (0: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (two one-thread runs side by side use 2 cores best)")
    return parser.parse_args()


def headline_ages() -> None:
    """The compact prompt with each headline's `HH:MM` replaced by its age in minutes (`--age`)."""
    from babylon_rl.evaluate import prompts

    clock = re.compile(r"^(\d\d):(\d\d), \d+ min left$", re.M)
    news = re.compile(r"^(\d\d):(\d\d) ([A-Z][A-Z0-9.]{0,9}): ", re.M)
    plain = prompts.compact

    def compact(observation: str) -> str:
        text = plain(observation)
        now = clock.search(text)
        if not now:
            return text
        minute = int(now.group(1)) * 60 + int(now.group(2))
        return news.sub(lambda m: f"{(minute - int(m.group(1)) * 60 - int(m.group(2))) % 1440} min ago {m.group(3)}: ", text)

    prompts.compact = compact


def world(home: Path, start: datetime | None = None, **options):
    """The quickstart's world, dataset and base model, made once (`options`: QuickstartOptions fields to change, `start`:
    its first window, the quickstart's by default)."""
    from dataclasses import replace

    from babylon_rl.context import BabylonContext
    from babylon_rl.quickstart import NAME, START, QuickstartOptions, dataset_params

    ctx = BabylonContext.create(str(home))
    if not (ctx.home.datasets / NAME / "manifest.json").exists():
        o = replace(QuickstartOptions(), **options)
        ctx.simulate(agents=o.agents, windows=o.windows, steps_per_window=o.steps_per_window, seed=o.seed, start=start or START,
                     target="duckdb", news_strength=o.news_strength)
        ctx.build()
        ctx.dataset_build(dataset_params(o), force=True)
        ctx.model_init("smollm2-135m")
    return ctx


def heldout_world(home: Path, **options):
    """A second world for evaluation only: the quickstart's settings on another seed and another stretch of time (no
    window id in common with `world`'s), three quarters of its 640 windows in the eval split. Nothing trained on
    `world` has read any of it, and a paired interval over its 480 eval windows is about half as wide as over the
    quickstart's 120. `options` change QuickstartOptions fields, e.g. news_strength=0 for its control."""
    return world(home, start=datetime(2025, 6, 1), **({"windows": 640, "seed": 1, "eval_fraction": 0.75} | options))


def answered(trainer, items) -> dict:
    """The student's menu answers on `items`: trade share, precision of its trades, P&L a decision, agreement with the log."""
    from babylon_rl.evaluate.actions import parse_action

    chosen = trainer.choose(items, averaged=False)
    outcomes = [item.task.price(item.answers[i])[1] for item, i in zip(items, chosen)]
    trades = [o for item, i, o in zip(items, chosen, outcomes) if parse_action(item.answers[i]).kind in ("buy", "sell")]
    logged = [(i, item) for i, item in zip(chosen, items) if item.target_index >= 0]
    return {"trade_share": len(trades) / len(items), "precision": float(np.mean([o.correct for o in trades])) if trades else None,
            "pnl": float(np.mean([o.pnl for o in outcomes])),
            "agree": float(np.mean([i == item.target_index for i, item in logged])) if logged else None}


def logged_answers(items) -> dict:
    """The teachers' own menu answers on `items`, scored the same way (their bets are off the menu and left out)."""
    from babylon_rl.evaluate.actions import parse_action

    on_menu = [item for item in items if item.target_index >= 0]
    outcomes = [item.task.price(item.answers[item.target_index])[1] for item in on_menu]
    trades = [o for item, o in zip(on_menu, outcomes) if parse_action(item.answers[item.target_index]).kind in ("buy", "sell")]
    return {"trade_share": len(trades) / len(on_menu), "precision": float(np.mean([o.correct for o in trades])),
            "pnl": float(np.mean([o.pnl for o in outcomes]))}


def main() -> None:
    args = arguments()
    import torch

    torch.set_num_threads(args.threads)
    if args.age:
        headline_ages()
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.evaluate.actions import parse_action
    from babylon_rl.evaluate.rules import fresh_headlines, latest_fresh_headline
    from babylon_rl.quickstart import NAME
    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.decisions import load_decision_data
    from babylon_rl.train.teachers import choose

    ctx = world(args.home)
    teachers = choose(Dataset.open(ctx.home, NAME))
    data = load_decision_data(ctx.home, NAME).taught_by(teachers)
    rng = np.random.default_rng(0)
    trades_only = args.right_only or (args.fresh_only and not args.fresh_holds) or not args.hold_weight
    pool = [t for t in data.train if getattr(parse_action(t.logged_answer), "kind", None) in ("buy", "sell")] if trades_only else data.train
    if args.right_only:  # hindsight on train windows only: the trades whose stock then moved their way
        pool = [t for t in pool if t.price(t.logged_answer)[1].correct]
    if args.fresh_only:  # labels that follow from the prompt: trades of the stock the latest fresh headline names,
        # and (--fresh-holds) holds where no headline is fresh
        freshest = (lambda prompt: next(fresh_headlines(prompt), None)) if args.any_headline else latest_fresh_headline

        def follows(task) -> bool:
            action, news = parse_action(task.logged_answer), freshest(task.request)
            if action is None:
                return False
            if action.kind == "hold":
                return args.fresh_holds and news is None
            return action.kind in ("buy", "sell") and news is not None and news[0] == action.ticker

        pool = [t for t in pool if follows(t)]
    train = [pool[i] for i in rng.permutation(len(pool))[: args.train]]
    by_window: dict[str, list] = {}
    for task in data.validation:
        by_window.setdefault(task.window_id, []).append(task)
    validation = [t for w in sorted(by_window) for t in sorted(by_window[w], key=lambda t: t.trajectory_id)
                  [:: max(1, len(by_window[w]) // args.val_per_window)][: args.val_per_window]]
    teachers_validation = [t for t in data.validation if t.agent_id in teachers.chosen][: args.teachers_validation or None]

    trainer = MenuTrainer(str(ctx.home.models / "smollm2-135m"), MenuOptions(
        objective="imitate", learning_rate=args.learning_rate, ema=0.0, hold_weight=args.hold_weight,
        answer_order=args.answer_order, variants=1))
    started = time.monotonic()
    train_items = trainer.items_for(train, 1)
    validation_items = trainer.items_for(validation, 0)
    teacher_items = trainer.items_for(teachers_validation, 0)
    setting = {"age": args.age, "answer_order": args.answer_order, "learning_rate": args.learning_rate, "batch": args.batch,
               "hold_weight": args.hold_weight, "right_only": args.right_only, "fresh_only": args.fresh_only,
               "fresh_holds": args.fresh_holds, "any_headline": args.any_headline,
               "pool": len(pool)}

    def write(row: dict) -> None:
        print(json.dumps(row), flush=True)
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")

    write({"setting": setting, "teachers": teachers.chosen, "train": len(train_items), "validation": len(validation_items),
           "teachers_validation": len(teacher_items), "states_seconds": round(time.monotonic() - started, 1),
           "teachers_answers": logged_answers(teacher_items)})
    step, train_seconds, epoch = 0, 0.0, 0
    deadline = time.monotonic() + args.minutes * 60

    def checkpoint() -> None:
        write({"step": step, "decisions_seen": step * args.batch, "train_seconds": round(train_seconds, 1),
               "validation": answered(trainer, validation_items), "teachers_validation": answered(trainer, teacher_items)})

    checkpoint()
    while time.monotonic() < deadline:
        order = np.random.default_rng(epoch).permutation(len(train_items))
        for start in range(0, len(order) - args.batch + 1, args.batch):
            train_seconds += trainer.step([train_items[i] for i in order[start : start + args.batch]])["seconds"]
            step += 1
            if step % args.eval_every == 0:
                checkpoint()
            if time.monotonic() >= deadline:
                break
        epoch += 1
    if step % args.eval_every:
        checkpoint()


if __name__ == "__main__":
    main()
