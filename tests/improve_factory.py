"""What `improve`'s stages record, made up: iterations in no time, with figures whose verdict is known.

The policy agents make 10 dollars more each iteration, with an interval of +-4, so iteration 0 and 2
differ beyond the interval; random makes -20 and contrarian -30, each +-5, so the policy agents end
above both. The gate's differences are inside their intervals unless the iteration is promoted.
"""

from __future__ import annotations

from babylon_rl.improve_state import STAGES, ImproveState, Iteration


def figure(value: float, half: float) -> dict:
    return {"value": value, "low": value - half, "high": value + half}


def record_stage(it: Iteration, stage: str, promoted: bool = False) -> None:
    """What the real stage would leave on the iteration (the gate's promotion itself is run_improve's _gate)."""
    if stage == "build":
        it.play = {"policy": figure(10.0 * it.iteration, 4), "random": figure(-20, 5), "contrarian": figure(-30, 5),
                   "news": figure(90, 30)}
    elif stage == "train":
        it.candidate = f"runs/improve-{it.iteration:03d}/merged"
    elif stage == "gate":
        diff = figure(0.1, 0.05) if promoted else figure(0.02, 0.05)
        it.gate = {"direction_accuracy": diff, "pnl_per_decision": figure(1.5, 1.0) if promoted else figure(-3.0, 1.0),
                   "trade_precision": diff,
                   "could_recognise_news_rule": False, "candidate": {"direction_accuracy": figure(0.4, 0.05),
                   "pnl_per_decision": figure(2.0, 1.5)}, "champion": {"direction_accuracy": figure(0.35, 0.05),
                   "pnl_per_decision": figure(1.0, 1.5)}}
        it.promoted = promoted
    it.seconds[stage] = 12.5


def made_up_state(iterations: int, promoted: set[int] = frozenset()) -> ImproveState:
    """A finished loop of `iterations`, the candidates of `promoted` iterations promoted."""
    state = ImproveState(options={"windows": 8, "agents": 5, "policy_agents": 2, "news_strength": 1.0}, champion="tiny")
    for number in range(iterations):
        it = Iteration(iteration=number, champion=state.champion)
        state.iterations.append(it)
        for stage in STAGES:
            record_stage(it, stage, number in promoted)
        if it.promoted:
            state.champion = it.candidate
    state.done = list(STAGES)
    return state
