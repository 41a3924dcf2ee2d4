"""Fixtures shared by the reliability tests."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from babylon_rl import warehouse
from babylon_rl.context import BabylonContext
from babylon_rl.settings import Home
from tests import factories
from tests.train_support import build_template

START = datetime(2025, 1, 15, 0, 0)


def simulate_game(url: str, home: Path, windows: int = 3, agents: int = 6, start: datetime | None = START, seed: int = 1) -> None:
    """Simulated game rows written into PostgreSQL (in-process, quiet)."""
    ctx = BabylonContext.create(home=str(home), database_url=url)
    ctx.console.quiet = True
    ctx.simulate(agents=agents, windows=windows, seed=seed, start=start, dirt_rate=0.0, target="postgres")


def factory_marts(home: Path, windows: int = 12, agents: int = 6, filler: int = 0) -> None:
    """The four marts (docs/TABLES.md) with deterministic rows, as the dataset tests use."""
    conn = warehouse.connect(Home.resolve(home))
    try:
        factories.create_marts(conn, factories.sample_rows(factories.hourly(windows, agents), filler=filler))
    finally:
        conn.close()


@pytest.fixture(scope="session")
def train_template(tmp_path_factory) -> Path:
    """A home with a scored factory dataset `ds` and the tiny model `tiny` (built once per session)."""
    return build_template(tmp_path_factory.mktemp("reliability-train-template"))
