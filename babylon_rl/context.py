"""The object every CLI command calls: one method per command, holding the resolved settings.

Commands print through `self.console` (rich); the methods return what they did so
tests and other Python callers can use them without parsing output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from babylon_rl import build, db, readiness, snapshot
from babylon_rl.settings import Home, mask_url, require_database_url, resolve_database_url

if TYPE_CHECKING:
    from babylon_rl.train.loop import TrainConfig, TrainResult
    from babylon_rl.train.tiny import TinyResult, TinySpec


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

    # -- warehouse --------------------------------------------------------------------
    def snapshot(self, full: bool = False) -> snapshot.SnapshotResult:
        url = require_database_url(self.database_url)
        with self.console.status(f"copying {mask_url(url)} into {self.home.warehouse}"):
            result = snapshot.run_snapshot(self.home, url, full=full)
        self._print_snapshot(result)
        return result

    def _print_snapshot(self, result: snapshot.SnapshotResult) -> None:
        kind = "full copy" if result.full_copy else "incremental"
        table = Table(title=f"snapshot {result.snapshot_id} ({kind}, {result.seconds:.1f}s)")
        for column in ("table", "rows copied", "watermark"):
            table.add_column(column)
        for copy in result.tables:
            table.add_row(copy.table, f"{copy.rows_copied:,}", copy.watermark or "")
        self.console.print(table)

    def build(self, wait_seconds: float = 0, full_snapshot: bool = False) -> build.BuildResult:
        result = build.run_build(
            self.home, self.database_url, wait_seconds, full_snapshot, on_wait=lambda msg: self.console.print(msg)
        )
        if result.snapshot:
            self._print_snapshot(result.snapshot)
        if result.restate_range:
            start, end = result.restate_range
            self.console.print(f"restated {result.restated_windows} changed window(s) between {start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M}")
        self.console.print(
            f"built {len(result.models)} models in {result.seconds:.1f}s; marts published to {self.home.exports}"
        )
        return result

    def export(self) -> list[str]:
        written = build.publish_marts(self.home)
        for path in written:
            self.console.print(path)
        return written

    def windows(self, lookback_hours: int, min_agents: int, as_of: datetime | None, as_json: bool) -> readiness.Readiness:
        as_of = as_of or datetime.now(timezone.utc).replace(tzinfo=None)
        report = readiness.readiness(self.home, lookback_hours, min_agents, as_of)
        if as_json:
            self.console.print_json(json.dumps(report.to_dict()))
            return report
        table = Table(title=f"windows in the {lookback_hours} hours before {as_of:%Y-%m-%d %H:%M} UTC")
        for column in ("window", "agents", "trajectories", "P&L std", "ready"):
            table.add_column(column, justify="right" if column != "window" else "left")
        for row in report.windows:
            std = "" if row.pnl_std is None else f"{row.pnl_std:,.2f}"
            table.add_row(row.window_id, str(row.agents), str(row.trajectories), std, "yes" if row.agents >= min_agents else "no")
        self.console.print(table)
        self.console.print(report.verdict)
        return report

    # -- training ---------------------------------------------------------------------
    def model_init_tiny(self, dataset: str, name: str, spec: "TinySpec") -> "TinyResult":
        from babylon_rl.train.tiny import init_tiny

        self.home.ensure()
        with self.console.status(f"training a tokenizer and a tiny model on dataset {dataset}") as status:
            result = init_tiny(self.home, dataset, name, spec,
                               on_step=lambda step, loss: status.update(f"warm start {step}/{spec.warmup_steps} loss {loss:.3f}"))
        self.console.print(
            f"saved {result.path}: {result.parameters:,} parameters, vocabulary {result.vocab_size}, "
            f"warm-start loss {result.warmup_loss:.3f} ({result.seconds:.1f}s); train it with "
            f"python cli.py train --dataset {dataset} --base-model {name} --learning-rate 1e-3"
        )
        return result

    def train(self, config: "TrainConfig") -> "TrainResult":
        from babylon_rl.train.loop import train

        self.home.ensure()
        result = train(self.home, config, self.database_url, self.console)
        best = f", best {result.best_checkpoint}" if result.best_checkpoint else ""
        merged = f", merged model {result.merged}" if result.merged else ""
        self.console.print(
            f"trained {result.steps}/{result.total_steps} steps on {len(set(result.trained_ids))} trajectories "
            f"({result.skipped_groups} windows skipped: no reward spread); run {result.run_dir}{best}{merged}"
        )
        return result
