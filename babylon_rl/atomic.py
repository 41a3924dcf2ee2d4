"""Writing a file or a directory so that a kill at any moment leaves the old one or the new one."""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _aside(path: Path, kind: str) -> Path:
    """A hidden sibling name, unique to this process and call (`.NAME.tmp-PID-HEX`)."""
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextmanager
def file(path: Path) -> Iterator[Path]:
    """Yield a temp path next to `path` to write; when the block ends without error, the written file
    is flushed to disk and replaces `path` in one rename. On an error nothing is left behind."""
    tmp = _aside(path, "tmp")
    try:
        yield tmp
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextmanager
def directory(path: Path) -> Iterator[Path]:
    """Yield a fresh temp directory next to `path` to fill; when the block ends without error it takes
    `path`'s place. A directory already there is moved aside first and removed after (a kill between
    the two renames leaves it as `.NAME.old-…` next to nothing at `path`, never a half-written one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _aside(path, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            old = _aside(path, "old")
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
