"""Every kind of model name resolves in one place (`babylon_rl/model_names.py`), to the same files and served names
whichever command asks: checked on directories that only look like models (no weights are loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from babylon_rl.errors import ConfigError
from babylon_rl.model_names import default_baseline, in_home, resolve
from babylon_rl.settings import Home


def _model(path: Path, base: Path | None = None) -> None:
    path.mkdir(parents=True)
    (path / "tokenizer.json").write_text("{}")
    config = ("adapter_config.json", {"base_model_name_or_path": str(base)}) if base else ("config.json", {})
    (path / config[0]).write_text(json.dumps(config[1]))


@pytest.fixture
def names_home(tmp_path: Path) -> Home:
    """models/tiny; a run `demo` with adapters at steps 1 and 2 on tiny, best.json at step 1 and a merged model."""
    home = Home(tmp_path / "home")
    _model(home.models / "tiny")
    run = home.runs / "demo"
    for step in (1, 2):
        _model(run / "checkpoints" / f"step-{step}", home.models / "tiny")
    _model(run / "merged")
    (run / "run.json").write_text(json.dumps({"base_model": str(home.models / "tiny")}))
    (run / "best.json").write_text(json.dumps({"step": 1}))
    return home


@pytest.mark.parametrize("name, path, served, aliases", [
    ("tiny", "models/tiny", "tiny", ()),
    ("demo", "runs/demo/checkpoints/step-2", "demo@2", ("demo",)),
    ("demo@1", "runs/demo/checkpoints/step-1", "demo@1", ()),
    ("demo@best", "runs/demo/checkpoints/step-1", "demo@1", ("demo@best",)),
    ("demo@latest", "runs/demo/checkpoints/step-2", "demo@2", ("demo@latest",)),
    ("demo@merged", "runs/demo/merged", "demo@merged", ()),
    ("runs/demo/checkpoints/step-1", "runs/demo/checkpoints/step-1", "runs/demo/checkpoints/step-1", ()),
])
def test_each_kind_of_name_resolves_to_its_files_and_served_names(names_home, name, path, served, aliases):
    ref = resolve(names_home, name)
    assert (in_home(names_home, ref.path), ref.name, ref.aliases) == (path, served, aliases)
    assert ref.adapter == ("checkpoints" in path) and (ref.run_dir is not None) == path.startswith("runs/")


def test_a_path_is_served_by_its_directory_name_and_promoted_by_its_champion(names_home):
    given = str(names_home.models / "tiny")
    assert (resolve(names_home, given).name, resolve(names_home, given).aliases) == ("tiny", (given,))
    with pytest.raises(ConfigError, match="no model promoted yet"):
        resolve(names_home, "promoted")
    (names_home.root / "improve").mkdir()
    (names_home.root / "improve" / "state.json").write_text(json.dumps({"champion": "demo@best"}))
    promoted = resolve(names_home, "promoted")
    assert (in_home(names_home, promoted.path), promoted.name, promoted.aliases) == ("runs/demo/checkpoints/step-1", "promoted",
                                                                                  ("demo@best",))
    assert default_baseline(promoted, names_home) == str(names_home.models / "tiny")


@pytest.mark.parametrize("name, says", [
    ("demo@9", "run demo has no checkpoint at step 9; its checkpoints: demo@1, demo@2"),
    ("nope@1", "no run 'nope' in"),
    ("nope", "model 'nope' is not a model directory, a model in"),
])
def test_a_name_that_names_no_model_is_a_one_line_error(names_home, name, says):
    with pytest.raises(ConfigError, match=says):
        resolve(names_home, name)


@pytest.mark.parametrize("command", ["eval", "arena"])
def test_the_help_of_every_command_that_takes_a_model_names_every_kind_of_name(command):
    """What `resolve` reads is what the help offers: a user reading `eval --help` learns RUN@latest and promoted too."""
    from click.testing import CliRunner

    from cli import cli

    text = " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())
    for kind in ("HOME/models", "RUN@STEP", "RUN@best", "RUN@latest", "RUN@merged", "promoted"):
        assert kind in text, kind
