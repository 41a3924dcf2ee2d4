"""Lab: what a trained menu student answers on VALIDATION decisions, by the latest fresh headline's sentiment.
usage: diag.py HOME RUN [RUN...]   (never reads the eval split)"""
import sys
from collections import Counter, defaultdict
from pathlib import Path
from babylon_rl.settings import Home
from babylon_rl.train.decisions import load_decision_data
from babylon_rl.train.cached import MenuRanker
from babylon_rl.evaluate.rules import headline_sentiment
from babylon_rl.evaluate.actions import parse_action

home = Home(Path(sys.argv[1]))
runs = sys.argv[2:]
data = load_decision_data(home, "quickstart")
seen, tasks = set(), []
for t in data.validation:
    if t.situation[1] is None or t.situation in seen:
        continue
    seen.add(t.situation); tasks.append(t)
from babylon_rl.model_names import resolve
adapters = [resolve(home, f"{r}@best").path for r in runs]
print("adapters", adapters)
base = str(home.models / "smollm2-135m")
ranker = MenuRanker(base, adapters, 50, "cpu", home.root / ".cache" / "frozen-states")
ranker.prepare(tasks)
for policy in adapters:
    table = defaultdict(Counter)
    pnl = defaultdict(float)
    for t, a in zip(tasks, ranker.answers(policy)):
        ticker, headline = t.situation[1]
        s = headline_sentiment(headline)
        act = parse_action(a)
        if act.kind == "hold":
            k = "hold"
        elif act.ticker != ticker:
            k = "other"
        else:
            st = t.truth.stocks[ticker]
            move = st.end - t.observation.prices[ticker]
            k = "right" if (move > 0) == (act.kind == "buy") else "wrong"
        table[s][k] += 1
        r, o = t.price(a)
        pnl[s] += o.pnl if o.valid else 0
    print(policy)
    for s, c in table.items():
        n = sum(c.values())
        print(f"  {s:8s} n={n:3d} " + " ".join(f"{k}={c[k]/n:.2f}" for k in ("hold", "right", "wrong", "other")) + f" pnl/dec={pnl[s]/n:+.1f}")
