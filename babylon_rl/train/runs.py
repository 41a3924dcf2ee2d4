"""Run names and the run directory layout under HOME/runs/RUN/."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from babylon_rl.settings import Home, safe_name


@dataclass(frozen=True)
class RunDir:
    """HOME/runs/RUN/: run.json, metrics.csv, wandb/, checkpoints/step-N/, merged/."""

    root: Path

    @classmethod
    def for_run(cls, home: Home, name: str) -> "RunDir":
        return cls(home.runs / safe_name(name, "run name"))

    @property
    def config(self) -> Path:
        return self.root / "run.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def merged(self) -> Path:
        return self.root / "merged"

    @property
    def inputs(self) -> Path:
        return self.root / "inputs.json"

    @property
    def best(self) -> Path:
        return self.root / "best.json"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step-{step}"

    def checkpoint_steps(self) -> list[int]:
        if not self.checkpoints.exists():
            return []
        steps = []
        for path in self.checkpoints.iterdir():
            match = re.fullmatch(r"step-(\d+)", path.name)
            if match and path.is_dir():
                steps.append(int(match.group(1)))
        return sorted(steps)
