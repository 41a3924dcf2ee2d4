"""Population training: many settings of a menu objective train side by side over one set of frozen states.

AgileRL's population (release line 2.9) gives every member its own copy of the base model and
trains them one after another. Here the frozen blocks' states are computed once per decision and
shared (`menu_trainer.MenuTrainer.items_for`), and the members are named LoRA adapters of one PEFT model:
a member is its adapter, its optimizer, its averaged weights and its hyper-parameters (`Hyper`), so
a population of N costs about N adapters' steps over one set of states.

Every `evolve_every` steps each member answers the run's validation sample (`--validation-decisions`,
never eval), the same decisions each time, and its mean reward there is its fitness. The best is the
elite and stays as it is. The other places are filled with clones of tournament winners, or, with
`replace_bottom`, only the bottom quantile is replaced by clones of the top one (as in PBT). Each
clone then has one hyper-parameter mutated, multiplied by 0.8 or 1.2 (the LoRA rank halved or
doubled), clipped to `BOUNDS`. A rank or alpha change keeps the policy: the adapter's product is
carried over (exact when the rank grows, its best approximation of the new rank when it shrinks);
that clone's optimizer starts again.
"""

from __future__ import annotations

import json
import math
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterator

import numpy as np

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.hashing import file_sha256 as sha256
from babylon_rl.train import objectives
from babylon_rl.train.menu_items import MenuItem, MenuOptions
from babylon_rl.train.menu_trainer import MenuTrainer
from babylon_rl.train.decisions import StepResult, Task
from babylon_rl.train.checkpoints import STATE_JSON, CheckpointError, read_checkpoint_state

POPULATION_STATE = "population.pt"  # every member's weights, averaged weights, optimizer and steps: what resume reads
POPULATION_JSON = "population.json"  # hyper-parameters, fitness history and lineage: what people and the report read

# name -> (lowest, highest): where mutation may take a hyper-parameter (`--bound NAME=LOW:HIGH` narrows or widens them)
BOUNDS: dict[str, tuple[float, float]] = {
    "learning_rate": (1e-5, 1e-2),
    "lora_r": (4, 64),
    "lora_alpha": (4, 256),
    "batch": (4, 4096),  # decisions a member steps on; at most the step's --groups-per-step
    "ema": (0.0, 0.999),
    "reward_temperature": (0.05, 2.0),
    "imitation_weight": (0.0, 1.0),
    "hold_weight": (0.0, 1.0),
}


@dataclass
class Hyper:
    """One member's hyper-parameters."""

    learning_rate: float
    lora_r: int
    lora_alpha: float
    batch: int
    ema: float
    reward_temperature: float
    imitation_weight: float | None  # None: the objective's own loss (imitate or counterfactual)
    hold_weight: float = 1.0  # a logged hold's weight in the imitation loss (`MenuOptions.hold_weight`)

    def mutated(self, name: str, rng: np.random.Generator, bounds: dict[str, tuple[float, float]]) -> "Hyper":
        """This setting with `name` moved one mutation step (x0.8 or x1.2; the rank halved or doubled; the EMA's
        remaining weight 1 - ema scaled), clipped to its bounds."""
        low, high = bounds[name]
        up = bool(rng.integers(2))
        value = getattr(self, name)
        if name == "lora_r":
            new = value * 2 if up else value // 2
        elif name == "ema":
            new = 1 - (1 - value) * (1.2 if up else 0.8)
        else:
            new = value * (1.2 if up else 0.8)
        new = min(max(new, low), high)
        return replace(self, **{name: int(round(new)) if name in ("lora_r", "batch") else float(new)})

    def line(self) -> str:
        mix = f" imitation {self.imitation_weight:.2f}" if self.imitation_weight is not None else ""
        mix += f" holds {self.hold_weight:.2f}" if self.hold_weight != 1 else ""
        return (f"lr {self.learning_rate:.2e} rank {self.lora_r} alpha {self.lora_alpha:.0f} batch {self.batch} "
                f"ema {self.ema:.3f} T {self.reward_temperature:.2f}{mix}")


@dataclass(frozen=True)
class PopulationOptions:
    size: int
    evolve_every: int
    objective: str  # a menu objective's name; what it may mutate is its `Objective.mutable`
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    replace_bottom: float | None = None  # PBT: replace only this bottom share, from the same top share
    tournament: int = 2  # members drawn per tournament
    seed: int = 0

    def limits(self, groups_per_step: int) -> dict[str, tuple[float, float]]:
        """The bounds in force: the defaults, the user's, and the batch capped at the step's decisions."""
        limits = dict(BOUNDS) | {"batch": (min(BOUNDS["batch"][0], groups_per_step), groups_per_step)} | self.bounds
        for name, (low, high) in limits.items():
            if low > high:
                raise ConfigError(f"--bound {name}={low:g}:{high:g}: the lowest is above the highest; give LOW <= HIGH")
        if limits["batch"][1] > groups_per_step:
            raise ConfigError(f"--bound batch: at most --groups-per-step ({groups_per_step}), the decisions a population step hands out")
        return limits


def parse_bounds(texts: list[str] | tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """`NAME=LOW:HIGH` strings as bounds, refused in one line when the name or the numbers are not understood."""
    bounds = {}
    for text in texts:
        name, _, rest = text.partition("=")
        low, _, high = rest.partition(":")
        if name not in BOUNDS:
            raise ConfigError(f"--bound {text}: no hyper-parameter {name!r}; one of {', '.join(BOUNDS)}")
        try:
            bounds[name] = (float(low), float(high))
        except ValueError:
            raise ConfigError(f"--bound {text}: write it as NAME=LOW:HIGH, e.g. learning_rate=1e-4:1e-2") from None
    return bounds


@dataclass
class Member:
    """One setting of the population: a named adapter of the shared model, its optimizer and averaged weights."""

    name: str
    hyper: Hyper
    params: list = field(repr=False)
    averaged: list = field(repr=False)
    optimizer: object = field(repr=False)
    steps: int = 0
    items: int = 0  # training items stepped on so far
    fitness: list[dict] = field(default_factory=list)  # {"step", "score", metrics...} per evolution
    parent: str | None = None  # the member it was last cloned from


class PopulationTrainer(MenuTrainer):
    """`MenuTrainer`'s machinery for N members at once (module docstring); the loop sees one trainer.

    `train_step` steps every member on its own batch of the step's decisions; `evolve` scores them on
    validation and runs the tournament; `save` writes the elite's averaged adapter as the checkpoint
    (what eval, serve and arena load) with every member beside it (what `--resume` reads).
    """

    def __init__(self, base_model: str, options: MenuOptions, population: PopulationOptions, groups_per_step: int,
                 tasks: list[Task] = (), validation: list[Task] = (), init_adapter: Path | None = None,
                 states_dir: Path | None = None) -> None:
        self.population = population
        self.limits = population.limits(groups_per_step)
        super().__init__(base_model, options, tasks, validation, init_adapter,
                         adapters=population.size, planned_rank=int(self.limits["lora_r"][1]), states_dir=states_dir)
        import torch

        self.base_options = options
        self._evolve_rng = np.random.default_rng(population.seed + 1)
        self._batch_rng = np.random.default_rng(population.seed + 2)
        first = Hyper(options.learning_rate, options.lora_r, 2.0 * options.lora_r, min(groups_per_step, int(self.limits["batch"][1])),
                      options.ema, options.reward_temperature, objectives.get(population.objective).imitation_weight,
                      options.hold_weight)
        start = self._weights_of("default")
        self.members: list[Member] = []
        for index in range(population.size):
            hyper = first if index == 0 else self._spread(first)
            self.members.append(self._install(f"m{index}", hyper, start))
        self.model.delete_adapter("default")
        self.lineage: list[dict] = [{"step": 0, "member": m.name, "parent": None, "hyper": asdict(m.hyper)} for m in self.members]
        self.elite = self.members[0].name
        self.last_members: list[dict] = []
        torch.manual_seed(population.seed)

    # -- members -----------------------------------------------------------------------------
    def _spread(self, hyper: Hyper) -> Hyper:
        """A starting setting near `hyper`: each mutable continuous knob drawn log-uniformly within x/2..2x, in bounds."""
        changes = {}
        for name in objectives.get(self.population.objective).mutable:
            if name in ("lora_r", "batch"):
                continue
            value, (low, high) = getattr(hyper, name), self.limits[name]
            if name == "ema":
                drawn = 1 - (1 - value) * math.exp(self._evolve_rng.uniform(-math.log(2), math.log(2)))
            elif name == "imitation_weight":
                drawn = self._evolve_rng.uniform(0.5, 1.0)
            elif name == "hold_weight":  # the run's weight on holds, or down to a quarter of it
                drawn = value * self._evolve_rng.uniform(0.25, 1.0)
            else:
                drawn = value * math.exp(self._evolve_rng.uniform(-math.log(2), math.log(2)))
            changes[name] = float(min(max(drawn, low), high))
        return replace(hyper, **changes)

    def _member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)

    def _lora_modules(self, name: str) -> Iterator[tuple[str, object]]:
        for path, module in self.model.named_modules():
            if hasattr(module, "lora_A") and name in module.lora_A:
                yield path, module

    def _weights_of(self, name: str) -> dict[str, tuple]:
        """Each LoRA module's (A, B, scaling) of adapter `name`, detached copies."""
        return {path: (module.lora_A[name].weight.detach().clone(), module.lora_B[name].weight.detach().clone(),
                       float(module.scaling[name])) for path, module in self._lora_modules(name)}

    @contextmanager
    def _swapped(self, name: str, values: list) -> Iterator[None]:
        """Adapter `name`'s parameters set to `values` (its averaged weights) for the block."""
        import torch

        params = self._params_of(name)
        raw = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, v in zip(params, raw):
                    p.copy_(v)

    def _params_of(self, name: str) -> list:
        return [p for n, p in self.model.named_parameters() if f".{name}." in n]

    def _install(self, name: str, hyper: Hyper, source: dict[str, tuple]) -> Member:
        """Adapter `name` (re)made with `hyper`'s rank and alpha, holding `source`'s product (`_carried`), with a fresh
        optimizer and its averaged weights equal to it."""
        import copy

        import torch

        config = copy.deepcopy(next(iter(self.model.peft_config.values())))
        if name in self.model.peft_config:
            self._activate_other(name)
            self.model.delete_adapter(name)
        config.r, config.lora_alpha = hyper.lora_r, hyper.lora_alpha
        self.model.add_adapter(name, config)
        scaling = hyper.lora_alpha / hyper.lora_r
        with torch.no_grad():
            for path, module in self._lora_modules(name):
                a, b = _carried(*source[path], module.lora_A[name].weight, scaling)
                module.lora_A[name].weight.copy_(a)
                module.lora_B[name].weight.copy_(b)
        self.model.set_adapter(name)
        params = self._params_of(name)
        optimizer = torch.optim.AdamW(params, lr=hyper.learning_rate, weight_decay=0.0)
        return Member(name, hyper, params, [p.detach().clone() for p in params], optimizer)

    def _activate_other(self, name: str) -> None:
        other = next((n for n in self.model.peft_config if n != name), None)
        if other is not None:
            self.model.set_adapter(other)

    @contextmanager
    def _as(self, member: Member) -> Iterator[None]:
        """The shared model and `MenuTrainer`'s state are this member's for the block (its adapter active)."""
        self.model.set_adapter(member.name)
        self.params, self.averaged, self.optimizer, self.steps = member.params, member.averaged, member.optimizer, member.steps
        h = member.hyper
        self.options = replace(self.base_options, learning_rate=h.learning_rate, ema=h.ema, lora_r=h.lora_r,
                               reward_temperature=h.reward_temperature, imitation_weight=h.imitation_weight,
                               hold_weight=h.hold_weight)
        try:
            yield
        finally:
            member.steps, member.averaged = self.steps, self.averaged

    # -- the decision-trainer interface of train/loop.py --------------------------------------
    def train_step(self, tasks: list[Task]) -> StepResult:
        """Every member one step on its own batch (its `batch` of the step's decisions, drawn apart); one result for
        the loop (means over members), each member's in `last_members`."""
        items = self.items_for(tasks, self.options.variants)  # every state computed here, once, for all members
        by_task: dict[int, list[MenuItem]] = {}
        for item in items:
            by_task.setdefault(id(item.task), []).append(item)
        self.last_members, rewards_by_trajectory = [], {}
        for member in self.members:
            chosen_tasks = [tasks[i] for i in sorted(self._batch_rng.permutation(len(tasks))[: member.hyper.batch])]
            batch = [item for t in chosen_tasks for item in by_task[id(t)]]
            with self._as(member):
                stats = self.step(batch)
            member.items += len(batch)
            rewards = [float(item.rewards[i]) for item, i in zip(batch, stats["chosen"])]
            for item, reward in zip(batch, rewards):
                rewards_by_trajectory.setdefault(item.task.trajectory_id, []).append(reward)
            self.last_members.append({"member": member.name, "loss": stats["loss"], "grad_norm": stats["grad_norm"],
                                      "reward_mean": float(np.mean(rewards)), "items": len(batch),
                                      "step_seconds": stats["seconds"], **asdict(member.hyper)})
        rows = self.last_members
        return StepResult(float(np.mean([r["loss"] for r in rows])), 0.0, float(np.mean([r["grad_norm"] for r in rows])),
                          sum(len(i.packed) for i in items), sum(r["step_seconds"] for r in rows),
                          {k: float(np.mean(v)) for k, v in rewards_by_trajectory.items()},
                          float(np.mean([r["reward_mean"] for r in rows])), 1.0, 0.0, len(tasks), 0)

    def evaluate(self, tasks: list[Task]) -> dict:
        """Every member answers the validation decisions; the best one's figures (`member` names it)."""
        scores = self._scores(tasks)
        best = max(self.members, key=lambda m: scores[m.name]["score"])
        return {**scores[best.name], "member": best.name}

    def _scores(self, tasks: list[Task]) -> dict[str, dict]:
        """Each member's figures on the validation decisions `tasks` (the loop's fixed sample: the same at every evolution)."""
        items = self.items_for(tasks, 0)
        scores = {}
        for member in self.members:
            with self._as(member):
                _, metrics = self.scored(items)
            scores[member.name] = {"score": metrics["reward"], **metrics}
        return scores

    def evolve(self, tasks: list[Task], step: int) -> dict:
        """Fitness on the validation decisions `tasks`, then the tournament; the elite's figures and the population's."""
        scores = self._scores(tasks)
        for member in self.members:
            member.fitness.append({"step": step, **scores[member.name]})
        ranked = sorted(self.members, key=lambda m: scores[m.name]["score"], reverse=True)
        elite = ranked[0]
        self.elite = elite.name
        for loser, parent in self._replacements(ranked, scores):
            self._clone(parent, loser, step)
        fitness = [scores[m.name]["score"] for m in ranked]
        return {**scores[elite.name], "member": elite.name, "mean_score": float(np.mean(fitness)), "hyper": elite.hyper.line()}

    def _replacements(self, ranked: list[Member], scores: dict) -> list[tuple[Member, dict]]:
        """(the member replaced, a snapshot of its parent) pairs: tournament winners into every place but the elite's,
        or with `replace_bottom` the top share into the bottom share. Parents are snapshot first: a parent may be
        replaced itself later in the same evolution."""
        n, p = len(ranked), self.population
        if p.replace_bottom:
            count = max(1, int(p.replace_bottom * n))
            losers = ranked[max(1, n - count):]
            top = ranked[: max(1, min(count, n - len(losers)))]
            parents = [top[int(self._evolve_rng.integers(len(top)))] for _ in losers]
        else:
            losers = ranked[1:]
            parents = []
            for _ in losers:
                drawn = self._evolve_rng.choice(n, size=min(p.tournament, n), replace=False)
                parents.append(max((ranked[i] for i in drawn), key=lambda m: scores[m.name]["score"]))
        snapshots = {m.name: self._snapshot(m) for m in parents}
        return [(loser, snapshots[parent.name]) for loser, parent in zip(losers, parents)]

    def _snapshot(self, member: Member) -> dict:
        return {"name": member.name, "hyper": member.hyper, "weights": self._weights_of(member.name),
                "averaged": [a.clone() for a in member.averaged], "optimizer": member.optimizer.state_dict(),
                "steps": member.steps, "items": member.items}

    def _clone(self, parent: dict, loser: Member, step: int) -> None:
        """`loser`'s place taken by a copy of `parent` with one hyper-parameter mutated (`Hyper.mutated`)."""
        import copy

        name = str(self._evolve_rng.choice(objectives.get(self.population.objective).mutable))
        hyper = parent["hyper"].mutated(name, self._evolve_rng, self.limits)
        member = self._install(loser.name, hyper, parent["weights"])
        if (hyper.lora_r, hyper.lora_alpha) == (parent["hyper"].lora_r, parent["hyper"].lora_alpha):
            # the same shape: the parent's averaged weights and optimizer state carry over
            member.averaged = [a.clone() for a in parent["averaged"]]
            member.optimizer.load_state_dict(copy.deepcopy(parent["optimizer"]))
            for group in member.optimizer.param_groups:
                group["lr"] = hyper.learning_rate
        member.steps, member.items, member.fitness, member.parent = parent["steps"], parent["items"], loser.fitness, parent["name"]
        self.members[self.members.index(loser)] = member
        old, new = getattr(parent["hyper"], name), getattr(hyper, name)
        self.lineage.append({"step": step, "member": loser.name, "parent": parent["name"], "mutated": name,
                             "from": old, "to": new, "hyper": asdict(hyper)})

    # -- checkpoints ------------------------------------------------------------------------
    def save(self, directory: Path, state: dict, extra: dict | None = None) -> Path:
        """The elite's averaged adapter as a plain PEFT adapter (what every other command loads), with every member's
        state (`population.pt`) and the hyper-parameters, fitness and lineage (`population.json`), in one rename."""
        import random

        import torch

        elite = self._member(self.elite)
        with atomic.directory(directory) as tmp:
            with self._swapped(elite.name, elite.averaged):
                self.model.save_pretrained(tmp / "adapters", selected_adapters=[elite.name])
            for path in (tmp / "adapters" / elite.name).iterdir():
                path.rename(tmp / path.name)
            shutil.rmtree(tmp / "adapters")
            self.tokenizer.save_pretrained(tmp)
            members = [{"name": m.name, "hyper": asdict(m.hyper), "params": [p.detach().clone() for p in m.params],
                        "averaged": m.averaged, "optimizer": m.optimizer.state_dict(), "steps": m.steps, "items": m.items,
                        "fitness": m.fitness, "parent": m.parent} for m in self.members]
            rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
                   "evolve": self._evolve_rng.bit_generator.state, "batch": self._batch_rng.bit_generator.state}
            torch.save({"members": members, "lineage": self.lineage, "elite": self.elite, "rng": rng}, tmp / POPULATION_STATE)
            (tmp / POPULATION_JSON).write_text(json.dumps(self.summary(), indent=1, default=str))
            files = {p.name: sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
            options = asdict(replace(self.base_options, learning_rate=elite.hyper.learning_rate, lora_r=elite.hyper.lora_r))
            meta = {**state, "base_model": self.base_model, "options": options, "population": self.population.size,
                    "elite": self.elite, "files": files}
            (tmp / STATE_JSON).write_text(json.dumps(meta, indent=2, default=str))
        return directory

    def summary(self) -> dict:
        return {"size": self.population.size, "evolve_every": self.population.evolve_every, "elite": self.elite,
                "objective": self.population.objective, "bounds": self.limits, "replace_bottom": self.population.replace_bottom,
                "members": [{"name": m.name, "hyper": asdict(m.hyper), "steps": m.steps, "items": m.items, "parent": m.parent,
                             "fitness": m.fitness} for m in self.members],
                "lineage": self.lineage}

    def load(self, directory: Path) -> dict:
        """Every member back as saved (adapter, averaged weights, optimizer, steps, fitness), the lineage and the RNGs."""
        import random

        import torch

        state = read_checkpoint_state(directory)
        try:
            saved = torch.load(directory / POPULATION_STATE, weights_only=False)
        except Exception as exc:
            raise CheckpointError(f"checkpoint file {directory / POPULATION_STATE} cannot be loaded ({type(exc).__name__}): "
                                  "delete the checkpoint or start a new run") from None
        if len(saved["members"]) != self.population.size:
            raise ConfigError(f"{directory} holds a population of {len(saved['members'])}, not {self.population.size}: "
                              f"resume with --population {len(saved['members'])}")
        members = []
        for row in saved["members"]:
            hyper = Hyper(**row["hyper"])
            member = self._install(row["name"], hyper, self._zero_source(hyper))
            with torch.no_grad():
                for p, value in zip(member.params, row["params"]):
                    p.copy_(value)
            member.averaged = [a.clone() for a in row["averaged"]]
            member.optimizer.load_state_dict(row["optimizer"])
            member.steps, member.items, member.fitness, member.parent = row["steps"], row["items"], row["fitness"], row["parent"]
            members.append(member)
        self.members, self.lineage, self.elite = members, saved["lineage"], saved["elite"]
        rng = saved["rng"]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        self._evolve_rng.bit_generator.state = rng["evolve"]
        self._batch_rng.bit_generator.state = rng["batch"]
        return state

    def _zero_source(self, hyper: Hyper) -> dict[str, tuple]:
        """A placeholder product of `hyper`'s rank for `_install` (the saved weights are copied in right after)."""
        import torch

        name = self.members[0].name
        return {path: (torch.zeros(hyper.lora_r, module.lora_A[name].in_features),
                       torch.zeros(module.lora_B[name].out_features, hyper.lora_r), 1.0)
                for path, module in self._lora_modules(name)}

    def save_merged(self, directory: Path) -> Path:
        """The elite's averaged adapter folded into the base (`--merge`)."""
        elite = self._member(self.elite)
        self.model.set_adapter(elite.name)
        with self._swapped(elite.name, elite.averaged):
            return super().save_merged(directory)


def _carried(a_source, b_source, scaling_source: float, a_init, scaling: float) -> tuple:
    """LoRA weights (A [r, in], B [out, r]) at rank r = len(a_init) whose product scaling * B @ A equals the source's
    (scaling_source * B_source @ A_source): exactly when r is at least the source's rank (new rows of A keep their
    fresh initialisation, the new columns of B are zero), else its best rank-r approximation (truncated SVD)."""
    import torch

    rank, source_rank = a_init.shape[0], a_source.shape[0]
    if rank >= source_rank:
        a = torch.cat([a_source, a_init[source_rank:]], 0)
        b = torch.cat([b_source * (scaling_source / scaling), torch.zeros(b_source.shape[0], rank - source_rank)], 1)
        return a, b
    u, s, vh = torch.linalg.svd(scaling_source * b_source @ a_source, full_matrices=False)
    root = torch.sqrt(s[:rank] / scaling)
    alive = s[:rank] > 1e-12 * max(float(s[0]), 1e-30)
    a = torch.where(alive[:, None], root[:, None] * vh[:rank], a_init)
    b = u[:, :rank] * root * alive
    return a, b
