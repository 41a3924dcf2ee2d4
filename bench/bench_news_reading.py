"""What a student reads in the news: on validation decisions (never eval), when it trades, which stock, which way.

For the base model and checkpoints of the same base, answering from the menu (`--shares`) as `eval --menu-shares` does,
on `--decisions` validation decisions drawn with seed 0, split by whether a headline of the last 30 minutes is in the
prompt (`rules.fresh_headlines`):
- fresh: how often it trades, how often the stock it trades is the one the latest fresh headline names, and where that
  headline is a telling one (the simulator's bullish or bearish templates, read here only to score), how often it
  trades that stock the headline's way, and its buys and sells of it by what the headline says (`bullish_buy`, ...);
- none fresh: how often it holds.
One JSON line per policy on stdout.

    python bench/bench_news_reading.py --home /tmp/brl-news --checkpoint /tmp/brl-news/runs/news-distill/checkpoints/step-40
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--dataset", default="quickstart")
    parser.add_argument("--checkpoint", type=Path, nargs="+", required=True, help="LoRA checkpoints of menu objectives' runs")
    parser.add_argument("--decisions", type=int, default=240)
    parser.add_argument("--shares", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args()


def reading(tasks, items, chosen) -> dict:
    from babylon_rl.evaluate.actions import parse_action
    from babylon_rl.evaluate.rules import fresh_headlines, latest_fresh_headline

    count = Counter()
    for task, item, index in zip(tasks, items, chosen):
        action = parse_action(item.answers[index])
        latest, telling = next(fresh_headlines(task.request), None), latest_fresh_headline(task.request)
        where = "fresh" if latest else "none"
        count[f"{where}_decisions"] += 1
        if action.kind == "hold":
            count[f"{where}_holds"] += 1
            continue
        count[f"{where}_trades"] += 1
        count[f"{where}_right"] += task.price(item.answers[index])[1].correct
        if latest and action.ticker == latest[0]:
            count["headline_stock"] += 1
            if telling and telling[0] == action.ticker:
                count["telling_headline_stock"] += 1
                count["headline_way"] += action.kind == ("buy" if telling[1] == "BULLISH" else "sell")
                count[f"{telling[1].lower()}_{action.kind}"] += 1  # e.g. bearish_buy: which way, by what the headline says
    return dict(sorted(count.items()))


def main() -> None:
    args = arguments()
    import torch

    torch.set_num_threads(args.threads)
    from babylon_rl.settings import Home
    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.decisions import load_decision_data

    home = Home.resolve(str(args.home))
    validation = load_decision_data(home, args.dataset).validation
    drawn = np.random.default_rng(0).permutation(len(validation))[: args.decisions]
    tasks = [validation[i] for i in sorted(drawn)]
    for name, adapter in (("base", None), *((str(path), path) for path in args.checkpoint)):
        trainer = MenuTrainer(str(home.models / "smollm2-135m"), MenuOptions(objective="imitate", variants=1, shares=args.shares),
                              init_adapter=adapter)
        items = trainer.items_for(tasks, 0)
        print(json.dumps({"policy": name, **reading(tasks, items, trainer.choose(items, averaged=False))}), flush=True)


if __name__ == "__main__":
    main()
