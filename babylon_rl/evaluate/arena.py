"""Closed-loop evaluation (`cli.py arena`): two models play the same simulated windows; what each made is compared.

Replay evaluation (`run.py`) asks a model about logged decisions, one at a time; here the model
plays. Each model in turn is the policy of `--policy-agents` agents in the same simulated
history (same seed and windows, so the same prices, news and personas around them) and lives
with its own earlier actions: its cash, its positions, its bets. The personas' rows do not
depend on the policy agents (`simulate/policy_play.py`), which the arena checks.

Nothing is written to the game's tables; the games are kept in memory. The unit is the window:
per window, the mean P&L of a model's agents and of each persona's agents. Intervals are a
seeded percentile bootstrap over windows, paired (both sides resample the same windows), as in
`eval` (`stats.py`). The arena's windows are its own (from `ARENA_START`), never a dataset's.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.stats import DEFAULT_RESAMPLES, Interval, difference_interval, ratio_interval, resample_indices
from babylon_rl.model_names import default_baseline, resolve
from babylon_rl.settings import Home, mask_url
from babylon_rl.simulate.config import PERSONA_NAMES, SimulationConfig
from babylon_rl.simulate.policy_play import POLICY_PERSONA, open_player
from babylon_rl.simulate.runner import run_simulation
from babylon_rl.simulate.sinks import MemorySink
from babylon_rl.simulate.trajectories import WindowRows
from babylon_rl.warehouse import RAW_BY_NAME

ARENA_START = datetime(2030, 1, 1)  # a window's market depends on the seed and its start: a fixed start makes one history per seed
_STEPS = RAW_BY_NAME["trajectories"].column_names.index("stepsJson")
_AGENT = RAW_BY_NAME["trajectories"].column_names.index("agentId")


@dataclass(frozen=True)
class ArenaOptions:
    model: str
    against: str | None = None  # None: the model's base (as eval's baseline)
    base_url: str | None = None  # both models are served there when given
    against_local: bool = False  # with base_url: `against` plays in this process, `model` on the endpoint
    windows: int = 24
    agents: int = 10  # personas around the policy agents
    policy_agents: int = 4
    steps_per_window: int = 10
    seed: int = 0
    news_strength: float = 1.0
    device: str = "auto"
    max_new_tokens: int = 32
    resamples: int = DEFAULT_RESAMPLES

    def simulation(self) -> SimulationConfig:
        return SimulationConfig(
            agents=self.agents, windows=self.windows, steps_per_window=self.steps_per_window, seed=self.seed,
            start=ARENA_START, dirt_rate=0.0, news_strength=self.news_strength, policy_agents=self.policy_agents,
            policy_model="(set per model)",
        ).validate()


@dataclass
class Side:
    """One model's games: its agents' mean P&L per window and how its decisions went."""

    role: str  # model | against
    model: str
    window_pnl: np.ndarray
    decisions: int
    actions: dict[str, float]  # share of decisions per action name, and `failed` for those the game refused
    seconds_per_window: float
    mean: Interval | None = None

    @property
    def valid_share(self) -> float:
        """The share of its decisions that were actions the game accepted."""
        return round(1.0 - self.actions.get("failed", 0.0), 4) if self.decisions else 0.0

    def to_dict(self) -> dict:
        return {"role": self.role, "model": self.model, "mean_window_pnl": self.mean.to_dict() if self.mean else None,
                "decisions": self.decisions, "valid_share": self.valid_share, "actions": self.actions,
                "seconds_per_window": self.seconds_per_window}


@dataclass
class ArenaResult:
    options: ArenaOptions
    sides: list[Side]
    personas: dict[str, Interval]  # persona -> mean window P&L per agent
    comparisons: list[dict]
    path: Path
    created_at: str

    def to_dict(self) -> dict:
        o = self.options
        return {"options": {**asdict(o), "base_url": mask_url(o.base_url) if o.base_url else None},
                "windows": o.windows, "start": ARENA_START.strftime("%Y-%m-%dT%H:%M"),
                "bootstrap": {"resamples": o.resamples, "seed": o.seed, "unit": "window", "level": 0.95},
                "sides": [s.to_dict() for s in self.sides], "personas": {k: v.to_dict() for k, v in self.personas.items()},
                "comparisons": self.comparisons, "created_at": self.created_at}


def run_arena(home: Home, options: ArenaOptions, on_window: Callable[[str, int], Callable[[int], None]]) -> ArenaResult:
    """Both models play the same windows; their agents' window P&L against each other and against every persona."""
    config = options.simulation()
    against = _against(home, options)
    games = [_play(home, options, config, role, model, on_window) for role, model in (("model", options.model), ("against", against))]
    personas = _persona_pnl(games[0][1], games[1][1])
    indices = resample_indices(options.windows, options.resamples, options.seed)
    ones = np.ones(options.windows)
    sides = [side for side, _ in games]
    for side in sides:
        side.mean = ratio_interval(side.window_pnl, ones, indices)
    opponents = [(s.model, s.window_pnl) for s in sides[1:]] + [(f"persona {p}", pnl) for p, pnl in personas.items()]
    comparisons = [_compare(sides[0].model, sides[0].window_pnl, name, pnl, indices) for name, pnl in opponents]
    comparisons += [_compare(sides[1].model, sides[1].window_pnl, f"persona {p}", pnl, indices) for p, pnl in personas.items()]
    path = home.root / "arena" / _name(sides[0].model, sides[1].model) / "arena.json"
    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = ArenaResult(options, sides, {p: ratio_interval(pnl, ones, indices) for p, pnl in personas.items()},
                         comparisons, path, created)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _against(home: Home, options: ArenaOptions) -> str:
    if options.against_local and not options.base_url:
        raise ConfigError("--against-local plays --against here while --model plays on an endpoint: give --base-url")
    if options.against:
        return options.against
    base = default_baseline(resolve(home, options.model), home) if not options.base_url else None
    if not base:
        raise ConfigError(f"{options.model} has no base model to play against: pass --against MODEL")
    return base


def _play(home: Home, options: ArenaOptions, config: SimulationConfig, role: str, model: str,
          on_window: Callable[[str, int], Callable[[int], None]]) -> tuple[Side, list[WindowRows]]:
    base_url = None if role == "against" and options.against_local else options.base_url
    player, model_id = open_player(home, model, base_url, options.device, options.policy_agents, options.max_new_tokens)
    sink = MemorySink()
    summary = run_simulation(replace(config, policy_model=model_id), sink, on_window(model_id, options.windows), player)
    pnl = _mean_pnl(sink.windows, POLICY_PERSONA)
    decisions, actions = _action_shares(sink.windows)
    return Side(role, model_id, pnl, decisions, actions, round(summary.seconds_per_window, 3)), sink.windows


def _persona_pnl(first: list[WindowRows], second: list[WindowRows]) -> dict[str, np.ndarray]:
    """Each persona's mean P&L per agent per window; the same in both games, or the comparison would not be fair."""
    def personas_of(windows: list[WindowRows]) -> list[dict]:
        return [{a: v for a, v in w.agent_pnl.items() if v[0] != POLICY_PERSONA} for w in windows]

    if personas_of(first) != personas_of(second):
        raise ConfigError("the personas played differently in the two games: the arena cannot compare them (a bug; please report it)")
    present = [p for p in PERSONA_NAMES if any(v[0] == p for w in first for v in w.agent_pnl.values())]
    return {p: _mean_pnl(first, p) for p in present}


def _mean_pnl(windows: list[WindowRows], persona: str) -> np.ndarray:
    """Per window, the mean P&L of the persona's agents (`policy`: the model's)."""
    return np.array([np.mean([pnl for who, pnl in w.agent_pnl.values() if who == persona]) for w in windows])


def _action_shares(windows: list[WindowRows]) -> tuple[int, dict[str, float]]:
    """How the policy agents' decisions went, read from their logged steps: each action's share, `failed` for refused ones."""
    counts: Counter[str] = Counter()
    for w in windows:
        for row in w.trajectories:
            if row[_AGENT].startswith("sim-policy-"):
                for step in json.loads(row[_STEPS]):
                    action = step["action"]
                    counts[action["actionName"] if action["success"] else "failed"] += 1
    total = sum(counts.values())
    return total, {name: round(n / total, 4) for name, n in sorted(counts.items())} if total else {}


def _compare(a: str, pnl_a: np.ndarray, b: str, pnl_b: np.ndarray, indices: np.ndarray) -> dict:
    difference = difference_interval(pnl_a, pnl_b, np.ones(len(pnl_a)), indices)
    verdict = "better" if difference.low > 0 else "worse" if difference.high < 0 else "not told apart"
    return {"a": a, "b": b, "difference": difference.to_dict(), "verdict": verdict}


def _name(a: str, b: str) -> str:
    def short(model: str) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in model.rstrip("/").split("/")[-1])

    return f"{short(a)}-vs-{short(b)}"
