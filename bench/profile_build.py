"""Where a `cli.py build` spends its time and memory: seconds and peak RSS per step and per model.

    python bench/profile_build.py --home /tmp/b100k            # the warehouse as it is
    python bench/profile_build.py --home /tmp/b100k --top 20   # and the 20 slowest batches

Runs the build in this process, as `cli.py build` does, and measures each step of
babylon_rl.build (the snapshot, reading the dirty windows, opening SQLMesh, each plan,
publishing the marts) and each model batch SQLMesh evaluates (its query and its audits).
Peak RSS is exact, not sampled: Linux's high-water mark (VmHWM) is read when a step ends
and reset when one begins (`echo 5 > /proc/self/clear_refs`), and a step that holds others
(a plan holds its batches) gets the highest of theirs. Linux only. Resetting the mark
also resets what `/usr/bin/time -v` reports as the process's maximum RSS: read the peak
from this script's table.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import click

from babylon_rl import build
from babylon_rl.settings import Home


def _peak_rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def _reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")


@dataclass
class Step:
    label: str
    seconds: float = 0.0
    peak_mb: float = 0.0
    count: int = 0
    started: float = 0.0


class Profile:
    """Totals per label, and every model batch; a step open while others run gets their peak RSS too."""

    def __init__(self) -> None:
        self.steps: dict[str, Step] = {}
        self.batches: list[Step] = []
        self._open: list[Step] = []

    def _fold_peak(self) -> None:
        peak = _peak_rss_mb()
        for step in self._open:
            step.peak_mb = max(step.peak_mb, peak)
        _reset_peak_rss()

    def begin(self, label: str) -> None:
        self._fold_peak()
        self._open.append(Step(label, started=time.monotonic()))

    def end(self) -> Step:
        """Close the innermost open step, add it to its label's totals, and return it."""
        self._fold_peak()
        run = self._open.pop()
        run.seconds = time.monotonic() - run.started
        total = self.steps.setdefault(run.label, Step(run.label))
        total.seconds += run.seconds
        total.peak_mb = max(total.peak_mb, run.peak_mb)
        total.count += 1
        return run

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        self.begin(label)
        try:
            yield
        finally:
            self.end()


def _instrument(profile: Profile) -> None:
    """Wrap babylon_rl.build's steps, and each SQLMesh model batch, in profile steps."""

    def timed(label: str, function):
        def wrapper(*args, **kwargs):
            with profile.step(label):
                return function(*args, **kwargs)
        return wrapper

    for name in ("run_snapshot", "_read_dirty", "_days_with_data", "plan_prod", "publish_marts", "_clear_dirty"):
        setattr(build, name, timed(name, getattr(build, name)))

    open_sqlmesh = build.sqlmesh_context

    def sqlmesh_context(*args, **kwargs):
        with profile.step("open SQLMesh (load the project)"):
            context = open_sqlmesh(*args, **kwargs)
        context.plan = timed("SQLMesh plans (with their batches)", context.plan)
        context.close = timed("close SQLMesh (checkpoint the warehouse)", context.close)
        _record_batches(profile, context.console)
        return context

    build.sqlmesh_context = sqlmesh_context


def _record_batches(profile: Profile, console) -> None:
    """SQLMesh's console hears of each batch's start and end; batches run one at a time (config.py)."""
    start_batch, update_batch = console.start_snapshot_evaluation_progress, console.update_snapshot_evaluation_progress

    def start(snapshot, *args, **kwargs):
        profile.begin(snapshot.name.replace('"', ""))
        return start_batch(snapshot, *args, **kwargs)

    def update(snapshot, interval, *args, **kwargs):
        batch = profile.end()
        batch.label = f"{batch.label} {_day(interval[0])}..{_day(interval[1])}"
        profile.batches.append(batch)
        return update_batch(snapshot, interval, *args, **kwargs)

    console.start_snapshot_evaluation_progress = start
    console.update_snapshot_evaluation_progress = update


def _day(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch_ms / 1000))


@click.command()
@click.option("--home", "home_dir", type=click.Path(path_type=Path, exists=True, file_okay=False), required=True,
              help="The toolkit home whose warehouse to build.")
@click.option("--database-url", default=None, help="Snapshot this game database first, as `cli.py build` does.")
@click.option("--top", default=10, show_default=True, help="Also list this many of the slowest model batches.")
def main(home_dir: Path, database_url: str | None, top: int) -> None:
    profile = Profile()
    _instrument(profile)
    with profile.step("whole build"):
        with profile.step("import SQLMesh"):
            import sqlmesh  # noqa: F401  (apply_models' first line would, unlabelled)
        build.run_build(Home.resolve(home_dir), database_url)
    click.echo(f"{'step':<58} {'runs':>5} {'seconds':>8} {'peak RSS MB':>12}")
    for step in sorted(profile.steps.values(), key=lambda s: -s.seconds):
        click.echo(f"{step.label:<58} {step.count:>5} {step.seconds:>8.1f} {step.peak_mb:>12,.0f}")
    if top:
        click.echo(f"\nslowest {top} model batches")
        for batch in sorted(profile.batches, key=lambda s: -s.seconds)[:top]:
            click.echo(f"{batch.label:<64} {batch.seconds:>8.1f} {batch.peak_mb:>12,.0f}")


if __name__ == "__main__":
    main()
