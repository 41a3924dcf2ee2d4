"""The objectives `train --objective` knows: one registry, read by the CLI's choices and the training config.

Light on purpose (no torch, no polars): `cli.py` imports it to list the choices.
"""

from __future__ import annotations

from typing import Literal, get_args

# The objectives trained from frozen states on the decision's menu (train/cached.py), and what each fits: every menu
# answer priced (menu: softmax(reward / T); menu-pg: the policy's expected reward; menu-value: each answer's margin over
# hold fitted to its reward by least squares, which moves the answers the policy never gives as much as the ones it
# does), the logged answer of every agent (menu-imitate, the imitation baseline), or the logged answers of the agents
# the data proves best on train windows (distill, train/teachers.py), or the trade of the stock the news names that paid,
# weighed by what it paid (hindsight: menu_losses.hindsight_index); each one's loss is in train/menu_losses.py.
MENU_OBJECTIVES = {"menu": "counterfactual", "menu-pg": "expected", "menu-value": "value", "menu-imitate": "imitate", "distill": "imitate",
                   "hindsight": "hindsight"}
# every `--objective`: the logged path's over whole conversations (grpo, awr), the decision objectives', the menu's
Objective = Literal["grpo", "awr", "imitate", "counterfactual", "menu", "menu-pg", "menu-value", "menu-imitate", "distill", "hindsight"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)
