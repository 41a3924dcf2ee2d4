"""Could any reader show learning on this world's held-out windows? The claim's power, seed by seed.

    python bench/bench_reader_power.py --home HOME --seed SEED

HOME is a finished `quickstart --seed SEED`. Runs the quickstart's own evaluation (the same decisions, references and
bootstrap), then puts the news rule in the trained model's seat: the rule reads the simulator's own wording (an oracle,
never a training input), so where even it does not beat every reference beyond the interval, no student that reads the
news could, and a seed's "NOT shown" says more about the held-out windows than about the learner. Also prints what the
news rule earns against each reference. Reads the eval split: a measurement, never an input to training or selection.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from babylon_rl.evaluate.run import LEARNING_REFERENCES, EvalOptions, compare_results, evaluate  # noqa: E402
from babylon_rl.quickstart import IMITATION, NAME, QuickstartOptions  # noqa: E402
from babylon_rl.settings import Home  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    defaults = QuickstartOptions(seed=args.seed)
    result = evaluate(Home.resolve(Path(args.home)), EvalOptions(
        model=f"{NAME}@best", dataset=NAME, imitation=f"{IMITATION}@best", seed=args.seed,
        max_decisions_per_window=defaults.eval_decisions_per_window, menu_shares=defaults.shares))
    print(f"seed {args.seed}: the trained model: learning {'shown' if result.learning_shown else 'NOT shown'}")
    references = [p for p in result.policies if p.role in LEARNING_REFERENCES]
    reader = replace(next(p for p in result.policies if p.role == "reader"), role="model")
    comparison, _ = compare_results([*references, reader], result.eval_set, result.options)
    as_model = replace(result, policies=[*references, reader], comparison=comparison)
    m = reader.metrics
    print(f"the news rule (an oracle) in the model's seat: P&L/decision {m['pnl_per_decision'].value:+.1f}, precision "
          f"{m['trade_precision'].value:.2f}: learning {'shown' if as_model.learning_shown else 'NOT shown'}")
    for role, diff in comparison.items():
        pnl, precision = diff["pnl_per_decision_diff"], diff["trade_precision_diff"]
        print(f"  vs {role}: P&L {pnl['value']:+.2f} [{pnl['low']:+.2f}, {pnl['high']:+.2f}], precision "
              f"{precision['value']:+.3f} [{precision['low']:+.3f}, {precision['high']:+.3f}]: "
              f"{'beats' if diff['beats_outside_interval'] else 'does NOT beat'}")


if __name__ == "__main__":
    main()
