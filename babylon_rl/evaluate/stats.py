"""Per-window totals and a seeded percentile bootstrap over windows.

Windows are the resampling unit (decisions inside a window share one market, so they are
not independent). A ratio metric is recomputed on every resample as sum(numerator) /
sum(denominator) over the resampled windows; the 95 % interval is the 2.5th and 97.5th
percentile. Comparisons resample the same windows for both policies (paired).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 1000


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


def resample_indices(windows: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, windows) window indices drawn with replacement; the same for a seed."""
    return np.random.default_rng([seed, windows]).integers(0, windows, size=(resamples, windows))


def ratio_interval(numerator: np.ndarray, denominator: np.ndarray, indices: np.ndarray) -> Interval:
    num, den = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    value = float(num.sum() / den.sum()) if den.sum() else 0.0
    sums = den[indices].sum(1)
    samples = np.where(sums > 0, num[indices].sum(1) / np.where(sums > 0, sums, 1), 0.0)
    return Interval(value, float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5)))


def difference_interval(num_a: np.ndarray, num_b: np.ndarray, denominator: np.ndarray, indices: np.ndarray) -> Interval:
    """Paired interval of ratio(a) - ratio(b) over the same resampled windows."""
    den = np.asarray(denominator, dtype=float)
    diff = np.asarray(num_a, dtype=float) - np.asarray(num_b, dtype=float)
    return ratio_interval(diff, den, indices)


def ratio_difference_interval(num_a: np.ndarray, den_a: np.ndarray, num_b: np.ndarray, den_b: np.ndarray,
                              indices: np.ndarray) -> Interval:
    """Paired interval of ratio(a) - ratio(b) where the two ratios have their own denominators (trade precision: each
    policy's right trades over its own trades), over the same resampled windows; a resample where one has no
    denominator counts that ratio as 0."""
    def ratios(num: np.ndarray, den: np.ndarray) -> tuple[float, np.ndarray]:
        num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
        sums = den[indices].sum(1)
        value = float(num.sum() / den.sum()) if den.sum() else 0.0
        return value, np.where(sums > 0, num[indices].sum(1) / np.where(sums > 0, sums, 1), 0.0)

    (a, samples_a), (b, samples_b) = ratios(num_a, den_a), ratios(num_b, den_b)
    samples = samples_a - samples_b
    return Interval(a - b, float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5)))
