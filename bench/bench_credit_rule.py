"""The credit as a rule: what a student that imitated its critic perfectly would earn on a split.

    python bench/bench_credit_rule.py --home HOME --dataset quickstart [--split eval]

Fits the critic on every train situation (train/credit.py), calls each decision of the split (buy or sell the named
stock where it is confident and the headline younger than the credit's age, else hold), answers each decision from its valid menu and scores it as `eval` does,
beside the best constant and the logged agents. With --split eval this reads the held-out windows: a measurement of
the objective's ceiling, never an input to training or selection.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from babylon_rl.dataset.dataset import Dataset  # noqa: E402
from babylon_rl.evaluate.decision_points import load_eval_set  # noqa: E402
from babylon_rl.evaluate.menu import on_menu, HOLD_ANSWER  # noqa: E402
from babylon_rl.evaluate.rules import fresh_headlines  # noqa: E402
from babylon_rl.evaluate.run import EvalOptions, compare_results, scored_answers  # noqa: E402
from babylon_rl.settings import Home  # noqa: E402
from babylon_rl.train.credit import HeadlineEmbedder, credit, headline_age  # noqa: E402
from babylon_rl.train.decisions import Task, load_decision_data  # noqa: E402
from babylon_rl.model_names import resolve_base  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--dataset", default="quickstart")
    parser.add_argument("--shares", type=int, default=50)
    parser.add_argument("--per-window", type=int, default=2)
    args = parser.parse_args()
    home = Home.resolve(Path(args.home))
    data = load_decision_data(home, args.dataset)
    eval_set = load_eval_set(Dataset.open(home, args.dataset)).sample(args.per_window, 0)
    tasks = [Task.from_decision(d, eval_set.truths[d.window_id]) for d in eval_set.decisions]
    found = credit(data.train, tasks, HeadlineEmbedder(resolve_base(home, "smollm2-135m")))
    print(found.line())
    print("on the split:", json.dumps(found.validation.to_dict()))
    answers = []
    for task in tasks:
        latest = next(fresh_headlines(task.request), None)
        call = found.checked.get(task.situation, "hold") if latest and headline_age(task) < found.max_age else "hold"
        answer = HOLD_ANSWER if call == "hold" else json.dumps({"action": call, "ticker": latest[0], "shares": args.shares})
        answers.append(on_menu(answer, task.request, args.shares))
    options = EvalOptions(model="credit rule", dataset=args.dataset)
    rule = scored_answers("model", "credit rule", answers, eval_set, options)
    logged = scored_answers("logged", "logged agents", [d.logged_answer for d in eval_set.decisions], eval_set, options)
    constants = [scored_answers("constant", a, [a] * len(tasks), eval_set, options)
                 for a in (json.dumps({"action": k, "ticker": t, "shares": args.shares}) for t in sorted(eval_set.truths[eval_set.windows[0]].stocks) for k in ("buy", "sell"))]
    best = max(constants, key=lambda r: sum(o.pnl for o in r.outcomes))
    comparison, _ = compare_results([rule, logged, best], eval_set, options)
    for result in (rule, logged, best):
        m = result.metrics
        print(f"{result.name:>16}: P&L/decision {m['pnl_per_decision'].value:+.1f} [{m['pnl_per_decision'].low:+.1f}, {m['pnl_per_decision'].high:+.1f}], "
              f"precision {m['trade_precision'].value:.2f}, traded {m['trade_share'].value:.2f}")
    for role, diff in comparison.items():
        print(f"rule vs {role}: P&L {diff['pnl_per_decision_diff']}, precision {diff['trade_precision_diff']}, beats: {diff['beats_outside_interval']}")


if __name__ == "__main__":
    main()
