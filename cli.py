"""babylon-rl command line: parses arguments and calls one method of BabylonContext per command."""

from __future__ import annotations

import os
import sys
from functools import wraps
from typing import Callable, TypeVar

import click

from babylon_rl.context import BabylonContext
from babylon_rl.errors import BabylonError

F = TypeVar("F", bound=Callable)


def error_handler(func: F) -> F:
    """Known errors become one line on stderr and their exit code; BABYLON_RL_DEBUG=1 shows tracebacks."""

    @wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except BabylonError as exc:
            if os.environ.get("BABYLON_RL_DEBUG"):
                raise
            click.echo(click.style(f"Error: {exc}", fg="red"), err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", envvar="BABYLON_RL_HOME", help="State directory (warehouse, datasets, runs). Default ./.babylon")
@click.option("--database-url", envvar="DATABASE_URL", help="The game's PostgreSQL, e.g. postgresql://postgres@127.0.0.1/babylon")
@click.version_option(package_name="babylon-rl")
@click.pass_context
def cli(ctx: click.Context, home: str | None, database_url: str | None) -> None:
    """Train LLM trading agents from the logs of the Babylon game.

    \b
    Examples:
      python cli.py quickstart
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon db migrate
    """
    ctx.obj = BabylonContext.create(home=home, database_url=database_url)


@cli.group()
def db() -> None:
    """Manage the game database schema (migrations/)."""


@db.command("migrate")
@click.pass_obj
@error_handler
def db_migrate(obj: BabylonContext) -> None:
    """Apply pending migrations, each in one transaction.

    \b
    Example:
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon db migrate
    """
    obj.db_migrate()


@db.command("status")
@click.pass_obj
@error_handler
def db_status(obj: BabylonContext) -> None:
    """List applied and pending migrations.

    \b
    Example:
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon db status
    """
    obj.db_status()


if __name__ == "__main__":
    cli()
