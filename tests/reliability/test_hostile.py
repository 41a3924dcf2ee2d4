"""Hostile names and window ids: refused or handled as data; nothing written outside the home, no table dropped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.dataset_factory import make_dataset
from tests.reliability.conftest import factory_marts
from tests.reliability.support import tree, warehouse_rows

HOSTILE = ["../x", "../../victim", "a/b", "/tmp/abs", "x'; DROP TABLE trajectories; --", 'x"; DROP SCHEMA babylon CASCADE; --',
           "ünï/../..", "..", ".", "", "a" * 5000, "x\x00y", "-rf", "~/x"]


def invoke(home: Path, *args: str):
    from cli import cli

    return CliRunner().invoke(cli, ["--home", str(home), *args], catch_exceptions=True)


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """A home with marts and a dataset, and a decoy dataset OUTSIDE the home a name could reach by ../"""
    home = tmp_path / "home"
    factory_marts(home, windows=6, agents=5)
    make_dataset(home, "demo")
    shutil.copytree(home / "datasets" / "demo", tmp_path / "victim")
    return home


def commands(name: str) -> list[tuple[str, ...]]:
    return [
        ("dataset", "build", "--name", name, "--min-agents", "3"),
        ("dataset", "show", name),
        ("dataset", "export", name, "--format", "jsonl"),
        ("score", "--dataset", name, "--judge", "heuristic"),
        ("score", "--report", name),
        ("train", "--dataset", name, "--max-steps", "1"),
        ("train", "--dataset", "demo", "--run-name", name, "--max-steps", "1"),
        ("model", "init-tiny", "--dataset", "demo", "--name", name, "--warmup-steps", "0"),
        ("model", "init", "--name", name),
        ("eval", "--model", "nothing-here", "--dataset", name, "--baseline", "none"),
        ("report", name),
        ("dataset", "build", "--name", "ok", "--min-agents", "3", "--windows", name),
    ]


@pytest.mark.parametrize("name", HOSTILE, ids=lambda n: repr(n[:20]))
def test_hostile_names_are_refused_and_write_nothing_outside(world: Path, name: str) -> None:
    outside = world.parent
    before = {k: v for k, v in tree(outside).items() if not k.startswith("home")}
    tables = warehouse_rows(world, "SELECT table_schema, table_name FROM information_schema.tables ORDER BY ALL")
    for args in commands(name):
        result = invoke(world, *args)
        assert result.exit_code in (0, 2), (args, result.output, result.exception)
        assert "Traceback" not in result.output
        if result.exit_code == 0:  # accepted only where the value is harmless as one name inside the home
            assert "/" not in name and ".." not in name and "'" not in name, (args, result.output)
    after = {k: v for k, v in tree(outside).items() if not k.startswith("home")}
    assert after == before, "files written outside the home"
    assert warehouse_rows(world, "SELECT table_schema, table_name FROM information_schema.tables ORDER BY ALL") == tables
