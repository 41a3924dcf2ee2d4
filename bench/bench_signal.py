"""How much the rewards teach a learner that is told what to look at: the floor under issue 24.

A diagnostic, never a policy of the product. On a dataset's train split it prices every answer of
each decision's menu (hold; buy or sell 10 shares of each stock: what `train --objective
counterfactual` prices) and turns the rewards into that objective's target, softmax(reward / T).
Three learners then average those targets over the first n train decisions (a seeded order)
and answer each validation decision with the answer of highest average target:

- `marginal`: one average over all decisions, whatever the prompt says (a constant: what a
  learner that does not read reaches);
- `tabular`: one average per (ticker, sentiment) of the latest fresh telling headline (the news
  rule's parse, `evaluate/rules.py`), or "no headline";
- `relational`: the average per answer over all decisions (what a constant learns), plus the
  average residual of the answer's relation to the headline: its stock or another, its direction
  with the headline's sentiment or against it. Ten classes share three features.

The last two are told the features the news rule reads; the question they answer is whether the rewards
(hindsight prices, noisy: decisions of one window share its moves) carry enough signal in n
decisions for a learner that looks in the right place. With `--news-strength 0` data they must
stay at the constant's level. The eval split is not opened.

    python cli.py --home /tmp/qs simulate --agents 10 --windows 480 --steps-per-window 3 --seed 0 --start 2025-01-01T00:00
    python cli.py --home /tmp/qs build
    python cli.py --home /tmp/qs dataset build --name qs --lookback-hours 481 --target-trajectories 100000 \\
        --max-group-size 10 --min-actions 3 --validation-fraction 0.1 --eval-fraction 0.25 --seed 0
    python bench/bench_signal.py --home /tmp/qs --dataset qs
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from babylon_rl.evaluate.rules import latest_fresh_headline, news_rule  # noqa: E402
from babylon_rl.settings import Home  # noqa: E402
from babylon_rl.train.grpo import Task, load_decision_data  # noqa: E402


def relation(news: tuple[str, str] | None, answer: dict) -> str:
    """How an answer stands to the latest fresh headline: its stock or another, with the sentiment or against it."""
    if news is None or answer["action"] == "hold":
        return "none"
    with_news = (answer["action"] == "buy") == (news[1] == "BULLISH")
    return ("its stock" if answer["ticker"] == news[0] else "another stock") + (", with" if with_news else ", against")


def priced(tasks: list[Task], menu: list[str]) -> tuple[np.ndarray, np.ndarray]:
    outcomes = [[task.price(answer) for answer in menu] for task in tasks]
    return (np.array([[reward for reward, _ in row] for row in outcomes]),
            np.array([[outcome.correct for _, outcome in row] for row in outcomes], dtype=float))


def tabular_answers(targets, news, seen, validation_news) -> list[int]:
    sums: dict = {}
    for i in seen:
        sums[news[i]] = sums.get(news[i], 0.0) + targets[i]
    marginal = targets[seen].mean(0)
    return [int(np.argmax(sums.get(n, marginal))) for n in validation_news]


def relational_answers(targets, news, seen, validation_news, answers) -> list[int]:
    marginal = targets[seen].mean(0)
    residuals: dict[str, list[float]] = {}
    for i in seen:
        for j, answer in enumerate(answers):
            residuals.setdefault(relation(news[i], answer), []).append(targets[i, j] - marginal[j])
    mean_residual = {name: float(np.mean(values)) for name, values in residuals.items()}
    return [int(np.argmax([marginal[j] + mean_residual.get(relation(n, a), 0.0) for j, a in enumerate(answers)]))
            for n in validation_news]


@dataclass
class SignalTable:
    train_decisions: int
    validation_decisions: int
    with_headline: float  # share of train decisions with a fresh telling headline
    constant: str
    constant_accuracy: float  # validation accuracy of the best constant on train
    rule_accuracy: float  # validation accuracy of the news rule (the constant where it does not fire)
    rows: dict[int, dict[str, tuple[float, float]]]  # decisions seen -> learner -> (mean, std) validation accuracy


def signal_table(home: Home, dataset: str, sizes: list[int], seeds: int = 5, temperature: float = 0.3) -> SignalTable:
    data = load_decision_data(home, dataset)
    menu = data.train[0].menu
    if any(task.menu != menu for task in data.train + data.validation):
        raise SystemExit("the windows do not share one menu (one set of stocks): this diagnostic needs one")
    answers = [json.loads(a) for a in menu]
    train_rewards, train_correct = priced(data.train, menu)
    _, validation_correct = priced(data.validation, menu)
    targets = np.exp((train_rewards - train_rewards.max(1, keepdims=True)) / temperature)
    targets /= targets.sum(1, keepdims=True)
    news = [latest_fresh_headline(t.request) for t in data.train]
    validation_news = [latest_fresh_headline(t.request) for t in data.validation]

    def accuracy(picks: list[int]) -> float:
        return float(np.mean([validation_correct[i, j] for i, j in enumerate(picks)]))

    rows = {}
    for size in (min(s, len(data.train)) for s in sizes):
        runs: dict[str, list[float]] = {"marginal": [], "tabular": [], "relational": []}
        for seed in range(seeds):
            seen = np.random.default_rng(seed).permutation(len(data.train))[:size]
            runs["marginal"].append(accuracy([int(np.argmax(targets[seen].mean(0)))] * len(validation_news)))
            runs["tabular"].append(accuracy(tabular_answers(targets, news, seen, validation_news)))
            runs["relational"].append(accuracy(relational_answers(targets, news, seen, validation_news, answers)))
        rows[size] = {name: (float(np.mean(v)), float(np.std(v))) for name, v in runs.items()}
    constant = int(np.argmax(train_correct.mean(0)))
    rule = float(np.mean([t.price(news_rule(t.request, menu[constant]))[1].correct for t in data.validation]))
    return SignalTable(len(data.train), len(data.validation), float(np.mean([n is not None for n in news])),
                       menu[constant], float(validation_correct[:, constant].mean()), rule, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--reward-temperature", type=float, default=0.3)
    parser.add_argument("--sizes", default="50,100,200,400,800,1600,3200")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()

    table = signal_table(Home.resolve(args.home), args.dataset, [int(s) for s in args.sizes.split(",")], args.seeds,
                         args.reward_temperature)
    print(f"{args.dataset}: {table.train_decisions} train decisions ({table.with_headline:.0%} with a fresh telling headline), "
          f"{table.validation_decisions} validation; T = {args.reward_temperature}")
    print(f"validation direction accuracy: best constant on train ({table.constant}) {table.constant_accuracy:.3f}; "
          f"news rule {table.rule_accuracy:.3f}\n")
    print("| train decisions seen | marginal (reads nothing) | tabular learner | relational learner |\n|---:|---|---|---|")
    for size, row in table.rows.items():
        print(f"| {size} | " + " | ".join(f"{row[name][0]:.3f} ± {row[name][1]:.3f}" for name in ("marginal", "tabular", "relational")) + " |")


if __name__ == "__main__":
    main()
