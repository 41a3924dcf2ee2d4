"""babylon-rl command line: parses arguments and calls one method of BabylonContext per command."""

from __future__ import annotations

import os
import sys
from functools import wraps
from typing import Callable, TypeVar

import click

from babylon_rl.context import BabylonContext
from babylon_rl.errors import BabylonError, ConfigError
from babylon_rl.judge.score import JUDGES, ScoreOptions

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


@cli.command()
@click.option("--full", is_flag=True, help="Re-copy every row instead of only rows past the last watermark.")
@click.pass_obj
@error_handler
def snapshot(obj: BabylonContext, full: bool) -> None:
    """Copy the game tables from PostgreSQL into the warehouse's raw schema.

    \b
    Incremental: only rows changed since the last snapshot (minus a safety margin)
    are copied and upserted on their primary key.
    \b
    Example:
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon snapshot
    """
    obj.snapshot(full=full)


@cli.command()
@click.option("--wait", "wait_seconds", type=click.FloatRange(min=0), default=0, show_default=True,
              help="Seconds to wait for another running build before giving up.")
@click.option("--full-snapshot", is_flag=True, help="Re-copy every source row before building.")
@click.pass_obj
@error_handler
def build(obj: BabylonContext, wait_seconds: float, full_snapshot: bool) -> None:
    """Snapshot the game database (if given), apply the SQLMesh models, publish the marts.

    \b
    Windows that received late rows are rebuilt. The marts are then written to
    HOME/exports/*.parquet, which can be queried while the next build runs.
    \b
    Examples:
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon build
      python cli.py build --wait 600      # after simulate --target duckdb
    """
    obj.build(wait_seconds=wait_seconds, full_snapshot=full_snapshot)


@cli.command()
@click.pass_obj
@error_handler
def export(obj: BabylonContext) -> None:
    """Write the marts to HOME/exports/*.parquet for readers that must not lock the warehouse.

    \b
    Example:
      python cli.py export && duckdb -c "SELECT * FROM '.babylon/exports/windows.parquet' LIMIT 5"
    """
    obj.export()


@cli.command()
@click.option("--lookback-hours", type=click.IntRange(min=1), default=168, show_default=True)
@click.option("--min-agents", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--as-of", type=click.DateTime(["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"]),
              help="End of the lookback (UTC). Default: now.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
@error_handler
def windows(obj: BabylonContext, lookback_hours: int, min_agents: int, as_of, as_json: bool) -> None:
    """Readiness report: recent windows, agents per window, how many can form a training group.

    \b
    Example:
      python cli.py windows --lookback-hours 24 --min-agents 5
    """
    obj.windows(lookback_hours, min_agents, as_of, as_json)


@cli.command()
@click.option("--dataset", help="Dataset name under HOME/datasets/.")
@click.option("--judge", type=click.Choice(JUDGES), default="ruler", show_default=True)
@click.option("--judge-model", envvar="JUDGE_MODEL", help="Judge model (env JUDGE_MODEL); required for ruler/art-ruler.")
@click.option("--judge-base-url", envvar="OPENAI_BASE_URL", help="OpenAI-compatible endpoint (env OPENAI_BASE_URL); default OpenAI. Key: OPENAI_API_KEY.")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Groups judged at once.")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=60.0, show_default=True, help="Seconds per request.")
@click.option("--max-retries", type=click.IntRange(0, 10), default=3, show_default=True, help="Retries on 429/5xx/timeouts, with exponential backoff.")
@click.option("--attempts", type=click.IntRange(1, 10), default=3, show_default=True, help="Requests per group when replies are malformed or have wrong ids.")
@click.option("--max-judge-tokens", type=click.IntRange(min=1000), default=60000, show_default=True, help="Prompt budget per group; longer transcripts are cut in the middle.")
@click.option("--price-in", type=click.FloatRange(min=0), default=0.0, show_default=True, help="USD per 1M prompt tokens, for the cost estimate.")
@click.option("--price-out", type=click.FloatRange(min=0), default=0.0, show_default=True, help="USD per 1M completion tokens.")
@click.option("--write-back", is_flag=True, help="Also write the scores to the game's trajectories (needs --database-url).")
@click.option("--report", "report", metavar="NAME", help="Instead of scoring: agreement between the judges that scored dataset NAME.")
@click.option("--json", "as_json", is_flag=True, help="With --report: machine-readable output.")
@click.pass_obj
@error_handler
def score(obj: BabylonContext, dataset: str | None, report: str | None, as_json: bool, write_back: bool, judge: str,
          judge_model: str | None, judge_base_url: str | None, **limits) -> None:
    """Score every trajectory of a dataset in [0, 1] with a judge; cached and resumable.

    \b
    Writes HOME/datasets/NAME/scores.parquet and scores.json only when every window
    group is scored; a re-run resumes from HOME/judge_cache and re-sends only what failed.
    \b
    Examples:
      python cli.py score --dataset demo --judge heuristic
      OPENAI_API_KEY=sk-... python cli.py score --dataset demo --judge ruler --judge-model gpt-4.1-mini --price-in 0.4 --price-out 1.6
      python cli.py score --dataset demo --judge ruler --judge-model qwen3 --judge-base-url http://127.0.0.1:8000/v1 --concurrency 16
      python cli.py score --dataset demo --judge art-ruler --judge-model gpt-4.1-mini
      python cli.py score --report demo --json
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon score --dataset demo --judge heuristic --write-back
    """
    if report:
        obj.score_report(report, as_json)
        return
    if not dataset:
        raise ConfigError("pass --dataset NAME to score, or --report NAME to compare judges")
    options = ScoreOptions(judge=judge, judge_model=judge_model, base_url=judge_base_url, **limits)
    obj.score(dataset, options, write_back=write_back)


if __name__ == "__main__":
    cli()
