"""Errors a user can act on. The CLI prints their message on one line and exits with `exit_code`."""

from __future__ import annotations


class BabylonError(Exception):
    """A known failure with a message that names the bad thing and what to do."""

    exit_code = 2


class ConfigError(BabylonError):
    """Bad arguments, missing files or settings."""


class DatabaseError(BabylonError):
    """The game database cannot be reached or refused the work."""


class MigrationError(BabylonError):
    """A migration cannot be applied or no longer matches what was applied."""


class WarehouseError(BabylonError):
    """The DuckDB warehouse is missing, locked or not built."""


class DatasetError(BabylonError):
    """A dataset is unknown, already exists, or no data meets the selection."""


class ResourceError(BabylonError):
    """The work would not fit the memory this process can use (refused before it starts, not killed)."""


class BuildInterrupted(KeyboardInterrupt):
    """Ctrl-C during a build, with what to do. Still a KeyboardInterrupt, so that nothing catching
    errors (`build --every` goes on after a failed build) swallows it; the CLI prints it and exits 130."""
