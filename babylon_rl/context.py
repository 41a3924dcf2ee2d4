"""The object every CLI command calls: one method per command, holding the resolved settings.

Commands print through `self.console` (rich); the methods return what they did so
tests and other Python callers can use them without parsing output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from babylon_rl import db
from babylon_rl.settings import Home, mask_url, require_database_url, resolve_database_url


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
