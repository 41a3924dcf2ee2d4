"""Does a student read what a headline says? On validation decisions whose latest fresh headline is a telling one (the
simulator's templates, read here only to score): the mean log p(buy its stock) - log p(hold) and log p(sell its stock) - log p(hold)
after bullish and after bearish headlines, for the base and each checkpoint given. A student that reads the words moves
the two apart. Validation only.

    python bench/bench_headline_margins.py /tmp/brl-news/runs/news-holds-w03/checkpoints/step-64
"""
import json, sys
import numpy as np, torch
torch.set_num_threads(1)
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from babylon_rl.settings import Home
from babylon_rl.train.cached import MenuOptions, MenuTrainer
from babylon_rl.train.decisions import load_decision_data
from babylon_rl.evaluate.rules import latest_fresh_headline, fresh_headlines
home = Home.resolve("/tmp/brl-news")
val = load_decision_data(home, "quickstart").validation
tasks = [t for t in val if latest_fresh_headline(t.request) and next(fresh_headlines(t.request))[0] == latest_fresh_headline(t.request)[0]]
tasks = [tasks[i] for i in sorted(np.random.default_rng(0).permutation(len(tasks))[:120])]
for ck in [None, *sys.argv[1:]]:
    tr = MenuTrainer(str(home.models / "smollm2-135m"), MenuOptions(objective="imitate", variants=1, shares=50), init_adapter=None if ck is None else __import__("pathlib").Path(ck))
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
