"""What every menu objective's loss reads and shares: a batch's menu log-probabilities (`MenuBatch`), the logged
answer's entry (`logged_index`, the default target) and the pieces of a fitted-target loss.

`menu_trainer.MenuTrainer` computes the log-probabilities of every menu answer from the frozen states; an objective says
only what to make of them, in its own module: its `base.MenuLoss` (a target and a loss) is part of its `Objective`
(train/objectives/; `objectives.LOSSES` keys them by the names `menu_items.MenuOptions` takes). Adding a menu objective:
its module, with its loss and target, and one line in `objectives.REGISTRY` (docs/TRAINING.md#adding-an-objective).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from babylon_rl.evaluate.actions import parse_action

if TYPE_CHECKING:
    import numpy as np
    import torch

    from babylon_rl.train.decisions import Task

HOLD_INDEX = 0  # the menu's first entry


class MenuItem(Protocol):
    """What a loss reads of a menu item (`menu_items.MenuItem`): the entry it is fitted to, and what that trade paid."""

    target_index: int
    paid: float


class MenuOptions(Protocol):
    """What a loss reads of the trainer's options (`menu_items.MenuOptions`)."""

    reward_temperature: float
    anchor: float
    hold_weight: float


@dataclass
class MenuBatch:
    """A batch's menu under the policy being trained, as every loss reads it."""

    items: list["MenuItem"]
    logp: "torch.Tensor"  # [B, width] each menu answer's log-probability; -inf on padding
    present: "torch.Tensor"  # [B, width] where `logp` is a real answer
    rewards: "torch.Tensor"  # [B, width] each answer's reward, `trade_cost` taken off the trades; 0 on padding
    start: "torch.Tensor | None" = None  # value with an anchor: each answer's margin over hold under the starting weights

    @property
    def margins(self) -> "torch.Tensor":
        return margins(self.logp)


def margins(logp: "torch.Tensor") -> "torch.Tensor":
    """Each menu answer's log-probability over hold's."""
    return logp - logp[:, HOLD_INDEX : HOLD_INDEX + 1]


# -- targets: the menu entry an item is fitted to (-1: none on the menu) ----------------------------------------------

def logged_index(task: "Task", answers: list[str], rewards: "np.ndarray | None" = None) -> int:
    """The logged answer's entry (imitation's and distillation's target)."""
    logged = task.request.resolve(parse_action(task.logged_answer))
    if logged is None or logged.kind not in ("buy", "sell", "hold"):
        return -1
    for i, answer in enumerate(answers):
        action = parse_action(answer)
        if action.kind == logged.kind and (logged.kind == "hold" or action.ticker == logged.ticker):
            return i
    return -1


# -- what the losses share (the losses are their objectives': train/objectives/) ------------------------------------

def targets(batch: MenuBatch) -> "torch.Tensor":
    import torch

    return torch.tensor([item.target_index for item in batch.items], device=batch.logp.device)


def hold_weighted(index: "torch.Tensor", o: "MenuOptions") -> "torch.Tensor":
    import torch

    return torch.where(index == HOLD_INDEX, o.hold_weight, 1.0)


def fitted(batch: MenuBatch, index: "torch.Tensor", counts: "torch.Tensor") -> "torch.Tensor":
    """Minus the targets' log-probabilities, weighed by `counts`; an item without a target counts and trains nothing."""
    picked = batch.logp.gather(1, index.clamp(min=0)[:, None]).squeeze(1)
    return -(picked * (index >= 0) * counts).sum() / counts.sum().clamp(min=1e-9)
