"""What the improve loop keeps in HOME/improve/state.json: its options, the champion, each iteration's stages and figures.

Read by the loop (`improve.py`) and its report (`improve_report.py`); it knows nothing of them. Where it lives is the
home's (`Home.improve_state`), so that `promoted` (`model_names.py`) reads the champion without importing the driver's
types.
"""

from __future__ import annotations

from pydantic import BaseModel

from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home

STAGES = ("play", "build", "dataset", "train", "gate")


class Iteration(BaseModel):
    iteration: int
    champion: str  # the model that played this iteration's windows and was the gate's baseline
    candidate: str | None = None
    promoted: bool | None = None
    # the candidate minus the champion: direction accuracy and P&L per decision, with intervals; and whether the same
    # decisions told the news rule from the best constant (False: the gate had no power; None: no headline to read);
    # under "candidate" and "champion", each one's own two figures with intervals
    gate: dict = {}
    play: dict = {}  # mean window P&L per agent of the policy agents and of each persona, with intervals
    seconds: dict[str, float] = {}


class ImproveState(BaseModel):
    options: dict
    champion: str
    iterations: list[Iteration] = []
    done: list[str] = []  # stages of the last iteration that finished

    @property
    def current(self) -> Iteration:
        return self.iterations[-1]


def load_state(home: Home) -> ImproveState:
    path = home.improve_state
    if not path.exists():
        raise ConfigError(f"no improve loop in {home.root} (no {path}); start one with python cli.py improve")
    return ImproveState.model_validate_json(path.read_text())
