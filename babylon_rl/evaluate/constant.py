"""The best constant action: the strongest answer that ignores the observation, chosen on the TRAIN windows.

A model that learnt one fixed answer ("buy EVRG" at every decision) is right whenever that
stock ends up; beating a warm-started model that always holds proves nothing about reading
the market. So every evaluation also scores the best constant answer: each candidate (hold;
buy T and sell T for every ticker of the training windows' ground truth, `CONSTANT_SHARES`
shares) answers every decision point of the training windows; the highest direction accuracy
wins (ties: the earlier candidate in that order). It is chosen without looking at the eval
windows, then answers the eval decision points like any other policy. A model that beats it
outside the interval must condition its answers on what it sees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.decision_points import Decision
from babylon_rl.evaluate.menu import on_menu
from babylon_rl.evaluate.scoring import GroundTruth, read_observation, score_action

CONSTANT_SHARES = 10  # direction accuracy does not depend on it; P&L per decision does


@dataclass(frozen=True)
class ConstantChoice:
    answer: str  # the JSON action it gives at every decision point
    train_accuracy: float
    train_decisions: int


def candidates(truths: dict[str, GroundTruth], shares: int = CONSTANT_SHARES) -> list[str]:
    """Hold, then buy and sell `shares` of each ticker of these windows (sorted)."""
    tickers = sorted({t for truth in truths.values() for t in truth.stocks})
    trades = [json.dumps({"action": kind, "ticker": t, "shares": shares}) for kind in ("buy", "sell") for t in tickers]
    return [json.dumps({"action": "hold"})] + trades


def best_constant(decisions: list[Decision], truths: dict[str, GroundTruth], threshold_pct: float,
                  menu_shares: int | None = None) -> ConstantChoice | None:
    """The candidate with the best direction accuracy on these (training) decisions; None without any. With
    `menu_shares`, each candidate trades that many shares and answers as it would from each decision's valid menu
    (`menu.on_menu`: hold where the game would refuse it), as it is then evaluated beside models that decide so."""
    if not decisions:
        return None
    observations = [(read_observation(d.observation), truths[d.window_id]) for d in decisions]
    best: ConstantChoice | None = None
    for answer in candidates({d.window_id: truths[d.window_id] for d in decisions}, menu_shares or CONSTANT_SHARES):
        actions = [parse_action(on_menu(answer, d.request, menu_shares) if menu_shares else answer) for d in decisions]
        correct = sum(score_action(action, obs, truth, threshold_pct, game_rules=True).correct for action, (obs, truth) in zip(actions, observations))
        if best is None or correct / len(decisions) > best.train_accuracy:
            best = ConstantChoice(answer, correct / len(decisions), len(decisions))
    return best
