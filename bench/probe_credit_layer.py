"""Probe: does a linear critic on SmolLM2's mean-pooled states, fitted on the earlier half's phrasings, carry to the
later half's unseen ones? Chose train/credit.py's EMBED_LAYER (docs/TRAINING.md#credit-by-meaning).

    python bench/probe_credit_layer.py [SEED]

Simulated markets directly (no database): every headline of 480 windows of the quickstart's world, its stock's move
from the headline to the window's end; fitted on the windows before the wording split, read on those after it.
The sentiment column is printed only to compare: nothing fits on it.
"""
import sys, time
from datetime import datetime
import numpy as np, torch
from babylon_rl.settings import Home
from babylon_rl.train.pretrained import init_default_model
from babylon_rl.train.models import load_causal_lm
from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.market import generate_market, company_name

home = Home(__import__("pathlib").Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/probe-home"))
path = init_default_model(home).path
model, tok = load_causal_lm(str(path))
cfg = SimulationConfig(seed=int(sys.argv[1]) if len(sys.argv) > 1 else 0, unseen_wording_from=datetime(2025,1,11))
rows = []
for h in range(480):
    start = datetime(2025,1,1+h//24,h%24)
    m = generate_market(cfg, start)
    for e in m.news:
        t = cfg.tickers[e.ticker]
        move = m.prices[e.ticker][-1] / m.prices[e.ticker][e.minute] - 1
        rows.append((h, int(start>=cfg.unseen_wording_from), e.headline.replace(company_name(t), "the company").replace(t, "the stock"), move, e.sentiment))
texts = [r[2] for r in rows]
t0=time.time()
feats = {}
with torch.no_grad():
    for i in range(0, len(texts), 64):
        batch = tok(texts[i:i+64], return_tensors="pt", padding=True)
        out = model(**batch, output_hidden_states=True)
        mask = batch["attention_mask"][..., None].float()
        for L in (8, 12, 16, 20, 24, 29):
            h = out.hidden_states[L]
            feats.setdefault(L, []).append(((h*mask).sum(1)/mask.sum(1)).numpy())
print("embed s", time.time()-t0, len(texts))
fam = np.array([r[1] for r in rows]); y = np.array([r[3] > 0 for r in rows]).astype(float)
sent = np.array([r[4] for r in rows])

def fit(X, y, l2):
    X = torch.tensor(X, dtype=torch.float64); y = torch.tensor(y, dtype=torch.float64)
    w = torch.zeros(X.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")
    def closure():
        opt.zero_grad()
        z = X @ w[:-1] + w[-1]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y) + l2 * (w[:-1]**2).sum() / 2
        loss.backward(); return loss
    opt.step(closure)
    return w.detach()
def predict(w, X):
    X = torch.tensor(X, dtype=torch.float64); return torch.sigmoid(X @ w[:-1] + w[-1]).numpy()
for L, f in feats.items():
    X = np.concatenate(f); X = (X - X[fam==0].mean(0)) / (X[fam==0].std(0)+1e-6)
    for C in (0.01, 0.1, 1.0):
        w = fit(X[fam==0], y[fam==0], C)
        p = predict(w, X[fam==1])
        for th in (0.6, 0.7):
            cred = (p>=th)|(p<=1-th)
            right = ((p>=th)&(y[fam==1]==1))|((p<=1-th)&(y[fam==1]==0))
            # agreement with sentiment
            s1 = sent[fam==1]
            agree = ((p>=th)&(s1=="BULLISH"))|((p<=1-th)&(s1=="BEARISH"))
            print(L, C, th, f"cover {cred.mean():.2f} prec {right[cred].mean():.3f} sentagree {agree[cred].mean():.3f} neutral-credited {((s1=='NEUTRAL')&cred).sum()}")
