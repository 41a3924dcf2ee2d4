"""Simulator throughput: trajectories per minute written to PostgreSQL and to DuckDB.

    python bench/bench_simulate.py --agents 100 --windows 50

PostgreSQL: a fresh, migrated database (created and dropped here) on --admin-url's server.
DuckDB: a fresh warehouse file in a temporary home.
"""

from __future__ import annotations

import tempfile
import uuid
from datetime import datetime
from pathlib import Path

import click
import psycopg
from rich.console import Console
from rich.table import Table

from babylon_rl import db
from babylon_rl.settings import Home
from babylon_rl.simulate import SimulationConfig, SimulationSummary, run_simulation
from babylon_rl.simulate.sinks import DuckDBSink, PostgresSink


def bench_postgres(config: SimulationConfig, admin_url: str) -> SimulationSummary:
    name = f"brl_bench_{uuid.uuid4().hex[:8]}"
    base = admin_url.rpartition("/")[0]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        db.migrate(f"{base}/{name}")
        sink = PostgresSink(f"{base}/{name}")
        try:
            return run_simulation(config, sink)
        finally:
            sink.close()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_duckdb(config: SimulationConfig) -> SimulationSummary:
    with tempfile.TemporaryDirectory() as tmp:
        sink = DuckDBSink(Home.resolve(Path(tmp) / "home"))
        try:
            return run_simulation(config, sink)
        finally:
            sink.close()


@click.command()
@click.option("--agents", default=100, show_default=True)
@click.option("--windows", default=50, show_default=True)
@click.option("--steps-per-window", default=10, show_default=True)
@click.option("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres", show_default=True)
@click.option("--target", "targets", multiple=True, type=click.Choice(["postgres", "duckdb"]), default=["postgres", "duckdb"])
def main(agents: int, windows: int, steps_per_window: int, admin_url: str, targets: tuple[str, ...]) -> None:
    config = SimulationConfig(agents=agents, windows=windows, steps_per_window=steps_per_window, seed=0,
                              start=datetime(2025, 1, 1))
    table = Table(title=f"simulate: {agents} agents x {windows} windows x {steps_per_window} steps")
    for column in ("target", "trajectories", "steps", "llm calls", "seconds", "trajectories/min"):
        table.add_column(column, justify="right")
    for target in targets:
        summary = bench_postgres(config, admin_url) if target == "postgres" else bench_duckdb(config)
        table.add_row(target, f"{summary.trajectories:,}", f"{summary.steps:,}", f"{summary.llm_calls:,}",
                      f"{summary.seconds:.2f}", f"{summary.trajectories_per_minute:,.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
