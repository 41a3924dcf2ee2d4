"""datasets/: writing one dataset version and publishing it with one atomic rename.

Layout: every build writes `datasets/.versions/<name>-<pid>-<hex>/` (the Parquet files, the
manifest, later its scores) and `datasets/<name>` is a relative symlink to the published
version. `--force` swaps that link with ONE `os.replace` of a new link, so a kill at any
moment leaves the old version or the new one, complete, each with its own scores.
Reading a published dataset is `babylon_rl.dataset.dataset.Dataset`.
"""

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

from babylon_rl.dataset import verify
from babylon_rl.errors import DatasetError
from babylon_rl.settings import Home, safe_name

SPLITS = ("train", "validation", "eval")
MANIFEST = "manifest.json"
# The ground truth of every window in the dataset, for the judge only.
CONTEXTS = "contexts.parquet"
VERSIONS = ".versions"

# Fixed writer settings: same rows in, same bytes out.
PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, statistics=True, row_group_size=16_384)

# Work entries inside datasets/: `.tmp-PID-HEX` (a version being written), `.link-PID-HEX` (a link
# about to replace a name), `.old-PID-HEX` (left by builds before versions existed).
_WORK = re.compile(r"\.(?:tmp|old|link)-(\d+)-[0-9a-f]{32}")
# Versions: `<name>-<pid>-<hex>`, or `<name>-legacy-<hex>` for a directory published before versions.
_VERSION = re.compile(r"(?P<name>.+)-(?P<pid>\d+|legacy)-[0-9a-f]{32}")


def versions_dir(home: Home) -> Path:
    return home.datasets / VERSIONS


def hash_files(paths: list[Path]) -> tuple[str, dict[str, dict]]:
    """The content hash (sha256 over each file's name and bytes, in order) and each file's size and sha256."""
    digest, files = hashlib.sha256(), {}
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        one = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
                one.update(block)
        files[path.name] = {"size": path.stat().st_size, "sha256": one.hexdigest()}
    return digest.hexdigest(), files


def manifest_hash(manifest: dict) -> str:
    """sha256 of the manifest without created_at (and without this hash itself)."""
    content = {key: value for key, value in manifest.items() if key not in {"created_at", "manifest_hash"}}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def ensure_absent(home: Home, name: str, force: bool) -> None:
    target = home.datasets / safe_name(name, "dataset name")
    recover(home, name)
    if os.path.lexists(target) and not force:
        raise DatasetError(f"dataset {name!r} already exists at {target}; pass --force to replace it or choose another --name")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _published_versions(home: Home) -> set[Path]:
    """The version directories some datasets/<name> link points at now."""
    return {p.resolve() for p in home.datasets.iterdir() if p.is_symlink() and not p.name.startswith(".")}


def sweep_stale(home: Home) -> list[Path]:
    """Remove work entries and unpublished versions left by builds that were killed (their process is gone).

    A published version is never removed, whoever wrote it."""
    removed: list[Path] = []
    if not home.datasets.is_dir():
        return removed
    for path in home.datasets.iterdir():
        match = _WORK.fullmatch(path.name)
        if match and not _alive(int(match.group(1))):
            _remove(path)
            removed.append(path)
    if not versions_dir(home).is_dir():
        return removed
    recover_all(home)
    published = _published_versions(home)
    for path in versions_dir(home).iterdir():
        match = _VERSION.fullmatch(path.name)
        if not match or path.resolve() in published:
            continue
        if match["pid"] == "legacy" or not _alive(int(match["pid"])):
            _remove(path)
            removed.append(path)
    return removed


@dataclass(frozen=True)
class Staged:
    directory: Path
    files: list[Path]
    content_hash: str
    digests: dict[str, dict]  # file name -> size and sha256, the manifest's `files`


def _write_error(name: str, where: Path, exc: BaseException) -> DatasetError:
    """One line for a failed write (disk full, file too large, read-only): the OS reason, not a traceback."""
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    reason = getattr(exc, "strerror", None) or re.sub(r"^.*underlying IO error: ", "", text)
    return DatasetError(f"cannot write dataset {name!r} under {where}: {reason}; nothing was published, "
                        "free some space (or choose another --home) and run it again")


def _work_path(home: Home, kind: str) -> Path:
    return home.datasets / f".{kind}-{os.getpid()}-{uuid.uuid4().hex}"


def stage(home: Home, frames: dict[str, pl.DataFrame], contexts: pl.DataFrame, name: str = "") -> Staged:
    """Write the split files and the window contexts into a fresh hidden directory inside datasets/."""
    home.datasets.mkdir(parents=True, exist_ok=True)
    sweep_stale(home)
    directory = _work_path(home, "tmp")
    try:
        directory.mkdir()
        files = []
        for split in SPLITS:
            path = directory / f"{split}.parquet"
            frames[split].write_parquet(path, **PARQUET_OPTIONS)
            files.append(path)
        contexts.write_parquet(directory / CONTEXTS, **PARQUET_OPTIONS)
        files.append(directory / CONTEXTS)
        content_hash, digests = hash_files(files)
    except (OSError, pl.exceptions.PolarsError) as exc:
        shutil.rmtree(directory, ignore_errors=True)
        raise _write_error(name, home.datasets, exc) from None
    verify.remember(directory, digests)  # the first open of the new version hashes nothing again
    return Staged(directory=directory, files=files, content_hash=content_hash, digests=digests)


def publish(home: Home, staged: Staged, name: str, manifest: dict, force: bool) -> Path:
    """Add the manifest, move the staged directory into .versions/ and point datasets/<name> at it."""
    try:
        (staged.directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        versions_dir(home).mkdir(exist_ok=True)
    except OSError as exc:
        discard(staged)
        raise _write_error(name, home.datasets, exc) from None
    version = versions_dir(home) / f"{safe_name(name, 'dataset name')}{staged.directory.name.removeprefix('.tmp')}"
    staged.directory.rename(version)
    link = home.datasets / name
    try:
        old = _point(home, link, version, force)
    except BaseException:
        if link.resolve() != version.resolve():  # never remove a version that got published
            shutil.rmtree(version, ignore_errors=True)
        raise
    if old is not None and old != version.resolve() and old.parent == versions_dir(home).resolve():
        shutil.rmtree(old, ignore_errors=True)  # readers that opened it before the swap lose it, as they did before
    return link


def _point(home: Home, link: Path, version: Path, force: bool) -> Path | None:
    """Make datasets/<name> point at `version`; returns the version it pointed at before, if any."""
    target = os.path.relpath(version, home.datasets)
    if not force:
        try:
            os.symlink(target, link)  # refuses an existing name atomically: no race with another build
            return None
        except FileExistsError:
            raise DatasetError(f"dataset {link.name!r} already exists at {link}; pass --force to replace it "
                               "or choose another --name") from None
    recover(home, link.name)
    if link.is_dir() and not link.is_symlink():
        _adopt_legacy(home, link)
    old = link.resolve() if link.is_symlink() else None
    _replace_link(home, link, target)
    return old


def _replace_link(home: Home, link: Path, target: str) -> None:
    """The one atomic step: a new link under a temporary name, renamed onto the published name."""
    tmp = _work_path(home, "link")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    finally:
        tmp.unlink(missing_ok=True)  # gone after a successful replace; left only by a failed one


def _adopt_legacy(home: Home, directory: Path) -> None:
    """A dataset directory published before versions becomes a version behind a link (once per dataset).

    A kill between the rename and the link leaves no name: `recover` links the legacy version again."""
    legacy = versions_dir(home) / f"{directory.name}-legacy-{uuid.uuid4().hex}"
    directory.rename(legacy)
    _replace_link(home, directory, os.path.relpath(legacy, home.datasets))


def recover(home: Home, name: str) -> None:
    """Finish an interrupted `_adopt_legacy`: link a legacy version whose name has no entry."""
    link = home.datasets / name
    if os.path.lexists(link) or not versions_dir(home).is_dir():
        return
    legacy = sorted((p for p in versions_dir(home).glob(f"{name}-legacy-*") if _version_name(p) == name),
                    key=lambda p: p.stat().st_mtime_ns)
    if legacy:
        _replace_link(home, link, os.path.relpath(legacy[-1], home.datasets))


def _version_name(path: Path) -> str | None:
    match = _VERSION.fullmatch(path.name)
    return match["name"] if match else None


def recover_all(home: Home) -> None:
    if not versions_dir(home).is_dir():
        return
    for path in versions_dir(home).iterdir():
        match = _VERSION.fullmatch(path.name)
        if match and match["pid"] == "legacy":
            recover(home, match["name"])


def remove(home: Home, name: str) -> None:
    """Unpublish datasets/<name> (one unlink), then delete its version."""
    link = home.datasets / safe_name(name, "dataset name")
    version = link.resolve()
    if link.is_symlink():
        link.unlink()
    shutil.rmtree(version, ignore_errors=True)


def discard(staged: Staged) -> None:
    shutil.rmtree(staged.directory, ignore_errors=True)


def names(home: Home) -> list[str]:
    """The published datasets: a link to a version (or a directory from before versions) with a manifest."""
    if not home.datasets.is_dir():
        return []
    recover_all(home)
    return sorted(p.name for p in home.datasets.iterdir() if not p.name.startswith(".") and (p / MANIFEST).is_file())
