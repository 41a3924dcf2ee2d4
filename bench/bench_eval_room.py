"""How much room the replay evaluation has: the news rule against the best constant, at 1, 2 and 4 decisions a window.

The paired interval of a difference narrows with windows, not with decisions a window (the decisions of a window
share its market). This prints, for a built dataset, the best constant's P&L and the news rule's difference to it on
P&L and trade precision, each with its interval, replaying `--per-window` decisions of each held-out window, scored
with the evaluation's own functions (no model is loaded: both policies are rules). Seconds on 2 cores.

    python bench/bench_eval_room.py --home /tmp/qs --dataset quickstart
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from babylon_rl.dataset.dataset import Dataset  # noqa: E402
from babylon_rl.evaluate.constant import best_constant  # noqa: E402
from babylon_rl.evaluate.decision_points import load_eval_set, load_train_decisions  # noqa: E402
from babylon_rl.evaluate.run import EvalOptions, _paired, _reader_policy, _summarise, resized, scored_answers  # noqa: E402
from babylon_rl.evaluate.stats import resample_indices  # noqa: E402
from babylon_rl.settings import Home  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--dataset", default="quickstart")
    parser.add_argument("--per-window", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--shares", type=int, default=50)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()

    dataset = Dataset.open(Home.resolve(args.home), args.dataset)
    every_decision = load_eval_set(dataset)
    chosen_on = load_train_decisions(dataset)  # the constant is chosen on train + validation, as the eval chooses it
    constant = best_constant(chosen_on.decisions, chosen_on.truths, 0.5)
    constant = replace(constant, answer=resized(constant.answer, args.shares))
    options = EvalOptions(model="rules", dataset=args.dataset, menu_shares=args.shares, resamples=args.resamples)
    for per_window in args.per_window:
        eval_set = every_decision.sample(per_window, options.seed)
        prompts = [d.request for d in eval_set.decisions]
        reader = _reader_policy(prompts, constant.answer, args.shares)
        rule = scored_answers("reader", "news rule", reader.answer(prompts, lambda n: None), eval_set, options)
        fixed = scored_answers("constant", "best constant", [constant.answer] * len(prompts), eval_set, options)
        indices = resample_indices(len(eval_set.windows), options.resamples, options.seed)
        for policy in (rule, fixed):
            _summarise(policy, eval_set, indices)
        diff = _paired(rule, fixed, eval_set, indices)
        pnl, precision, own = diff["pnl_per_decision_diff"], diff["trade_precision_diff"], fixed.metrics["pnl_per_decision"]
        print(f"{len(eval_set.windows)} windows x {per_window}: the constant's P&L {own.value:+.1f} [{own.low:+.1f}, {own.high:+.1f}]; "
              f"news rule - constant P&L {pnl['value']:+.2f} [{pnl['low']:+.2f}, {pnl['high']:+.2f}] (width "
              f"{pnl['high'] - pnl['low']:.1f}), trade precision {precision['value']:+.3f} [{precision['low']:+.3f}, {precision['high']:+.3f}]")


if __name__ == "__main__":
    main()
