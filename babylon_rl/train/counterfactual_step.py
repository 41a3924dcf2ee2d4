"""`--objective counterfactual`'s step, which `grpo.GrpoTrainer` runs: GRPO's prices (grpo.py), used more densely.

Instead of k samples, every answer on a decision's menu (hold; buy or sell 10 shares of each of the window's
stocks, the best constant's candidates, `evaluate/constant.py`) is priced, and the policy is fitted to
softmax(reward / `reward_temperature`) over the menu (cross-entropy on each answer's whole log-probability: reward-
weighted regression over the full action set, the limit of GRPO with every action sampled). It prices the policy's
own answer and every other it could have given, so an answer the policy gives little mass (`sell`) is still pushed
up when it would have paid; and since one prompt pass serves the whole menu, a decision costs several times less
than k = 8 sampled answers with two inner epochs (docs/TRAINING.md). The menu family does the same from frozen
states, far cheaper a step (menu_trainer.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from babylon_rl.policy import answer_logprobs, encode_answers, encode_prompts
from babylon_rl.train.decisions import StepResult, Task
from babylon_rl.train.replay_contract import ReplayTrainer
from babylon_rl.train.step import optimizer_step, slices


@dataclass
class MenuBatch:
    """The menus of a micro-batch of decisions, padded to one width: answers ([B*width], flat) and their prices ([B, width])."""

    answers: list[str]
    width: int
    rewards: object  # float tensor [B, width]
    correct: object  # float tensor [B, width]: 1.0 where the answer's direction was right
    present: object  # bool tensor [B, width]: False on padding

    @classmethod
    def price(cls, tasks: list[Task], device: str) -> "MenuBatch":
        import torch

        menus = [t.menu for t in tasks]
        width = max(len(m) for m in menus)
        padded = [m + [m[0]] * (width - len(m)) for m in menus]
        outcomes = [[t.price(answer) for answer in m] for t, m in zip(tasks, padded)]
        present = torch.tensor([[j < len(m) for j in range(width)] for m in menus], device=device)
        rewards = torch.tensor([[r for r, _ in row] for row in outcomes], dtype=torch.float32, device=device)
        correct = torch.tensor([[float(o.correct) for _, o in row] for row in outcomes], device=device)
        return cls([a for m in padded for a in m], width, rewards, correct, present)


def counterfactual_step(trainer: ReplayTrainer, tasks: list[Task]) -> StepResult:
    """Price every answer on each decision's menu; fit the policy to softmax(reward / T) over it (module docstring)."""
    import torch

    o = trainer.options
    started = time.monotonic()
    tokens_seen = 0
    expected_reward: list[float] = []
    expected_correct: list[float] = []
    menu_mass: list[float] = []

    def loss_of(part: list[Task]):
        nonlocal tokens_seen
        menu = MenuBatch.price(part, o.device)
        batch = encode_prompts(trainer.tokenizer, [t.request for t in part], o.device)
        answers, mask = encode_answers(trainer.tokenizer, menu.answers, o.device)
        logp = (answer_logprobs(trainer.model, batch, answers, mask, menu.width) * mask).sum(1).view(len(part), menu.width)
        target = torch.softmax((menu.rewards / o.reward_temperature).masked_fill(~menu.present, -torch.inf), 1)
        tokens_seen += int(batch.attention.sum()) + int(mask.sum())
        with torch.no_grad():  # what the policy would score, answering from the menu with its own odds
            on_menu = logp.detach().masked_fill(~menu.present, -torch.inf)
            policy = torch.softmax(on_menu, 1)
            expected_reward.extend((policy * menu.rewards.masked_fill(~menu.present, 0.0)).sum(1).tolist())
            expected_correct.extend((policy * menu.correct).sum(1).tolist())
            menu_mass.extend(on_menu.logsumexp(1).exp().tolist())
        return -(target * logp.masked_fill(~menu.present, 0.0)).sum() / len(tasks)

    parts = slices(tasks, o.micro_batch)
    loss_total, grad_norm = optimizer_step(trainer.model, trainer.optimizer, trainer.params, o.max_grad_norm, parts, loss_of)
    by_trajectory: dict[str, list[float]] = {}
    for task, value in zip(tasks, expected_reward):
        by_trajectory.setdefault(task.trajectory_id, []).append(value)
    return StepResult(loss_total, 0.0, grad_norm, tokens_seen, time.monotonic() - started,
                      {k: float(np.mean(v)) for k, v in by_trajectory.items()}, float(np.mean(expected_reward)),
                      float(np.mean(menu_mass)), float(np.mean(expected_correct)), len(tasks), 0)
