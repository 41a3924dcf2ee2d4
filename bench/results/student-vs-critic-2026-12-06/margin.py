"""The student's menu margin (best trade's log-probability minus hold's) on a split, and what holding below a margin earns.

    python diag_margin.py TRAIN_HOME ADAPTER [DEV_HOME]

Seed 0's validation decisions (two a window, chosen as eval chooses) from TRAIN_HOME; with DEV_HOME, also that world's
held-out decisions (a diagnostic: no choice is made on them).
"""
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from peft import PeftModel

from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.decision_points import COLUMNS, EvalSet, load_eval_set, read_decisions, read_truths
from babylon_rl.model_names import resolve_base
from babylon_rl.settings import Home
from babylon_rl.train.menu_items import MenuOptions, make_items
from babylon_rl.train.menu_ranker import lowest_adapted_layer, menu_logprobs
from babylon_rl.train.state_cache import cache_states
from babylon_rl.train.decisions import Task
from babylon_rl.train.frozen import SplitModel, bottom_dtype
from babylon_rl.train.models import load_causal_lm

train_home = Home.resolve(Path(sys.argv[1]))
adapter = Path(sys.argv[2])
base = resolve_base(train_home, "smollm2-135m")
model, tokenizer = load_causal_lm(base, "cpu")
model.eval()
layers = model.config.num_hidden_layers
top = layers - lowest_adapted_layer(adapter)
options = MenuOptions(shares=50, train_layers=top, device="cpu")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    adapted = PeftModel.from_pretrained(model, str(adapter)).eval()
split = SplitModel(adapted, top, bottom_dtype("cpu"))


def validation_two_a_window(home):
    """Seed 0's validation decisions, two a window, drawn as eval draws its held-out ones (`EvalSet.sample`)."""
    dataset = Dataset.open(home, "quickstart")
    rows = dataset.read_split("validation", COLUMNS)
    truths = read_truths(dataset, set(rows["window_id"].unique()))
    return [Task.from_decision(d, truths[d.window_id]) for d in EvalSet("quickstart", read_decisions(rows, truths), truths).sample(2, 0).decisions]


def margins(tasks):
    items = make_items(tokenizer, tasks, options, 0, np.random.default_rng(0))
    out = []
    for start in range(0, len(items), 128):
        chunk = items[start:start + 128]
        cache_states(split, chunk, options.cache_batch, "cpu")
        with torch.no_grad():
            for b in range(0, len(chunk), 16):
                part = chunk[b:b + 16]
                logp, real = menu_logprobs(split, part, "cpu")
                for item, row in zip(part, logp.tolist()):
                    best = int(np.argmax(row[1:])) + 1 if len(item.answers) > 1 else 0
                    out.append((item.answers[best], row[best] - row[0] if best else -99.0))
        for item in chunk:
            item.states = None
    return out


def table(name, tasks):
    rows = margins(tasks)
    print(f"\n== {name}: {len(tasks)} decisions")
    for tau in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0):
        pnl, trades, right = 0.0, 0, 0
        for task, (answer, m) in zip(tasks, rows):
            if m > tau:
                _, outcome = task.price(answer)
                pnl += outcome.pnl
                trades += outcome.kind in ("buy", "sell")
                right += outcome.kind in ("buy", "sell") and outcome.correct
        print(f"  margin > {tau:3.1f}: P&L/decision {pnl / len(tasks):+6.1f}, traded {trades / len(tasks):.2f}, precision {right / max(trades, 1):.2f}")
    return rows


table("validation (seed 0)", validation_two_a_window(train_home))
if len(sys.argv) > 3:
    dev = load_eval_set(Dataset.open(Home.resolve(Path(sys.argv[3])), "quickstart")).sample(2, 0)
    rows = table("dev world held out", [Task.from_decision(d, dev.truths[d.window_id]) for d in dev.decisions])
    Path("margins_dev.json").write_text(json.dumps(rows))
