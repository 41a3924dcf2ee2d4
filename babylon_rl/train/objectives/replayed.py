"""imitate and counterfactual: the train split's replayed decisions, whole prompts and answers through the model
(grpo.GrpoTrainer; their steps: imitate_step.py, counterfactual_step.py); the menu objectives do the same from frozen
states, far cheaper a step."""

from __future__ import annotations

from babylon_rl.train.objectives.base import Objective
from babylon_rl.train.objectives.options import REWARD_TEMPERATURE

IMITATE = Objective(
    "imitate", "The same LoRA as --on-policy, supervised on every logged answer to the decision prompts: the imitation baseline.",
    "decisions")
COUNTERFACTUAL = Objective(
    "counterfactual", "Every answer on each train decision's menu (hold, buy or sell each stock) priced, the policy fitted to "
    "softmax(reward / --reward-temperature) over them.", "decisions", options=(REWARD_TEMPERATURE,))
