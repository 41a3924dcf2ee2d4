"""Experiment: distill's taught decisions, those beside a fresh headline relabelled to the better of buy/sell its stock."""
import json, os, runpy, sys
from dataclasses import replace
from babylon_rl.train import loop
from babylon_rl.evaluate.rules import fresh_headlines

MODE = os.environ.get("HS_MODE", "teachers")  # teachers | all
KEEP_BUYS = os.environ.get("HS_KEEP", "0") == "1"
orig = loop._load_data

def relabel(task):
    latest = next(fresh_headlines(task.request), None)
    if latest is None:
        return (replace(task, logged_answer=json.dumps({"action": "hold"})) if MODE == "all" else task), None
    x = latest[0]
    if x not in task.truth.stocks:
        return task, None
    buy = json.dumps({"action": "buy", "ticker": x, "shares": 50})
    sell = json.dumps({"action": "sell", "ticker": x, "shares": 50})
    rb, rs = task.price(buy)[0], task.price(sell)[0]
    label = buy if rb > rs else sell if rs > rb else task.logged_answer
    return replace(task, logged_answer=label), label

def patched(home, config):
    data = orig(home, config)
    if MODE == "all":
        from babylon_rl.train.decisions import load_decision_data
        full = load_decision_data(home, config.dataset)
        pool = full.train
        data = replace(data, train=loop.drawn(pool, config.train_decisions, config.seed + 4))
    out, counts = [], {"buy": 0, "sell": 0, "kept": 0}
    for t in data.train:
        t2, label = relabel(t)
        out.append(t2)
        counts["kept" if label is None else json.loads(label)["action"]] += 1
    print("relabelled:", counts, flush=True)
    return replace(data, train=out)

loop._load_data = patched
sys.argv = ["cli.py"] + sys.argv[1:]
runpy.run_path("cli.py", run_name="__main__")
