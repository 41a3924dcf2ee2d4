"""One simulated window: the personas (`trajectories.py`), the policy agents beside them (`policy_play.py`), then the
window's outcomes."""

from __future__ import annotations

from datetime import datetime
from functools import partial

from babylon_rl.simulate.config import SimulationConfig
from babylon_rl.simulate.policy_play import Player, play_policy_agents
from babylon_rl.simulate.trajectories import WindowPlay, WindowRows


def simulate_window(config: SimulationConfig, start: datetime, player: Player | None = None) -> WindowRows:
    """The window starting at `start`; `player` answers its policy agents (`config.policy_agents`), if it has any."""
    return WindowPlay(config, start).run(partial(play_policy_agents, player=player) if player is not None else None)
