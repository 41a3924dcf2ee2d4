"""hindsight: where the prompt's latest fresh headline names a stock, the trade of it that news of its meaning paid on the
train windows (a critic of the headlines learned from outcomes, cross-fitted: train/credit.py), elsewhere hold
(docs/TRAINING.md#credit-by-meaning)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from babylon_rl.train.objectives.base import ONE_BLOCK, MenuLoss, Objective, Prepared
from babylon_rl.train.objectives.options import HOLD_WEIGHT

if TYPE_CHECKING:
    import numpy as np
    import torch

    from babylon_rl.train.decisions import Task
    from babylon_rl.train.menu_losses import MenuBatch, MenuOptions


def hindsight_index(task: "Task", answers: list[str], rewards: "np.ndarray") -> int:
    """The menu entry `hindsight` fits: where the prompt's latest fresh headline names a stock, the trade of that stock
    the headline calls for (`task.news_direction`: learned from outcomes on the train windows, train/credit.py: buy, sell,
    or hold where the critic is not confident); elsewhere hold.

    The credit goes where the news points and nowhere else. A decision's reward over the whole menu is mostly the other
    stocks' moves (docs/TRAINING.md, "Hindsight on the named stock"); the named stock's own move is the news's effect plus
    its noise, which the critic, fitted over many windows, averages out. The student learns what the words mean from
    what the stocks did. The loss weighs each trade target by what it paid or cost here (`hindsight`)."""
    from babylon_rl.evaluate.actions import parse_action
    from babylon_rl.evaluate.rules import fresh_headlines
    from babylon_rl.train.menu_losses import HOLD_INDEX

    latest = next(fresh_headlines(task.request), None)
    if latest is None or task.news_direction is None:
        return HOLD_INDEX
    trades = {(a.kind, a.ticker): i for i, a in enumerate(map(parse_action, answers)) if a.kind in ("buy", "sell")}
    # the valid menu lacks a buy the cash does not cover and a sell of what is not held: hold is what is left there
    index = trades.get((task.news_direction, latest[0]))
    return HOLD_INDEX if index is None else index


def hindsight(batch: "MenuBatch", o: "MenuOptions") -> "torch.Tensor":
    """Imitation of `hindsight_index`'s targets, each trade target weighed by what it paid or cost in its decision (the
    absolute P&L, `MenuItem.paid`), the batch's trades averaging 1 against a hold's weight: the decisions with most at
    stake count most."""
    import torch

    from babylon_rl.train.menu_losses import HOLD_INDEX, fitted, hold_weighted, targets

    index = targets(batch)
    counts = hold_weighted(index, o)
    trade = (index >= 0) & (index != HOLD_INDEX)
    if trade.any():
        paid = torch.tensor([item.paid for item in batch.items], device=counts.device)
        counts = torch.where(trade, paid / paid[trade].mean().clamp(min=1e-9), counts)
    return fitted(batch, index, counts)


def credited(data, ctx: Prepared):
    """Every train decision with what its headline calls for (train/credit.py), learned with the base model."""
    from babylon_rl.train.credit import HeadlineEmbedder, credited
    from babylon_rl.train.models import resolve_device

    return credited(data, HeadlineEmbedder(ctx.base_model, resolve_device(ctx.config.device)))


# hindsight holds at full weight: its credit is a critic's, which holds wherever it is unsure, and a student that weighs
# those holds lightly trades wherever it is unsure too, at a far lower precision (docs/TRAINING.md#credit-by-meaning)
HINDSIGHT = Objective(
    "hindsight", "The menu machinery fitted, where the prompt's latest fresh headline names a stock, to the trade of it that "
    "news of its meaning paid on the train windows (a critic learned from outcomes), elsewhere to hold: every agent's "
    "decisions.", "menu",
    recipe=ONE_BLOCK | {"hold_weight": 1.0}, options=(HOLD_WEIGHT,), prepare=credited,
    loss=MenuLoss("hindsight", hindsight, hindsight_index, fits_target=True),
    mutable=("learning_rate", "lora_r", "lora_alpha", "batch", "ema", "hold_weight"))
