"""Does a student read what a headline says? On validation decisions whose latest fresh headline is a telling one (the
simulator's templates, read here only to score): the mean log p(buy its stock) - log p(hold) and log p(sell its stock) - log p(hold)
after bullish and after bearish headlines, for the base and each checkpoint given. A student that reads the words moves
the two apart. Validation only.

    python bench/bench_headline_margins.py /tmp/brl-news/runs/news-holds-w03/checkpoints/step-64
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from babylon_rl.evaluate.rules import fresh_headlines, latest_fresh_headline  # noqa: E402
from babylon_rl.settings import Home  # noqa: E402
from babylon_rl.train.menu_items import MenuOptions  # noqa: E402
from babylon_rl.train.menu_losses import HOLD_INDEX  # noqa: E402
from babylon_rl.train.menu_ranker import menu_logprobs  # noqa: E402
from babylon_rl.train.menu_trainer import MenuTrainer  # noqa: E402
from babylon_rl.train.decisions import load_decision_data  # noqa: E402

HOME = Home.resolve("/tmp/brl-news")


def is_telling(task) -> bool:
    """Its latest fresh headline is a telling one (bullish or bearish), not a neutral one after a telling one."""
    latest = latest_fresh_headline(task.request)
    return latest is not None and next(fresh_headlines(task.request))[0] == latest[0]


def telling_decisions(split: str, n: int) -> list:
    """`n` decisions of the quickstart's `split` (seed 0) whose latest fresh headline is a telling one."""
    tasks = [t for t in getattr(load_decision_data(HOME, "quickstart"), split) if is_telling(t)]
    return [tasks[i] for i in sorted(np.random.default_rng(0).permutation(len(tasks))[:n])]


def menu_index(answers: list[str], kind: str, ticker: str) -> int:
    return next(i for i, a in enumerate(answers) if f'"{kind}"' in a and ticker in a)


def margins(items, tasks, logprobs) -> dict:
    """Mean log p(buy its stock) - log p(hold) and log p(sell its stock) - log p(hold), after bullish and bearish headlines."""
    out = {}
    for sentiment in ("BULLISH", "BEARISH"):
        buy, sell = [], []
        for task, item, logp in zip(tasks, items, logprobs):
            ticker, said = latest_fresh_headline(task.request)
            if said == sentiment:
                buy.append(logp[menu_index(item.answers, "buy", ticker)] - logp[HOLD_INDEX])
                sell.append(logp[menu_index(item.answers, "sell", ticker)] - logp[HOLD_INDEX])
        out[sentiment] = {"n": len(buy), "buy_minus_hold": round(float(np.mean(buy)), 3),
                          "sell_minus_hold": round(float(np.mean(sell)), 3)}
    return out


def main() -> None:
    torch.set_num_threads(1)
    tasks = telling_decisions("validation", 120)
    for checkpoint in [None, *sys.argv[1:]]:
        trainer = MenuTrainer(str(HOME.models / "smollm2-135m"), MenuOptions(objective="imitate", variants=1, shares=50),
                              init_adapter=None if checkpoint is None else Path(checkpoint))
        items = trainer.items_for(tasks, 0)
        with torch.no_grad():
            logprobs = [row for s in range(0, len(items), 8)
                        for row in menu_logprobs(trainer.split, items[s : s + 8], "cpu")[0].tolist()]
        print(checkpoint, json.dumps(margins(items, tasks, logprobs)), flush=True)


if __name__ == "__main__":
    main()
