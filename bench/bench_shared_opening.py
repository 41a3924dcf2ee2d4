"""The frozen states with and without a batch's shared opening run once (`SplitModel.bottom(shared=...)`), alternated.

    python bench/bench_shared_opening.py --home /tmp/qs1 --decisions 96 --rounds 2

Reads train decisions of a dataset in a home (the quickstart's), and prints seconds a decision for each round.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    import numpy as np

    import babylon_rl.train.state_cache as state_cache
    from babylon_rl.settings import Home
    from babylon_rl.train.menu_items import MenuOptions, make_items
    from babylon_rl.train.menu_trainer import MenuTrainer
    from babylon_rl.train.decisions import load_decision_data

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--dataset", default="quickstart")
    parser.add_argument("--decisions", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    home = Home(args.home)
    tasks = load_decision_data(home, args.dataset).train[: args.decisions]
    options = MenuOptions(train_layers=1)
    trainer = MenuTrainer(str(home.models / "smollm2-135m"), options)
    shared_prefix = state_cache.shared_prefix
    for _ in range(args.rounds):
        for label, measure in (("each row whole", lambda packs: 0), ("shared opening once", shared_prefix)):
            items = make_items(trainer.tokenizer, tasks, options, 0, np.random.default_rng(0))
            state_cache.shared_prefix = measure
            started = time.perf_counter()
            state_cache.cache_states(trainer.split, items, options.cache_batch, options.device)
            print(f"{label}: {(time.perf_counter() - started) / len(items):.3f} s a decision over {len(items)}", flush=True)


if __name__ == "__main__":
    main()
