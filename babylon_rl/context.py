"""The object every CLI command calls: one method per command, holding the resolved settings.

Commands print through `self.console` (rich); the methods return what they did so
tests and other Python callers can use them without parsing output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from babylon_rl import db
from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home, mask_url, require_database_url, resolve_database_url


if TYPE_CHECKING:
    from babylon_rl.simulate import SimulationSummary


@dataclass
class BabylonContext:
    home: Home
    database_url: str | None = None
    console: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True))

    @classmethod
    def create(cls, home: str | None = None, database_url: str | None = None) -> "BabylonContext":
        resolved = Home.resolve(home)
        resolved.export_env()
        return cls(home=resolved, database_url=resolve_database_url(database_url))

    # -- db ---------------------------------------------------------------------------
    def db_migrate(self) -> list[db.MigrationState]:
        url = require_database_url(self.database_url)
        done = db.migrate(url)
        if not done:
            self.console.print(f"{mask_url(url)}: nothing to do, all migrations are applied")
        for state in done:
            how = "adopted (tables already existed)" if state.status == "adopted" else "applied"
            self.console.print(f"{state.name}: {how}")
        return done

    def db_status(self) -> list[db.MigrationState]:
        url = require_database_url(self.database_url)
        states = db.status(url)
        table = Table(title=f"migrations on {mask_url(url)}")
        for column in ("migration", "status", "applied at"):
            table.add_column(column)
        for state in states:
            applied = state.applied_at.strftime("%Y-%m-%d %H:%M:%S") if state.applied_at else ""
            table.add_row(state.name, state.status, applied)
        self.console.print(table)
        return states

    # -- simulate -----------------------------------------------------------------------
    def simulate(
        self,
        agents: int,
        windows: int,
        window_hours: int = 1,
        steps_per_window: int = 10,
        seed: int = 0,
        start: datetime | None = None,
        rich_share: float = 0.3,
        dirt_rate: float = 0.02,
        target: str | None = None,
    ) -> "SimulationSummary":
        from babylon_rl.simulate import SimulationConfig, open_sink, run_simulation

        config = SimulationConfig(
            agents=agents, windows=windows, window_hours=window_hours, steps_per_window=steps_per_window,
            seed=seed, start=start, rich_share=rich_share, dirt_rate=dirt_rate,
        ).validate()
        target = target or ("postgres" if self.database_url else "duckdb")
        if target not in ("postgres", "duckdb"):
            raise ConfigError(f"--target must be postgres or duckdb, not {target}")
        where = mask_url(require_database_url(self.database_url)) if target == "postgres" else str(self.home.warehouse)
        sink = open_sink(target, self.database_url, self.home)
        try:
            with Progress(
                TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("windows"),
                TimeElapsedColumn(), console=self.console, transient=True,
            ) as progress:
                task = progress.add_task("windows", total=windows)
                summary = run_simulation(config, sink, lambda n: progress.advance(task, n))
        finally:
            sink.close()
        self._print_summary(summary, where)
        return summary

    def _print_summary(self, summary: "SimulationSummary", where: str) -> None:
        table = Table(title=f"simulated into {where}", show_header=False)
        table.add_column("")
        table.add_column("", justify="right")
        rows = {
            "windows": f"{summary.windows:,} ({summary.first_window} .. {summary.last_window})",
            "trajectories": f"{summary.trajectories:,}", "steps": f"{summary.steps:,}",
            "llm calls": f"{summary.llm_calls:,}", "market outcomes": f"{summary.market_outcomes:,}",
            "seconds": f"{summary.seconds:.1f}", "trajectories/minute": f"{summary.trajectories_per_minute:,.0f}",
        }
        for name, value in rows.items():
            table.add_row(name, value)
        self.console.print(table)
