"""How much of the held-out news a train window already had: the share of the eval split's distinct headline texts
(ticker and company name masked) that also occur in the train split. A measurement, never a training input.

    python bench/bench_wording.py --home HOME --dataset quickstart

Prints the counts and the share; docs/BENCHMARKS.md keeps the quickstart's (the issue's bound: at most 5 %).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from babylon_rl.dataset.dataset import Dataset  # noqa: E402
from babylon_rl.evaluate.decision_points import COLUMNS, read_decisions, read_truths  # noqa: E402
from babylon_rl.evaluate.rules import NEWS_LINE  # noqa: E402
from babylon_rl.settings import Home  # noqa: E402
from babylon_rl.train.credit import company_names, masked  # noqa: E402
from babylon_rl.train.decisions import Task  # noqa: E402


def split_tasks(dataset: Dataset, split: str) -> list[Task]:
    rows = dataset.read_split(split, COLUMNS)
    truths = read_truths(dataset, set(rows["window_id"].unique()))
    return [Task.from_decision(d, truths[d.window_id]) for d in read_decisions(rows, truths)]


def headlines(tasks: list[Task], names: dict[str, list[str]]) -> set[str]:
    return {masked(ticker, text, names) for t in tasks for _h, _m, ticker, text in NEWS_LINE.findall(t.request.messages[-1]["content"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--dataset", default="quickstart")
    args = parser.parse_args()
    dataset = Dataset.open(Home.resolve(Path(args.home)), args.dataset)
    train, held_out = split_tasks(dataset, "train"), split_tasks(dataset, "eval")
    names = company_names(train)
    seen, new = headlines(train, names), headlines(held_out, names)
    shared = seen & new
    print(f"train: {len(seen)} distinct headlines; held out: {len(new)}; held-out headlines also in train: {len(shared)} "
          f"({len(shared) / max(len(new), 1):.1%})")
    for text in sorted(shared)[:10]:
        print("  shared:", text)


if __name__ == "__main__":
    main()
