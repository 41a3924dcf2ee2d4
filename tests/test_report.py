"""`cli.py report RUN`: a self-contained HTML page with the plots and the eval table."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from tests.eval_factory import write_eval_dataset
from tests.train_support import build_template, install


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.table_ids: list[str] = []
        self.external: list[str] = []
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "table" and attrs.get("id"):
            self.table_ids.append(attrs["id"])
        if tag in ("script", "link") or (tag == "img" and not str(attrs.get("src", "")).startswith("data:")):
            self.external.append(tag)
        self._in_cell = tag == "td"

    def handle_data(self, data):
        if self._in_cell:
            self.cells.append(data)

    def handle_endtag(self, tag):
        self._in_cell = False


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("report-template"))


def test_report_has_plots_and_eval_table(template, home, run_cli):
    h = install(template, home)
    assert run_cli("train", "--dataset", "ds", "--base-model", "tiny", "--learning-rate", "1e-3", "--groups-per-step", "2",
                   "--max-steps", "2", "--run-name", "r1").exit_code == 0
    write_eval_dataset(home)
    assert run_cli("eval", "--model", "r1", "--dataset", "ev", "--resamples", "200").exit_code == 0
    result = run_cli("report", "r1")
    assert result.exit_code == 0, result.output
    path = h.runs / "r1" / "report.html"
    assert str(path) in result.output.replace("\n", "")
    page = _Page()
    page.feed(path.read_text())
    assert page.tags.count("svg") >= 4  # windows, P&L per window, score vs P&L, reward/loss
    assert "eval-table" in page.table_ids
    assert any(c.startswith("logged agents") for c in page.cells)
    assert any(c.startswith("baseline") for c in page.cells) and any(c.startswith("model") for c in page.cells)
    assert not page.external  # self-contained
    assert not list(path.parent.glob(".report*"))  # the temp file was renamed


def test_report_unknown_run_exits_2(home, run_cli):
    result = run_cli("report", "nope")
    assert result.exit_code == 2 and "unknown run 'nope'" in result.output
