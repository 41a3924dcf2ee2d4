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

`objective_signal` measures a training objective before any model trains on it: under the
objective's own loss (cross-entropy to softmax(reward / T) over the menu) on the validation
decisions, how much a policy that reads the headline (the train marginal tilted towards the news
rule's answer, the tilt fitted on train: a diagnostic, never a policy) gains over the marginal, per
decision, and how much that gain spreads over windows; `needed` is about how many decisions' worth
of windows it takes for the gain to stand two standard errors clear of zero. Candidates: the menu's
trade size (10 shares, 50), and renamed tickers (each decision under a random permutation of its
stocks, so the marginal cannot hold a per-ticker constant).
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
from babylon_rl.train.decisions import Task, load_decision_data  # noqa: E402


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


def _targets(rewards: np.ndarray, temperature: float) -> np.ndarray:
    targets = np.exp((rewards - rewards.max(1, keepdims=True)) / temperature)
    return targets / targets.sum(1, keepdims=True)


def _exchangeable(targets: np.ndarray, answers: list[dict]) -> np.ndarray:
    """The marginal a learner of renamed tickers can hold: hold, and each direction spread evenly over the stocks."""
    out = targets.copy()
    for kind in ("buy", "sell"):
        columns = [j for j, a in enumerate(answers) if a["action"] == kind]
        out[..., columns] = targets[..., columns].mean(-1, keepdims=True)
    return out


def objective_signal(home: Home, dataset: str, shares: int, renamed: bool, temperature: float = 0.3,
                     horizon: str = "window-end") -> dict[str, float]:
    """The gain in nats per validation decision of a headline-reading policy over the marginal, under this objective
    (its targets priced at the window's end, or at the agent's next look: `menu_items.next_look`)."""
    from babylon_rl.evaluate.constant import candidates
    from babylon_rl.train.menu_items import next_look

    data = load_decision_data(home, dataset)
    menu = candidates({data.train[0].window_id: data.train[0].truth}, shares)  # every trade, priced as it would pay
    answers = [json.loads(a) for a in menu]
    horizon_of = next_look if horizon == "next-look" else list
    train_targets = _targets(priced(horizon_of(data.train), menu)[0], temperature)
    validation_targets = _targets(priced(horizon_of(data.validation), menu)[0], temperature)
    marginal = train_targets.mean(0)
    if renamed:
        marginal = _exchangeable(marginal, answers)

    def rule_column(task: Task) -> int | None:
        news = latest_fresh_headline(task.request)
        if news is None:
            return None
        wanted = {"action": "buy" if news[1] == "BULLISH" else "sell", "ticker": news[0], "shares": shares}
        return next((j for j, a in enumerate(answers) if a == wanted), None)

    def gains(tasks: list[Task], targets: np.ndarray, tilt: float, first: np.ndarray | None = None) -> np.ndarray:
        """Per decision; with `first` (answers x first choices, 0/1), the part of the gain the answer's first choice takes."""
        out = np.zeros(len(tasks))
        for i, task in enumerate(tasks):
            column = rule_column(task)
            if column is not None:
                tilted = (1 - tilt) * marginal
                tilted[column] += tilt
                if first is None:
                    out[i] = float(targets[i] @ (np.log(tilted) - np.log(marginal)))
                else:
                    out[i] = float((targets[i] @ first) @ (np.log(tilted @ first) - np.log(marginal @ first)))
        return out

    tilt = max(np.linspace(0.0, 0.9, 19), key=lambda t: gains(data.train, train_targets, t).mean())
    gain = gains(data.validation, validation_targets, tilt)
    # The same gain, split by the answer's first choice: direction first (hold / buy / sell, what the menu's token tree
    # asks first) or ticker first (hold / which stock). The joint is the same, so the totals are; what differs is
    # how much of the reading the first token must do.
    direction_first = np.array([[a["action"] == d for d in ("hold", "buy", "sell")] for a in answers], dtype=float)
    tickers = sorted({a.get("ticker") for a in answers if a.get("ticker")})
    ticker_first = np.array([[a.get("ticker", "hold") == k for k in ("hold", *tickers)] for a in answers], dtype=float)
    windows = sorted({t.window_id for t in data.validation})
    per_window = np.array([gain[[i for i, t in enumerate(data.validation) if t.window_id == w]].mean() for w in windows])
    decisions_per_window = len(gain) / len(windows)
    needed = (2 * per_window.std() / gain.mean()) ** 2 * decisions_per_window if gain.mean() > 0 else float("inf")
    return {"tilt": float(tilt), "gain_per_decision": float(gain.mean()), "window_std": float(per_window.std()),
            "windows": len(windows), "needed": float(needed),
            "direction_first": float(gains(data.validation, validation_targets, tilt, direction_first).mean()),
            "ticker_first": float(gains(data.validation, validation_targets, tilt, ticker_first).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--reward-temperature", type=float, default=0.3)
    parser.add_argument("--sizes", default="50,100,200,400,800,1600,3200")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--objectives", action="store_true", help="measure the candidate objectives' signal (objective_signal) instead")
    args = parser.parse_args()

    if args.objectives:
        print("| objective | tilt | reading's gain over the marginal (nats / validation decision) | its spread over windows (std) | decisions needed "
              "| of it at the first choice, direction first | ticker first |\n|---|---:|---:|---:|---:|---:|---:|")
        for shares, renamed, horizon in ((10, False, "window-end"), (50, False, "window-end"), (10, True, "window-end"),
                                         (50, True, "window-end"), (50, True, "next-look")):
            row = objective_signal(Home.resolve(args.home), args.dataset, shares, renamed, args.reward_temperature, horizon)
            print(f"| {shares} shares{', renamed tickers' if renamed else ''}, to the {horizon} | {row['tilt']:.2f} | {row['gain_per_decision']:+.4f} | "
                  f"{row['window_std']:.4f} ({row['windows']} windows) | {row['needed']:,.0f} | {row['direction_first']:+.4f} | "
                  f"{row['ticker_first']:+.4f} |")
        return

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
