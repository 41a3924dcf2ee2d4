"""Critic variants as a policy: seed 0's train stories fit the critic, which answers (a) seed 0's validation decisions
and (b) a dev world's held-out decisions (seed 100, unseen wording). Never a deciding seed's held-out windows.

    python variants.py SEED0_HOME DEV_HOME BASE_MODEL_DIR
"""
import sys
from pathlib import Path

import numpy as np
import torch

from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.menu import HOLD_ANSWER, on_menu
from babylon_rl.evaluate.rules import news_rule
from babylon_rl.settings import Home
from babylon_rl.train import credit as c
from babylon_rl.train.decisions import load_decision_data, read_split_decisions
from babylon_rl.train.models import load_causal_lm

home, dev_home, base = sys.argv[1], sys.argv[2], sys.argv[3]
SHARES = 50
data = load_decision_data(Home(Path(home)), "quickstart")
dev = read_split_decisions(Dataset.open(Home(Path(dev_home)), "quickstart"), "eval")
names = c.company_names(data.train + data.validation + dev)


def freshest(tasks):
    out = {}
    for t in tasks:
        s = t.situation
        if s[1] is not None and (s not in out or c.headline_age(t) < c.headline_age(out[s])):
            out[s] = t
    return out


def move(task, ticker):
    now, stock = task.observation.prices.get(ticker), task.truth.stocks.get(ticker)
    return None if not now or stock is None or stock.end == now else stock.end / now - 1


train_fresh = [(s, t, move(t, s[1][0])) for s, t in freshest(data.train).items()]
train_fresh = [x for x in train_fresh if x[2] is not None]
texts = [c.masked(s[1][0], s[1][1], names) for s, _, _ in train_fresh]
y = np.array([float(m > 0) for _, _, m in train_fresh])
ret = np.array([abs(m) for _, _, m in train_fresh])
windows = sorted({s[0] for s, _, _ in train_fresh})
fold = c._folds([s[0] for s, _, _ in train_fresh], windows)
other = {}
for split, tasks in (("validation", data.validation), ("dev", dev)):
    for t in tasks:
        if t.situation[1] is not None:
            tk, h = t.situation[1]
            other[(tk, h)] = c.masked(tk, h, names)
keys = sorted(other)
model, tok = load_causal_lm(base, "cpu")
tok.padding_side = "right"


def embed(all_texts, layers):
    out = {L: np.zeros((len(all_texts), model.config.hidden_size), np.float32) for L in layers}
    order = sorted(range(len(all_texts)), key=lambda i: len(all_texts[i]))
    with torch.inference_mode():
        for start in range(0, len(order), 64):
            chunk = order[start:start + 64]
            tokens = tok([all_texts[i] for i in chunk], return_tensors="pt", padding=True)
            hs = model.model(**tokens, output_hidden_states=True).hidden_states
            mask = tokens["attention_mask"][..., None].float()
            for L in layers:
                out[L][chunk] = ((hs[L] * mask).sum(1) / mask.sum(1)).float().numpy()
    return out


LAYERS = (8, 12, 16, 20, 24)
E = embed(texts + [other[k] for k in keys], LAYERS)


def fit_w(x, yy, l2, weight):
    X, Y, W = (torch.tensor(a, dtype=torch.float64) for a in (x, yy, weight))
    w = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        v = (torch.nn.functional.binary_cross_entropy_with_logits(X @ w[:-1] + w[-1], Y, reduction="none") * W).mean() + l2 * (w[:-1] ** 2).sum() / 2
        v.backward()
        return v
    opt.step(loss)
    return w.detach().numpy()


def cross(x, yy, weight, l2, folds):
    p = np.full(len(yy), 0.5)
    for k in np.unique(folds):
        held, kept = folds == k, folds != k
        p[held] = c._predict(fit_w(x[kept], yy[kept], l2, weight[kept]), x[held])
    return p


found = c.credit(data.train, data.validation, c.HeadlineEmbedder(base))
print(found.line(), "max_age", found.max_age, flush=True)


def policy_of(p_of, confident):
    def decide(t):
        latest = t.situation[1]
        if latest is None or c.headline_age(t) >= found.max_age:
            return HOLD_ANSWER
        p = p_of[latest]
        call = "buy" if p >= confident else "sell" if p <= 1 - confident else "hold"
        return HOLD_ANSWER if call == "hold" else on_menu(f'{{"action": "{call}", "ticker": "{latest[0]}", "shares": {SHARES}}}', t.request, SHARES)
    return decide


def score(policy, tasks):
    pnl, traded, right = [], 0, 0
    for t in tasks:
        _, o = t.price(policy(t))
        pnl.append(o.pnl)
        if o.kind in ("buy", "sell"):
            traded += 1
            right += o.correct
    return f"{np.mean(pnl):+6.2f} at {right / max(traded, 1):.2f} trading {traded / len(pnl):.2f}"


def variant(name, layers, weight, keep=None, confident=c.CONFIDENT):
    x_all = np.concatenate([E[L] for L in layers], 1)
    keep = np.ones(len(y), bool) if keep is None else keep
    tx, ox = c._standardised(x_all[: len(y)][keep], x_all[len(y):])
    yy, ww = y[keep], weight[keep]
    l2 = min(c.L2_GRID, key=lambda pen: c._log_loss(yy, cross(tx, yy, ww, pen, fold[keep])))
    p = c._predict(fit_w(tx, yy, l2, ww), ox)
    p_of = dict(zip(keys, p))
    pol = policy_of(p_of, confident)
    print(f"{name:44s} l2 {l2:5.1f} | seed0 validation {score(pol, data.validation)} | dev100 held out {score(pol, dev)}", flush=True)


ones = np.ones(len(y))
clip = np.quantile(ret, 0.9)
w_ret = np.minimum(ret, clip); w_ret = w_ret / w_ret.mean()
variant("layer 16 (the critic now)", (16,), ones)
variant("layer 16, weighted by |move|", (16,), w_ret)
variant("layer 16, moves under 0.5% dropped", (16,), ones, keep=ret >= 0.005)
variant("layers 12+16+20", (12, 16, 20), ones)
variant("layers 12+16+20, weighted by |move|", (12, 16, 20), w_ret)
variant("layers 8..24", LAYERS, ones)
variant("layer 20", (20,), ones)
variant("layer 12", (12,), ones)
for name, pol in (("logged agents", lambda t: t.logged_answer),
                  ("news rule (oracle)", lambda t: on_menu(news_rule(t.request, HOLD_ANSWER, SHARES), t.request, SHARES))):
    print(f"{name:44s}          | seed0 validation {score(pol, data.validation)} | dev100 held out {score(pol, dev)}")
