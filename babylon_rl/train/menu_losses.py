"""What each menu objective fits: the menu entry an item is fitted to, and the loss of a batch's menu log-probabilities.

`cached.MenuTrainer` computes the log-probabilities of every menu answer from the frozen states; an objective says
only what to make of them. One function per loss and one registry, `LOSSES`, keyed by the names `cached.MenuOptions`
takes (`objectives.MENU_OBJECTIVES` maps `--objective` onto them). Adding a menu objective: a loss here (and a target,
if it fits one entry), one line in `LOSSES` and one in `MENU_OBJECTIVES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.rules import fresh_headlines

if TYPE_CHECKING:
    import torch

    from babylon_rl.train.decisions import Task

HOLD_INDEX = 0  # the menu's first entry


class MenuItem(Protocol):
    """What a loss reads of a menu item (`cached.MenuItem`): the entry it is fitted to, and what that trade paid."""

    target_index: int
    paid: float


class MenuOptions(Protocol):
    """What a loss reads of the trainer's options (`cached.MenuOptions`)."""

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

def logged_index(task: "Task", answers: list[str], rewards: np.ndarray | None = None) -> int:
    """The logged answer's entry (imitation's and distillation's target)."""
    logged = task.request.resolve(parse_action(task.logged_answer))
    if logged is None or logged.kind not in ("buy", "sell", "hold"):
        return -1
    for i, answer in enumerate(answers):
        action = parse_action(answer)
        if action.kind == logged.kind and (logged.kind == "hold" or action.ticker == logged.ticker):
            return i
    return -1


def hindsight_index(task: "Task", answers: list[str], rewards: np.ndarray) -> int:
    """The menu entry `hindsight` fits: where the prompt's latest fresh headline names a stock, the trade of that stock
    the headline calls for (`task.news_direction`: learned from outcomes on the train windows, train/credit.py: buy, sell,
    or hold where the critic is not confident); elsewhere hold.

    The credit goes where the news points and nowhere else. A decision's reward over the whole menu is mostly the other
    stocks' moves (docs/TRAINING.md, "Hindsight on the named stock"); the named stock's own move is the news's effect plus
    its noise, which the critic, fitted over many windows, averages out. The student learns what the words mean from
    what the stocks did. The loss weighs each trade target by what it paid or cost here (`hindsight`)."""
    latest = next(fresh_headlines(task.request), None)
    if latest is None or task.news_direction is None:
        return HOLD_INDEX
    trades = {(a.kind, a.ticker): i for i, a in enumerate(map(parse_action, answers)) if a.kind in ("buy", "sell")}
    # the valid menu lacks a buy the cash does not cover and a sell of what is not held: hold is what is left there
    index = trades.get((task.news_direction, latest[0]))
    return HOLD_INDEX if index is None else index


# -- losses: the mean loss of a batch ----------------------------------------------------------------------------------

def counterfactual(batch: MenuBatch, o: "MenuOptions") -> "torch.Tensor":
    """Cross-entropy to softmax(reward / T) over the menu: the mass on what paid most in hindsight."""
    import torch

    target = torch.softmax((batch.rewards / o.reward_temperature).masked_fill(~batch.present, -torch.inf), 1)
    return -(target * batch.logp.masked_fill(~batch.present, 0.0)).sum(1).mean()


def expected(batch: MenuBatch, o: "MenuOptions") -> "torch.Tensor":
    """Minus the expected menu reward: the exact policy gradient (GRPO with every answer sampled)."""
    return -(batch.logp.masked_fill(~batch.present, 0.0).exp() * batch.rewards).sum(1).mean()


def value(batch: MenuBatch, o: "MenuOptions") -> "torch.Tensor":
    """Each answer's margin over hold fitted to its reward / T by least squares (towards the starting margins with an
    anchor). Least squares fits the mean over the windows that share a context: the margins converge on the expected
    reward / T, and an answer's gradient is its error, whatever the policy gives it (a hold's margin is 0)."""
    target = batch.rewards / o.reward_temperature
    if batch.start is not None:
        target = (target + o.anchor * batch.start) / (1 + o.anchor)
    errors = (batch.margins - target).masked_fill(~batch.present, 0.0)
    return ((errors**2).sum(1) / (batch.present.sum(1) - 1).clamp(min=1)).mean()


def imitate(batch: MenuBatch, o: "MenuOptions") -> "torch.Tensor":
    """Cross-entropy to each item's target entry, a hold target at `hold_weight` against a trade's 1; an item without a
    target on the menu counts and trains nothing."""
    index = _targets(batch)
    return _fitted(batch, index, _hold_weighted(index, o))


def hindsight(batch: MenuBatch, o: "MenuOptions") -> "torch.Tensor":
    """Imitation of `hindsight_index`'s targets, each trade target weighed by what it paid or cost in its decision (the
    absolute P&L, `MenuItem.paid`), the batch's trades averaging 1 against a hold's weight: the decisions with most at
    stake count most."""
    import torch

    index = _targets(batch)
    counts = _hold_weighted(index, o)
    trade = (index >= 0) & (index != HOLD_INDEX)
    if trade.any():
        paid = torch.tensor([item.paid for item in batch.items], device=counts.device)
        counts = torch.where(trade, paid / paid[trade].mean().clamp(min=1e-9), counts)
    return _fitted(batch, index, counts)


def _targets(batch: MenuBatch) -> "torch.Tensor":
    import torch

    return torch.tensor([item.target_index for item in batch.items], device=batch.logp.device)


def _hold_weighted(index: "torch.Tensor", o: "MenuOptions") -> "torch.Tensor":
    import torch

    return torch.where(index == HOLD_INDEX, o.hold_weight, 1.0)


def _fitted(batch: MenuBatch, index: "torch.Tensor", counts: "torch.Tensor") -> "torch.Tensor":
    """Minus the targets' log-probabilities, weighed by `counts`; an item without a target counts and trains nothing."""
    picked = batch.logp.gather(1, index.clamp(min=0)[:, None]).squeeze(1)
    return -(picked * (index >= 0) * counts).sum() / counts.sum().clamp(min=1e-9)


@dataclass(frozen=True)
class MenuLoss:
    loss: Callable[[MenuBatch, "MenuOptions"], "torch.Tensor"]
    target: Callable[["Task", list[str], np.ndarray], int] = logged_index  # the logged answer's: what a mix imitates
    fits_target: bool = False  # a loss of the target entry: `imitation_weight` mixes it with counterfactual's


LOSSES: dict[str, MenuLoss] = {
    "counterfactual": MenuLoss(counterfactual),
    "expected": MenuLoss(expected),
    "value": MenuLoss(value),
    "imitate": MenuLoss(imitate, fits_target=True),
    "hindsight": MenuLoss(hindsight, hindsight_index, fits_target=True),
}
