"""The simulator's entry point: generate windows in order and write them in batches."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable

from babylon_rl.errors import ConfigError
from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.sinks import Sink, start_after
from babylon_rl.simulate.trajectories import WindowRows
from babylon_rl.simulate.window import simulate_window

if TYPE_CHECKING:
    from babylon_rl.simulate.policy_play import Player


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
    policy_agents: int = 0
    policy_model: str = ""

    @property
    def seconds_per_window(self) -> float:
        return self.seconds / self.windows if self.windows else 0.0

    @property
    def trajectories_per_minute(self) -> float:
        return self.trajectories / self.seconds * 60.0 if self.seconds > 0 else 0.0


def window_starts(config: SimulationConfig) -> list[datetime]:
    assert config.start is not None
    return [config.start + timedelta(hours=i * config.window_hours) for i in range(config.windows)]


def run_simulation(
    config: SimulationConfig, sink: Sink, on_window: Callable[[int], None] | None = None, player: Player | None = None
) -> SimulationSummary:
    """Simulate `config.windows` windows into `sink`; `on_window(n)` reports n more windows written.
    `player` answers the policy agents' prompts (`config.policy_agents`)."""
    config.validate()
    if config.policy_agents and player is None:
        raise ConfigError("policy agents need a model to play with (--policy MODEL)")
    if config.start is None:
        config = replace(config, start=start_after(sink.newest_window(), config.windows, config.window_hours))
    began = time.perf_counter()
    totals = [0, 0, 0, 0]  # trajectories, steps, llm calls, outcomes
    starts = window_starts(config)
    if config.unseen_wording_from is None:
        config = replace(config, unseen_wording_from=starts[len(starts) // 2])
    for first in range(0, len(starts), config.batch_windows):
        batch = [simulate_window(config, start, player) for start in starts[first:first + config.batch_windows]]
        sink.write(batch)
        _add(totals, batch)
        if on_window:
            on_window(len(batch))
    return SimulationSummary(
        sink.name, starts[0].strftime("%Y-%m-%dT%H:%M"), starts[-1].strftime("%Y-%m-%dT%H:%M"), len(starts),
        totals[0], totals[1], totals[2], totals[3], round(time.perf_counter() - began, 3),
        config.policy_agents, config.policy_model,
    )


def _add(totals: list[int], batch: list[WindowRows]) -> None:
    for rows in batch:
        totals[0] += len(rows.trajectories)
        totals[1] += rows.steps
        totals[2] += len(rows.llm_calls)
        totals[3] += len(rows.outcomes)
