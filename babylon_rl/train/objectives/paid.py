"""imitate-paid: every agent's logged trade where it paid, hold everywhere else: imitation that keeps the winning trades
and turns the losing ones into holds (an agent's trades, credited by this window's outcome alone: no critic, no teachers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from babylon_rl.train.objectives.base import ONE_BLOCK, MenuLoss, Objective
from babylon_rl.train.objectives.imitation import imitate

if TYPE_CHECKING:
    import numpy as np

    from babylon_rl.train.decisions import Task


def paid_index(task: "Task", answers: list[str], rewards: "np.ndarray") -> int:
    """The logged answer's menu entry where it is a trade whose reward was above 0, hold where it was a hold or a trade
    that lost; -1 (nothing to fit) where the logged answer is not on the menu."""
    from babylon_rl.train.menu_losses import HOLD_INDEX, logged_index

    index = logged_index(task, answers, rewards)
    return index if index < 0 or rewards[index] > 0 else HOLD_INDEX


IMITATE_PAID = Objective(
    "imitate-paid", "The menu machinery fitted to every agent's logged trade where it paid, to hold where it lost or held.",
    "menu", recipe={k: v for k, v in ONE_BLOCK.items() if k != "hold_weight"},  # its holds at full weight, as it fits them
    loss=MenuLoss("paid", imitate, paid_index, fits_target=True), mutable=("learning_rate", "lora_r", "lora_alpha", "batch", "ema"))
