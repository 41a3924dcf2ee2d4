"""babylon_rl.atomic: the one way files and directories are written (temp path, then rename)."""

from __future__ import annotations

from pathlib import Path

import pytest

from babylon_rl import atomic


def test_a_failed_file_write_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "eval.json"
    atomic.write_text(target, "old")
    with pytest.raises(RuntimeError), atomic.file(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]
    atomic.write_text(target, "new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]


def test_a_directory_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "models" / "m"
    with atomic.directory(target) as tmp:
        (tmp / "weights").write_text("v1")
    with pytest.raises(RuntimeError), atomic.directory(target) as tmp:
        (tmp / "weights").write_text("v2, half")
        raise RuntimeError("killed mid-save")
    assert (target / "weights").read_text() == "v1"
    with atomic.directory(target) as tmp:
        (tmp / "weights").write_text("v2")
    assert (target / "weights").read_text() == "v2"
    assert sorted(p.name for p in target.parent.iterdir()) == ["m"]  # no temp or old directory left
