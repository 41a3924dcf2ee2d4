"""Credit by meaning (train/credit.py): learned from outcomes, cross-fitted, confident or holding, names masked from the data."""

from __future__ import annotations

import zlib
import numpy as np

from babylon_rl.evaluate.prompts import decision_prompt
from babylon_rl.evaluate.scoring import GroundTruth, Stock, read_observation
from babylon_rl.train.credit import HeadlineEmbedder, company_names, credit, masked
from babylon_rl.train.decisions import Task

UP = ("{name} tops forecasts", "{name} wins a big contract", "Analysts lift {ticker}", "{name} posts record sales")
DOWN = ("{name} misses forecasts", "Regulators probe {name}", "Analysts cut {ticker}", "{name} recalls its product")
FLAT = ("{name} updates its logo", "{name} names a director")
NAMES = {"ACME": "Acme Corp", "BOLT": "Bolt Energy", "CRUX": "Crux Biotech"}


def _task(window: int, ticker: str, headline: str | None, end: float, agent: str = "a", at: str = "12:20") -> Task:
    """One decision at 12:23 in window `window` after `headline` (published `at`) about `ticker` (at $100 then), which
    ends the window at `end`."""
    prices = "\n".join(f"  {t} $100.00 (+0.00% since your last look)" for t in NAMES)
    news = f"  [{at}] {ticker}: {headline}" if headline else "  (none yet)"
    observation = (f"It is 12:23 UTC; window 2025-01-01T12:00 closes in 37 min.\nPrices:\n{prices}\nNews so far this window:\n"
                   f"{news}\nYour portfolio: cash $20,000.00; positions: none; open bets: none; P&L so far $+0.00.")
    stocks = {t: Stock(100.0, end if t == ticker else 100.0) for t in NAMES}
    return Task(f"t{window}-{agent}", f"w{window:04d}", decision_prompt(observation), read_observation(observation),
                GroundTruth(f"w{window:04d}", stocks, {}), '{"action": "hold"}', agent)


def _world(windows: int, seed: int, signal: bool = True, start: int = 0, phrasings: slice = slice(0, 4)) -> list[Task]:
    """A headline a window, worded from `phrasings` about a random stock; its stock goes its way 85 % of the time (with
    `signal`), either way at random (without), a neutral one either way."""
    rng = np.random.default_rng(seed)
    tasks = []
    for w in range(start, start + windows):
        kind = rng.integers(3)
        ticker = list(NAMES)[rng.integers(len(NAMES))]
        text = (UP, DOWN, FLAT)[kind][phrasings][rng.integers(len((UP, DOWN, FLAT)[kind][phrasings]))]
        sign = (1, -1, 0)[kind] if signal else 0
        up = rng.random() < (0.85 if sign > 0 else 0.15 if sign < 0 else 0.5)
        tasks.append(_task(w, ticker, text.format(name=NAMES[ticker], ticker=ticker), 103.0 if up else 97.0))
    return tasks


def _bag_of_words(texts: list[str]) -> np.ndarray:
    """A stand-in embedding that knows no word's meaning: each word hashed to one of 256 counts."""
    out = np.zeros((len(texts), 256))
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode()) % 256] += 1.0
    return out


def test_credit_learns_each_wordings_trade_from_outcomes_and_holds_where_it_is_not_confident():
    train, validation = _world(300, seed=1), _world(100, seed=2, start=300)
    found = credit(train, validation, _bag_of_words)
    calls = {}
    for task in train:
        ticker, headline = task.situation[1]
        calls.setdefault(headline.replace(NAMES[ticker], "{name}").replace(ticker, "{ticker}"), []).append(found.direction(task))
    assert found.confident and found.validation.precision > 0.75 and found.cross_fitted.precision > 0.75
    for phrasing, directions in calls.items():
        expected = "buy" if phrasing in UP else "sell" if phrasing in DOWN else "hold"
        assert directions.count(expected) > 0.7 * len(directions), (phrasing, directions)
    assert "cross-fitted precision" in found.line() and "on validation" in found.line()
    assert found.to_dict()["validation"]["credited"] == found.validation.credited


def test_a_critic_that_could_remember_each_window_credits_nothing_when_outcomes_are_noise():
    """Each headline unique to its window (its window's number in words) and its stock's move a coin flip: a critic fitted
    on its own windows would memorise them; cross-fitted, no situation's credit comes from its own label."""
    rng = np.random.default_rng(3)
    train = [_task(w, "ACME", f"Acme Corp story number {w} word{w}", 103.0 if rng.random() < 0.5 else 97.0) for w in range(200)]
    found = credit(train, _world(60, seed=4, signal=False, start=200), _bag_of_words)
    # confident somewhere by chance (the validation calls), its cross-fitted trades no better than a coin beyond chance at
    # any age: it credits hold everywhere
    assert set(found.checked.values()) & {"buy", "sell"} and found.max_age == 0 and not found.cross_fitted.beyond_chance
    assert not found.confident and set(found.directions.values()) == {"hold"} and "confident nowhere" in found.line()


def test_a_headlines_credit_holds_only_as_long_as_its_trades_were_right():
    """Stories whose stock moves their way when the decision is 3 minutes after them and at random 23 minutes after (the
    move done): the credit learns from the train outcomes to trade the fresh ones and hold the stale ones."""
    rng = np.random.default_rng(8)
    tasks = []
    for w, task in enumerate(_world(300, seed=9)):
        ticker, headline = task.situation[1]
        up_late = rng.random() < 0.5
        tasks += [task, _task(w, ticker, headline, 103.0 if up_late else 97.0, agent="late", at="12:00")]
    train, validation = tasks[:480], tasks[480:]
    found = credit(train, validation, _bag_of_words)
    assert found.max_age == 5 and found.confident
    late = [t for t in train if t.agent_id == "late"]
    assert {found.direction(t) for t in late} == {"hold"}
    assert {found.direction(t) for t in train if t.agent_id == "a"} >= {"buy", "sell"}
    assert found.to_dict()["max_age"] == 5 and "under 5 min old" in found.line()


def test_credit_with_no_news_or_too_few_windows_says_so_and_credits_hold():
    quiet = [_task(w, "ACME", None, 103.0) for w in range(20)]
    found = credit(quiet, [], _bag_of_words)
    assert not found.confident and "no train decision follows a fresh headline" in found.line() and found.directions == {}
    one = credit(_world(1, seed=6), [], _bag_of_words)
    assert "too few to learn from" in one.line() and set(one.directions.values()) == {"hold"}


def test_company_names_are_learned_from_the_headlines_not_from_a_name_table():
    tasks = _world(60, seed=7)
    names = company_names(tasks)
    assert names == {t: [n] for t, n in NAMES.items()}
    assert masked("ACME", "Acme Corp tops forecasts as ACME rallies; Bolt Energy lags", names) == \
        "the company tops forecasts as the stock rallies; Bolt Energy lags"


def test_the_headline_embedder_reads_the_base_models_blocks(small_llama):
    embed = HeadlineEmbedder(str(small_llama), batch=2)
    texts = ["the company tops forecasts", "the company misses", "the company tops forecasts"]
    out = embed(texts)
    assert out.shape == (3, 32) and np.isfinite(out).all()
    assert np.allclose(out[0], out[2], atol=1e-5) and not np.allclose(out[0], out[1])
    # padding does not change a text's embedding: alone, in a batch of one
    assert np.allclose(HeadlineEmbedder(str(small_llama), batch=1)(texts[:1])[0], out[0], atol=1e-4)
