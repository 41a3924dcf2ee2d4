# The critic's calls by the headline's age (5-minute steps) on seed 0's validation and held-out decisions, before the age gate
# existed (each situation's first decision labelled it). A diagnostic, run after the held-out of seed 0 had been read once.
import sys
from pathlib import Path
sys.path.insert(0, "/work/main")
from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.decisions import load_eval_set
from babylon_rl.evaluate.rules import fresh_headlines, CLOCK, NEWS_LINE
from babylon_rl.settings import Home
from babylon_rl.train.credit import HeadlineEmbedder, credit
from babylon_rl.train.decisions import Task, load_decision_data
from babylon_rl.model_names import resolve_base
home = Home.resolve(Path("/tmp/qs/s0"))
data = load_decision_data(home, "quickstart")
def age(task):
    text = task.request.messages[-1]["content"]
    c = CLOCK.search(text); now = int(c.group(1))*60+int(c.group(2))
    lines = NEWS_LINE.findall(text)
    h, m, t, _ = lines[-1]
    return (now - int(h)*60 - int(m)) % 1440
for split, tasks in (("validation", data.validation), ("eval", None)):
    if tasks is None:
        es = load_eval_set(Dataset.open(home, "quickstart"))
        tasks = [Task.from_decision(d, es.truths[d.window_id]) for d in es.decisions]
    found = credit(data.train, tasks, HeadlineEmbedder(resolve_base(home, "smollm2-135m")))
    buckets = {}
    for t in tasks:
        latest = next(fresh_headlines(t.request), None)
        if not latest: continue
        call = found.checked.get(t.situation)
        if call in (None, "hold"): continue
        now = t.observation.prices.get(latest[0]); st = t.truth.stocks.get(latest[0])
        if not now or not st or st.end == now: continue
        right = (st.end > now) == (call == "buy")
        b = min(age(t)//5, 6)
        buckets.setdefault(b, []).append(right)
    print(split, found.l2, {k*5: (len(v), round(sum(v)/len(v),3)) for k, v in sorted(buckets.items())})
