"""Helpers for the reliability tests: the real CLI in a subprocess, kill -9 on a sign of work,
directory-tree snapshots and byte-level searches of a whole home."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import duckdb
import psycopg

ROOT = Path(__file__).resolve().parents[2]
CLI = str(ROOT / "cli.py")


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: this checkout first, the given home, no inherited database URL."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "BABYLON_RL_DEBUG", "OPENAI_BASE_URL", "JUDGE_MODEL"}}
    env.update(PYTHONPATH=str(ROOT), BABYLON_RL_HOME=str(home), WANDB_MODE="offline", COLUMNS="200", **extra)
    return env


def start(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The CLI in its own process group, so a kill reaches the workers it forks too (SQLMesh loads models in a pool)."""
    return subprocess.Popen([sys.executable, CLI, *args], env=env or cli_env(home), cwd=str(home.parent),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _kill9(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CLI, *args], env=env or cli_env(home), cwd=str(home.parent),
                          capture_output=True, text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """A known failure: exit code 2, no traceback, one `Error:` line naming the needles."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


def kill_when(proc: subprocess.Popen, sign: Callable[[], bool], timeout: float = 60) -> bool:
    """kill -9 the process as soon as `sign()` holds; True when it was killed while still running."""
    seen = wait_for(lambda: sign() or proc.poll() is not None, timeout)
    killed = seen and proc.poll() is None
    if killed:
        _kill9(proc)
    proc.communicate(timeout=30)
    return killed


def kill_after(proc: subprocess.Popen, low: float, high: float, seed: int | None = None) -> bool:
    """kill -9 after a random delay in [low, high] seconds; True when it was still running."""
    delay = random.Random(seed).uniform(low, high)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        _kill9(proc)
        proc.communicate(timeout=30)
        return True
    proc.communicate(timeout=30)
    return False


def tree(root: Path) -> dict[str, int]:
    """Every file and directory under root with its size (directories as -1)."""
    out = {}
    for path in root.rglob("*"):
        try:
            out[str(path.relative_to(root))] = -1 if path.is_dir() else path.stat().st_size
        except FileNotFoundError:
            continue
    return out


def files_containing(root: Path, needles: list[bytes]) -> list[str]:
    """Files under root (binary ones included) holding any of the byte strings."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path}: {needle!r}" for needle in needles if needle in data]
    return hits


def warehouse_rows(home: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute(sql).fetchall()


def pg_rows(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def source_counts(url: str, tables=("trajectories", "llm_call_logs", "market_outcomes")) -> dict[str, int]:
    return {t: pg_rows(url, f'SELECT count(*) FROM "{t}"')[0][0] for t in tables}


def raw_counts(home: Path, tables=("trajectories", "llm_call_logs", "market_outcomes")) -> dict[str, int]:
    return {t: warehouse_rows(home, f"SELECT count(*) FROM raw.{t}")[0][0] for t in tables}
