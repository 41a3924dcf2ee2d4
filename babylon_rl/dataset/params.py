"""The parameters of `dataset build`, the export formats and the dataset-name rule."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from babylon_rl.errors import ConfigError
from babylon_rl.settings import safe_name

# `dataset export --format`
FORMATS = ("dpo", "jsonl")

# Two P&L values closer than this are "the same outcome" for the no-signal flag.
NO_SIGNAL_TOLERANCE = 1e-6


@dataclass(frozen=True)
class BuildParams:
    """Everything that decides the content of a dataset (recorded in the manifest)."""

    name: str
    min_agents: int = 5
    lookback_hours: int = 168
    target_trajectories: int = 1000
    max_dropout: float = 0.3
    max_group_size: int = 8
    min_actions: int = 5
    seed: int = 0
    eval_fraction: float = 0.1
    validation_fraction: float = 0.1  # of the windows before the eval ones: what selection (keep-best, constants) reads
    windows: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    include_used: bool = False

    def validate(self) -> "BuildParams":
        safe_name(self.name, "dataset name")
        _check(self.target_trajectories >= 1, f"--target-trajectories must be at least 1, got {self.target_trajectories}")
        _check(0 <= self.max_dropout < 1, f"--max-dropout must be in [0, 1), got {self.max_dropout}")
        _check(0 <= self.eval_fraction < 1, f"--eval-fraction must be in [0, 1), got {self.eval_fraction}")
        _check(0 <= self.validation_fraction < 1, f"--validation-fraction must be in [0, 1), got {self.validation_fraction}")
        _check(self.eval_fraction + self.validation_fraction < 1,
               f"--validation-fraction + --eval-fraction must be below 1 (train needs windows), got {self.validation_fraction + self.eval_fraction}")
        _check(self.min_agents >= 1, f"--min-agents must be at least 1, got {self.min_agents}")
        _check(
            self.max_group_size >= self.min_agents,
            f"--max-group-size ({self.max_group_size}) must be at least --min-agents ({self.min_agents})",
        )
        _check(self.min_actions >= 0, f"--min-actions must be 0 or more, got {self.min_actions}")
        _check(self.lookback_hours >= 1, f"--lookback-hours must be at least 1, got {self.lookback_hours}")
        _check(self.seed >= 0, f"--seed must be 0 or more, got {self.seed}")
        if self.since and self.until and self.since >= self.until:
            raise ConfigError(f"--since ({self.since:%Y-%m-%dT%H:%M}) must be before --until ({self.until:%Y-%m-%dT%H:%M})")
        return self

    @property
    def selection_mode(self) -> str:
        if self.windows:
            return "windows"
        if self.since or self.until:
            return "range"
        return "lookback"

    def to_manifest(self) -> dict:
        data = asdict(self)
        data["windows"] = list(self.windows)
        for key in ("since", "until"):
            data[key] = data[key].strftime("%Y-%m-%dT%H:%M:%S") if data[key] else None
        data["selection_mode"] = self.selection_mode
        data["no_signal_tolerance"] = NO_SIGNAL_TOLERANCE
        return data


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
