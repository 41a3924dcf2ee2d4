"""The adapter around SQLMesh's internal state API fails loudly on an upgrade, before a build does."""

from __future__ import annotations

import inspect
import re

import sqlmesh
from sqlmesh.core.state_sync.base import StateSync

from babylon_rl import sqlmesh_state
from babylon_rl.settings import PROJECT_ROOT


def test_installed_and_pinned_sqlmesh_are_the_version_the_adapter_was_checked_against() -> None:
    pinned = re.search(r'"sqlmesh==([^"]+)"', (PROJECT_ROOT / "pyproject.toml").read_text()).group(1)
    message = ("babylon_rl/sqlmesh_state.py calls SQLMesh's internal state API: check forget_intervals against "
               "this version, then set TESTED_WITH")
    assert sqlmesh.__version__ == sqlmesh_state.TESTED_WITH, message
    assert pinned == sqlmesh_state.TESTED_WITH, message


def test_the_internal_calls_keep_their_shape() -> None:
    parameters = list(inspect.signature(StateSync.remove_intervals).parameters)
    assert parameters[:3] == ["self", "snapshot_intervals", "remove_shared_versions"]
