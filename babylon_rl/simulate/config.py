"""What to simulate: one frozen dataclass, validated before anything is generated."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime

from babylon_rl.errors import ConfigError

WORDINGS = ("fresh", "templates")
PERSONA_NAMES = ("news", "momentum", "contrarian", "random", "risk_averse")


@dataclass(frozen=True)
class DirtRates:
    """Per-kind rates of the production flaws the simulator reproduces.

    Trajectory kinds are drawn per trajectory, outcome kinds per stock row.
    """

    null_window_id: float = 0.0
    null_final_pnl: float = 0.0
    error_step: float = 0.0
    duplicate_outcome: float = 0.0
    zero_change_bearish: float = 0.0

    @classmethod
    def uniform(cls, rate: float) -> "DirtRates":
        return cls(**{f.name: rate for f in fields(cls)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SimulationConfig:
    agents: int = 8
    windows: int = 1
    window_hours: int = 1
    steps_per_window: int = 10
    seed: int = 0
    start: datetime | None = None  # UTC window start; None = decided from the target
    rich_share: float = 0.3
    dirt_rate: float = 0.02
    dirt: DirtRates | None = None  # per-kind override; None = dirt_rate for every kind
    tickers: tuple[str, ...] = ("ACME", "BOLT", "CRUX", "DYNA", "EVRG")
    prediction_markets: int = 3
    news_per_window: tuple[int, int] = (3, 6)  # inclusive range
    evaluation_share: float = 0.05
    starting_balance: float = 10_000.0
    batch_windows: int = 10  # windows per write transaction
    personas: tuple[str, ...] = field(default=PERSONA_NAMES)
    # fresh: every headline worded afresh by the newsroom (simulate/news.py); templates: the 14 fixed sentences of old
    wording: str = "fresh"
    # windows starting from here are worded from phrasings and outlets no earlier window used; None in a simulation:
    # the start of its latest half (run_simulation), which the quickstart's eval split (its latest half) is
    unseen_wording_from: datetime | None = None
    news_strength: float = 1.0  # scales the drift a headline gives its stock; 0: headlines say nothing about prices
    policy_agents: int = 0  # agents whose decisions come from a model (policy_play.py), beside the personas
    policy_model: str = ""  # that model's id, logged as the model of their calls

    @property
    def dirt_rates(self) -> DirtRates:
        return self.dirt if self.dirt is not None else DirtRates.uniform(self.dirt_rate)

    @property
    def window_minutes(self) -> int:
        return 60 * self.window_hours

    def validate(self) -> "SimulationConfig":
        checks = [
            (self.agents >= 1, "--agents must be at least 1"),
            (self.windows >= 1, "--windows must be at least 1"),
            (self.window_hours >= 1, "--window-hours must be at least 1"),
            (1 <= self.steps_per_window <= self.window_minutes // 2,
             f"--steps-per-window must be between 1 and {self.window_minutes // 2} for {self.window_hours}-hour windows"),
            (0.0 <= self.rich_share <= 1.0, "--rich-share must be between 0 and 1"),
            (all(0.0 <= r <= 1.0 for r in self.dirt_rates.as_dict().values()), "--dirt-rate must be between 0 and 1"),
            (len(self.tickers) >= 1 and len(set(self.tickers)) == len(self.tickers), "tickers must be distinct and at least one"),
            (self.prediction_markets >= 0, "prediction_markets must not be negative"),
            (1 <= self.news_per_window[0] <= self.news_per_window[1], "news_per_window must be a range (low >= 1, low <= high)"),
            (set(self.personas) <= set(PERSONA_NAMES) and self.personas, f"personas must come from {PERSONA_NAMES}"),
            (self.batch_windows >= 1, "batch_windows must be at least 1"),
            (0.0 <= self.news_strength <= 10.0, f"--news-strength must be between 0 and 10, not {self.news_strength}"),
            (self.wording in WORDINGS, f"--wording must be one of {', '.join(WORDINGS)}, not {self.wording!r}"),
            (self.policy_agents >= 0, "--policy-agents must not be negative"),
            (not self.policy_agents or self.policy_model, "--policy-agents needs --policy MODEL (the model they play with)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        if self.start is not None and (self.start.minute or self.start.second or self.start.microsecond):
            raise ConfigError(f"--start must be a whole UTC hour like 2025-01-15T10:00, not {self.start:%Y-%m-%dT%H:%M}")
        return self
