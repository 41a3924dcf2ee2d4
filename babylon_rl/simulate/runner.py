"""The simulator's entry point: generate windows in order and write them in batches."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable

from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.sinks import Sink, start_after
from babylon_rl.simulate.trajectories import WindowRows, simulate_window


@dataclass(frozen=True)
class SimulationSummary:
    target: str
    first_window: str
    last_window: str
    windows: int
    trajectories: int
    steps: int
    llm_calls: int
    market_outcomes: int
    seconds: float

    @property
    def trajectories_per_minute(self) -> float:
        return self.trajectories / self.seconds * 60.0 if self.seconds > 0 else 0.0


def window_starts(config: SimulationConfig) -> list[datetime]:
    assert config.start is not None
    return [config.start + timedelta(hours=i * config.window_hours) for i in range(config.windows)]


def run_simulation(
    config: SimulationConfig, sink: Sink, on_window: Callable[[int], None] | None = None
) -> SimulationSummary:
    """Simulate `config.windows` windows into `sink`; `on_window(n)` reports n more windows written."""
    config.validate()
    if config.start is None:
        config = replace(config, start=start_after(sink.newest_window(), config.windows, config.window_hours))
    began = time.perf_counter()
    totals = [0, 0, 0, 0]  # trajectories, steps, llm calls, outcomes
    starts = window_starts(config)
    for first in range(0, len(starts), config.batch_windows):
        batch = [simulate_window(config, start) for start in starts[first:first + config.batch_windows]]
        sink.write(batch)
        _add(totals, batch)
        if on_window:
            on_window(len(batch))
    return SimulationSummary(
        sink.name, starts[0].strftime("%Y-%m-%dT%H:%M"), starts[-1].strftime("%Y-%m-%dT%H:%M"), len(starts),
        totals[0], totals[1], totals[2], totals[3], round(time.perf_counter() - began, 3),
    )


def _add(totals: list[int], batch: list[WindowRows]) -> None:
    for rows in batch:
        totals[0] += len(rows.trajectories)
        totals[1] += rows.steps
        totals[2] += len(rows.llm_calls)
        totals[3] += len(rows.outcomes)
