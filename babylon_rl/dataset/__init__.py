"""Datasets: window selection, dropout and train/eval split of the training-samples mart.

Sub-modules: params (options and name rule), selection (the one DuckDB query),
sampling (cap, dropout, group features, split in Polars), store (atomic files,
manifest, hashes), build (the whole `dataset build`), export (jsonl / dpo).
"""

from babylon_rl.dataset.build import OUTPUT_COLUMNS, BuildResult, build
from babylon_rl.dataset.export import FORMATS, ExportResult, export
from babylon_rl.dataset.params import BuildParams, validate_name
from babylon_rl.dataset.store import names, read_manifest, read_split

__all__ = [
    "FORMATS", "OUTPUT_COLUMNS", "BuildParams", "BuildResult", "ExportResult",
    "build", "export", "names", "read_manifest", "read_split", "validate_name",
]  # fmt: skip
