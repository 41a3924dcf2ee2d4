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


@cli.group()
def model() -> None:
    """Local base models for training (HOME/models/NAME/)."""


@model.command("init-tiny")
@click.option("--dataset", required=True, help="Dataset (HOME/datasets/NAME) whose text trains the tokenizer and warm start.")
@click.option("--name", default="tiny", show_default=True, help="Saved as HOME/models/NAME; pass it as --base-model.")
@click.option("--hidden", type=click.IntRange(min=8), default=64, show_default=True)
@click.option("--layers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--heads", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--vocab-size", type=click.IntRange(min=300), default=512, show_default=True)
@click.option("--warmup-steps", type=click.IntRange(min=0), default=150, show_default=True,
              help="Supervised steps on the logged answers so the model speaks the action format.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_obj
@error_handler
def model_init_tiny(obj: BabylonContext, dataset: str, name: str, hidden: int, layers: int, heads: int,
                    vocab_size: int, warmup_steps: int, seed: int) -> None:
    """Build a tiny Qwen2-architecture model (~100k-1M parameters) from a dataset, no download.

    \b
    Trains a byte-level BPE tokenizer with Qwen2's pre-tokenizer and a ChatML template,
    then warm-starts the model on the logged assistant answers.
    \b
    Examples:
      python cli.py model init-tiny --dataset demo
      python cli.py model init-tiny --dataset demo --name tiny-wide --hidden 128 --layers 4
    """
    from babylon_rl.train.tiny import TinySpec

    spec = TinySpec(vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                    kv_heads=max(1, heads // 2) if heads % 2 == 0 else heads, intermediate=2 * hidden,
                    warmup_steps=warmup_steps, seed=seed)
    obj.model_init_tiny(dataset, name, spec)


@cli.command()
@click.option("--dataset", required=True, help="A scored dataset (HOME/datasets/NAME with scores.parquet).")
@click.option("--backend", type=click.Choice(["torch", "art", "serverless"]), default="torch", show_default=True,
              help="torch: LoRA on CPU/GPU here; art: ART LocalBackend (NVIDIA GPU); serverless: ART on W&B (WANDB_API_KEY).")
@click.option("--base-model", default="tiny", show_default=True,
              help="A local model directory, a name in HOME/models, or a hub id such as Qwen/Qwen2.5-0.5B-Instruct.")
@click.option("--run-name", help="Letters, digits, - _ . (default DATASET-BACKEND); the run lives in HOME/runs/RUN.")
@click.option("--learning-rate", type=click.FloatRange(min=0, min_open=True), default=5e-6, show_default=True,
              help="For the tiny model use about 1e-3.")
@click.option("--max-steps", type=click.IntRange(min=1), help="Steps to train (default: one epoch).")
@click.option("--epochs", type=click.IntRange(min=1), help="Passes over the training windows; wins over --max-steps.")
@click.option("--groups-per-step", type=click.IntRange(min=1), default=20, show_default=True, help="Windows per step.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--eval-every", type=click.IntRange(min=1), help="Evaluate on eval.parquet every N steps.")
@click.option("--keep-best", is_flag=True, help="Keep only the best-evaluated checkpoint (and the latest, for --resume).")
@click.option("--resume", is_flag=True, help="Continue the run from its latest checkpoint with its saved settings.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--kl-coef", type=click.FloatRange(min=0), default=0.0, show_default=True, help="KL penalty to the base model.")
@click.option("--clip-eps", type=click.FloatRange(min=0, min_open=True), default=0.2, show_default=True)
@click.option("--lora-r", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--inner-epochs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Updates per batch (PPO-style; the clipped ratio matters from the second).")
@click.option("--merge", is_flag=True, help="Also save the base model with the adapter merged in (torch).")
@click.pass_obj
@error_handler
def train(obj: BabylonContext, **options) -> None:
    """Train a policy on a scored dataset (GRPO: one group per window).

    \b
    Writes HOME/runs/RUN/ (checkpoints/step-N, metrics.csv, wandb/). With --database-url
    it records training_batches and trained_models and marks trained trajectories.
    \b
    Examples:
      python cli.py model init-tiny --dataset demo
      python cli.py train --dataset demo --base-model tiny --learning-rate 1e-3 --max-steps 20
      python cli.py train --dataset demo --run-name demo-1 --resume
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon train --dataset demo \\
          --backend art --base-model Qwen/Qwen2.5-0.5B-Instruct --epochs 3
    """
    from pydantic import ValidationError

    from babylon_rl.errors import ConfigError
    from babylon_rl.train.loop import TrainConfig

    try:
        config = TrainConfig(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(f"invalid training options: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from None
    obj.train(config)


if __name__ == "__main__":
    cli()
