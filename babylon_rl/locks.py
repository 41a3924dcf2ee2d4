"""An advisory file lock so that two builds never write the warehouse at once."""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from babylon_rl.errors import WarehouseError


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return "another process"
    return f"process {pid}" if pid else "another process"


@contextmanager
def exclusive(path: Path, wait_seconds: float, on_wait: Callable[[str], None] | None = None,
              refusal: str = "another build is running ({holder} holds {path}); wait for it or pass --wait SECONDS") -> Iterator[None]:
    """Hold `path` exclusively; wait up to `wait_seconds` for another holder, then refuse naming it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    deadline = time.monotonic() + wait_seconds
    told = False
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(path)
                if time.monotonic() >= deadline:
                    raise WarehouseError(refusal.format(holder=holder, path=path)) from None
                if on_wait and not told:
                    on_wait(f"waiting up to {wait_seconds:.0f}s for the build lock held by {holder}")
                    told = True
                time.sleep(0.2)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()  # closing the descriptor releases the flock


def held(path: Path) -> bool:
    """True while a process holds `path` with `exclusive` (a build is running)."""
    try:
        handle = open(path)
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False
