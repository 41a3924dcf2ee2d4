"""What the commands print: one rich console with a method per thing a command reports.

BabylonContext does the work and hands its results here; nothing in this module computes
anything but text, tables and progress bars. Progress bars are transient and drawn only on
a terminal (rich leaves them out when the output is not a TTY). Its types come from the core (the stages
and the context's results); the drivers above the context (quickstart.py, improve.py) print their own lines through it.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from babylon_rl.settings import mask_url

if TYPE_CHECKING:
    import polars as pl

    from babylon_rl.build import BuildResult
    from babylon_rl.dataset.build import DatasetBuildResult
    from babylon_rl.dataset.export import ExportResult
    from babylon_rl.db import MigrationState
    from babylon_rl.evaluate import EvalResult
    from babylon_rl.evaluate.arena import ArenaResult
    from babylon_rl.judge.compare import Agreement
    from babylon_rl.judge.score import ScoreRun
    from babylon_rl.readiness import Readiness
    from babylon_rl.simulate import SimulationSummary
    from babylon_rl.lake import LakeResult
    from babylon_rl.snapshot import SnapshotResult
    from babylon_rl.standing import Standing
    from babylon_rl.train.loop import TrainResult


class TerminalConsole(Console):
    def __init__(self, **options) -> None:
        super().__init__(**{"highlight": False, "soft_wrap": True, **options})

    def _bars(self, columns, transient: bool = True) -> Progress:
        """Progress bars drawn on a terminal only: elsewhere (a pipe, a log file, CI) they print nothing at all."""
        return Progress(*columns, console=self, transient=transient, disable=not self.is_terminal)

    @contextmanager
    def counting(self, label: str, total: int | None, unit: str = "", transient: bool = True) -> Iterator[Callable[[int], None]]:
        """A progress bar for `total` things; yields the function that advances it."""
        columns = [TextColumn(label), BarColumn(), MofNCompleteColumn()] + ([TextColumn(unit)] if unit else []) + [TimeElapsedColumn()]
        with self._bars(columns, transient) as progress:
            task = progress.add_task(label, total=total)
            yield lambda n=1: progress.advance(task, n)

    # -- db -----------------------------------------------------------------------------
    def migrations_applied(self, url: str, done: list[MigrationState]) -> None:
        if not done:
            self.print(f"{mask_url(url)}: nothing to do, all migrations are applied")
        for state in done:
            how = "adopted (tables already existed)" if state.status == "adopted" else "applied"
            self.print(f"{state.name}: {how}")

    def migration_status(self, url: str, states: list[MigrationState]) -> None:
        table = Table(title=f"migrations on {mask_url(url)}")
        for column in ("migration", "status", "applied at"):
            table.add_column(column)
        for state in states:
            applied = state.applied_at.strftime("%Y-%m-%d %H:%M:%S") if state.applied_at else ""
            table.add_row(state.name, state.status, applied)
        self.print(table)

    # -- warehouse ----------------------------------------------------------------------
    def snapshot_done(self, result: SnapshotResult) -> None:
        kind = "full copy" if result.full_copy else "incremental"
        table = Table(title=f"snapshot {result.snapshot_id} ({kind}, {result.seconds:.1f}s)")
        for column in ("table", "rows copied", "watermark"):
            table.add_column(column)
        for copy in result.tables:
            table.add_row(copy.table, f"{copy.rows_copied:,}", copy.watermark or "")
        self.print(table)
        for copy in result.tables:
            if copy.future_rows:
                self.print(
                    f"[yellow]warning:[/] {copy.future_rows:,} row(s) of {copy.table} are stamped after the source's clock; "
                    "the watermark is capped at the source's now(), so later rows are still copied; they are listed in "
                    "meta.future_rows: check the game's clock")

    def lake_written(self, result: LakeResult) -> None:
        if not result.rows:
            self.print(f"lake {result.path} is up to date: no day changed since it was written ({result.seconds:.1f}s)")
            return
        what = "the whole lake" if result.full else "the changed days"
        days = f"{len(result.days)} day partition(s)"
        if result.days:
            days += f", {result.days[0]}" + (f" .. {result.days[-1]}" if len(result.days) > 1 else "")
        rows = ", ".join(f"{table} {count:,}" for table, count in result.rows.items())
        self.print(f"wrote {what} to {result.path}: {days}; rows {rows} ({result.seconds:.1f}s)")

    def build_started(self, number: int, at: datetime) -> None:
        self.print(f"build {number} at {at:%Y-%m-%d %H:%M:%S} UTC")

    def build_failed(self, number: int, error: Exception) -> None:
        self.print(Text(f"build {number} failed: {error}", style="red"))

    @contextmanager
    def building(self) -> Iterator[Callable[[str, int, int | None], None]]:
        """One line for a build: its step, and a bar over SQLMesh's model batches once a plan or run knows how many."""
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with self._bars(columns) as progress:
            progress.add_task("building", total=None)

            def update(what: str, done: int, total: int | None) -> None:
                task = progress.tasks[-1]
                if task.total == total:
                    progress.update(task.id, description=what, completed=done)
                else:  # a bar cannot go back to not knowing its total: a new one
                    progress.remove_task(task.id)
                    progress.add_task(what, total=total, completed=done)

            yield update

    def build_done(self, result: BuildResult, exports: Path) -> None:
        if result.snapshot:
            self.snapshot_done(result.snapshot)
        if result.models_changed:
            self.print("applied the project's models to prod")
        if result.restate_range:
            start, end = result.restate_range
            what = "computed all {} window(s) with data" if result.whole_history else "restated {} changed window(s)"
            if result.changed_only:
                what = f"computed the changed models and what reads them ({', '.join(result.restated_models)}) over all {{}} window(s) with data"
            self.print(f"{what.format(result.restated_windows)} between {start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M}")
        if result.pending_windows:
            self.print(
                f"{result.pending_windows} changed window(s) start at or after {result.built_until:%Y-%m-%d %H:%M}, "
                "the models' last hourly run: a build after their hour computes them"
            )
        if result.models_changed or result.restate_range:
            self.print(f"built {len(result.models)} models in {result.seconds:.1f}s; marts published to {exports}")
        else:
            self.print(f"nothing to compute: the models are unchanged and no window due has new rows ({result.seconds:.1f}s)")

    def lines(self, items: list) -> None:
        for item in items:
            self.print(item)

    def windows_report(self, report: Readiness, lookback_hours: int, min_agents: int, as_of: datetime, as_json: bool) -> None:
        if as_json:
            self.print_json(json.dumps(report.to_dict()))
            return
        table = Table(title=f"windows in the {lookback_hours} hours before {as_of:%Y-%m-%d %H:%M} UTC")
        for column in ("window", "agents", "trajectories", "P&L std", "ready"):
            table.add_column(column, justify="right" if column != "window" else "left")
        for row in report.windows:
            std = "" if row.pnl_std is None else f"{row.pnl_std:,.2f}"
            table.add_row(row.window_id, str(row.agents), str(row.trajectories), std, "yes" if row.agents >= min_agents else "no")
        self.print(table)
        self.print(report.verdict)

    def agent_standing(self, standing: Standing, as_json: bool) -> None:
        if as_json:
            self.print_json(json.dumps(standing.to_dict()))
            return
        table = Table(title=f"{standing.source}: {len(standing.windows)} windows; P&L against the window's median agent, "
                            f"{standing.corrected_level:.1%} intervals ({standing.level:.0%} over {len(standing.agents)} agents)",
                      title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
        scored = any(a.judge_score is not None for a in standing.agents)
        columns = ["agent", "win", "P&L/win", "P&L/dec", "vs peers", "interval"] + (["judge"] if scored else []) + [""]
        for column in columns:
            table.add_column(column, justify="left" if column in ("agent", "") else "right", no_wrap=True)
        for a in standing.agents:
            score = [] if not scored else ["" if a.judge_score is None else f"{a.judge_score:.2f}"]
            table.add_row(a.agent_id, str(a.windows), f"{a.pnl_per_window:+.1f}", f"{a.pnl_per_decision:+.2f}",
                          f"{a.vs_peers.value:+.1f}", f"[{a.vs_peers.low:+.1f},{a.vs_peers.high:+.1f}]", *score, a.standing)
        self.print(table)
        above = standing.above
        self.print(f"{len(above)} of {len(standing.agents)} agents stand above their peers beyond the interval"
                   + (f": {', '.join(a.agent_id for a in above)}" if above else ""))

    def simulation_summary(self, summary: SimulationSummary, where: str) -> None:
        table = Table(title=f"simulated into {where}", show_header=False)
        table.add_column("")
        table.add_column("", justify="right")
        rows = {
            "windows": f"{summary.windows:,} ({summary.first_window} .. {summary.last_window})",
            "trajectories": f"{summary.trajectories:,}", "steps": f"{summary.steps:,}",
            "llm calls": f"{summary.llm_calls:,}", "market outcomes": f"{summary.market_outcomes:,}",
            "seconds": f"{summary.seconds:.1f}", "trajectories/minute": f"{summary.trajectories_per_minute:,.0f}",
        }
        if summary.policy_agents:
            rows["policy agents"] = f"{summary.policy_agents} playing {summary.policy_model}"
            rows["seconds/window"] = f"{summary.seconds_per_window:.2f}"
        for name, value in rows.items():
            table.add_row(name, value)
        self.print(table)

    # -- datasets -----------------------------------------------------------------------
    def dataset_built(self, name: str, result: DatasetBuildResult) -> None:
        m = result.manifest
        splits, drop = m["counts"]["splits"], m["dropout"]
        self.print(f"dataset {name} written to {result.path}")
        for split, c in splits.items():
            self.print(f"  {split}: {c['trajectories']} trajectories in {c['windows']} windows ({c['no_signal_groups']} without signal)")
        self.print(
            f"  dropout rate applied {drop['rate']:.3f} of {drop['available']} available: removed {drop['removed_by_dropout']} "
            f"trajectories ({drop['windows_dropped']} whole windows, {drop['trajectories_in_dropped_windows']} trajectories in them); "
            f"group cap removed {drop['removed_by_cap']}"
        )
        self.print(f"  content hash {m['content_hash']}")

    def dataset_list(self, where: Path, manifests: list[dict], damaged: list[str]) -> None:
        table = Table(title=f"datasets in {where}")
        for column in ("name", "created", "train traj/win", "validation traj/win", "eval traj/win", "dropout", "hash"):
            table.add_column(column)
        empty = {"trajectories": 0, "windows": 0}
        for m in manifests:
            splits = m["counts"]["splits"]
            cells = [f"{c['trajectories']}/{c['windows']}" for c in (splits.get(s, empty) for s in ("train", "validation", "eval"))]
            table.add_row(m["name"], m["created_at"], *cells, f"{m['dropout']['rate']:.3f}", m["content_hash"][:12])
        self.print(table if manifests or damaged else "no datasets yet; create one with `cli.py dataset build --name NAME`")
        for message in damaged:
            self.print(f"[yellow]{message}[/]", markup=True, highlight=False)

    def dataset_show(self, name: str, manifest: dict, rows: pl.DataFrame, samples: int) -> None:
        m, p, drop = manifest, manifest["parameters"], manifest["dropout"]
        self.print(f"[bold]{name}[/bold]  created {m['created_at']}  hash {m['content_hash']}")
        self.print(f"  source snapshot {m['source_snapshot_id']}, {len(m['model_versions'])} model versions, newest window {m['newest_window']}")
        self.print("  parameters: " + ", ".join(f"{k}={v}" for k, v in sorted(p.items())), markup=False)
        self.print(
            f"  dropout {drop['rate']:.3f}: removed {drop['removed_by_dropout']} of {drop['available']} "
            f"({drop['windows_dropped']} whole windows); group cap removed {drop['removed_by_cap']}"
        )
        self.print(_window_table(rows))
        self.print(_sample_table(rows.head(samples)))

    def dataset_exported(self, result: ExportResult, fmt: str) -> None:
        self.print(f"wrote {result.lines} {fmt} lines to {result.path}")
        if fmt == "dpo":
            self.print(f"  skipped {result.skipped_no_signal} windows without signal, "
                       f"{result.skipped_no_shared_prompt} pairs without a shared prompt")

    # -- judge --------------------------------------------------------------------------
    @contextmanager
    def judging(self, description: str) -> Iterator[tuple[Callable[[ScoreRun], None], Callable[[ScoreRun], None]]]:
        """A progress bar over a scoring run's groups; yields its (on_start, on_update) callbacks."""
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[stats]}"), TimeElapsedColumn())
        with self._bars(columns, transient=False) as progress:
            task = progress.add_task(description, total=None, stats="")

            def on_start(run: ScoreRun) -> None:
                progress.update(task, total=run.groups, completed=run.cached_groups, stats=f"{run.cached_groups} cached")

            def on_update(run: ScoreRun) -> None:
                progress.update(task, completed=run.scored_groups + len(run.failed), stats=(
                    f"failed {len(run.failed)} | tokens in {run.tokens_in:,} out {run.tokens_out:,} | ${run.cost:,.4f}"))

            yield on_start, on_update

    def scored(self, run: ScoreRun) -> None:
        self.print(
            f"{run.trajectories} trajectories in {run.groups} groups scored by {run.judge} ({run.judge_model}, "
            f"rubric {run.rubric_version}): {run.cached_groups} from the cache, {run.judged_groups} judged with "
            f"{run.requests} requests, tokens in {run.tokens_in:,} out {run.tokens_out:,}, est. ${run.cost:,.4f}; "
            f"{run.no_signal_groups} no-signal group(s), {run.truncated} truncated transcript(s) -> {run.path}")

    def agreement(self, dataset: str, rows: list[Agreement], as_json: bool) -> None:
        if as_json:
            self.print_json(json.dumps([vars(r) for r in rows]))
            return
        table = Table(title=f"judge agreement on {dataset}: mean per-window Spearman")
        for column in ("scores", "against", "mean Spearman", "windows"):
            table.add_column(column, justify="right" if column in ("mean Spearman", "windows") else "left")
        for row in rows:
            rho = "n/a" if row.mean_spearman is None else f"{row.mean_spearman:+.3f}"
            table.add_row(row.left, row.right, rho, str(row.windows))
        self.print(table)

    # -- training -----------------------------------------------------------------------
    def trained(self, result: TrainResult, on_decisions: bool) -> None:
        best = f", best {result.best_checkpoint}" if result.best_checkpoint else ""
        merged = f", merged model {result.merged}" if result.merged else ""
        if result.resumed_at and not result.steps_this_run:
            self.print(f"nothing to train: {result.run_dir.name} had already done all {result.total_steps} steps; "
                       f"run {result.run_dir}{best}{merged}")
            return
        steps = f"{result.steps_this_run} steps this time (resumed at step {result.resumed_at}; {result.steps}/{result.total_steps} in all)" \
            if result.resumed_at else f"{result.steps}/{result.total_steps} steps"
        trajectories = len(set(result.trained_ids))
        what = f"the decisions of {trajectories} trajectories" if on_decisions else \
            f"{trajectories} trajectories ({result.skipped_groups} windows skipped: no reward spread)"
        self.print(f"trained {steps} on {what}; run {result.run_dir}{best}{merged}")

    # -- evaluation ---------------------------------------------------------------------
    @contextmanager
    def evaluating(self) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
        """One progress bar per policy; yields the function that adds one and returns its advance."""
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with self._bars(columns) as progress:
            def on_policy(name: str, total: int) -> Callable[[int], None]:
                task = progress.add_task(f"eval {name}", total=total)
                return lambda n: progress.advance(task, n)

            yield on_policy

    def evaluated(self, result: EvalResult, json_path: Path, csv_path: Path) -> None:
        from babylon_rl.evaluate.run import MIN_VALID_RATE
        from babylon_rl.evaluate.table import comparison_line, design_line, eval_table

        self.print(eval_table(result))
        for role, diff in result.comparison.items():
            self.print(comparison_line(role, diff, "model", result.named_baseline))
        if "baseline" in result.comparison or "constant" in result.comparison:
            shown = "shown" if result.learning_shown else \
                "NOT shown (it must beat every reference, the baseline and the best constant at least, on P&L and trade precision)" \
                if result.model_valid else f"NOT shown (under {MIN_VALID_RATE:.0%} of its answers were valid actions)"
            self.print(f"learning {shown}")
        design = design_line(result.design_check)
        if design:
            self.print(design)
        failed = result.model_result.failed_requests
        if failed:
            self.print(f"{failed} request(s) to the endpoint failed and count as invalid answers")
        self.print(f"wrote {json_path} and {csv_path}")


    def arena_played(self, result: ArenaResult) -> None:
        o = result.options
        table = Table(title=f"arena: {o.windows} windows x {o.steps_per_window} decisions, {o.policy_agents} agents per model "
                            f"among {o.agents} personas, seed {o.seed}, news strength {o.news_strength:g}")
        for column in ("who", "mean window P&L per agent [95% CI]", "decisions", "valid", "s/window"):
            table.add_column(column, justify="left" if column == "who" else "right")
        for side in result.sides:
            table.add_row(f"{side.role} {side.model}", _interval(side.mean), f"{side.decisions:,}",
                          f"{side.valid_share:.0%}", f"{side.seconds_per_window:.2f}")
        for persona, mean in result.personas.items():
            table.add_row(f"persona {persona}", _interval(mean), "", "", "")
        self.print(table)
        for c in result.comparisons:
            self.print(f"{c['a']} - {c['b']}: {interval_text(c['difference'])} per agent and window: {c['verdict']}")
        self.print(f"wrote {result.path}")

    # -- serve and export -------------------------------------------------------------------
    def serving(self, url: str, plan: list, options) -> None:
        table = Table(box=box.SIMPLE, show_header=True)
        for column in ("model", "parent", "files"):
            table.add_column(column)
        for served in plan:
            table.add_row(served.id + "".join(f" ({a})" for a in served.aliases), served.parent or "", str(served.ref.path))
        self.print(table)
        key = "required (Authorization: Bearer KEY)" if options.api_key else "none"
        timeout = f"{options.request_timeout:g} s" if options.request_timeout else "none"
        self.print(f"serving {url} (batches of up to {options.max_batch} requests and {options.max_batch_tokens:,} tokens, "
                   f"queue {options.max_queue}, timeout {timeout}, prefix cache {options.prefix_cache_mb} MB, API key: {key}); "
                   "GET /health answers 200 once the weights are loaded", markup=False)

    def exported(self, result) -> None:
        self.print(f"exported {result.model_id} as {result.format} to {result.path} ({result.size_mb:.0f} MB, "
                   f"{result.seconds:.1f}s)", markup=False)
        if result.recorded:
            self.print(f"model_exports: recorded {result.model_id} {result.format} at {result.path}", markup=False)
        self.print(result.hint, markup=False)


def _interval(interval) -> str:
    return interval_text(interval.to_dict()) if interval else ""


def interval_text(figure: dict, digits: int = 2) -> str:
    """An interval as `Interval.to_dict` writes it, for people: `+0.117 [-0.050, +0.283]`."""
    return f"{figure['value']:+,.{digits}f} [{figure['low']:+,.{digits}f}, {figure['high']:+,.{digits}f}]"


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


def _sample_table(frame: pl.DataFrame) -> Table:
    table = Table(title="sample rows")
    for column in ("trajectory", "window", "agent", "pnl", "rank"):
        table.add_column(column, overflow="fold")
    table.add_column("messages", overflow="fold", min_width=20, max_width=60)
    for r in frame.iter_rows(named=True):
        text = r["messages"] if len(r["messages"]) <= 120 else r["messages"][:117] + "..."
        table.add_row(Text(r["trajectory_id"]), r["window_id"], Text(r["agent_id"]), f"{r['pnl']:.2f}", str(r["pnl_rank"]), Text(text))
    return table
