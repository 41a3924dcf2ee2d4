"""Checking a dataset's files against the size and sha256 its manifest recorded, cheaply.

The size is compared on every open. The sha256 is computed only when the file's
(size, mtime_ns, ctime_ns) differs from what `.verified.json` in the version directory
remembers for it, so opening a big dataset a second time reads no Parquet bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from babylon_rl import atomic
from babylon_rl.hashing import file_sha256 as sha256

CACHE = ".verified.json"


def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _read_cache(directory: Path) -> dict:
    try:
        cache = json.loads((directory / CACHE).read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _write_cache(directory: Path, cache: dict) -> None:
    """Temp file then rename; a read-only dataset just hashes again next time."""
    try:
        atomic.write_text(directory / CACHE, json.dumps(cache, sort_keys=True))
    except OSError:
        pass


def remember(directory: Path, digests: dict[str, dict]) -> None:
    """Record files just hashed (at build time) as verified."""
    _write_cache(directory, {name: {"stat": _stat_key(directory / name), "sha256": d["sha256"]} for name, d in digests.items()})


def expected_files(manifest: dict) -> dict[str, dict]:
    """The manifest's `files` map (name -> size, sha256); empty for datasets built before it recorded them."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        return {}
    return {name: want for name, want in files.items()
            if isinstance(want, dict) and {"size", "sha256"} <= want.keys() and Path(name).name == name}


def mismatch(directory: Path, manifest: dict) -> str | None:
    """What does not match the manifest (one phrase naming the file), or None when everything does."""
    cache = _read_cache(directory)
    changed = False
    for name, want in expected_files(manifest).items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        key = _stat_key(path)
        if key[0] != want["size"]:
            return f"{name} does not match its manifest (size {key[0]}, expected {want['size']})"
        if cache.get(name) == {"stat": key, "sha256": want["sha256"]}:
            continue
        if sha256(path) != want["sha256"]:
            return f"{name} does not match its manifest (its sha256 differs from the one recorded at build time)"
        cache[name] = {"stat": key, "sha256": want["sha256"]}
        changed = True
    if changed:
        _write_cache(directory, cache)
    return None
