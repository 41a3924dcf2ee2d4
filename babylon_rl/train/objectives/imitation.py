"""menu-imitate: the menu machinery fitted to every agent's logged answer, the imitation baseline of the menu objectives
(the same budget as the student's: ONE_BLOCK); and the imitation loss distill shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from babylon_rl.train.objectives.base import ONE_BLOCK, MenuLoss, Objective
from babylon_rl.train.objectives.options import HOLD_WEIGHT

if TYPE_CHECKING:
    import torch

    from babylon_rl.train.menu_losses import MenuBatch, MenuOptions


def imitate(batch: "MenuBatch", o: "MenuOptions") -> "torch.Tensor":
    """Cross-entropy to each item's target entry, a hold target at `hold_weight` against a trade's 1; an item without a
    target on the menu counts and trains nothing."""
    from babylon_rl.train.menu_losses import fitted, hold_weighted, targets

    index = targets(batch)
    return fitted(batch, index, hold_weighted(index, o))


IMITATION = MenuLoss("imitate", imitate, fits_target=True)  # the logged answer's entry (`menu_losses.logged_index`)

MENU_IMITATE = Objective(
    "menu-imitate", "The menu machinery fitted to the logged answer's menu entry of every agent: the imitation baseline.", "menu",
    recipe=ONE_BLOCK, options=(HOLD_WEIGHT,), loss=IMITATION,
    mutable=("learning_rate", "lora_r", "lora_alpha", "batch", "ema", "hold_weight"))
