"""datasets/<name>/: writing the Parquet files and manifest atomically, and reading them back."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from babylon_rl.dataset.params import validate_name
from babylon_rl.errors import DatasetError
from babylon_rl.settings import Home

SPLITS = ("train", "validation", "eval")
MANIFEST = "manifest.json"
# The ground truth of every window in the dataset, for the judge only.
CONTEXTS = "contexts.parquet"

# Fixed writer settings: same rows in, same bytes out.
PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, statistics=True, row_group_size=16_384)


def dataset_dir(home: Home, name: str) -> Path:
    return home.datasets / validate_name(name)


def hash_files(paths: list[Path]) -> str:
    """sha256 over each file's name and bytes, in the given order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def manifest_hash(manifest: dict) -> str:
    """sha256 of the manifest without created_at (and without this hash itself)."""
    content = {key: value for key, value in manifest.items() if key not in {"created_at", "manifest_hash"}}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def ensure_absent(home: Home, name: str, force: bool) -> None:
    if dataset_dir(home, name).exists() and not force:
        raise DatasetError(f"dataset {name!r} already exists at {dataset_dir(home, name)}; pass --force to replace it or choose another --name")


# Work directories inside datasets/: `.tmp-PID-HEX` (being written), `.old-PID-HEX` (being replaced).
_WORK_DIR = re.compile(r"\.(?:tmp|old)-(\d+)-[0-9a-f]{32}")


def _work_dir(home: Home, kind: str) -> Path:
    return home.datasets / f".{kind}-{os.getpid()}-{uuid.uuid4().hex}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(home: Home) -> list[Path]:
    """Remove work directories left by builds that were killed (their process is gone)."""
    removed = []
    if not home.datasets.is_dir():
        return removed
    for path in home.datasets.iterdir():
        match = _WORK_DIR.fullmatch(path.name)
        if match and path.is_dir() and not _alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@dataclass(frozen=True)
class Staged:
    directory: Path
    files: list[Path]
    content_hash: str


def _write_error(name: str, where: Path, exc: BaseException) -> DatasetError:
    """One line for a failed write (disk full, file too large, read-only): the OS reason, not a traceback."""
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    reason = getattr(exc, "strerror", None) or re.sub(r"^.*underlying IO error: ", "", text)
    return DatasetError(f"cannot write dataset {name!r} under {where}: {reason}; nothing was published, "
                        "free some space (or choose another --home) and run it again")


def stage(home: Home, frames: dict[str, pl.DataFrame], contexts: pl.DataFrame, name: str = "") -> Staged:
    """Write the split files and the window contexts into a fresh hidden directory inside datasets/."""
    home.datasets.mkdir(parents=True, exist_ok=True)
    sweep_stale(home)
    directory = _work_dir(home, "tmp")
    try:
        directory.mkdir()
        files = []
        for split in SPLITS:
            path = directory / f"{split}.parquet"
            frames[split].write_parquet(path, **PARQUET_OPTIONS)
            files.append(path)
        contexts.write_parquet(directory / CONTEXTS, **PARQUET_OPTIONS)
        files.append(directory / CONTEXTS)
    except (OSError, pl.exceptions.PolarsError) as exc:
        shutil.rmtree(directory, ignore_errors=True)
        raise _write_error(name, home.datasets, exc) from None
    return Staged(directory=directory, files=files, content_hash=hash_files(files))


def publish(home: Home, staged: Staged, name: str, manifest: dict, force: bool) -> Path:
    """Add the manifest and move the staged directory to datasets/<name> (swap when --force)."""
    try:
        (staged.directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        discard(staged)
        raise _write_error(name, home.datasets, exc) from None
    target = dataset_dir(home, name)
    if not target.exists():
        try:
            staged.directory.rename(target)
            return target
        except OSError:
            if not target.exists():
                raise
    if not force:
        discard(staged)
        ensure_absent(home, name, force)
    old = _work_dir(home, "old")
    target.rename(old)
    staged.directory.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def discard(staged: Staged) -> None:
    shutil.rmtree(staged.directory, ignore_errors=True)


def names(home: Home) -> list[str]:
    if not home.datasets.is_dir():
        return []
    return sorted(p.name for p in home.datasets.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).exists())


def read_manifest(home: Home, name: str) -> dict:
    path = dataset_dir(home, name) / MANIFEST
    if not path.exists():
        known = ", ".join(names(home)) or "none yet; create one with `cli.py dataset build --name NAME`"
        raise DatasetError(f"unknown dataset {name!r}; existing datasets: {known}")
    return json.loads(path.read_text())


def read_split(home: Home, name: str, split: str) -> pl.DataFrame:
    return pl.read_parquet(dataset_dir(home, name) / f"{split}.parquet")
