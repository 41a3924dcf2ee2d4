"""The build lock: a second holder waits (bounded) or is refused with the holder named."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from babylon_rl import locks
from babylon_rl.errors import WarehouseError

HOLD = """
import sys, time
from pathlib import Path
from babylon_rl import locks
with locks.exclusive(Path(sys.argv[1]), 0):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "build.lock"
    holder = _hold(path, 30)
    try:
        with pytest.raises(WarehouseError, match=f"process {holder.pid} holds"):
            with locks.exclusive(path, wait_seconds=0.3):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    path = tmp_path / "build.lock"
    holder = _hold(path, 1.0)
    messages: list[str] = []
    started = time.monotonic()
    with locks.exclusive(path, wait_seconds=20, on_wait=messages.append):
        waited = time.monotonic() - started
    holder.wait()
    assert waited > 0.3
    assert messages and "waiting up to 20s" in messages[0]


def test_lock_is_released_when_the_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "build.lock"
    holder = _hold(path, 30)
    holder.kill()
    holder.wait()
    with locks.exclusive(path, wait_seconds=0):
        assert path.read_text().strip().isdigit()
