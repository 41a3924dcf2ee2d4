"""What an objective is: one object (`Objective`) with its name, one-line help, recipe, own options, data
preparation, menu loss and what a population may mutate; and what an option of `train` is (`Option`).

Light on purpose (click and the standard library): `cli.py` imports the registry at every start to build `train`'s
options and help. Whatever needs torch, numpy or the data is imported inside the functions that use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

if TYPE_CHECKING:
    import numpy as np
    import torch

    from babylon_rl.settings import Home
    from babylon_rl.train.decisions import Task
    from babylon_rl.train.menu_losses import MenuBatch, MenuOptions

# What an option left unset means: the objective's recipe, else GENERAL. The one-block recipe (ONE_BLOCK) is the student
# measured to teach on 2 cores (docs/TRAINING.md#the-default-recipe): LoRA on the top block, which runs at the menu's
# choices only, so a step is cheap and what costs is each distinct decision's frozen states, paid once; many epochs over
# a few hundred decisions, the checkpoint chosen on validation. A recipe applies on the torch back-end without
# --on-policy; everywhere else GENERAL does.
GENERAL: dict[str, Any] = dict(learning_rate=2e-4, groups_per_step=8, train_layers=4, hold_weight=1.0, teacher_answers="all",
                               keep_best=False)
ONE_BLOCK: dict[str, Any] = dict(learning_rate=3e-3, groups_per_step=32, train_layers=1, hold_weight=0.3, train_decisions=640,
                                 max_steps=192, eval_every=16, keep_best=True)


@dataclass(frozen=True)
class Option:
    """One option of `train`: its flags, the `TrainConfig` field it sets, its help and click type. `default` is the
    click default (None: unset, so the recipe's or GENERAL's value applies, or `unset` says what happens then).

    `refusal`: an option only the objectives that name it take; given to another objective (a value other than
    `neutral`), `TrainConfig` refuses it in one line with this text, `{takers}` and `{objective}` filled in."""

    flags: tuple[str, ...]
    name: str
    help: str
    type: Any = None
    default: Any = None
    show_default: bool = False
    is_flag: bool = False
    multiple: bool = False
    metavar: str | None = None
    required: bool = False
    unset: str | None = None  # what an unset value means where no recipe names it
    refusal: str | None = None
    neutral: Any = None

    def given(self, value: Any) -> bool:
        return value is not None and value != self.neutral


@dataclass(frozen=True)
class MenuLoss:
    """A menu objective's fit (train/menu_trainer.py computes every menu answer's log-probability from the frozen states; this
    says what to make of them): `target`, the menu entry each decision is fitted to (-1: none on the menu; None: the
    logged answer's, `menu_losses.logged_index`), and `loss`, a batch's mean loss. `key` is the name
    `menu_items.MenuOptions.objective` takes. `fits_target`: a loss of the target entry, which a population's
    `imitation_weight` mixes with counterfactual's."""

    key: str
    loss: Callable[["MenuBatch", "MenuOptions"], "torch.Tensor"]
    target: Callable[["Task", list[str], "np.ndarray"], int] | None = None
    fits_target: bool = False

    def target_index(self, task: "Task", answers: list[str], rewards: "np.ndarray") -> int:
        from babylon_rl.train.menu_losses import logged_index

        return (self.target or logged_index)(task, answers, rewards)


class Settings(Protocol):
    """What a preparation reads of the training config (`loop.TrainConfig`)."""

    dataset: str
    seed: int
    device: str
    teacher_answers: str | None


@dataclass(frozen=True)
class Prepared:
    """What a preparation is handed: the home, the config, and the base model the run trains, resolved (the default
    converted on first use) only when a preparation asks for it: distill refuses a dataset without teachers first."""

    home: "Home"
    config: Settings
    resolve_base: Callable[[], str]

    @property
    def base_model(self) -> str:
        return self.resolve_base()


# where an objective trains: over a dataset's scored conversations (logged), on replayed decisions with the policy's own
# or the logged answers (decisions: grpo.py), or on each decision's menu from frozen states (menu: menu_trainer.py)
FAMILIES = ("logged", "decisions", "menu")


@dataclass(frozen=True)
class Objective:
    """One `--objective`: everything `train` needs to know of it, read by the loop, the CLI, populations and the docs."""

    name: str
    help: str  # one line: what it fits
    family: str  # one of FAMILIES
    recipe: Mapping[str, Any] = field(default_factory=dict)  # the defaults it changes from GENERAL
    options: tuple[Option, ...] = ()  # what it takes beyond every objective's and its family's options
    prepare: Callable[[Any, Prepared], Any] | None = None  # the train decisions it reads, from the loaded data
    loss: MenuLoss | None = None  # a menu objective's fit
    mutable: tuple[str, ...] = ()  # the hyper-parameters a population may mutate (population.BOUNDS' names)
    imitation_weight: float | None = None  # a population's first mix of imitation and counterfactual (None: its loss)

    def __post_init__(self) -> None:
        assert self.family in FAMILIES, self.family
        assert (self.family == "menu") == (self.loss is not None), f"{self.name}: a menu objective has a loss, no other"


def join_and(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
