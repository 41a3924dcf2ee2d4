"""distill: imitation of only the agents that stand above their peers on the train windows and hold on validation
(train/teachers.py, `cli.py agents`; docs/TRAINING.md#distilling-the-best-agents)."""

from __future__ import annotations

import click

from babylon_rl.train.objectives.base import ONE_BLOCK, Objective, Option, Prepared
from babylon_rl.train.objectives.imitation import IMITATION
from babylon_rl.train.objectives.options import HOLD_WEIGHT, REWARD_TEMPERATURE


def taught(data, ctx: Prepared):
    """The train decisions of the teachers the train split proves best, only their answers a reader of the prompt can
    reproduce with --teacher-answers news (`teachers.taught`)."""
    from babylon_rl.dataset.dataset import Dataset
    from babylon_rl.train.teachers import choose, taught

    return taught(data, choose(Dataset.open(ctx.home, ctx.config.dataset), ctx.config.seed), ctx.config.teacher_answers)


DISTILL = Objective(
    "distill", "The menu machinery fitted only to the answers of the agents that stand above their peers on the train windows "
    "and hold on validation (`cli.py agents`).", "menu",
    recipe=ONE_BLOCK | {"teacher_answers": "news"},
    options=(HOLD_WEIGHT, Option(
        ("--teacher-answers",), "teacher_answers", "Which of the teachers' train answers it imitates: all, or news = their "
        "trades of the stock the latest headline of the last 30 minutes names and their holds where no headline is that fresh "
        "(the answers a reader of the prompt can reproduce).", click.Choice(["all", "news"]),
        refusal="--teacher-answers chooses which of the teachers' answers {takers} imitates, not {objective}", neutral="all"),
        REWARD_TEMPERATURE),
    prepare=taught, loss=IMITATION,
    mutable=("learning_rate", "lora_r", "lora_alpha", "batch", "ema", "imitation_weight", "hold_weight", "reward_temperature"),
    imitation_weight=1.0)
