"""Datasets: window selection, dropout and train/eval split of the training-samples mart.

Sub-modules: params (options and name rule), selection (the one DuckDB query),
sampling (cap, dropout, group features, split in Polars), store (atomic files,
manifest, hashes), build (the whole `dataset build`), export (jsonl / dpo).

The package itself imports nothing: a CLI command that does not build or read a dataset
loads neither Polars nor these modules.
"""
