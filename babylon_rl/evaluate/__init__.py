"""Replay evaluation on held-out windows (`cli.py eval`): see run.py, scoring.py and stats.py."""

from babylon_rl.evaluate.actions import Action, parse_action
from babylon_rl.evaluate.run import EvalOptions, EvalResult, evaluate, log_wandb, write_database, write_outputs
from babylon_rl.evaluate.scoring import GroundTruth, Observation, Outcome, read_observation, score_action

__all__ = [
    "Action", "EvalOptions", "EvalResult", "GroundTruth", "Observation", "Outcome", "evaluate", "log_wandb",
    "parse_action", "read_observation", "score_action", "write_database", "write_outputs",
]
