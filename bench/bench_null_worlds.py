"""The claim's false-positive rate on worlds with nothing to learn, with a student that trades.

    python bench/bench_null_worlds.py --model HOME/runs/quickstart/checkpoints/step-N \
        [--imitation HOME/runs/quickstart-imitation/checkpoints/step-M] [--worlds 10] [--first-seed 1000]

A student trained on one world's credit (the quickstart's, seed 0) reads headlines and trades on them. Here it is put
to `--worlds` new worlds at news strength 0 (headlines say nothing about prices), each simulated, built and split as
the quickstart's, and evaluated as the quickstart evaluates: the held-out half, two decisions a window, against its
base, the imitation run (when given), the best constant and the logged agents, through the same claim code
(`EvalResult.learning_shown`). The claim should be made at most about 1 time in 20. One line a world, then the rate.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from babylon_rl.context import BabylonContext  # noqa: E402
from babylon_rl.evaluate import EvalOptions, evaluate  # noqa: E402
from babylon_rl.quickstart import NAME, START, QuickstartOptions, dataset_params  # noqa: E402


def null_world(home: Path, seed: int) -> BabylonContext:
    """The quickstart's world for `seed` at news strength 0: simulated, built and split into its dataset."""
    ctx = BabylonContext.create(str(home))
    ctx.home.ensure()
    options = QuickstartOptions(seed=seed, news_strength=0.0)
    ctx.simulate(agents=options.agents, windows=options.windows, steps_per_window=options.steps_per_window, seed=seed,
                 start=START, target="duckdb", news_strength=0.0, wording=options.wording)
    ctx.build()
    ctx.dataset_build(dataset_params(options), force=True)
    return ctx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the trained student's checkpoint (an adapter directory)")
    parser.add_argument("--imitation", help="the imitation baseline's checkpoint, compared too")
    parser.add_argument("--worlds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1000)
    args = parser.parse_args()
    claims = 0
    for seed in range(args.first_seed, args.first_seed + args.worlds):
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"null-{seed}-") as home:
            ctx = null_world(Path(home), seed)
            # evaluated without writing: the model's own run keeps its eval.json
            result = evaluate(ctx.home, EvalOptions(model=str(Path(args.model).resolve()), dataset=NAME, seed=seed,
                                              imitation=str(Path(args.imitation).resolve()) if args.imitation else None,
                                              max_decisions_per_window=QuickstartOptions.eval_decisions_per_window,
                                              menu_shares=QuickstartOptions.shares))
        model = result.model_result.metrics
        claims += result.learning_shown
        print(json.dumps({"seed": seed, "learning_shown": result.learning_shown,
                          "pnl_per_decision": round(model["pnl_per_decision"].value, 2),
                          "trade_precision": model["trade_precision"].value, "trade_share": round(model["trade_share"].value, 3),
                          "seconds": round(time.monotonic() - started, 1)}), flush=True)
    print(f"learning claimed on {claims} of {args.worlds} news-0 worlds", flush=True)


if __name__ == "__main__":
    main()
