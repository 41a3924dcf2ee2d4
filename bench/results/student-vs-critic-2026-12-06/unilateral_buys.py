"""The headlines after which the student bought where its critic held (the dev world, held out): a diagnostic, read by a person."""
import json
from pathlib import Path
from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.decision_points import load_eval_set
from babylon_rl.evaluate.rules import fresh_headlines
from babylon_rl.settings import Home
from babylon_rl.train.credit import headline_age
from babylon_rl.train.decisions import Task
ev = load_eval_set(Dataset.open(Home.resolve(Path("/tmp/qs/dev100")), "quickstart")).sample(2, 0)
tasks = [Task.from_decision(d, ev.truths[d.window_id]) for d in ev.decisions]
rows = [json.loads(line) for line in open(Path(__file__).with_name("student_vs_critic.jsonl"))]
for t, r in zip(tasks, rows):
    c, s = json.loads(r["critic"])["action"], json.loads(r["student"])["action"]
    if c == "hold" and s == "buy":
        latest = next(fresh_headlines(t.request), None)
        age = headline_age(t) if latest else None
        print(f"{'right' if r['student_right'] else 'wrong'} {r['student_pnl']:+7.0f} age {age} named {latest[0] if latest else None} bought {json.loads(r['student'])['ticker']}: {latest[1][:110] if latest else ''}")
