"""The objectives `train --objective` knows: the one registry, and the only place besides their modules that names them.

Each objective is one `base.Objective` in a module of its own (one per family where two are the same machinery):
its help, recipe, options, data preparation, menu loss and what a population may mutate. The loop, the CLI's
options and help, populations and the refusal of an option an objective does not take all read it from here.
Adding one: its module and one line in REGISTRY (docs/TRAINING.md#adding-an-objective).

Light on purpose (no torch, no polars, no numpy): `cli.py` imports it at every start.
"""

from __future__ import annotations

from typing import Any, Literal

from babylon_rl.train.objectives.base import GENERAL, ONE_BLOCK, FAMILIES, MenuLoss, Objective, Option, Prepared, join_and
from babylon_rl.train.objectives.distill import DISTILL
from babylon_rl.train.objectives.hindsight import HINDSIGHT
from babylon_rl.train.objectives.imitation import MENU_IMITATE
from babylon_rl.train.objectives.logged import AWR, GRPO
from babylon_rl.train.objectives.options import COMMON, FAMILY_OPTIONS, FAMILY_TITLES
from babylon_rl.train.objectives.paid import IMITATE_PAID
from babylon_rl.train.objectives.priced import MENU, MENU_PG, MENU_VALUE
from babylon_rl.train.objectives.replayed import COUNTERFACTUAL, IMITATE

__all__ = ["GENERAL", "ONE_BLOCK", "FAMILIES", "MenuLoss", "Objective", "Option", "Prepared", "COMMON", "FAMILY_OPTIONS",
           "FAMILY_TITLES", "REGISTRY", "OBJECTIVES", "MENU_OBJECTIVES", "LOSSES", "RECIPES", "ObjectiveName", "get",
           "default_objective", "takes", "refusal", "options", "recipe_default", "join_and"]

REGISTRY: dict[str, Objective] = {o.name: o for o in (
    GRPO,
    AWR,
    IMITATE,
    COUNTERFACTUAL,
    MENU,
    MENU_PG,
    MENU_VALUE,
    DISTILL,
    MENU_IMITATE,
    HINDSIGHT,
    IMITATE_PAID,
)}

OBJECTIVES: tuple[str, ...] = tuple(REGISTRY)
ObjectiveName = Literal[OBJECTIVES]  # type: ignore[valid-type]  # every --objective, for TrainConfig's validation
# the menu objectives (trained from frozen states: train/menu_trainer.py) -> the name of their loss, `menu_items.MenuOptions.objective`
MENU_OBJECTIVES: dict[str, str] = {o.name: o.loss.key for o in REGISTRY.values() if o.loss}
LOSSES: dict[str, MenuLoss] = {o.loss.key: o.loss for o in REGISTRY.values() if o.loss}
RECIPES: dict[str, dict] = {o.name: dict(o.recipe) for o in REGISTRY.values() if o.recipe}


def get(name: str) -> Objective:
    return REGISTRY[name]


def default_objective(backend: str, on_policy: bool) -> str:
    """hindsight on the torch back-end (a step costs seconds: docs/TRAINING.md), grpo on ART and with --on-policy."""
    return HINDSIGHT.name if backend == "torch" and not on_policy else GRPO.name


def own_options(objective: Objective) -> tuple[Option, ...]:
    """What `objective` takes beyond COMMON: its family's options, then its own."""
    return (*FAMILY_OPTIONS[objective.family], *objective.options)


def takes(objective: Objective, name: str) -> bool:
    return any(o.name == name for o in (*COMMON, *own_options(objective)))


def options() -> list[Option]:
    """Every option of `train`, each once: COMMON, the families', the objectives' own."""
    seen: dict[str, Option] = {}
    for option in (*COMMON, *(o for family in FAMILIES for o in FAMILY_OPTIONS[family]),
                   *(o for objective in REGISTRY.values() for o in objective.options)):
        seen.setdefault(option.name, option)
    return list(seen.values())


def refusal(objective: Objective, values: dict[str, Any]) -> str | None:
    """The line that refuses an option `objective` does not take (only options with a `refusal` are checked), or None."""
    for option in options():
        if option.refusal and option.given(values.get(option.name)) and not takes(objective, option.name):
            takers = [o.name for o in REGISTRY.values() if takes(o, option.name)]
            return option.refusal.format(takers=join_and(takers), objective=objective.name)
    return None


def recipe_default(name: str, objective: Objective | None = None) -> Any:
    """An unset option's value for `objective` (its recipe's, else GENERAL's; None: neither names it)."""
    recipe = objective.recipe if objective else {}
    return recipe.get(name, GENERAL.get(name))
