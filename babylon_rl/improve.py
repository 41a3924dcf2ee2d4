"""`cli.py improve`: the game's loop, closed. The champion plays; its windows train a candidate; the
candidate replaces the champion only when it beats it on windows it never saw.

One iteration, each stage the same BabylonContext method its own command calls:

1. play: `windows` new windows in which the champion decides for `policy_agents` agents beside the
   personas (`simulate --policy`);
2. build (incremental);
3. dataset `improve-NNN` over every window so far, split by time: its eval split is the newest
   windows, which neither the candidate nor the champion trained on;
4. train: from the champion, merged into `runs/improve-NNN/merged`: by default `hindsight`, `train`'s own objective
   (the trade each headline's meaning calls for, learned from the train windows' outcomes: train/credit.py; where the
   credit is confident nowhere the candidate holds, and cannot beat the champion), or on the policy's own answers to
   the train decisions, priced by what the market did (`counterfactual`: every menu answer; `grpo`: k samples);
5. gate: replay eval of the candidate against the champion (its baseline) on the eval split; it is
   promoted only when it beats the champion beyond the interval on P&L per decision AND trade
   precision (`EvalResult.comparison["baseline"]`);
6. record: the decision in HOME/improve/state.json and runs/improve-NNN/promotion.json and, with a
   database URL, on the candidate's trained_models row (deployed, or kept ready with the gate's
   figures; the champion it replaced archived).

After the gate, HOME/improve/report.html (babylon_rl/improve_report.py) shows every iteration so far.
With `every_minutes`, an iteration starts every so many minutes (at once when the last one ran
over), `iterations` of them or, without it, until Ctrl-C or SIGTERM.

HOME/improve/state.json says which stages of the current iteration finished. It is replaced by a
rename after each stage, so a kill at any moment leaves it at a stage boundary (Ctrl-C and SIGTERM
inside a stage leave it at the stage's start); the next
`improve` resumes at the first unfinished stage, and every stage is safe to run again: play
continues after the newest window written (one transaction per batch of windows), build and
dataset build are idempotent, train resumes from the run's last checkpoint. Two loops at once
are refused by the build's lock. Windows are the simulator's from `START`: a seed is one history.
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
from rich.table import Table

from babylon_rl import atomic, locks
from babylon_rl.console import interval_text
from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.stats import ratio_interval, resample_indices
from babylon_rl.improve_state import STAGES, ImproveState, Iteration
from babylon_rl.model_names import in_home
from babylon_rl.train import objectives

if TYPE_CHECKING:
    from babylon_rl.context import BabylonContext
    from babylon_rl.dataset.params import BuildParams
    from babylon_rl.evaluate.run import PolicyResult

START = datetime(2025, 1, 1)


ON_POLICY = {"steps": 12, "groups_per_step": 16, "learning_rate": 3e-4}  # counterfactual and grpo, where the loop names none


@dataclass(frozen=True)
class ImproveOptions:
    iterations: int | None = 3  # run until this many are done; None: until stopped (with every_minutes)
    every_minutes: float | None = None  # start an iteration every so many minutes; None: each right after the last
    windows: int = 60  # new windows per iteration
    agents: int = 10  # personas
    policy_agents: int = 2  # agents the champion plays
    steps_per_window: int = 3
    news_strength: float = 1.0  # 0: nothing to learn, no candidate may be promoted
    # hindsight: `train`'s default, its recipe (`Objective.recipe`, train/objectives/); counterfactual or grpo: on the champion's own answers
    objective: str = "hindsight"
    steps: int | None = None  # training steps per iteration; None: hindsight's recipe, 12 on the champion's answers
    groups_per_step: int | None = None  # None: hindsight's recipe, 16 on the champion's answers
    samples: int = 8  # grpo only
    learning_rate: float | None = None  # None: hindsight's recipe, 3e-4 on the champion's answers
    kl_coef: float = 0.02  # on the champion's answers only
    validation_fraction: float = 0.1
    eval_fraction: float = 0.25
    eval_decisions_per_window: int = 2
    base_model: str = "smollm2-135m"
    device: str = "auto"
    seed: int = 0

    @classmethod
    def given(cls, iterations: int | None = None, every_minutes: float | None = None, **options) -> "ImproveOptions":
        """The command line's options: neither --iterations nor --every is 3 iterations, one after the other;
        --every alone has no end. A pace that is not a positive number of minutes is refused."""
        if every_minutes is not None and not (math.isfinite(every_minutes) and every_minutes > 0):
            raise ConfigError(f"--every must be a positive number of minutes, not {every_minutes:g}")
        if iterations is None and every_minutes is None:
            iterations = cls.iterations
        return cls(iterations=iterations, every_minutes=every_minutes, **options)

    def fixed(self) -> dict:
        """What a resumed loop must share with the one that started: everything but how many iterations to run and how often."""
        return {k: v for k, v in asdict(self).items() if k not in ("iterations", "every_minutes")}




def run_improve(ctx: "BabylonContext", options: ImproveOptions) -> ImproveState:
    """Run iterations until `options.iterations` are done (or until stopped), each from the first stage it has not finished;
    with `options.every_minutes`, each new one starts that long after the one before it started here."""
    path = ctx.home.improve_state
    with locks.exclusive(path.with_name(".lock"), 0, refusal="another improve loop is running in this home ({holder} holds {path})"), \
            _sigterm_as_interrupt():
        state = _load(path, options)
        started = None
        while _next_iteration(ctx, options, state, path, started):
            started = time.monotonic()
            _finish_iteration(ctx, options, state, path)
    _print_summary(ctx, state, path)
    return state


def _next_iteration(ctx: "BabylonContext", options: ImproveOptions, state: ImproveState, path: Path, started: float | None) -> bool:
    """Whether an iteration is to run: the unfinished last one, or a new one (recorded once its time has come)."""
    if state.iterations and not set(state.done) >= set(STAGES):
        return True
    if options.iterations is not None and len(state.iterations) >= options.iterations:
        return False
    if started is not None and options.every_minutes is not None:
        _wait_until(ctx, len(state.iterations), started + options.every_minutes * 60)
    state.iterations.append(Iteration(iteration=len(state.iterations), champion=state.champion))
    state.done = []
    _save(path, state)
    return True


def _wait_until(ctx: "BabylonContext", iteration: int, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        return
    at = datetime.now() + timedelta(seconds=left)
    ctx.console.print(f"iteration {iteration} starts at {at:%Y-%m-%d %H:%M:%S} (--every); Ctrl-C stops the loop between iterations")
    try:
        while left > 0:
            time.sleep(left)
            left = deadline - time.monotonic()
    except KeyboardInterrupt as exc:
        raise KeyboardInterrupt(f"stopped before iteration {iteration} began: {iteration} done, the same command goes on") from exc


def _finish_iteration(ctx: "BabylonContext", options: ImproveOptions, state: ImproveState, path: Path) -> None:
    """The stages not done yet, state.json saved after each; then the report. An interrupt inside a stage leaves
    state.json where the stage began, so the next call runs that stage again."""
    from babylon_rl.improve_report import write_improve_report

    for stage in STAGES:
        if stage not in state.done:
            try:
                _run_stage(ctx, options, state, stage)
            except KeyboardInterrupt as exc:
                raise KeyboardInterrupt(f"stopped in iteration {state.current.iteration}'s {stage}: the same command "
                                        f"resumes at that stage ({path})") from exc
            state.done.append(stage)
            _save(path, state)
    report_path = write_improve_report(ctx.home, state)
    ctx.console.print(_gate_line(ctx, state.current))
    ctx.console.print(f"wrote {report_path}")


def report(ctx: "BabylonContext") -> Path:
    """`report --improve`: the loop's page (HOME/improve/report.html) written again from its state.json."""
    from babylon_rl.improve_report import write_improve_report

    path = write_improve_report(ctx.home)
    ctx.console.print(f"wrote {path}")
    return path


def _print_summary(ctx: "BabylonContext", state: ImproveState, path: Path) -> None:
    """One row per iteration (who played, what the policy agents and the personas made), then the gate's decisions."""
    personas = sorted({p for it in state.iterations for p in it.play if p != "policy"})
    table = Table(title="improve: mean window P&L per agent (policy agents with its 95% CI)")
    for column in ("iteration", "champion (played)", "policy agents", *personas):
        table.add_column(column, overflow="fold")
    for it in state.iterations:
        table.add_row(str(it.iteration), in_home(ctx.home, it.champion), interval_text(it.play["policy"]) if "policy" in it.play else "",
                      *[f"{it.play[p]['value']:+,.2f}" if p in it.play else "" for p in personas])
    ctx.console.print(table)
    for it in state.iterations:
        if it.promoted is not None:
            ctx.console.print(_gate_line(ctx, it))
    ctx.console.print(f"champion: {in_home(ctx.home, state.champion)}; state in {path}")


def _gate_line(ctx: "BabylonContext", it: Iteration) -> str:
    acc, pnl = it.gate["direction_accuracy"], it.gate["pnl_per_decision"]
    decision = f"promoted {in_home(ctx.home, it.candidate)}" if it.promoted else f"kept {in_home(ctx.home, it.champion)}"
    powerless = " (this gate could not recognise even the news rule)" if it.gate.get("could_recognise_news_rule") is False else ""
    precision = it.gate.get("trade_precision")
    precision_text = f", trade precision {interval_text(precision, 3)}" if precision else ""
    return (f"iteration {it.iteration} gate, candidate - champion on held-out windows: P&L per decision {interval_text(pnl)}"
            f"{precision_text}, direction accuracy {interval_text(acc, 3)}: {decision}{powerless}")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the loop as Ctrl-C does (training saves its checkpoint, state.json stays at a stage boundary)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum, frame) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _load(path, options: ImproveOptions) -> ImproveState:
    if not path.exists():
        return ImproveState(options=options.fixed(), champion=options.base_model)
    state = ImproveState.model_validate_json(path.read_text())
    if state.options != json.loads(json.dumps(options.fixed())):
        changed = sorted(k for k in options.fixed() if state.options.get(k) != options.fixed()[k])
        raise ConfigError(f"{path} holds a loop with other options ({', '.join(changed)}): "
                          "pass the same options to continue it, or use another --home")
    return state


def _save(path, state: ImproveState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, state.model_dump_json(indent=2) + "\n")


def _run_stage(ctx: "BabylonContext", options: ImproveOptions, state: ImproveState, stage: str) -> None:
    it = state.current
    ctx.console.rule(f"[bold]iteration {it.iteration}: {stage}")
    started = time.monotonic()
    if stage == "play":
        _play(ctx, options, it)
    elif stage == "build":
        ctx.build()
        it.play = _policy_pnl(ctx, options, it.iteration)
    elif stage == "dataset":
        ctx.dataset_build(dataset_params(options, it.iteration), force=True)
    elif stage == "train":
        it.candidate = _train(ctx, options, it)
    else:
        _gate(ctx, options, state)
    it.seconds[stage] = round(time.monotonic() - started, 1)


def _name(iteration: int) -> str:
    return f"improve-{iteration:03d}"


def _window_range(options: ImproveOptions, iteration: int) -> tuple[datetime, datetime]:
    first = START + timedelta(hours=iteration * options.windows)
    return first, first + timedelta(hours=options.windows)


def _play(ctx: "BabylonContext", options: ImproveOptions, it: Iteration) -> None:
    """The iteration's windows not written yet: a killed play resumes after its last written batch."""
    from babylon_rl.simulate import open_sink
    from babylon_rl.train.pretrained import DEFAULT_MODEL, model_dir

    if it.champion == DEFAULT_MODEL and not (model_dir(ctx.home) / "config.json").exists():
        ctx.model_init(DEFAULT_MODEL)
    first, end = _window_range(options, it.iteration)
    target = "postgres" if ctx.database_url else "duckdb"
    sink = open_sink(target, ctx.database_url, ctx.home)
    try:
        newest = sink.newest_window()
    finally:
        sink.close()
    if newest is not None and newest >= first:
        first = newest + timedelta(hours=1)
    remaining = int((end - first) / timedelta(hours=1))
    if remaining <= 0:
        ctx.console.print(f"the windows up to {end:%Y-%m-%dT%H:%M} are written already")
        return
    ctx.simulate(agents=options.agents, windows=remaining, steps_per_window=options.steps_per_window, seed=options.seed,
                 start=first, target=target, news_strength=options.news_strength, policy=it.champion,
                 policy_agents=options.policy_agents, device=options.device)


def dataset_params(options: ImproveOptions, iteration: int) -> "BuildParams":
    """Every window so far, split by time: the eval split is the newest windows, which no model of the loop trained on."""
    from babylon_rl.dataset.params import BuildParams

    return BuildParams(name=_name(iteration), lookback_hours=(iteration + 1) * options.windows + 1,
                       target_trajectories=1_000_000, max_dropout=0.0, max_group_size=options.agents + options.policy_agents,
                       min_actions=min(options.steps_per_window, 5), validation_fraction=options.validation_fraction,
                       eval_fraction=options.eval_fraction, seed=options.seed)


def _train(ctx: "BabylonContext", options: ImproveOptions, it: Iteration) -> str:
    from babylon_rl.train.runs import RunDir

    name = _name(it.iteration)
    resume = bool(RunDir.for_run(ctx.home, name).checkpoint_steps())
    common = dict(dataset=name, run_name=name, backend="torch", base_model=it.champion, merge=True, objective=options.objective,
                  seed=options.seed, device=options.device, resume=resume or None)
    if objectives.get(options.objective).recipe:  # the recipe's own defaults where the loop names none
        result = ctx.train(**common, learning_rate=options.learning_rate, groups_per_step=options.groups_per_step,
                           max_steps=options.steps)
    else:
        result = ctx.train(**common, on_policy=True, learning_rate=options.learning_rate or ON_POLICY["learning_rate"],
                           groups_per_step=options.groups_per_step or ON_POLICY["groups_per_step"],
                           max_steps=options.steps or ON_POLICY["steps"], samples=options.samples, kl_coef=options.kl_coef,
                           inner_epochs=2)
    return in_home(ctx.home, result.merged)


def _gate(ctx: "BabylonContext", options: ImproveOptions, state: ImproveState) -> None:
    from babylon_rl.evaluate import EvalOptions

    it = state.current
    result = ctx.evaluate(EvalOptions(model=it.candidate, dataset=_name(it.iteration), baseline=it.champion, seed=options.seed,
                                      device=options.device, max_decisions_per_window=options.eval_decisions_per_window))
    versus = result.comparison["baseline"]
    design = result.design_check  # the news rule vs the best constant on the same decisions: had this gate any power?
    by_role = {p.role: p for p in result.policies}
    it.gate = {"direction_accuracy": versus["direction_accuracy_diff"], "pnl_per_decision": versus["pnl_per_decision_diff"],
               "trade_precision": versus["trade_precision_diff"] if versus["precision_estimable"] else None,
               "could_recognise_news_rule": None if design is None else bool(design["beats_outside_interval"]),
               "candidate": _held_out(by_role["model"]), "champion": _held_out(by_role["baseline"])}
    it.promoted = bool(versus["beats_outside_interval"])
    replaced = state.champion
    if it.promoted:
        state.champion = it.candidate
    record = {"iteration": it.iteration, "candidate": it.candidate, "champion": replaced, "promoted": it.promoted,
              "gate": it.gate, "champion_after": state.champion}
    run_dir = ctx.home.runs / _name(it.iteration)
    atomic.write_text(run_dir / "promotion.json", json.dumps(record, indent=2) + "\n")
    if ctx.database_url:
        _record_in_database(ctx.database_url, ctx.home.root, it, replaced)


def _held_out(policy: "PolicyResult") -> dict:
    """A policy's own held-out figures at the gate, with their intervals (the report plots them side by side)."""
    return {key: policy.metrics[key].to_dict() for key in ("direction_accuracy", "pnl_per_decision")}


def _record_in_database(url: str, home: Path, it: Iteration, replaced: str) -> None:
    """The candidate's trained_models row: deployed when promoted (the champion it replaced archived), else kept ready;
    the gate's figures and the model it was measured against in evalMetrics.gate."""
    from babylon_rl import db

    gate = {"gate": {**it.gate, "promoted": it.promoted, "against": replaced}}
    with db.connect(url) as conn, conn.transaction():
        conn.execute(
            """UPDATE "trained_models" SET "status" = %s, "deployedAt" = CASE WHEN %s THEN now() ELSE "deployedAt" END,
                      "evalMetrics" = COALESCE("evalMetrics", '{}'::jsonb) || %s::jsonb, "updatedAt" = now()
               WHERE "modelId" = %s""",
            ("deployed" if it.promoted else "ready", it.promoted, json.dumps(gate), f"{_name(it.iteration)}:merged"))
        if it.promoted:
            conn.execute(
                """UPDATE "trained_models" SET "status" = 'archived', "archivedAt" = now(), "updatedAt" = now()
                   WHERE "storagePath" = %s AND "status" = 'deployed'""", (str(home / replaced),))


def _policy_pnl(ctx: "BabylonContext", options: ImproveOptions, iteration: int) -> dict:
    """Mean window P&L per agent of the policy agents and of each persona in this iteration's windows, from the marts,
    with a bootstrap interval over windows."""
    from babylon_rl import warehouse

    first, end = _window_range(options, iteration)
    with warehouse.connect(ctx.home, read_only=True) as conn:
        rows = conn.execute(
            """WITH personas AS (
                 SELECT "agentId" AS agent_id, any_value(json_extract_string("metadataJson", '$.persona')) AS persona
                 FROM raw.trajectories GROUP BY 1)
               SELECT p.window_id, personas.persona, avg(p.pnl)
               FROM babylon.agent_window_pnl AS p JOIN personas USING (agent_id)
               WHERE p.window_start >= ? AND p.window_start < ?
               GROUP BY ALL ORDER BY 1, 2""", [first, end]).fetchall()
    windows = sorted({w for w, _, _ in rows})
    index = {w: i for i, w in enumerate(windows)}
    indices = resample_indices(len(windows), 1000, options.seed)
    figures = {}
    for persona in sorted({p for _, p, _ in rows}):
        pnl, present = np.zeros(len(windows)), np.zeros(len(windows))
        for w, p, value in rows:
            if p == persona:
                pnl[index[w]], present[index[w]] = value, 1.0
        figures[persona] = ratio_interval(pnl, present, indices).to_dict()
    return figures
