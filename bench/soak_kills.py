"""Soak under faults: `build --every` while rows arrive every game minute, kill -9 at random moments.

The game's rows are simulated once into a staging database, then replayed into the game database
a slice per game minute, in the order the game writes them (a trajectory when it ends, with its
LLM calls; a window's market outcomes with its last trajectory), each stamped with the clock at
arrival. Some minutes also correct a row of an earlier window (a late row, which the next build
must restate). A builder (`cli.py build --every`) runs throughout; every few minutes it is killed
with SIGKILL at a random moment and started again. At the end one more `build` runs to
completion, a fresh home builds everything from the same database, and every row of every mart
must be equal (rows lost = differences = 0). Exit code 1 otherwise.

    python bench/soak_kills.py --database-url postgresql://postgres@127.0.0.1/postgres --game-minutes 60

A game minute lasts `--tick-seconds` of real time; `tests/reliability/test_soak.py` runs a short variant.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb
import psycopg
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parents[1]
MARTS = ("windows", "agent_window_pnl", "training_samples", "rejected_rows")
REPLAYED = {"trajectories": "updatedAt", "llm_call_logs": "createdAt", "market_outcomes": "createdAt"}


@dataclass
class SoakResult:
    game_minutes: int
    windows: int
    rows_written: int = 0
    late_rows: int = 0
    builders_started: int = 0
    builds_started: int = 0
    builds_completed: int = 0
    kills: int = 0
    seconds: float = 0.0
    differences: dict[str, int] = field(default_factory=dict)  # mart -> rows in one build and not the other
    raw_missing: dict[str, int] = field(default_factory=dict)  # table -> source rows not in the warehouse

    @property
    def passed(self) -> bool:
        return not any(self.differences.values()) and not any(self.raw_missing.values())


# -- the CLI and the databases ----------------------------------------------------------------
def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "BABYLON_RL_DEBUG"}}
    return {**env, "PYTHONPATH": str(ROOT), "BABYLON_RL_HOME": str(home)}


def _cli(home: Path, *args: str, timeout: float = 600) -> str:
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], env=_env(home), cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"cli.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


@contextmanager
def scratch_databases(admin_url: str, *names: str) -> Iterator[list[str]]:
    """Fresh databases on the server of `admin_url`, dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    created = [f"soak_{name}_{suffix}" for name in names]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        for name in created:
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield [admin_url.rsplit("/", 1)[0] + f"/{name}" for name in created]
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for name in created:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the game's rows, minute by minute -------------------------------------------------------
@dataclass
class Slice:
    rows: dict[str, list[tuple]]  # table -> rows to insert this minute


def _read(url: str, table: str, order: str) -> tuple[list[str], list[tuple]]:
    with psycopg.connect(url) as conn:
        cursor = conn.execute(f'SELECT * FROM "{table}" ORDER BY {order}')
        return [c.name for c in cursor.description], [tuple(map(_param, row)) for row in cursor.fetchall()]


def _param(value: object) -> object:
    """A value as it can be inserted again (jsonb columns come back as dicts and lists)."""
    return Jsonb(value) if isinstance(value, (dict, list)) else value


def plan_arrivals(source_url: str, minutes: int) -> tuple[dict[str, list[str]], list[Slice]]:
    """The staging database's rows cut into one slice per game minute, in the order the game writes them."""
    columns, trajectories = {}, None
    columns["trajectories"], trajectories = _read(source_url, "trajectories", '"endTime", "trajectoryId"')
    columns["llm_call_logs"], calls = _read(source_url, "llm_call_logs", '"trajectoryId", id')
    columns["market_outcomes"], outcomes = _read(source_url, "market_outcomes", '"windowId", id')
    tid, wid = columns["trajectories"].index("trajectoryId"), columns["trajectories"].index("windowId")
    calls_of: dict[str, list[tuple]] = {}
    for row in calls:
        calls_of.setdefault(row[columns["llm_call_logs"].index("trajectoryId")], []).append(row)
    outcomes_of: dict[str, list[tuple]] = {}
    for row in outcomes:
        outcomes_of.setdefault(row[columns["market_outcomes"].index("windowId")], []).append(row)
    last_of_window = {row[wid]: index for index, row in enumerate(trajectories)}
    slices = [Slice({table: [] for table in REPLAYED}) for _ in range(minutes)]
    for index, row in enumerate(trajectories):
        rows = slices[index * minutes // len(trajectories)].rows
        rows["trajectories"].append(row)
        rows["llm_call_logs"] += calls_of.get(row[tid], [])
        if last_of_window[row[wid]] == index:
            rows["market_outcomes"] += outcomes_of.get(row[wid], [])
    return columns, slices


def write_slice(url: str, columns: dict[str, list[str]], piece: Slice) -> int:
    """Insert one minute's rows in one transaction, stamped with the clock at arrival (UTC)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    written = 0
    with psycopg.connect(url) as conn, conn.transaction():
        for table, stamp in REPLAYED.items():
            names, rows = columns[table], piece.rows[table]
            if not rows:
                continue
            at = names.index(stamp)
            quoted = ", ".join(f'"{n}"' for n in names)
            marks = ", ".join(["%s"] * len(names))
            conn.cursor().executemany(f'INSERT INTO "{table}" ({quoted}) VALUES ({marks})',
                                      [row[:at] + (now,) + row[at + 1:] for row in rows])
            written += len(rows)
    return written


def correct_a_late_row(url: str, rng: random.Random) -> bool:
    """Change the P&L of one trajectory of an earlier window, stamped now (a late correction)."""
    with psycopg.connect(url) as conn, conn.transaction():
        ids = [r[0] for r in conn.execute('SELECT "trajectoryId" FROM trajectories ORDER BY "trajectoryId"').fetchall()]
        if not ids:
            return False
        conn.execute("""UPDATE trajectories SET "finalPnL" = coalesce("finalPnL", 0) + 1.5,
                        "updatedAt" = (now() AT TIME ZONE 'UTC') WHERE "trajectoryId" = %s""", (rng.choice(ids),))
    return True


# -- the builder that gets killed ---------------------------------------------------------------
class Builder:
    """`cli.py build --every` in its own process group, logging to a file per start."""

    def __init__(self, home: Path, url: str, every_minutes: float, logs: Path) -> None:
        self.home, self.url, self.every_minutes, self.logs = home, url, every_minutes, logs
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.logs / f"builder-{self.starts}.log").open("w")
        args = [sys.executable, str(ROOT / "cli.py"), "--database-url", self.url, "build", "--every", str(self.every_minutes)]
        self.proc = subprocess.Popen(args, env=_env(self.home), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()

    def kill(self) -> bool:
        """SIGKILL to the whole process group; True when it was still running."""
        running = self.proc is not None and self.proc.poll() is None
        if running:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
        return running

    def counts(self) -> tuple[int, int, list[str]]:
        """(builds started, builds completed, failure lines) over every start's log."""
        text = "".join(p.read_text() for p in sorted(self.logs.glob("builder-*.log")))
        started = len(re.findall(r"^build \d+ at ", text, re.M))
        completed = len(re.findall(r"^(built \d+ models|nothing to compute)", text, re.M))
        return started, completed, re.findall(r"^build \d+ failed: .*$", text, re.M)


# -- comparing the end state ---------------------------------------------------------------------
def mart_rows(home: Path) -> dict[str, list[tuple]]:
    """Every mart row, doubles to 9 significant digits (an AVG may add in another order after a restatement)."""
    def rounded(row: tuple) -> tuple:
        return tuple(float(f"{v:.9g}") if isinstance(v, float) else v for v in row)

    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return {m: sorted((rounded(r) for r in conn.execute(f"SELECT * FROM babylon.{m}").fetchall()), key=repr)
                for m in MARTS}


def _difference(left: list[tuple], right: list[tuple]) -> int:
    from collections import Counter

    a, b = Counter(left), Counter(right)
    return sum(((a - b) + (b - a)).values())


def _raw_missing(home: Path, url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        source = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in REPLAYED}
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        copied = {t: conn.execute(f"SELECT count(*) FROM raw.{t}").fetchone()[0] for t in REPLAYED}
    return {t: source[t] - copied[t] for t in REPLAYED}


# -- the soak ------------------------------------------------------------------------------------
def soak(admin_url: str, workdir: Path, game_minutes: int = 60, windows: int = 6, agents: int = 6,
         tick_seconds: float = 2.0, every_minutes: float = 0.05, kill_every: tuple[int, int] = (3, 8),
         late_share: float = 0.2, seed: int = 0, log=print) -> SoakResult:
    rng = random.Random(seed)
    result = SoakResult(game_minutes, windows)
    started = time.monotonic()
    home, reference, logs = workdir / "home", workdir / "reference", workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with scratch_databases(admin_url, "source", "game") as (source_url, game_url):
        for url in (source_url, game_url):
            _cli(home, "--database-url", url, "db", "migrate")
        _cli(home, "--database-url", source_url, "simulate", "--agents", str(agents), "--windows", str(windows),
             "--seed", str(seed), "--start", "2025-01-15T00:00", "--dirt-rate", "0.05")
        columns, slices = plan_arrivals(source_url, game_minutes)
        builder = Builder(home, game_url, every_minutes, logs)
        builder.start()
        next_kill, completed, deferred = rng.randint(*kill_every), 0, 0
        for minute, piece in enumerate(slices, start=1):
            tick_start = time.monotonic()
            result.rows_written += write_slice(game_url, columns, piece)
            if minute > game_minutes // windows and rng.random() < late_share:
                result.late_rows += correct_a_late_row(game_url, rng)
            if minute == next_kill and builder.counts()[1] == completed and deferred < kill_every[1]:
                next_kill, deferred = next_kill + 1, deferred + 1  # on a slow machine: let this start finish one build first
            elif minute == next_kill:
                time.sleep(rng.uniform(0, tick_seconds))  # a random moment of whatever the builder is doing
                result.kills += builder.kill()
                completed, deferred = builder.counts()[1], 0
                builder.start()
                next_kill = minute + rng.randint(*kill_every)
            time.sleep(max(0.0, tick_start + tick_seconds - time.monotonic()))
            if minute % 10 == 0:
                log(f"game minute {minute}/{game_minutes}: {result.rows_written} rows, {result.kills} kills")
        result.kills += builder.kill()  # the last fault: the builder dies wherever it is
        result.builders_started = builder.starts
        result.builds_started, result.builds_completed, failures = builder.counts()
        for line in failures:
            log(f"builder: {line}")
        _cli(home, "--database-url", game_url, "build", "--wait", "120")
        _cli(reference, "--database-url", game_url, "build")
        ours, theirs = mart_rows(home), mart_rows(reference)
        result.differences = {m: _difference(ours[m], theirs[m]) for m in MARTS}
        result.raw_missing = _raw_missing(home, game_url)
    result.seconds = time.monotonic() - started
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1/postgres",
                        help="A server where scratch databases may be created (dropped at the end).")
    parser.add_argument("--game-minutes", type=int, default=60)
    parser.add_argument("--windows", type=int, default=6, help="Game windows the minutes' rows are spread over.")
    parser.add_argument("--agents", type=int, default=6)
    parser.add_argument("--tick-seconds", type=float, default=2.0, help="Real seconds per game minute.")
    parser.add_argument("--every-minutes", type=float, default=0.05, help="The builder's --every (real minutes).")
    parser.add_argument("--kill-every", type=int, nargs=2, default=(3, 8), metavar=("MIN", "MAX"),
                        help="Kill the builder every MIN to MAX game minutes.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/babylon-soak-kills"))
    args = parser.parse_args()
    import shutil

    shutil.rmtree(args.workdir, ignore_errors=True)
    result = soak(args.database_url, args.workdir, args.game_minutes, args.windows, args.agents, args.tick_seconds,
                  args.every_minutes, tuple(args.kill_every), seed=args.seed)
    for name, value in vars(result).items():
        print(f"{name:18} {value}")
    print("PASSED: the marts equal a fresh full build's" if result.passed else "FAILED: the marts differ")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
