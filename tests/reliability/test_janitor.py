"""`build` runs SQLMesh's janitor: table versions no environment uses any more are dropped."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlmesh import Context
from sqlmesh.core.config import Config
from sqlmesh.core.config.loader import load_config_from_paths

from babylon_rl.settings import PROJECT_ROOT, Home
from tests.reliability.support import ok, run, warehouse_rows

VERSIONS = "SELECT count(*) FROM information_schema.tables WHERE table_schema LIKE 'sqlmesh__%'"


def plan_with_variable(home: Path, **variables) -> None:
    """A plain `sqlmesh plan` (no janitor) with a changed variable: new versions of the models that read it."""
    Home(home).export_env()
    logging.getLogger("sqlmesh").setLevel(logging.WARNING)
    config = load_config_from_paths(Config, project_paths=[PROJECT_ROOT / "config.py"])
    config = config.model_copy(update={"variables": {**config.variables, **variables}})
    context = Context(paths=[PROJECT_ROOT], config=config)
    try:
        context.plan("prod", auto_apply=True, no_prompts=True)
    finally:
        context.close()


@pytest.mark.slow
def test_build_drops_table_versions_no_environment_uses(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ok(run(home, "simulate", "--agents", "5", "--windows", "2", "--target", "duckdb", "--start", "2025-01-15T00:00"))
    ok(run(home, "build"))
    versions = warehouse_rows(home, VERSIONS)[0][0]
    plan_with_variable(home, min_agents=4)
    assert warehouse_rows(home, VERSIONS)[0][0] > versions  # the min_agents=4 versions exist next to the old ones
    ok(run(home, "build"))  # back to the project's variables: the min_agents=4 versions are unused now
    assert warehouse_rows(home, VERSIONS)[0][0] == versions
