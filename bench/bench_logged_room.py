"""How wide the logged agents' P&L interval is with k of their held-out decisions a window, and with all of them.

Their P&L is heavy-tailed (one agent's bet can pay thousands), so the number of their decisions counted in each window
sets the width of every comparison against them; pricing a logged answer needs no model, so `eval` counts all of them
(docs/EVALUATION.md, "The logged agents on every held-out decision"). A seeded percentile bootstrap over windows, as
`eval`'s own:

    python bench/bench_logged_room.py --home /tmp/brl-heldout
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.evaluate.actions import parse_action
    from babylon_rl.evaluate.decision_points import load_eval_set
    from babylon_rl.evaluate.scoring import read_observation, score_action
    from babylon_rl.settings import Home

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--dataset", default="quickstart")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    eval_set = load_eval_set(Dataset.open(Home.resolve(args.home), args.dataset))
    by_window: dict[str, list[float]] = {}
    for d in eval_set.decisions:
        outcome = score_action(d.request.resolve(parse_action(d.logged_answer)), read_observation(d.observation), eval_set.truths[d.window_id])
        by_window.setdefault(d.window_id, []).append(outcome.pnl)
    windows = sorted(by_window)
    every = np.concatenate([by_window[w] for w in windows])
    print(f"{len(windows)} windows, {len(every)} logged decisions: P&L per decision {every.mean():+.2f}, "
          f"99th percentile {np.percentile(every, 99):.0f}, largest {every.max():.0f}")
    rng = np.random.default_rng(0)
    for k in (1, 2, 4, 8, None):
        means = np.array([np.mean(by_window[w] if k is None else rng.choice(by_window[w], min(k, len(by_window[w])), replace=False))
                          for w in windows])
        boots = means[rng.integers(0, len(means), (args.resamples, len(means)))].mean(1)
        low, high = np.percentile(boots, [2.5, 97.5])
        print(f"{'all' if k is None else k} a window: {means.mean():+.1f} [{low:+.1f}, {high:+.1f}], width {high - low:.1f}")


if __name__ == "__main__":
    main()
