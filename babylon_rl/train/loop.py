"""The training loop. Read it top to bottom: config, data, model, resume, steps, checkpoints.

One step takes the next `groups_per_step` windows in a seeded order, drops windows whose
rewards are all equal (no learning signal; counted as skipped), turns the judge's scores
into group-normalised advantages and updates the policy on the logged conversations.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Literal, Protocol

import numpy as np
from pydantic import BaseModel, Field, model_validator
from rich.console import Console

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.model_names import resolve, resolve_base
from babylon_rl.settings import Home
from babylon_rl.train.data import Group, Schedule, load_scored_dataset
from babylon_rl.train import objectives
from babylon_rl.train.objectives import GENERAL, MENU_OBJECTIVES, ObjectiveName, Prepared
from babylon_rl.train.runs import RunDir
from babylon_rl.train.tracking import Tracker, public_config
from babylon_rl.train.writeback import WriteBack

if TYPE_CHECKING:
    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.decisions import StepResult
    from babylon_rl.train.memory import Plan
    from babylon_rl.train.logged_trainer import StepStats


class TrainConfig(BaseModel):
    dataset: str
    backend: Literal["torch", "art", "serverless"] = "torch"
    base_model: str = "smollm2-135m"
    run_name: str | None = None
    # None: the objective's recipe (`Objective.recipe`), else GENERAL (train/objectives/base.py); a --resume run keeps what its first run resolved
    learning_rate: float | None = Field(None, gt=0)  # LoRA on SmolLM2 (2e-4 by default); the tiny model needs ~1e-3
    max_steps: int | None = Field(None, ge=1)
    epochs: int | None = Field(None, ge=1)  # wins over max_steps
    groups_per_step: int | None = Field(None, ge=1)
    checkpoint_every: int = Field(50, ge=1)
    eval_every: int | None = Field(None, ge=1)
    keep_best: bool | None = None
    resume: bool = False
    seed: int = 0
    kl_coef: float = Field(0.0, ge=0)
    clip_eps: float = Field(0.2, gt=0)
    lora_r: int = Field(16, ge=0)  # 0: full fine-tune (the tiny model)
    inner_epochs: int = Field(1, ge=1)
    merge: bool = False
    # None: hindsight on the torch back-end (a step costs seconds: docs/TRAINING.md), GRPO on ART and with --on-policy
    objective: ObjectiveName | None = None
    awr_beta: float = Field(1.0, gt=0)
    # on-policy: the policy answers the train split's replayed decisions itself (train/grpo.py)
    on_policy: bool = False
    samples: int = Field(8, ge=2)  # answers per decision (the GRPO group)
    temperature: float = Field(0.8, gt=0)
    reward_temperature: float = Field(0.3, gt=0)  # counterfactual: softmax(reward / this) over the menu
    hold_weight: float | None = Field(None, ge=0, le=1)  # distill, menu-imitate, hindsight: a hold label's weight against a trade's 1
    trade_cost: float = Field(0.0, ge=0)  # menu, menu-pg, menu-value: taken off every trade's reward in the target
    anchor: float = Field(0.0, ge=0)  # menu-value: the starting policy's margins as a prior of this weight (MenuOptions.anchor)
    teacher_answers: Literal["all", "news"] | None = None  # distill: which of the teachers' answers it imitates (train/teachers.py)
    train_layers: int | None = Field(None, ge=0)  # LoRA on the top N blocks; 0 = all
    shares: int = Field(50, ge=1)  # menu: the size of each menu trade
    variants: int = Field(1, ge=0)  # menu: renamed copies of each train decision (0: the real names)
    micro_batch: int = Field(4096, ge=1)  # logged path: padded tokens per forward pass
    max_length: int = Field(2048, ge=16)  # logged path: tokens per chunk of a conversation
    max_new_tokens: int = Field(32, ge=4)
    device: str = "auto"
    init_from: str | None = None  # menu objectives: start the LoRA from this adapter (a run's latest checkpoint, or a directory)
    # population training (train/population.py): members side by side over one set of frozen states, evolved on validation
    population: int | None = Field(None, ge=1)
    evolve_every: int = Field(10, ge=1)
    replace_bottom: float | None = Field(None, gt=0, lt=1)
    # validation decisions a selection pass answers (--eval-every, --keep-best, an evolution): drawn once, the same each time
    validation_decisions: int = Field(256, ge=1)
    # decision objectives: train on at most this many train decisions (after distill's filter), drawn once from the seed;
    # the frozen blocks cost per distinct decision and a step of --train-layers 1 almost nothing, so epochs are cheap
    train_decisions: int | None = Field(None, ge=1)
    bounds: dict[str, tuple[float, float]] = Field(default_factory=dict)  # hyper-parameter -> (lowest, highest)

    @model_validator(mode="after")
    def _default_objective(self) -> "TrainConfig":
        if self.objective is None:
            self.objective = objectives.default_objective(self.backend, self.on_policy)
        refused = objectives.refusal(self.spec, self.__dict__)  # an option of another objective: `Option.refusal`
        if refused:
            raise ValueError(refused)
        if self.train_decisions and not self.on_decisions:
            raise ValueError(f"--train-decisions draws decisions for the decision objectives, not for {self.objective} over logged conversations")
        if self.resume:  # the run's saved config is what runs (`run_dir`): a recipe's length must not pass for a new one
            return self
        recipe = self.spec.recipe if self.backend == "torch" and not self.on_policy else {}
        for name, value in (GENERAL | recipe).items():
            if getattr(self, name) is None and not (name == "max_steps" and self.epochs):
                setattr(self, name, value)
        return self

    @property
    def name(self) -> str:
        return self.run_name or f"{self.dataset}-{self.backend}"

    @property
    def spec(self) -> objectives.Objective:
        """The objective's object: its recipe, options, preparation, loss (train/objectives/)."""
        return objectives.get(self.objective)

    @property
    def on_decisions(self) -> bool:
        """Trained on replayed decisions (its own answers, every menu answer, or the logged ones), not on scored trajectories."""
        return self.on_policy or self.spec.family in ("decisions", "menu")


@dataclass
class StepHooks:
    """Called inside the loop; tests use them to simulate a Ctrl-C at a given step."""

    before_update: Callable[[int], None] = lambda step: None


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    total_steps: int
    checkpoints: list[Path]
    best_checkpoint: Path | None
    merged: Path | None
    trained_ids: list[str]
    skipped_groups: int
    wandb_run_id: str | None
    eval: dict = field(default_factory=dict)
    resumed_at: int = 0  # the step a --resume run started from (0: a fresh run)

    @property
    def steps_this_run(self) -> int:
        return self.steps - self.resumed_at


class Trainer(Protocol):
    """What the loop needs of a trainer (logged_trainer, grpo, menu_trainer, population, art_backend): a step on a batch of the
    train split (windows of logged trajectories, or decisions), a score on the validation sample, checkpoints."""

    plan: Plan | None  # its estimated peak memory, printed before the first step; None where it made none

    def train_step(self, batch: list) -> StepStats | StepResult: ...

    def evaluate(self, validation: list) -> dict: ...

    def save(self, directory: Path, state: dict) -> Path: ...

    def load(self, directory: Path) -> dict: ...

    def save_merged(self, directory: Path) -> Path: ...


class Population(Trainer, Protocol):
    """A population of settings trained side by side (train/population.py)."""

    last_members: list[dict]  # each member's figures at the last step

    def evolve(self, validation: list, step: int) -> dict: ...


def make_trainer(config: TrainConfig, base_model: str, run: RunDir, seen: tuple[list, list] = ([], []), art_factory=None,
                 init_adapter: Path | None = None, states_dir: Path | None = None) -> Trainer:
    """The trainer for this config (a population's is `make_population`'s); a decision trainer sizes its memory by
    the train and validation decisions it will see (`scheduled`); a menu trainer starts from `init_adapter` when given
    (`warm_start`) and keeps its frozen states in `states_dir` across processes."""
    if config.spec.family == "menu":
        from babylon_rl.train.menu_trainer import MenuTrainer

        return MenuTrainer(base_model, menu_options(config), *seen, init_adapter=init_adapter, states_dir=states_dir)
    if config.on_decisions:
        from babylon_rl.train.grpo import GrpoOptions, GrpoTrainer
        from babylon_rl.train.models import resolve_device

        return GrpoTrainer(base_model, GrpoOptions(
            learning_rate=config.learning_rate, samples=config.samples, temperature=config.temperature,
            max_new_tokens=config.max_new_tokens, inner_epochs=config.inner_epochs, clip_eps=config.clip_eps,
            kl_coef=config.kl_coef, lora_r=config.lora_r, train_layers=config.train_layers, seed=config.seed,
            device=resolve_device(config.device), reward_temperature=config.reward_temperature,
            objective=config.objective if config.spec.family == "decisions" else "grpo"),
            [*seen[0], *seen[1]])
    if config.backend == "torch":
        from babylon_rl.train.logged_trainer import TorchOptions, TorchTrainer

        return TorchTrainer(base_model, TorchOptions(
            learning_rate=config.learning_rate, kl_coef=config.kl_coef, clip_eps=config.clip_eps,
            lora_r=config.lora_r, inner_epochs=config.inner_epochs, seed=config.seed,
            objective=config.objective, awr_beta=config.awr_beta, train_layers=config.train_layers,
            micro_batch=config.micro_batch, max_length=config.max_length))
    from babylon_rl.train.art_backend import ArtOptions, ArtTrainer

    return ArtTrainer(config.backend, base_model, config.name, run.root,
                      ArtOptions(config.learning_rate, config.kl_coef, config.clip_eps), art_factory)


def menu_options(config: TrainConfig) -> MenuOptions:
    """A menu objective's options (train/menu_items.py), refused in one line without a block to train."""
    from babylon_rl.train.menu_items import MenuOptions
    from babylon_rl.train.models import resolve_device

    if not 0 < config.train_layers:
        raise ConfigError(f"--objective {config.objective} trains the top --train-layers blocks from their frozen input: give it 1 or more")
    return MenuOptions(
        objective=config.spec.loss.key,
        learning_rate=config.learning_rate, reward_temperature=config.reward_temperature, shares=config.shares,
        hold_weight=config.hold_weight, trade_cost=config.trade_cost, anchor=config.anchor, variants=config.variants, lora_r=config.lora_r, train_layers=config.train_layers,
        seed=config.seed,
        device=resolve_device(config.device))


def make_population(config: TrainConfig, base_model: str, seen: tuple[list, list], init_adapter: Path | None = None,
                    states_dir: Path | None = None) -> Population:
    """`--population`'s trainer: `make_trainer`'s menu trainer, as many members side by side."""
    from babylon_rl.train.population import PopulationTrainer

    return PopulationTrainer(base_model, menu_options(config), population_options(config), config.groups_per_step, *seen,
                             init_adapter=init_adapter, states_dir=states_dir)


def load_run(home: Home, config: TrainConfig) -> tuple[RunDir, TrainConfig]:
    """The run directory and config; on --resume the run's own saved config (seed, batch size), and its steps unless
    --max-steps or --epochs names a new length."""
    run = RunDir.for_run(home, config.name)
    if config.resume:
        if not run.config.exists():
            raise ConfigError(f"nothing to resume: run {config.name!r} has no {run.config}; start it without --resume")
        saved = TrainConfig(**json.loads(run.config.read_text()))
        if config.dataset != saved.dataset:
            raise ConfigError(f"run {config.name!r} trained on dataset {saved.dataset!r}, not {config.dataset!r}: resume it with "
                              f"--dataset {saved.dataset}, or start a new --run-name")
        if config.population is not None and config.population != saved.population:
            raise ConfigError(f"run {config.name!r} is a population of {saved.population or 1}, not {config.population}: resume "
                              f"it without --population, or start a new --run-name")
        # a run is made longer by naming its new length: --max-steps or --epochs on the command line win over the saved ones
        length = {"max_steps": config.max_steps, "epochs": config.epochs} if config.max_steps or config.epochs else {}
        return run, saved.model_copy(update={"resume": True, **length})
    if run.checkpoint_steps():
        raise ConfigError(f"run {config.name!r} already has checkpoints in {run.checkpoints}: pass --resume to continue it, or a new --run-name")
    return run, config


def create_run(run: RunDir, config: TrainConfig) -> None:
    run.root.mkdir(parents=True, exist_ok=True)
    # on --resume: the saved config again, with any new length
    atomic.write_text(run.config, config.model_copy(update={"resume": False}).model_dump_json(indent=2))


def _base_model(home: Home, config: TrainConfig, console: Console) -> str:
    """The base model to train from (`resolve_base`), the default converted first when it is missing."""
    if config.backend == "torch":
        from babylon_rl.train.pretrained import DEFAULT_MODEL, init_default_model, model_dir

        if config.base_model == DEFAULT_MODEL and not (model_dir(home) / "config.json").exists():
            console.print(f"converting the default policy (SmolLM2-135M-Instruct) into {model_dir(home)} first (once, ~20 s)")
            init_default_model(home)
        return resolve_base(home, config.base_model)
    return config.base_model  # ART loads hub ids on its own machine


def train(home: Home, config: TrainConfig, database_url: str | None = None, console: Console | None = None,
          hooks: StepHooks | None = None, art_factory=None) -> TrainResult:
    console = console or Console()
    hooks = hooks or StepHooks()

    # data and run
    run, config = load_run(home, config)
    data = _load_data(home, config)
    resolved = functools.cache(lambda: _base_model(home, config, console))
    data = _drawn(_prepared(data, home, config, resolved), config)
    base_model = resolved()
    init_adapter = None
    if config.init_from:
        init_adapter, parent_ids = warm_start(home, config, base_model)
        data = replace(data, read_trajectory_ids=data.read_trajectory_ids | parent_ids)
        console.print(f"starting from the adapter {init_adapter}")
    if config.backend != "torch" and art_factory is None:
        from babylon_rl.train.art_backend import check_available

        check_available(config.backend)
    schedule = Schedule(len(data.train), config.groups_per_step, config.seed)
    total_steps = schedule.total_steps(config.max_steps, config.epochs)
    if config.population:
        check_population(config, total_steps)
    for standing in (getattr(data, "teachers", None), getattr(data, "credit", None)):
        if standing:
            console.print(standing.line())
    create_run(run, config)
    _record_inputs(run, data)

    # model, and where a resumed run left off
    validation = validation_sample(data.validation, config.validation_decisions, config.seed)  # never the eval split
    seen = (scheduled(data, schedule, total_steps), validation) if config.on_decisions else ([], [])
    population = make_population(config, base_model, seen, init_adapter, home.frozen_states) if config.population else None
    trainer = population or make_trainer(config, base_model, run, seen, art_factory, init_adapter, home.frozen_states)
    if trainer.plan:
        from babylon_rl.train.memory import headroom

        room, bound = headroom()
        console.print(f"memory: about {trainer.plan.total / 1e9:.1f} GB at its peak (estimated); {room / 1e9:.1f} GB more fits in {bound}")
    state = {"step": 0, "reward_sum": 0.0, "reward_count": 0, "best": None, "skipped": 0}
    if config.resume and run.checkpoint_steps():
        state.update(trainer.load(run.checkpoint(run.checkpoint_steps()[-1])).get("loop", {}))
        console.print(f"resuming {config.name} from step {state['step']} of {total_steps}")
    resumed_at = state["step"]

    writeback = WriteBack(database_url, config.name, base_model) if database_url else None
    if writeback:
        writeback.fail_unfinished("interrupted")

    trained_ids: list[str] = []
    with Tracker(run.root, config.name, public_config(config.model_dump()), data.manifest, console,
                 total_steps, start_step=state["step"]) as tracker:
        bookkeeping = Bookkeeping(config, validation, run, trainer, population, writeback, tracker, state, console, base_model)
        in_flight: int | None = None
        try:
            while state["step"] < total_steps:
                step = state["step"] + 1
                groups = [data.train[i] for i in schedule.batch(step - 1)]
                # logged trajectories: only windows whose scores differ teach anything; own answers: every decision
                used = groups if config.on_decisions else [g for g in groups if g.has_spread]
                rewards = {} if config.on_decisions else {s.trajectory_id: s.reward for g in used for s in g.samples}
                if writeback and used:
                    writeback.start_batch(step, sorted({g.window_id for g in used}), rewards or {g.trajectory_id: None for g in used})
                    in_flight = step
                hooks.before_update(step)
                stats = trainer.train_step(used) if used else None
                if config.on_decisions:
                    rewards = stats.rewards
                state["step"] = step
                state["skipped"] += len(groups) - len(used)
                state["reward_sum"] += sum(rewards.values())
                state["reward_count"] += len(rewards)
                if writeback and used:
                    writeback.complete_batch(step, list(rewards), stats.loss, None, rewards if config.on_decisions else None)
                    in_flight = None
                trained_ids += list(rewards)
                metrics = _on_policy_metrics(step, schedule, stats, config.learning_rate) if config.on_decisions else \
                    _metrics(step, schedule, groups, used, stats, config.learning_rate)
                tracker.log_step(metrics)
                if population:
                    tracker.log_members(step, population.last_members)
                bookkeeping.after_step(step, total_steps)
        except KeyboardInterrupt:
            bookkeeping.on_failure(in_flight, "interrupted", save=True)
            raise
        except Exception as exc:
            bookkeeping.on_failure(in_flight, f"{type(exc).__name__}: {exc}", save=False)
            raise
        merged = bookkeeping.merge() if config.merge else None

    return TrainResult(run.root, state["step"], total_steps, [run.checkpoint(s) for s in run.checkpoint_steps()],
                       bookkeeping.best_path(), merged, trained_ids, state["skipped"], tracker.wandb_run_id, bookkeeping.last_eval,
                       resumed_at)


def population_options(config: TrainConfig):
    from babylon_rl.train.population import PopulationOptions

    return PopulationOptions(config.population, config.evolve_every, config.objective, config.bounds, config.replace_bottom,
                             seed=config.seed)


def check_population(config: TrainConfig, total_steps: int) -> None:
    """A population's settings refused in one line before anything is written: crossed bounds, an evolution never reached."""
    population_options(config).limits(config.groups_per_step)
    if config.evolve_every > total_steps:
        raise ConfigError(f"--evolve-every {config.evolve_every} is longer than the run ({total_steps} steps): the population "
                          f"would never be scored; give at most {total_steps}")


def scheduled(data, schedule: Schedule, total_steps: int) -> list:
    """The train decisions the run's steps will hand the trainer (with the validation sample: what it holds at most)."""
    used = sorted({i for step in range(total_steps) for i in schedule.batch(step)})
    return [data.train[i] for i in used]


def validation_sample(validation: list, size: int, seed: int) -> list:
    """`size` of the validation split's decisions (all when fewer), drawn once from the seed and kept in split order: every
    selection pass answers the same ones, so that its score moves with the policy and not with the sample."""
    # seed + 3: the draw populations made before every selection pass shared it, so their earlier runs reproduce
    return drawn(validation, size, seed + 3)


def drawn(decisions: list, size: int, seed: int, situation: Callable[[Any], Hashable] | None = None) -> list:
    """`size` of `decisions` (all when fewer), drawn from `seed`, in their order. With `situation`, spread over its values:
    one decision of every situation (in the draw's order) before a second of any."""
    if len(decisions) <= size:
        return list(decisions)
    order = list(np.random.default_rng(seed).permutation(len(decisions)))
    if situation is not None:
        drawn_so_far: Counter = Counter()
        nth = {}
        for i in order:
            key = situation(decisions[i])
            nth[i], drawn_so_far[key] = drawn_so_far[key], drawn_so_far[key] + 1
        order.sort(key=nth.__getitem__)  # stable: the draw's order within each round
    return [decisions[i] for i in sorted(order[:size])]


def _load_data(home: Home, config: TrainConfig):
    if config.on_decisions:
        from babylon_rl.train.decisions import load_decision_data

        return load_decision_data(home, config.dataset)
    return load_scored_dataset(home, config.dataset)


def _prepared(data, home: Home, config: TrainConfig, base_model: Callable[[], str]):
    """The train decisions the objective reads (`Objective.prepare`: distill's teachers' answers, hindsight's credit)."""
    prepare = config.spec.prepare if config.on_decisions else None
    return prepare(data, Prepared(home, config, base_model)) if prepare else data


def _drawn(data, config: TrainConfig):
    """At most --train-decisions of the train decisions, spread over situations: decisions of one window and headline teach
    hindsight one target, and each costs its frozen states all the same (docs/TRAINING.md#which-train-decisions)."""
    if not (config.on_decisions and config.train_decisions):
        return data
    return replace(data, train=drawn(data.train, config.train_decisions, config.seed + 4, situation=lambda task: task.situation))


def warm_start(home: Home, config: TrainConfig, base_model: str) -> tuple[Path, frozenset[str]]:
    """The adapter `--init-from` names, and the trajectory ids its own run read (they count as read by this run).

    Refused in one line: an objective that does not train from frozen states, a path that is no adapter of this
    base model, and an adapter whose run read any of this dataset's eval windows (held out stays held out)."""
    from transformers import AutoConfig

    from babylon_rl.dataset.dataset import Dataset

    if config.spec.family != "menu":
        raise ConfigError(f"--init-from starts a menu objective ({', '.join(MENU_OBJECTIVES)}) from an adapter; "
                          f"--objective {config.objective} cannot start from one")
    ref = resolve(home, config.init_from)
    if not ref.adapter:
        raise ConfigError(f"--init-from {config.init_from}: {ref.path} is a whole model, not a LoRA adapter: name a run or a checkpoint")
    if ref.base_model and Path(ref.base_model).resolve() != Path(base_model).resolve():
        raise ConfigError(f"--init-from {config.init_from}: the adapter was trained on {ref.base_model}, not {base_model}: "
                          f"pass --base-model {ref.base_model}")
    shape = json.loads((ref.path / "adapter_config.json").read_text())
    layers = AutoConfig.from_pretrained(base_model).num_hidden_layers
    blocks = sorted(shape.get("layers_to_transform") or range(layers))
    if shape.get("r") != config.lora_r or blocks != list(range(layers - config.train_layers, layers)):
        raise ConfigError(f"--init-from {config.init_from}: the adapter has rank {shape.get('r')} on the top {len(blocks)} blocks; "
                          f"this run trains rank {config.lora_r} on {config.train_layers}: pass --lora-r {shape.get('r')} "
                          f"--train-layers {len(blocks)}")
    inputs = ref.run_dir / "inputs.json" if ref.run_dir else None
    if inputs is None or not inputs.exists():
        raise ConfigError(f"--init-from {config.init_from}: {ref.path} has no run with an inputs.json, so what it read cannot be "
                          "checked against this dataset's eval split: start from a checkpoint of a babylon-rl run")
    parent_ids = frozenset(json.loads(inputs.read_text())["trajectory_ids"])
    eval_rows = Dataset.open(home, config.dataset).read_split("eval", ["trajectory_id"])
    leaked = parent_ids & set(eval_rows["trajectory_id"].to_list() if eval_rows is not None else [])
    if leaked:
        raise ConfigError(f"--init-from {config.init_from}: its run read {len(leaked)} trajectories of dataset "
                          f"{config.dataset!r}'s eval split (e.g. {min(leaked)}): starting from it would train on held-out windows")
    return ref.path, parent_ids


def _record_inputs(run: RunDir, data) -> None:
    """inputs.json: every trajectory id training and selection read (the tests check none is an eval id)."""
    teachers = getattr(data, "teachers", None)
    extra = {"teachers": teachers.to_dict(), "teacher_answers": data.teacher_answers, "taught_decisions": len(data.train)} if teachers else {}
    if getattr(data, "credit", None):
        extra["credit"] = data.credit.to_dict()
    run.inputs.write_text(json.dumps({"dataset": data.name, "trajectory_ids": data.read_ids, **extra}, indent=1))


def _on_policy_metrics(step: int, schedule: Schedule, stats, lr: float) -> dict:
    return {
        "step": step, "epoch": (step - 1) // schedule.steps_per_epoch + 1, "reward_mean": stats.reward_mean,
        "valid_rate": stats.valid_rate, "correct_rate": stats.correct_rate, "groups_used": stats.groups_used,
        "groups_skipped": stats.groups_skipped, "trajectories": len(stats.rewards), "loss": stats.loss, "kl": stats.kl,
        "grad_norm": stats.grad_norm, "tokens": stats.tokens, "tokens_per_s": round(stats.tokens_per_second, 1),
        "learning_rate": lr, "step_seconds": round(stats.seconds, 4), "sample_seconds": round(stats.sample_seconds, 4),
    }


def _metrics(step: int, schedule: Schedule, groups: list[Group], used: list[Group], stats, lr: float) -> dict:
    rewards = [r for g in used for r in g.rewards]
    return {
        "step": step, "epoch": (step - 1) // schedule.steps_per_epoch + 1,
        "reward_mean": float(np.mean(rewards)) if rewards else 0.0, "reward_std": float(np.std(rewards)) if rewards else 0.0,
        "groups_used": len(used), "groups_skipped": len(groups) - len(used), "trajectories": len(rewards),
        "loss": stats.loss if stats else 0.0, "kl": stats.kl if stats else 0.0, "grad_norm": stats.grad_norm if stats else 0.0,
        "tokens": stats.tokens if stats else 0, "tokens_per_s": round(stats.tokens_per_second, 1) if stats else 0.0,
        "learning_rate": lr, "step_seconds": round(stats.seconds, 4) if stats else 0.0,
    }


@dataclass
class Bookkeeping:
    """What the loop does after each step besides the step: evaluation on the validation sample, checkpoints and their
    bookkeeping (trained_models rows, --keep-best, best.json), the checkpoint of an interrupted run, the merge."""

    config: TrainConfig
    validation: list  # the validation sample every selection pass answers; never the eval split
    run: RunDir
    trainer: Trainer
    population: Population | None  # the trainer again, where it is a population
    writeback: WriteBack | None
    tracker: Tracker
    state: dict
    console: Console
    base_model: str
    last_eval: dict = field(default_factory=dict)

    def after_step(self, step: int, total: int) -> None:
        if self.population:
            self.after_population_step(self.population, step, total)
            return
        eval_due = bool(self.config.eval_every and step % self.config.eval_every == 0)
        # --keep-best chooses among checkpoints: every evaluated step is one, or it could only choose at --checkpoint-every
        checkpoint_due = step % self.config.checkpoint_every == 0 or step == total or (eval_due and self.config.keep_best)
        if eval_due or (checkpoint_due and (self.config.keep_best or self.config.eval_every)):
            self.last_eval = self.trainer.evaluate(self.validation)
            self.tracker.log_eval(step, self.last_eval)
        if checkpoint_due:
            self.checkpoint(step)

    def after_population_step(self, population: Population, step: int, total: int) -> None:
        """At each evolution (and the last step): every member scored on validation, the tournament, a checkpoint of
        the elite with the whole population beside it; the best elite so far is the run's best checkpoint."""
        if step % self.config.evolve_every and step != total:
            return
        evolution = population.evolve(self.validation, step)
        self.last_eval = {k: v for k, v in evolution.items() if k != "hyper"}
        self.console.print(f"evolution at step {step}: best {evolution['score']:+.3f} mean {evolution['mean_score']:+.3f}; "
                           f"elite {evolution['member']}: {evolution['hyper']}")
        self.tracker.log_eval(step, self.last_eval, echo=False)
        self.checkpoint(step)

    def checkpoint(self, step: int) -> Path:
        path = self.run.checkpoint(step)
        key = f"step-{step}"
        if self.writeback:
            self.writeback.model_training(key, key, str(path), step, self.tracker.wandb_run_id)
        try:
            self.trainer.save(path, {"step": step, "eval": self.last_eval, "loop": dict(self.state)})
        except BaseException:
            if self.writeback:
                self.writeback.model_finished(key, "failed", None, None)
            raise
        if self.writeback:
            self.writeback.model_finished(key, "ready", self._avg_reward(), self.last_eval or None)
        if self.config.keep_best or self.config.population:
            self._keep_best(step)
        return path

    def _avg_reward(self) -> float | None:
        count = self.state["reward_count"]
        return self.state["reward_sum"] / count if count else None

    def _keep_best(self, step: int) -> None:
        """Record the checkpoint with the best validation score (best.json); with --keep-best keep only it and the
        latest (needed by --resume)."""
        score = self.last_eval.get("score")
        best = self.state.get("best")
        if score is not None and (best is None or score > best["score"]):
            self.state["best"] = {"step": step, "score": score}
            self.run.best.write_text(json.dumps(self.state["best"]))
            # the saved state must know it is the best, for a later resume
            state_file = self.run.checkpoint(step) / "state.json"
            saved = json.loads(state_file.read_text())
            saved["loop"]["best"] = self.state["best"]
            state_file.write_text(json.dumps(saved, indent=2, default=str))
        if not self.config.keep_best:
            return
        keep = {step} | ({self.state["best"]["step"]} if self.state.get("best") else set())
        for old in self.run.checkpoint_steps():
            if old not in keep:
                shutil.rmtree(self.run.checkpoint(old))
                if self.writeback:
                    self.writeback.model_finished(f"step-{old}", "archived", None, None)

    def best_path(self) -> Path | None:
        best = self.state.get("best")
        return self.run.checkpoint(best["step"]) if best else None

    def on_failure(self, in_flight: int | None, error: str, save: bool) -> None:
        if self.writeback and in_flight is not None:
            self.writeback.fail_batch(in_flight, error)
        if save and self.state["step"] > 0 and self.state["step"] not in self.run.checkpoint_steps():
            self.checkpoint(self.state["step"])
            self.console.print(f"interrupted: saved {self.run.checkpoint(self.state['step'])}; continue with --resume")

    def merge(self) -> Path:
        key = "merged"
        if self.writeback:
            self.writeback.model_training(key, f"step-{self.state['step']}-merged", str(self.run.merged),
                                          self.state["step"], self.tracker.wandb_run_id)
        best = self.best_path()
        if best is not None:  # the checkpoint validation kept is the model, not the last step's weights
            self.trainer.load(best)
        path = self.trainer.save_merged(self.run.merged)
        if self.writeback:
            self.writeback.model_finished(key, "ready", self._avg_reward(), self.last_eval or None)
        return path
