"""Shared set-up for the training tests: one factory dataset and one tiny model, copied per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import babylon_rl.train  # noqa: F401  (offline environment before transformers is imported)
from babylon_rl.settings import Home
from babylon_rl.train.tiny import TinySpec, init_tiny
from tests.train_factory import write_dataset

TEST_SPEC = TinySpec(warmup_steps=100)


def build_template(root: Path) -> Path:
    write_dataset(root)
    init_tiny(Home(root), "ds", "tiny", TEST_SPEC)
    return root


def install(template: Path, home: Path) -> Home:
    shutil.copytree(template, home, dirs_exist_ok=True)
    return Home(home)
