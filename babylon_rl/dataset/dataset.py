"""One published dataset, opened and verified once: every stage reads it (and writes its scores) through this.

`Dataset.open(home, name)` validates the name, resolves `datasets/<name>` to its version
directory once (a `--force` build that swaps the link mid-run does not mix two versions in one
reader), reads and checks the manifest and checks the files against it. A damaged dataset is
one DatasetError line naming the file and the command that rebuilds it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from babylon_rl import atomic
from babylon_rl.dataset import store, verify
from babylon_rl.dataset.params import BuildParams
from babylon_rl.errors import DatasetError
from babylon_rl.settings import Home, safe_name

if TYPE_CHECKING:
    import polars as pl

SCORES = "scores.parquet"  # the latest complete scoring run; scores.<judge>.parquet keeps each judge's


@dataclass(frozen=True)
class Dataset:
    home: Home
    name: str
    path: Path  # the published version's directory, resolved at open
    manifest: dict

    @classmethod
    def open(cls, home: Home, name: str, verify_files: bool = True) -> "Dataset":
        link = home.datasets / safe_name(name, "dataset name")
        if not os.path.lexists(link):
            store.recover(home, name)
        path = link.resolve()
        if link.is_symlink() and not path.is_dir():
            raise DatasetError(damaged_message(name, {}, f"{link} points to a missing version ({path})"))
        if not (path / store.MANIFEST).is_file():
            raise unknown(home, name)
        dataset = cls(home, name, path, _load_manifest(name, path / store.MANIFEST))
        if verify_files:
            dataset.verify()
        return dataset

    @property
    def published(self) -> Path:
        """datasets/<name>: the path analysts read (the link to this version)."""
        return self.home.datasets / self.name

    def verify(self) -> None:
        problem = verify.mismatch(self.path, self.manifest)
        if problem:
            raise self.damaged(problem)

    def damaged(self, what: str) -> DatasetError:
        return DatasetError(damaged_message(self.name, self.manifest, what))

    # -- the build's files ----------------------------------------------------------------
    def split_path(self, split: str) -> Path:
        return self.path / f"{split}.parquet"

    def has_split(self, split: str) -> bool:
        return self.split_path(split).is_file()

    @property
    def contexts_path(self) -> Path:
        return self.path / store.CONTEXTS

    def read_split(self, split: str, columns: list[str] | None = None) -> "pl.DataFrame | None":
        """One split's rows, or None when the dataset has no such file."""
        return self._read(self.split_path(split), columns) if self.has_split(split) else None

    def read_splits(self, splits: tuple[str, ...] = store.SPLITS, columns: list[str] | None = None) -> list["pl.DataFrame"]:
        """The frames of the given splits that the dataset has, in that order."""
        return [frame for frame in (self.read_split(split, columns) for split in splits) if frame is not None]

    def read_contexts(self, columns: list[str] | None = None) -> "pl.DataFrame | None":
        return self._read(self.contexts_path, columns) if self.contexts_path.is_file() else None

    def _read(self, path: Path, columns: list[str] | None, on_error: Callable[[str], DatasetError] | None = None) -> "pl.DataFrame":
        import polars as pl

        try:
            return pl.read_parquet(path, columns=columns)
        except (OSError, pl.exceptions.PolarsError) as exc:
            what = f"{path.name} cannot be read ({_reason(exc)})"
            raise (on_error or self.damaged)(what) from None

    # -- scores, kept with the version they were computed on ------------------------------
    def scores_path(self, judge: str | None = None) -> Path:
        return self.path / (f"scores.{judge}.parquet" if judge else SCORES)

    def has_scores(self, judge: str | None = None) -> bool:
        return self.scores_path(judge).is_file()

    def judges(self) -> list[str]:
        """The judges with a complete scores.<judge>.parquet, sorted."""
        return sorted(p.name[len("scores."):-len(".parquet")] for p in self.path.glob("scores.*.parquet"))

    def read_scores(self, judge: str | None = None, columns: list[str] | None = None) -> "pl.DataFrame | None":
        if not self.has_scores(judge):
            return None
        again = f"python cli.py score --dataset {self.name} --judge {judge or 'heuristic'}"
        return self._read(self.scores_path(judge), columns,
                          lambda what: DatasetError(f"the scores of dataset {self.name!r} are damaged: {what}; score it again with: {again}"))

    def write_scores(self, judge: str, frame: "pl.DataFrame", summary: dict) -> Path:
        """scores.<judge>.parquet/.json and scores.parquet/.json, each by temp file and rename."""
        text = json.dumps(summary, indent=2) + "\n"
        for parquet, js in ((self.scores_path(judge), self.path / f"scores.{judge}.json"),
                            (self.scores_path(), self.path / "scores.json")):
            with atomic.file(parquet) as tmp:
                frame.write_parquet(tmp)
            atomic.write_text(js, text)
        return self.scores_path()


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _load_manifest(name: str, path: Path) -> dict:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(damaged_message(name, {}, f"{store.MANIFEST} cannot be read ({_reason(exc)})")) from None
    if not isinstance(manifest, dict):
        raise DatasetError(damaged_message(name, {}, f"{store.MANIFEST} is not a JSON object"))
    recorded = manifest.get("manifest_hash")
    if recorded is not None and recorded != store.manifest_hash(manifest):
        raise DatasetError(damaged_message(name, manifest, f"{store.MANIFEST} was changed after the build (its manifest_hash does not match)"))
    return manifest


def unknown(home: Home, name: str) -> DatasetError:
    known = ", ".join(store.names(home)) or "none yet; build one with python cli.py dataset build --name NAME"
    return DatasetError(f"unknown dataset {name!r} under {home.datasets}; existing datasets: {known}")


def damaged_message(name: str, manifest: dict, what: str) -> str:
    return f"dataset {name!r} is damaged: {what}; rebuild it with: {rebuild_command(name, manifest)}"


def rebuild_command(name: str, manifest: dict) -> str:
    """`dataset build` with the options the manifest recorded (those not at their default), plus --force."""
    recorded = manifest.get("parameters") if isinstance(manifest.get("parameters"), dict) else {}
    defaults = BuildParams(name=name).to_manifest()
    args = ["python cli.py dataset build", f"--name {name}"]
    for field in fields(BuildParams):
        value, default = recorded.get(field.name), defaults[field.name]
        if field.name == "name" or value is None or value == default:
            continue
        if default is not None and not isinstance(value, type(default)):
            continue  # not a parameter this toolkit wrote
        args.append(_option(field.name, value))
    return " ".join(args + ["--force"])


def _option(key: str, value: object) -> str:
    flag = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return flag
    if isinstance(value, list):
        return f"{flag} {','.join(map(str, value))}"
    return f"{flag} {value}"
