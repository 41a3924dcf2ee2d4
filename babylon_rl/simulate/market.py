"""The market of one window: minute price paths, news that leads prices, prediction markets.

Everything comes from numpy Generators seeded with (seed, window key, stream), where
the window key is the window's start hour since the epoch: a window's content depends
only on the seed and its own start, never on how many windows one call generated.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from babylon_rl.simulate import news as newsroom
from babylon_rl.simulate.config import SimulationConfig

EPOCH = datetime(1970, 1, 1)

# Streams of the per-window generators; separate streams keep e.g. the dirt draws
# from shifting the market when only --dirt-rate changes.
STREAM_MARKET, STREAM_AGENTS, STREAM_DIRT, STREAM_IDS, STREAM_POLICY, STREAM_WORDING = 0, 1, 2, 3, 4, 5

MINUTE_SIGMA = 0.0015  # ~1.2 % per hour of noise
JUMP_PROB, JUMP_SIGMA = 0.004, 0.012
NEWS_MOVE = (0.015, 0.04)  # total drift after a BULLISH/BEARISH headline
NEWS_LAG = (10, 30)  # minutes over which that drift unfolds
PRICED_IN_SHARE = 0.15  # headlines the market ignores

COMPANY_NAMES = {
    "ACME": "Acme Corp", "BOLT": "Bolt Energy", "CRUX": "Crux Biotech",
    "DYNA": "Dynamo Motors", "EVRG": "Evergreen Foods",
}
HEADLINES = {
    "BULLISH": (
        "{name} beats earnings expectations", "{name} wins a major government contract",
        "Analysts upgrade {ticker} to strong buy", "{name} reports record user growth",
        "{name} announces a share buyback",
    ),
    "BEARISH": (
        "{name} misses revenue guidance", "Regulators open a probe into {name}",
        "{name} CEO resigns unexpectedly", "Analysts downgrade {ticker} to sell",
        "{name} recalls its flagship product",
    ),
    "NEUTRAL": (
        "{name} schedules its annual shareholder meeting", "{name} names a new board member",
        "{name} moves its headquarters across town", "{name} updates its logo",
    ),
}
SENTIMENTS = ("BULLISH", "BEARISH", "NEUTRAL")


@dataclass(frozen=True)
class NewsEvent:
    minute: int
    ticker: int  # index into the window's tickers
    sentiment: str  # the simulator's own label: it moves the price and the personas read it; nothing trains on it
    headline: str
    echo: bool = False  # a second outlet's report of a story already out: the market moves once per story


@dataclass(frozen=True)
class PredictionMarket:
    market_id: str
    ticker: int
    threshold: float
    above: bool
    question: str
    prob: list[float]  # P(YES) at each minute
    outcome: str
    base_volume: float


@dataclass
class WindowMarket:
    key: int
    start: datetime
    window_id: str
    minutes: int
    tickers: tuple[str, ...]
    prices: list[list[float]]  # [ticker][minute], cents, minutes + 1 points
    news: list[NewsEvent]
    markets: list[PredictionMarket]

    @property
    def start_ms(self) -> int:
        return int((self.start - EPOCH).total_seconds()) * 1000

    def end_price(self, ticker: int) -> float:
        return self.prices[ticker][-1]


def window_key(start: datetime) -> int:
    return int((start - EPOCH).total_seconds()) // 3600


def window_id(start: datetime) -> str:
    return start.strftime("%Y-%m-%dT%H:%M")


def rng_for(config: SimulationConfig, key: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([config.seed, key, stream])


def base_prices(config: SimulationConfig) -> np.ndarray:
    return np.random.default_rng([config.seed, 7919]).uniform(20.0, 250.0, len(config.tickers))


def company_name(ticker: str) -> str:
    return COMPANY_NAMES.get(ticker, f"{ticker.title()} Inc")


def generate_market(config: SimulationConfig, start: datetime) -> WindowMarket:
    key = window_key(start)
    rng = rng_for(config, key, STREAM_MARKET)
    minutes, n = config.window_minutes, len(config.tickers)
    news = _news(rng, config, minutes, start)
    log_returns = _log_returns(rng, n, minutes, news, config.news_strength)
    start_prices = base_prices(config) * np.exp(rng.normal(0.0, 0.08, n))
    paths = start_prices[:, None] * np.exp(np.concatenate([np.zeros((n, 1)), np.cumsum(log_returns, axis=1)], axis=1))
    prices = np.round(np.maximum(paths, 0.01), 2)
    markets = _prediction_markets(rng, config, prices, key)
    return WindowMarket(key, start, window_id(start), minutes, config.tickers, prices.tolist(), news, markets)


def _news(rng: np.random.Generator, config: SimulationConfig, minutes: int, start: datetime) -> list[NewsEvent]:
    """The window's stories (minute, stock, sentiment: the market stream's draws, whatever the wording), each worded by
    the newsroom (`news.py`) or, with `wording="templates"`, from the 14 fixed sentences."""
    low, high = config.news_per_window
    count = int(rng.integers(low, high + 1))
    at = np.sort(rng.integers(0, minutes - 5, count))
    tickers = rng.integers(0, len(config.tickers), count)
    kinds = rng.choice(3, count, p=[0.4, 0.4, 0.2])
    templates = rng.random(count)
    wording = rng_for(config, window_key(start), STREAM_WORDING)
    family = int(config.unseen_wording_from is not None and start >= config.unseen_wording_from)
    events = []
    for minute, ticker, kind, pick in zip(at.tolist(), tickers.tolist(), kinds.tolist(), templates.tolist()):
        sentiment = SENTIMENTS[kind]
        symbol = config.tickers[ticker]
        if config.wording == "templates":
            options = HEADLINES[sentiment]
            events.append(NewsEvent(minute, ticker, sentiment, options[int(pick * len(options))].format(name=company_name(symbol), ticker=symbol)))
            continue
        events.append(NewsEvent(minute, ticker, sentiment, newsroom.word(wording, sentiment, company_name(symbol), symbol, family)))
        if newsroom.echoes(wording) and minute + 5 < minutes - 5:
            later = minute + int(wording.integers(1, 5))
            events.append(NewsEvent(later, ticker, sentiment, newsroom.word(wording, sentiment, company_name(symbol), symbol, family), echo=True))
    return sorted(events, key=lambda e: e.minute)


def _log_returns(rng: np.random.Generator, n: int, minutes: int, news: list[NewsEvent], strength: float = 1.0) -> np.ndarray:
    """Noise, jumps and each headline's drift times `strength`; the draws do not depend on it, so 1.0 is the
    market of every earlier version and 0.0 the same market with headlines that carry no information."""
    drift = rng.normal(0.0, 0.00005, (n, 1))
    noise = rng.normal(0.0, MINUTE_SIGMA, (n, minutes))
    jumps = (rng.random((n, minutes)) < JUMP_PROB) * rng.normal(0.0, JUMP_SIGMA, (n, minutes))
    returns = drift + noise + jumps
    for event in (e for e in news if not e.echo):
        size, lag, priced_in = rng.uniform(*NEWS_MOVE), int(rng.integers(NEWS_LAG[0], NEWS_LAG[1] + 1)), rng.random()
        if event.sentiment == "NEUTRAL" or priced_in < PRICED_IN_SHARE:
            continue
        sign = 1.0 if event.sentiment == "BULLISH" else -1.0
        # The move starts the minute after the headline: index m is the move from minute m to m + 1.
        first, last = event.minute + 1, min(event.minute + 1 + lag, minutes)
        if last > first:
            returns[event.ticker, first:last] += strength * sign * size / lag
    return returns


def _prediction_markets(rng: np.random.Generator, config: SimulationConfig, prices: np.ndarray, key: int) -> list[PredictionMarket]:
    markets = []
    minutes = prices.shape[1] - 1
    remaining = np.arange(minutes, -1, -1) + 1.0
    for index in range(config.prediction_markets):
        ticker = int(rng.integers(0, len(config.tickers)))
        above = bool(rng.random() < 0.6)
        threshold = round(float(prices[ticker, 0] * (1.0 + rng.uniform(-0.012, 0.012))), 2)
        # P(YES) = a logistic stand-in for the normal CDF of the distance to the threshold.
        z = np.log(prices[ticker] / threshold) / (MINUTE_SIGMA * 2.0 * np.sqrt(remaining))
        p_above = 1.0 / (1.0 + np.exp(-1.7 * z))
        prob = np.clip(p_above if above else 1.0 - p_above, 0.01, 0.99)
        end_above = prices[ticker, -1] > threshold
        outcome = "YES" if end_above == above else "NO"
        symbol = config.tickers[ticker]
        word = "above" if above else "below"
        span = "the hour" if config.window_hours == 1 else "the window"
        question = f"Will {symbol} close {span} {word} ${threshold:.2f}?"
        market_id = f"pm-{key:x}-{int(rng.integers(0, 16**8)):08x}-{index}"
        markets.append(PredictionMarket(
            market_id, ticker, threshold, above, question, np.round(prob, 4).tolist(), outcome,
            round(float(rng.lognormal(8.0, 0.8)), 2),
        ))
    return markets
