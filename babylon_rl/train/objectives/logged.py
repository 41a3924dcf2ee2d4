"""grpo and awr: a dataset's logged conversations, one group per window, weighed by the judge's scores (logged_trainer.py,
art_backend.py); grpo with --on-policy answers the train split's replayed decisions itself (grpo.py)."""

from __future__ import annotations

import click

from babylon_rl.train.objectives.base import Objective, Option

GRPO = Objective(
    "grpo", "Clipped policy gradient with the group advantages: over logged conversations, or with --on-policy on the "
    "policy's own answers to the train decisions (the ART back-ends' default).", "logged",
    options=(
        Option(("--on-policy",), "on_policy", "The policy answers the train split's replayed decisions itself (--samples answers "
               "each), each answer priced by the window's ground truth. Without it: the logged trajectories' scores.", is_flag=True),
        Option(("--samples",), "samples", "--on-policy: answers per decision (the group).", click.IntRange(min=2), 8, True),
        Option(("--temperature",), "temperature", "--on-policy: sampling temperature.", click.FloatRange(min=0, min_open=True), 0.8, True),
        Option(("--train-decisions",), "train_decisions", "--on-policy: train on at most N of the train decisions, drawn once from "
               "--seed.", click.IntRange(min=1), unset="all"),
    ))
AWR = Objective(
    "awr", "Advantage-weighted imitation, exp(A / --awr-beta) per trajectory, for logged (off-policy) answers.", "logged",
    options=(Option(("--awr-beta",), "awr_beta", "AWR temperature: smaller trusts the judge more.", click.FloatRange(min=0, min_open=True),
                    1.0, True),))
