"""The claim's false-positive rate where there is nothing to learn, through the eval's own claim code.

240 null evaluations (prices that are a random walk, whatever the prompt says): a trader that answers at random and one
that answers one constant trade, each against its base (another random trader) and the best constant on the same
windows, paired over windows as `eval` pairs them. The claim (`EvalResult.learning_shown`) may be made at most 1 time in
20; and the same code must make it for a trader that knows where each stock ends, or the test could not fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from babylon_rl.evaluate.constant import ConstantChoice
from babylon_rl.evaluate.decision_points import Decision, EvalSet
from babylon_rl.evaluate.run import EvalOptions, EvalResult, compare_results, scored_answers
from babylon_rl.evaluate.scoring import GroundTruth, Stock

TICKERS = ("ACME", "BOLT", "CRUX")
WINDOWS, PER_WINDOW, EVALUATIONS = 40, 2, 120


def _null_world(rng: np.random.Generator) -> EvalSet:
    """`WINDOWS` windows of three stocks at $100 that end a random walk later; `PER_WINDOW` decisions each, every stock held."""
    decisions, truths = [], {}
    for w in range(WINDOWS):
        window = f"2025-01-01T{w:02d}:00" if w < 24 else f"2025-01-02T{w - 24:02d}:00"
        truths[window] = GroundTruth(window, {t: Stock(100.0, float(100.0 * np.exp(rng.normal(0, 0.012)))) for t in TICKERS}, {})
        for d in range(PER_WINDOW):
            prices = "\n".join(f"  {t} $100.00 (+0.00% since your last look)" for t in TICKERS)
            held = ", ".join(f"{t} 50 @ $100.00" for t in TICKERS)
            observation = (f"It is {window[11:13]}:{20 + 10 * d} UTC; window {window} closes in {40 - 10 * d} min.\nPrices:\n{prices}\n"
                           f"News so far this window:\n  (none yet)\nYour portfolio: cash $10,000.00; positions: {held}; open bets: none; "
                           "P&L so far $+0.00.\nWhat do you do?")
            decisions.append(Decision(window, f"t{w}-{d}", f"agent-{d}", 1, ({"role": "user", "content": observation},), '{"action": "hold"}'))
    return EvalSet("null", decisions, truths)


def _trade(kind: str, ticker: str) -> str:
    return json.dumps({"action": kind, "ticker": ticker, "shares": 50})


def _random(rng: np.random.Generator, n: int) -> list[str]:
    menu = ['{"action": "hold"}'] + [_trade(k, t) for t in TICKERS for k in ("buy", "sell")]
    return [menu[i] for i in rng.integers(0, len(menu), n)]


def _claimed(eval_set: EvalSet, model: list[str], base: list[str], seed: int) -> bool:
    options = EvalOptions(model="m", dataset="null", seed=seed, resamples=400)
    constants = {a: scored_answers("constant", a, [a] * len(eval_set.decisions), eval_set, options)
                 for a in [_trade(k, t) for t in TICKERS for k in ("buy", "sell")]}
    best = max(constants.values(), key=lambda r: sum(o.pnl for o in r.outcomes))  # the best constant in hindsight: harder to beat
    results = [scored_answers("model", "model", model, eval_set, options), scored_answers("baseline", "base", base, eval_set, options), best]
    comparison, design = compare_results(results, eval_set, options)
    result = EvalResult(options, eval_set, results, comparison, ConstantChoice(best.name, 0.0, 0), Path("."), None, "", design_check=design)
    return result.learning_shown


def test_the_claim_is_made_at_most_once_in_twenty_where_there_is_nothing_to_learn():
    rng = np.random.default_rng(20261205)
    claims = []
    for i in range(EVALUATIONS):
        world = _null_world(rng)
        n = len(world.decisions)
        claims.append(_claimed(world, _random(rng, n), _random(rng, n), seed=i))  # a random trader
        claims.append(_claimed(world, [_trade("buy", TICKERS[i % 3])] * n, _random(rng, n), seed=i))  # a constant one
    assert len(claims) >= 200 and np.mean(claims) <= 0.05, f"{sum(claims)} claims in {len(claims)} null evaluations"
    # the same code claims learning for a trader that knows where each stock ends
    world = _null_world(rng)
    oracle = []
    for d in world.decisions:
        stocks = world.truths[d.window_id].stocks
        best = max(TICKERS, key=lambda t: abs(stocks[t].end - 100.0))
        oracle.append(_trade("buy" if stocks[best].end > 100.0 else "sell", best))
    assert _claimed(world, oracle, _random(rng, len(oracle)), seed=0)
