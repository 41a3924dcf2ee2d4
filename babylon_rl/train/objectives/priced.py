"""menu, menu-pg and menu-value: every answer of each decision's menu priced by what the market did, the policy fitted to
the prices (the frozen-state machinery: menu_trainer.py; the batch: menu_losses.MenuBatch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from babylon_rl.train.objectives.base import MenuLoss, Objective, Option
from babylon_rl.train.objectives.options import REWARD_TEMPERATURE, TRADE_COST

if TYPE_CHECKING:
    import torch

    from babylon_rl.train.menu_losses import MenuBatch, MenuOptions

_TUNED = ("learning_rate", "lora_r", "lora_alpha", "batch", "ema")  # what a population may mutate of any menu objective


def counterfactual(batch: "MenuBatch", o: "MenuOptions") -> "torch.Tensor":
    """Cross-entropy to softmax(reward / T) over the menu: the mass on what paid most in hindsight."""
    import torch

    target = torch.softmax((batch.rewards / o.reward_temperature).masked_fill(~batch.present, -torch.inf), 1)
    return -(target * batch.logp.masked_fill(~batch.present, 0.0)).sum(1).mean()


def expected(batch: "MenuBatch", o: "MenuOptions") -> "torch.Tensor":
    """Minus the expected menu reward: the exact policy gradient (GRPO with every answer sampled)."""
    return -(batch.logp.masked_fill(~batch.present, 0.0).exp() * batch.rewards).sum(1).mean()


def value(batch: "MenuBatch", o: "MenuOptions") -> "torch.Tensor":
    """Each answer's margin over hold fitted to its reward / T by least squares (towards the starting margins with an
    anchor). Least squares fits the mean over the windows that share a context: the margins converge on the expected
    reward / T, and an answer's gradient is its error, whatever the policy gives it (a hold's margin is 0)."""
    target = batch.rewards / o.reward_temperature
    if batch.start is not None:
        target = (target + o.anchor * batch.start) / (1 + o.anchor)
    errors = (batch.margins - target).masked_fill(~batch.present, 0.0)
    return ((errors**2).sum(1) / (batch.present.sum(1) - 1).clamp(min=1)).mean()


MENU = Objective(
    "menu", "Every menu answer priced, the policy fitted to softmax(reward / --reward-temperature) over them; tickers renamed "
    "(--variants), the frozen blocks run once per decision (docs/TRAINING.md).", "menu",
    options=(REWARD_TEMPERATURE, TRADE_COST), loss=MenuLoss("counterfactual", counterfactual), mutable=(*_TUNED, "reward_temperature"))
MENU_PG = Objective(
    "menu-pg", "The same menu, the policy moved up its expected reward over it: it trades only where a trade pays on average; "
    "it refines what the policy already does.", "menu", options=(TRADE_COST,), loss=MenuLoss("expected", expected), mutable=_TUNED)
MENU_VALUE = Objective(
    "menu-value", "Each answer's log-probability margin over hold fitted to its reward / --reward-temperature by least squares "
    "(the expected reward, averaged over windows; it also finds the paying answers the policy never gives).", "menu",
    options=(REWARD_TEMPERATURE, TRADE_COST, Option(
        ("--anchor",), "anchor", "The starting policy's margins (--init-from) as a prior of this weight against the rewards' 1: "
        "each margin is fitted to (reward / T + anchor x its starting margin) / (1 + anchor), so what the student holds on with "
        "confidence stays held unless the rewards disagree.", click.FloatRange(min=0), 0.0, True,
        refusal="--anchor weighs the starting policy's margins in {takers}'s fit, not in {objective}", neutral=0.0)),
    loss=MenuLoss("value", value), mutable=_TUNED)
