"""A linear probe: is the sentiment of the latest fresh telling headline readable from the base model's hidden state at the
last prompt token, block by block? 400 train decisions (never eval), 5-fold, L2-regularised logistic regression.

    python bench/probe_headline_sentiment.py
"""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_headline_margins import HOME as home, telling_decisions  # noqa: E402
from babylon_rl.evaluate.rules import latest_fresh_headline  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

torch.set_num_threads(1)
tasks = telling_decisions("train", 400)
y = np.array([latest_fresh_headline(t.request)[1] == "BULLISH" for t in tasks])
path = str(home.models / "smollm2-135m")
tok = AutoTokenizer.from_pretrained(path); model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
layers = [8, 16, 22, 26, 30]
feats = {l: [] for l in layers}
with torch.no_grad():
    for t in tasks:
        ids = tok.apply_chat_template(t.request.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
        hs = model(ids, output_hidden_states=True).hidden_states
        for l in layers: feats[l].append(hs[l][0, -1].numpy())
print("n", len(y), "bullish share", y.mean())
for l in layers:
    X = np.array(feats[l]); X = (X - X.mean(0)) / (X.std(0) + 1e-6)
    accs = []
    folds = np.arange(len(y)) % 5
    for f in range(5):
        Xt, yt = torch.tensor(X[folds != f], dtype=torch.float32), torch.tensor(y[folds != f], dtype=torch.float32)
        w = torch.zeros(X.shape[1], requires_grad=True); b = torch.zeros(1, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=200)
        def closure():
            opt.zero_grad(); loss = torch.nn.functional.binary_cross_entropy_with_logits(Xt @ w + b, yt) + 0.01 * (w * w).sum(); loss.backward(); return loss
        opt.step(closure)
        pred = (torch.tensor(X[folds == f], dtype=torch.float32) @ w + b > 0).numpy()
        accs.append((pred == y[folds == f]).mean())
    print(l, round(float(np.mean(accs)), 3), flush=True)
