"""The credit as a policy on the validation decisions: what a student that copied its credit perfectly would earn,
for ways of turning the critic's calls into a decision's target. Reads train and validation only."""
import sys
from collections import defaultdict

import numpy as np

from babylon_rl.evaluate.menu import HOLD_ANSWER, on_menu
from babylon_rl.evaluate.rules import _headlines_by_age, news_rule
from babylon_rl.settings import Home
from babylon_rl.train import credit as c
from babylon_rl.train.decisions import load_decision_data

home, dataset, base = sys.argv[1], sys.argv[2], sys.argv[3]
other_home = sys.argv[4] if len(sys.argv) > 4 else None  # a dev world: its eval split is read (never a deciding one)
SHARES = 50
from pathlib import Path
data = load_decision_data(Home(Path(home)), dataset)
embed = c.HeadlineEmbedder(base)
found = c.credit(data.train, data.validation, embed)
print(found.line(), "max_age", found.max_age)
if other_home:
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.train.decisions import read_split_decisions
    from dataclasses import replace
    dev = read_split_decisions(Dataset.open(Home(Path(other_home)), dataset), "eval")
    data = replace(data, validation=dev)
names = c.company_names(data.train + data.validation)
train_ex = [e for e in c.examples(data.train, names) if e.up is not None]
fresh = {(t.window_id, ticker, h) for t in data.validation for age, ticker, h in _headlines_by_age(t.request) if age <= 30}
fresh = sorted(fresh)
feats = embed([e.text for e in train_ex] + [c.masked(tk, h, names) for _, tk, h in fresh])
tx, vx = c._standardised(feats[: len(train_ex)], feats[len(train_ex):])
w = c._fit(tx, np.array([float(e.up) for e in train_ex]), found.l2)
p_of = {(tk, h): float(p) for (_, tk, h), p in zip(fresh, c._predict(w, vx))}


def trade(task, call, ticker):
    return on_menu(f'{{"action": "{call}", "ticker": "{ticker}", "shares": {SHARES}}}', task.request, SHARES) if call != "hold" else HOLD_ANSWER


def variant(task, max_age, confident, skip_unmenued):
    for age, ticker, h in _headlines_by_age(task.request):
        if age >= max_age:
            break
        p = p_of[(ticker, h)]
        call = "buy" if p >= confident else "sell" if p <= 1 - confident else "hold"
        if call == "hold":
            continue
        answer = trade(task, call, ticker)
        if answer != HOLD_ANSWER or not skip_unmenued:
            return answer
    return HOLD_ANSWER


def current(task):
    latest = task.situation[1]
    latest_p = p_of.get((latest[0], latest[1])) if latest else None
    d = None if latest_p is None else "buy" if latest_p >= c.CONFIDENT else "sell" if latest_p <= 1 - c.CONFIDENT else "hold"
    d = "hold" if d is not None and c.headline_age(task) >= found.max_age else d
    return HOLD_ANSWER if d in (None, "hold") else trade(task, d, latest[0])


policies = {
    "current (latest fresh, its call)": current,
    "first confident < max_age": lambda t: variant(t, found.max_age, c.CONFIDENT, False),
    "first confident on menu < max_age": lambda t: variant(t, found.max_age, c.CONFIDENT, True),
    "first confident on menu < 30": lambda t: variant(t, 31, c.CONFIDENT, True),
    "first confident(0.55) on menu < max_age": lambda t: variant(t, found.max_age, 0.55, True),
    "first confident(0.7) on menu < max_age": lambda t: variant(t, found.max_age, 0.7, True),
    "logged agents": lambda t: t.logged_answer,
    "news rule (oracle)": lambda t: on_menu(news_rule(t.request, HOLD_ANSWER, SHARES), t.request, SHARES),
}
by_window = defaultdict(list)
for name, policy in policies.items():
    pnl, traded, right = [], 0, 0
    for t in data.validation:
        _, outcome = t.price(policy(t))
        pnl.append(outcome.pnl)
        if outcome.kind in ("buy", "sell"):
            traded += 1
            right += outcome.correct
    print(f"{name:42s} P&L/decision {np.mean(pnl):+7.2f}  precision {right / max(traded, 1):.3f}  traded {traded / len(pnl):.2f}  (n={len(pnl)})")
