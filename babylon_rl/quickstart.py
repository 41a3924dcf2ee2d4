"""`cli.py quickstart`: the whole loop on a fresh home, one BabylonContext method per stage.

simulate -> build -> dataset build -> model init-tiny -> score -> train -> eval -> report.
Each stage is the same method the individual command calls; this module only chooses the
options, times the stages and prints where everything went.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from rich.table import Table

from babylon_rl.errors import ConfigError
from babylon_rl.settings import mask_url

if TYPE_CHECKING:
    from babylon_rl.context import BabylonContext

NAME = "quickstart"
MARKER = "quickstart.json"
TINY_CONTEXT = 640
START = datetime(2025, 1, 1)  # a fixed history: the same seed gives the same market on every machine


@dataclass(frozen=True)
class QuickstartOptions:
    # The defaults are the measured working settings (docs/BENCHMARKS.md, "Quickstart"): few
    # decisions per trajectory, so the trajectory's score is about those decisions; 16 agents
    # per window group; the tiny model fine-tuned whole (lora_r 0) with a KL penalty.
    agents: int = 16
    windows: int = 80
    steps_per_window: int = 2
    steps: int | None = None  # training steps; None = --epochs
    epochs: int = 1
    groups_per_step: int = 2
    learning_rate: float = 5e-4
    kl_coef: float = 0.05
    warmup_steps: int = 150
    eval_fraction: float = 0.2
    seed: int = 0
    force: bool = False


@dataclass
class QuickstartResult:
    stages: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    eval: object = None


def _existing(ctx: "BabylonContext") -> list[Path]:
    h = ctx.home
    return [p for p in (h.root / MARKER, h.datasets / NAME, h.runs / NAME) if p.exists()]


def _clear(ctx: "BabylonContext") -> None:
    """--force: remove what an earlier quickstart wrote into this home, so the flow starts over."""
    h = ctx.home
    for path in (h.root / MARKER, h.warehouse, h.sqlmesh_state):
        path.unlink(missing_ok=True)
    for path in (h.exports, h.datasets / NAME, h.runs / NAME, h.models / "tiny", h.root / "evals", h.root / ".cache"):
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def _stage(ctx: "BabylonContext", result: QuickstartResult, number: int, name: str, spinner: bool = False) -> Iterator[None]:
    ctx.console.rule(f"[bold][{number}/8] {name}")
    started = time.monotonic()
    if spinner:
        with ctx.console.status(f"{name} ..."):
            yield
    else:
        yield
    result.stages[name] = time.monotonic() - started
    ctx.console.print(f"[green]done[/green] {name} in {result.stages[name]:.1f}s")


def run(ctx: "BabylonContext", options: QuickstartOptions) -> QuickstartResult:
    from babylon_rl.dataset.params import BuildParams
    from babylon_rl.evaluate import EvalOptions
    from babylon_rl.judge.options import ScoreOptions

    found = _existing(ctx)
    if found and not options.force:
        raise ConfigError(f"{ctx.home.root} already has a quickstart ({found[0]}): pass --force to start it over, or use another --home")
    if options.force:
        _clear(ctx)
    ctx.home.ensure()
    result = QuickstartResult()
    target = "postgres" if ctx.database_url else "duckdb"
    if ctx.database_url:
        with _stage(ctx, result, 0, "db migrate"):
            ctx.db_migrate()
    with _stage(ctx, result, 1, f"simulate into {target}"):
        ctx.simulate(agents=options.agents, windows=options.windows, steps_per_window=options.steps_per_window,
                     seed=options.seed, start=START, target=target)
    with _stage(ctx, result, 2, "build", spinner=True):
        ctx.build()
    with _stage(ctx, result, 3, "dataset build"):
        ctx.dataset_build(BuildParams(name=NAME, lookback_hours=options.windows + 1, target_trajectories=100_000,
                                      max_group_size=max(options.agents, 5), min_actions=min(options.steps_per_window, 5),
                                      eval_fraction=options.eval_fraction, seed=options.seed), force=True)
    with _stage(ctx, result, 4, "model init-tiny"):
        # context 640: the system prompt and the current observation (~520 tokens) fit, and a
        # shorter context is ~2x faster to train than 1,024 (docs/BENCHMARKS.md)
        ctx.model_init_tiny(NAME, "tiny", hidden=64, layers=2, heads=4, vocab_size=1024, max_positions=TINY_CONTEXT,
                            max_length=TINY_CONTEXT, warmup_steps=options.warmup_steps, seed=options.seed)
    with _stage(ctx, result, 5, "score --judge heuristic"):
        ctx.score(NAME, ScoreOptions(judge="heuristic"))
    with _stage(ctx, result, 6, "train --backend torch"):
        trained = ctx.train(dataset=NAME, backend="torch", base_model="tiny", run_name=NAME,
                            learning_rate=options.learning_rate, groups_per_step=options.groups_per_step,
                            kl_coef=options.kl_coef, lora_r=0,
                            max_steps=options.steps, epochs=None if options.steps else options.epochs, seed=options.seed)
    with _stage(ctx, result, 7, "eval: base vs trained vs best constant vs logged agents"):
        result.eval = ctx.evaluate(EvalOptions(model=NAME, dataset=NAME, seed=options.seed))
    with _stage(ctx, result, 8, "report", spinner=True):
        report = ctx.report(NAME)
    result.artifacts = {
        "warehouse": mask_url(ctx.database_url) + " -> " + str(ctx.home.warehouse) if ctx.database_url else str(ctx.home.warehouse),
        "dataset": str(ctx.home.datasets / NAME), "base model": str(ctx.home.models / "tiny"),
        "run": str(trained.run_dir), "adapter": str(trained.checkpoints[-1]) if trained.checkpoints else "",
        "eval": str(trained.run_dir / "eval.json"), "report": str(report),
    }
    _finish(ctx, options, result)
    return result


def learning_verdict(evaluation) -> list[str]:
    """The learning check in words: does the trained model beat each reference outside the interval?

    Learning is shown only when it beats both the warm-started model and the best constant action
    (chosen on the training windows): a model that learnt one fixed answer cannot pass.
    """
    constant = evaluation.constant.answer if evaluation.constant else "none: the dataset has no training decisions"
    names = {"baseline": "the warm-started (imitation-only) tiny model",
             "constant": f"the best constant action on the training windows ({constant})", "logged": "the logged agents"}
    lines = []
    for role in ("baseline", "constant", "logged"):
        diff = evaluation.comparison.get(role)
        if not diff:
            continue
        d = diff["direction_accuracy_diff"]
        verdict = "[bold green]BEATS[/bold green]" if diff["beats_outside_interval"] else "[bold red]does NOT beat[/bold red]"
        lines.append(f"trained model {verdict} {names[role]} outside the 95 % interval: direction accuracy "
                     f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    if evaluation.learning_shown:
        lines.append("[bold green]learning shown[/bold green]: the trained model beats the warm-started model and the best constant action")
    else:
        lines.append("[bold red]learning NOT shown[/bold red]: the trained model must beat both the warm-started model and the best constant action")
    return lines


def _finish(ctx: "BabylonContext", options: QuickstartOptions, result: QuickstartResult) -> None:
    from babylon_rl.evaluate.table import eval_table

    (ctx.home.root / MARKER).write_text(json.dumps({"options": asdict(options), "stages_seconds": result.stages,
                                                    "artifacts": result.artifacts}, indent=2) + "\n")
    ctx.console.rule("[bold]quickstart summary")
    ctx.console.print(eval_table(result.eval))
    for line in learning_verdict(result.eval):
        ctx.console.print(line)
    table = Table(show_header=False, title=f"artifacts ({sum(result.stages.values()):.0f}s in all)")
    table.add_column("")
    table.add_column("", overflow="fold")
    for name, path in result.artifacts.items():
        table.add_row(name, path)
    ctx.console.print(table)
