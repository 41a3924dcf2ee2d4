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
from babylon_rl.train.decisions import load_decision_data  # noqa: E402

HOME = Home.resolve("/tmp/brl-news")


def telling_decisions(split: str, n: int) -> list:
    """`n` decisions of the quickstart's `split` (seed 0) whose latest fresh headline is a telling one."""
    tasks = getattr(load_decision_data(HOME, "quickstart"), split)
    tasks = [t for t in tasks if latest_fresh_headline(t.request)
             and next(fresh_headlines(t.request))[0] == latest_fresh_headline(t.request)[0]]
    return [tasks[i] for i in sorted(np.random.default_rng(0).permutation(len(tasks))[:n])]


def main() -> None:
    from babylon_rl.train.cached import MenuOptions, MenuTrainer

    torch.set_num_threads(1)
    home, tasks = HOME, telling_decisions("validation", 120)
    for ck in [None, *sys.argv[1:]]:
        tr = MenuTrainer(str(home.models / "smollm2-135m"), MenuOptions(objective="imitate", variants=1, shares=50), init_adapter=None if ck is None else Path(ck))
        items = tr.items_for(tasks, 0)
        with torch.no_grad():
            rows = []
            for s in range(0, len(items), 8):
                lp, _ = tr._logprobs(items[s:s+8]); rows += lp.tolist()
        out = {}
        for sent in ("BULLISH", "BEARISH"):
            buy, sell = [], []
            for t, it, lp in zip(tasks, items, rows):
                tick, s = latest_fresh_headline(t.request)
                if s != sent: continue
                ib = it.answers.index(next(a for a in it.answers if '"buy"' in a and tick in a))
                isl = it.answers.index(next(a for a in it.answers if '"sell"' in a and tick in a))
                buy.append(lp[ib] - lp[0]); sell.append(lp[isl] - lp[0])
            out[sent] = {"n": len(buy), "buy_minus_hold": round(float(np.mean(buy)), 3), "sell_minus_hold": round(float(np.mean(sell)), 3)}
        print(ck, json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
