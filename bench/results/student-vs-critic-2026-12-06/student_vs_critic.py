"""Where the student differs from its critic on a world's held-out decisions, by the age of the latest fresh headline.

    python diag_student.py TRAIN_HOME EVAL_HOME ADAPTER [ADAPTER...]
"""
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from babylon_rl.dataset.dataset import Dataset
from babylon_rl.evaluate.decision_points import load_eval_set
from babylon_rl.evaluate.menu import on_menu, HOLD_ANSWER
from babylon_rl.evaluate.rules import fresh_headlines
from babylon_rl.evaluate.run import EvalOptions, scored_answers
from babylon_rl.settings import Home
from babylon_rl.train.credit import HeadlineEmbedder, credit, headline_age
from babylon_rl.train.decisions import Task, load_decision_data
from babylon_rl.model_names import resolve_base

train_home, eval_home = Home.resolve(Path(sys.argv[1])), Home.resolve(Path(sys.argv[2]))
adapters = [Path(a) for a in sys.argv[3:]]
data = load_decision_data(train_home, "quickstart")
eval_set = load_eval_set(Dataset.open(eval_home, "quickstart")).sample(2, 0)
tasks = [Task.from_decision(d, eval_set.truths[d.window_id]) for d in eval_set.decisions]
base = resolve_base(train_home, "smollm2-135m")
found = credit(data.train, tasks, HeadlineEmbedder(base))
print(found.line())
options = EvalOptions(model="x", dataset="quickstart")
critic_answers, ages, named = [], [], []
for task in tasks:
    latest = next(fresh_headlines(task.request), None)
    age = headline_age(task) if latest else None
    call = found.checked.get(task.situation, "hold") if latest and age < found.max_age else "hold"
    ans = HOLD_ANSWER if call == "hold" else json.dumps({"action": call, "ticker": latest[0], "shares": 50})
    critic_answers.append(on_menu(ans, task.request, 50))
    ages.append(age)
    named.append(latest[0] if latest else None)
critic = scored_answers("model", "critic", critic_answers, eval_set, options)
dump = []

from babylon_rl.train.menu_ranker import MenuRanker
ranker = MenuRanker(base, adapters, 50, "cpu")
ranker.prepare(tasks)


def bucket(age):
    if age is None:
        return "none"
    return "0-5" if age < 5 else "5-10" if age < 10 else "10-20" if age < 20 else "20+"


def kind(answer):
    a = json.loads(answer)
    return a["action"], a.get("ticker")


for adapter in adapters:
    answers = ranker.answers(adapter)
    student = scored_answers("model", "student", answers, eval_set, options)
    print(f"\n== {adapter}")
    rows = defaultdict(Counter)
    by_call = Counter()
    for i, task in enumerate(tasks):
        b = bucket(ages[i])
        s_act, s_tick = kind(answers[i])
        c_act, _ = kind(critic_answers[i])
        so, co = student.outcomes[i], critic.outcomes[i]
        r = rows[b]
        r["n"] += 1
        r["c_trade"] += c_act != "hold"
        r["c_right"] += c_act != "hold" and co.correct
        r["c_pnl"] += co.pnl
        r["s_trade"] += s_act != "hold"
        r["s_right"] += s_act != "hold" and so.correct
        r["s_pnl"] += so.pnl
        r["s_named"] += s_act != "hold" and s_tick == named[i]
        r["agree"] += answers[i] == critic_answers[i]
        r["s_trade_c_hold"] += s_act != "hold" and c_act == "hold"
        r["s_trade_c_hold_right"] += s_act != "hold" and c_act == "hold" and so.correct
        r["s_hold_c_trade"] += s_act == "hold" and c_act != "hold"
        r["opposite"] += s_act in ("buy", "sell") and c_act in ("buy", "sell") and s_act != c_act
        by_call[(b, c_act, s_act)] += 1
        dump.append({"adapter": str(adapter), "age": ages[i], "named": named[i], "critic": critic_answers[i], "student": answers[i],
                     "critic_pnl": co.pnl, "critic_right": co.correct, "student_pnl": so.pnl, "student_right": so.correct})
    print(f"{'age':>6} {'n':>4} | {'critic tr':>9} {'prec':>5} {'pnl/d':>6} | {'stud tr':>7} {'prec':>5} {'pnl/d':>6} {'named':>5} | agree  s-only(right) c-only opposite")
    for b in ("0-5", "5-10", "10-20", "20+", "none"):
        r = rows[b]
        if not r["n"]:
            continue
        cp = r["c_right"] / r["c_trade"] if r["c_trade"] else float("nan")
        sp = r["s_right"] / r["s_trade"] if r["s_trade"] else float("nan")
        print(f"{b:>6} {r['n']:>4} | {r['c_trade']:>9} {cp:5.2f} {r['c_pnl']/r['n']:+6.1f} | {r['s_trade']:>7} {sp:5.2f} {r['s_pnl']/r['n']:+6.1f} {r['s_named']:>5} | "
              f"{r['agree']:>5} {r['s_trade_c_hold']:>4}({r['s_trade_c_hold_right']}) {r['s_hold_c_trade']:>6} {r['opposite']:>6}")
    print("critic's call -> student's action, fresh headlines under 20 min:")
    for (b, c, s_), n in sorted(by_call.items()):
        if b in ("0-5", "5-10", "10-20"):
            print(f"  {b:>6} critic {c:>5} student {s_:>5}: {n}")
Path(sys.argv[0]).with_name("student_vs_critic.jsonl").write_text("\n".join(json.dumps(d) for d in dump))
