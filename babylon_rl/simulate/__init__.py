"""`cli.py simulate`: a deterministic, realistic game history in the production schema.

market.py (prices, news, prediction markets) -> agents.py (personas deciding from what
they observed) -> trajectories.py (rows of the three game tables) -> sinks.py (writers);
policy_play.py: agents deciding with a model (`--policy`), beside the personas.
"""

from __future__ import annotations

from babylon_rl.settings import Home, require_database_url
from babylon_rl.simulate.config import DirtRates, SimulationConfig
from babylon_rl.simulate.runner import SimulationSummary, run_simulation
from babylon_rl.simulate.sinks import DuckDBSink, PostgresSink, Sink

__all__ = ["DirtRates", "SimulationConfig", "SimulationSummary", "run_simulation", "open_sink", "Sink"]


def open_sink(target: str, database_url: str | None, home: Home) -> Sink:
    if target == "postgres":
        return PostgresSink(require_database_url(database_url))
    return DuckDBSink(home)
