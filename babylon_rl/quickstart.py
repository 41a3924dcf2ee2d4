"""`cli.py quickstart`: the whole loop on a fresh home, one BabylonContext method per stage.

simulate -> build -> dataset build -> model init -> score -> agents (who stands above its peers on the train
windows: the line to beat) -> train (the imitation baseline: every logged answer's menu entry, from frozen states)
-> train (hindsight: on the same decisions, the trade of the stock the fresh news names that a critic of the headlines,
learned from outcomes on the train windows, calls for; train/credit.py)
-> eval (the three models answer from the menu on one shared base: its frozen blocks run once) -> report. Each stage is the same method the individual command calls; this module only
chooses the options, times the stages and prints where everything went. It drives a BabylonContext as the CLI does (cli.py calls
run_quickstart), so the context does not know about it: no import cycle between the two.
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
from babylon_rl.train.pretrained import DEFAULT_MODEL
from babylon_rl.settings import mask_url

if TYPE_CHECKING:
    from babylon_rl.context import BabylonContext
    from babylon_rl.dataset.params import BuildParams

NAME = "quickstart"
IMITATION = "quickstart-imitation"
MARKER = "quickstart.json"
START = datetime(2025, 1, 1)  # a fixed history: the same seed gives the same market on every machine
STAGES = 10


@dataclass(frozen=True)
class QuickstartOptions:
    # The defaults are sized to 2 CPU cores (docs/BENCHMARKS.md, "Quickstart"): SmolLM2-135M with LoRA on
    # its top block, from frozen states (docs/TRAINING.md).
    agents: int = 10
    # Many windows, two held-out decisions each: decisions of one window share its market moves, so the eval's
    # interval (a bootstrap over windows) narrows mostly with windows. 24 held-out windows x 6 decisions could not
    # recognise even the rule that reads the news; 240 x 1 did while shorts were priced, and on the game's rules (a sell
    # needs the shares: evaluate/menu.py) the second decision a window halves the noise of a base that buys at random
    # (docs/BENCHMARKS.md#quickstart; tests/test_learning.py::test_the_quickstarts_eval_design_recognises_a_news_reader).
    windows: int = 480
    steps_per_window: int = 3
    news_strength: float = 1.0  # 0: headlines say nothing about prices (the control: no learning to show)
    # fresh: every headline worded afresh, the held-out (latest) half in phrasings the rest never used (simulate/news.py)
    wording: str = "fresh"
    # Training is `train`'s own recipe for hindsight and its imitation baseline (their `Objective.recipe`, train/objectives/:
    # LoRA on the top block from frozen states, many epochs over few decisions, the checkpoint chosen on validation), run twice as long: the
    # student's validation still rose at the recipe's 192 steps. On 2 cores with native bf16 each distinct decision's
    # frozen states cost ~0.3 s once (~0.6 s in float32 without it) and a step of 32 ~0.22 s (docs/BENCHMARKS.md#quickstart).
    # Both runs draw the same train decisions (every agent's, the same seed), so their frozen states are computed once.
    steps: int | None = 384  # training steps, the same for the student and the imitation baseline
    groups_per_step: int | None = None  # decisions per step
    learning_rate: float | None = None
    # distinct train decisions both runs read, spread over situations (loop.drawn): their frozen states are what training
    # costs, and 480 spread hold more distinct situations than 640 drawn at random did (docs/TRAINING.md#which-train-decisions)
    train_decisions: int | None = 480
    validation_decisions: int = 128  # each selection pass's, every `eval_every` steps
    eval_every: int = 32
    shares: int = 50  # the menu's trade size, and the references' in the eval
    validation_fraction: float = 0.1
    eval_fraction: float = 0.5  # the latest 240 windows
    eval_decisions_per_window: int = 2
    base_model: str = "smollm2-135m"
    device: str = "auto"
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
    from babylon_rl.dataset.store import remove

    remove(h, NAME)
    for path in (h.exports, h.runs / NAME, h.runs / IMITATION, h.root / "evals", h.root / ".cache"):
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def _stage(ctx: "BabylonContext", result: QuickstartResult, number: int, name: str, spinner: bool = False) -> Iterator[None]:
    ctx.console.rule(f"[bold][{number}/{STAGES}] {name}")
    started = time.monotonic()
    if spinner:
        with ctx.console.status(f"{name} ..."):
            yield
    else:
        yield
    result.stages[name] = time.monotonic() - started
    ctx.console.print(f"[green]done[/green] {name} in {result.stages[name]:.1f}s")


def run_quickstart(ctx: "BabylonContext", options: QuickstartOptions) -> QuickstartResult:
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
                     seed=options.seed, start=START, target=target, news_strength=options.news_strength,
                     wording=options.wording)
    with _stage(ctx, result, 2, "build"):
        ctx.build()
    with _stage(ctx, result, 3, "dataset build"):
        ctx.dataset_build(dataset_params(options), force=True)
    with _stage(ctx, result, 4, f"model init ({options.base_model})"):
        if options.base_model == DEFAULT_MODEL:
            ctx.model_init(DEFAULT_MODEL)
    with _stage(ctx, result, 5, "score --judge heuristic"):
        ctx.score(NAME, ScoreOptions(judge="heuristic"))
    common = dict(dataset=NAME, backend="torch", base_model=options.base_model, learning_rate=options.learning_rate,
                  groups_per_step=options.groups_per_step, max_steps=options.steps, shares=options.shares, seed=options.seed,
                  device=options.device, train_decisions=options.train_decisions, validation_decisions=options.validation_decisions,
                  eval_every=options.eval_every)
    with _stage(ctx, result, 6, "agents: who stands above its peers on the train windows (the line to beat)"):
        best_agents = _best_agents(ctx)
    artifacts = {"warehouse": mask_url(ctx.database_url) + " -> " + str(ctx.home.warehouse) if ctx.database_url else str(ctx.home.warehouse),
                 "dataset": str(ctx.home.datasets / NAME), "base model": str(ctx.home.models / options.base_model)}
    with _stage(ctx, result, 7, "train --objective menu-imitate (the imitation baseline, same budget, frozen blocks once)"):
        ctx.train(run_name=IMITATION, objective="menu-imitate", **common)
    with _stage(ctx, result, 8, "train --objective hindsight (the same decisions: the trade each headline's meaning calls for)"):
        trained = ctx.train(run_name=NAME, objective="hindsight", **common)
    _release_training_states()
    with _stage(ctx, result, 9, "eval: trained vs base vs imitation vs best constant vs logged agents"):
        result.eval = ctx.evaluate(EvalOptions(model=f"{NAME}@best", dataset=NAME, imitation=f"{IMITATION}@best", seed=options.seed,
                                               device=options.device, best_agents=best_agents,
                                               max_decisions_per_window=options.eval_decisions_per_window, menu_shares=options.shares))
    with _stage(ctx, result, 10, "report", spinner=True):
        report = ctx.report(NAME)
    result.artifacts = artifacts | {
        "imitation run": str(ctx.home.runs / IMITATION),
        "run": str(trained.run_dir), "adapter": str(trained.best_checkpoint or (trained.checkpoints[-1] if trained.checkpoints else "")),
        "eval": str(trained.run_dir / "eval.json"), "report": str(report),
    }
    _finish(ctx, options, result)
    return result


def _best_agents(ctx: "BabylonContext") -> tuple[str, ...]:
    """The standing on the train windows (printed), then the agents above their peers there that hold on validation
    (`teachers.choose`): the eval shows their own held-out play as the line to beat. None (said in one line) when no agent
    stands out; the student trains all the same, as it needs no teacher."""
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.train.teachers import NoTeachers, choose

    ctx.agents(dataset=NAME, split="train")
    try:
        best = choose(Dataset.open(ctx.home, NAME))
    except NoTeachers:
        ctx.console.print("no agent stands above its peers beyond the interval on the train windows (and holds on "
                          "validation): the eval has no best agents' line")
        return ()
    ctx.console.print(best.line(label="best agents"))
    return tuple(best.chosen)


def dataset_params(options: QuickstartOptions) -> "BuildParams":
    """The quickstart's dataset: every simulated window, split by time into train / validation / eval."""
    from babylon_rl.dataset.params import BuildParams

    return BuildParams(name=NAME, lookback_hours=options.windows + 1, target_trajectories=100_000,
                       max_group_size=max(options.agents, 5), min_actions=min(options.steps_per_window, 5),
                       validation_fraction=options.validation_fraction, eval_fraction=options.eval_fraction, seed=options.seed)


def learning_verdict(evaluation) -> list[str]:
    """The learning check in words: does the trained model beat each reference beyond the interval?

    Learning is shown only when it beats every reference present (its base model and the best
    constant action at least) on P&L per decision AND trade precision (evaluate/run.py): a model
    that learnt one fixed answer, or only the answer format, cannot pass.
    """
    from babylon_rl.evaluate.run import MIN_VALID_RATE
    from babylon_rl.evaluate.table import comparison_line, design_line

    lines = []
    for role in ("baseline", "constant", "logged", "imitation"):
        diff = evaluation.comparison.get(role)
        if diff:
            lines.append(comparison_line(role, diff).replace("BEATS", "[bold green]BEATS[/bold green]")
                         .replace("does NOT beat", "[bold red]does NOT beat[/bold red]"))
    design = design_line(evaluation.design_check)
    if design:
        lines.append(design)
    if not evaluation.model_valid:
        lines.append(f"[bold red]learning NOT shown[/bold red]: under {MIN_VALID_RATE:.0%} of the trained model's held-out "
                     "answers were valid actions")
    elif evaluation.learning_shown:
        lines.append("[bold green]learning shown[/bold green]: the trained model beats every reference on held-out windows, "
                     "on P&L per decision and trade precision, beyond the 95 % interval")
    else:
        lines.append("[bold red]learning NOT shown[/bold red]: the trained model must beat every reference above on held-out "
                     "windows, on P&L per decision and trade precision, beyond the 95 % interval")
    if "teachers" in evaluation.comparison:  # the aim past the claim: a student beyond the best agents it could learn from
        lines.append(comparison_line("teachers", evaluation.comparison["teachers"]))
    return lines


def _release_training_states() -> None:
    """The frozen states the two runs shared (~0.4 MB a decision) are of no use to the eval, which runs its own: freed
    before it, so that the process's peak is the eval's or the training's, not their sum."""
    import gc

    from babylon_rl.train.state_cache import SHARED_STATES

    SHARED_STATES.clear()
    gc.collect()


RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
HELDOUT_BENCHMARK = RESULTS / "distill-one-block" / "heldout-eval.json"


def heldout_benchmark_line(path: Path) -> str | None:
    """What the one-block student's committed held-out evaluation (docs/BENCHMARKS.md#the-one-block-student) says in one
    line: its P&L and precision against its teachers', the references it beats on both, the verdict. None outside a
    checkout."""
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    figures = {p["role"]: p["metrics"] for p in result["policies"]}

    def of(role: str) -> str:
        return f"{figures[role]['pnl_per_decision']['value']:+.1f} P&L, {figures[role]['trade_precision']['value']:.2f} precision"

    beaten = [name for role, name in (("baseline", "its base"), ("constant", "the best constant"), ("logged", "the logged agents"),
                                      ("imitation", "imitation")) if result["comparison"].get(role, {}).get("beats_outside_interval")]
    # another run's figures: never worded as this run's verdict, which the lines above give
    return (f"not this run: the committed one-block benchmark ({result['created_at'][:10]}, {result['windows']} held-out windows "
            f"of a world no training step read): the student {of('model')} against its teachers' {of('teachers')}; it beat "
            f"{', '.join(beaten) or 'nothing'} on both metrics (docs/BENCHMARKS.md#the-one-block-student)")


def _finish(ctx: "BabylonContext", options: QuickstartOptions, result: QuickstartResult) -> None:
    from babylon_rl.evaluate.table import eval_table

    (ctx.home.root / MARKER).write_text(json.dumps({"options": asdict(options), "stages_seconds": result.stages,
                                                    "artifacts": result.artifacts}, indent=2) + "\n")
    ctx.console.rule("[bold]quickstart summary")
    ctx.console.print(eval_table(result.eval))
    for line in learning_verdict(result.eval):
        ctx.console.print(line)
    benchmark = heldout_benchmark_line(HELDOUT_BENCHMARK)
    if benchmark:
        ctx.console.print(benchmark)
    table = Table(show_header=False, title=f"artifacts ({sum(result.stages.values()):.0f}s in all)")
    table.add_column("")
    table.add_column("", overflow="fold")
    for name, path in result.artifacts.items():
        table.add_row(name, path)
    ctx.console.print(table)
