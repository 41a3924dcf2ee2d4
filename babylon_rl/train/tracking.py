"""Run tracking: a W&B run (offline unless WANDB_API_KEY is set) under HOME/runs/RUN/wandb,
a metrics.csv with one row per step, and a rich progress bar with ETA."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

METRIC_COLUMNS = [
    "step", "epoch", "reward_mean", "reward_std", "groups_used", "groups_skipped", "trajectories",
    "loss", "kl", "grad_norm", "tokens", "tokens_per_s", "learning_rate", "step_seconds",
    "valid_rate", "correct_rate", "sample_seconds",  # on-policy runs: their sampled answers (empty otherwise)
]
MEMBER_COLUMNS = [
    "step", "member", "loss", "grad_norm", "reward_mean", "items", "step_seconds",
    "learning_rate", "lora_r", "lora_alpha", "batch", "ema", "reward_temperature", "imitation_weight", "hold_weight",
]
SECRET_KEYS = ("database_url", "api_key", "password", "token")


def public_config(config: dict) -> dict:
    """The run config without anything that could hold a secret."""
    return {k: v for k, v in config.items() if not any(s in k.lower() for s in SECRET_KEYS)}


@dataclass
class Tracker:
    run_dir: Path
    run_name: str
    config: dict
    manifest: dict
    console: Console
    total_steps: int
    start_step: int = 0
    wandb_run: object = None
    _progress: Progress | None = field(default=None, repr=False)
    _task: int | None = None

    def __enter__(self) -> "Tracker":
        self._start_wandb()
        self._truncate_metrics(self.start_step)
        self._progress = Progress(
            TextColumn("[bold]train[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console, transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(self.run_name, total=self.total_steps, completed=self.start_step)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress:
            self._progress.stop()
        if self.wandb_run is not None:
            self.wandb_run.finish(exit_code=1 if exc[0] else 0)

    @property
    def wandb_run_id(self) -> str | None:
        return getattr(self.wandb_run, "id", None)

    def _start_wandb(self) -> None:
        import wandb

        wandb_dir = self.run_dir / "wandb"
        wandb_dir.mkdir(parents=True, exist_ok=True)
        run_id = "".join(c if c.isalnum() or c in "-_" else "-" for c in self.run_name)[:64]
        self.wandb_run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "babylon-rl"),
            name=self.run_name,
            id=run_id,
            resume="allow",
            dir=str(self.run_dir),
            config={**public_config(self.config), "dataset_manifest": self.manifest},
            mode="online" if os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE") != "offline" else "offline",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, x_disable_machine_info=True),
        )

    def _truncate_metrics(self, keep_through: int) -> None:
        """On resume, drop rows of steps after the checkpoint we continue from (metrics.csv and a population's members.csv)."""
        for name, columns in (("metrics.csv", METRIC_COLUMNS), ("members.csv", MEMBER_COLUMNS)):
            path = self.run_dir / name
            if not path.exists():
                continue
            with path.open(newline="") as handle:
                rows = [r for r in csv.DictReader(handle) if int(r["step"]) <= keep_through]
            self._write_rows(path, rows, mode="w", columns=columns)

    @staticmethod
    def _write_rows(path: Path, rows: list[dict], mode: str, columns: list[str] = METRIC_COLUMNS) -> None:
        new = mode == "w" or not path.exists()
        with path.open(mode, newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerows(rows)

    def log_step(self, metrics: dict) -> None:
        self._write_rows(self.run_dir / "metrics.csv", [metrics], mode="a")
        if self.wandb_run is not None:
            self.wandb_run.log({f"train/{k}": v for k, v in metrics.items() if k != "step"}, step=metrics["step"])
        if self._progress is not None:
            self._progress.update(self._task, completed=metrics["step"],
                                  description=f"{self.run_name} loss {metrics['loss']:.4f} reward {metrics['reward_mean']:.3f}")

    def log_members(self, step: int, rows: list[dict]) -> None:
        """A population step: one members.csv row per member (its figures and hyper-parameters), and member/NAME/* in W&B."""
        self._write_rows(self.run_dir / "members.csv", [{"step": step, **row} for row in rows], "a", MEMBER_COLUMNS)
        if self.wandb_run is not None:
            self.wandb_run.log({f"member/{row['member']}/{k}": v for row in rows for k, v in row.items()
                                if isinstance(v, (int, float)) and k != "member"}, step=step)

    def log_eval(self, step: int, metrics: dict, echo: bool = True) -> None:
        metrics = {k: v for k, v in metrics.items() if v is not None}  # e.g. no trade precision where nothing traded
        if self.wandb_run is not None and metrics:
            self.wandb_run.log({f"eval/{k}": v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)
        if metrics and echo:
            shown = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
            self.console.print(f"step {step} eval: {shown}")
