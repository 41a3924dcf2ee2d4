"""`cli.py simulate`: a deterministic, realistic game history in the production schema.

market.py (prices, news, prediction markets) -> agents.py (personas deciding from what
they observed) -> trajectories.py (rows of the three game tables) -> sinks.py (writers);
policy_play.py: agents deciding with a model (`--policy`), beside the personas.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from babylon_rl.settings import Home, require_database_url

if TYPE_CHECKING:
    from babylon_rl.simulate.sinks import Sink

__all__ = ["DirtRates", "SimulationConfig", "SimulationSummary", "run_simulation", "open_sink", "Sink"]
# The runner and the sinks import the database drivers: loaded on first use, so that the market model
# (simulate.market, which the trainer's renaming reads) imports on a machine without them.
_LAZY = {"DirtRates": "config", "SimulationConfig": "config", "SimulationSummary": "runner", "run_simulation": "runner",
         "Sink": "sinks"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"babylon_rl.simulate.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_sink(target: str, database_url: str | None, home: Home) -> Sink:
    from babylon_rl.simulate.sinks import DuckDBSink, PostgresSink

    if target == "postgres":
        return PostgresSink(require_database_url(database_url))
    return DuckDBSink(home)
