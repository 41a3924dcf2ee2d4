"""`cli.py report RUN`: a self-contained HTML page with the plots and the eval table; `report --improve`: the loop's page."""

from __future__ import annotations

from html import unescape
from html.parser import HTMLParser

import pytest

from babylon_rl.improve_report import verdict
from tests.eval_factory import write_eval_dataset
from tests.improve_factory import figure, made_up_state
from tests.train_support import build_template, install


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.table_ids: list[str] = []
        self.external: list[str] = []
        self.cells: list[str] = []
        self.rows: dict[str, list[list[str]]] = {}  # table id -> its rows' cells
        self._in_cell = False
        self._table = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "table" and attrs.get("id"):
            self.table_ids.append(attrs["id"])
            self._table = attrs["id"]
        if tag == "tr" and self._table:
            self.rows.setdefault(self._table, []).append([])
        if tag in ("script", "link") or (tag == "img" and not str(attrs.get("src", "")).startswith("data:")):
            self.external.append(tag)
        self._in_cell = tag == "td"

    def handle_data(self, data):
        if self._in_cell:
            self.cells.append(data)
            if self._table:
                self.rows[self._table][-1].append(data)

    def handle_endtag(self, tag):
        self._in_cell = False
        if tag == "table":
            self._table = ""


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("report-template"))


def test_report_has_plots_and_eval_table(template, home, run_cli):
    h = install(template, home)
    assert run_cli("train", "--dataset", "ds", "--base-model", "tiny", "--objective", "grpo", "--learning-rate", "1e-3",
                   "--groups-per-step", "2", "--max-steps", "2", "--run-name", "r1").exit_code == 0
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
    assert "The evaluation of r1@2: " in path.read_text()  # which checkpoint the figures are of
    assert any(c.startswith("logged agents") for c in page.cells)
    assert any(c.startswith("baseline") for c in page.cells) and any(c.startswith("model") for c in page.cells)
    assert not page.external  # self-contained
    assert not list(path.parent.glob(".report*"))  # the temp file was renamed


def test_report_unknown_run_exits_2(home, run_cli):
    result = run_cli("report", "nope")
    assert result.exit_code == 2 and "unknown run 'nope'" in result.output


def test_improve_report_has_both_plots_a_row_per_iteration_and_the_verdict(home, run_cli):
    (home / "improve").mkdir(parents=True)
    (home / "improve" / "state.json").write_text(made_up_state(3, promoted={1}).model_dump_json())
    result = run_cli("report", "--improve")
    assert result.exit_code == 0, result.output
    path = home / "improve" / "report.html"
    assert str(path) in result.output.replace("\n", "")
    text = path.read_text()
    page = _Page()
    page.feed(text)
    assert page.tags.count("svg") == 2  # P&L per agent by iteration; the gate's figures by iteration
    assert "mean window P&amp;L per agent ($)" in text and "held-out direction accuracy" in text
    rows = page.rows["iterations"][1:]
    assert [r[:4] for r in rows] == [["0", "tiny", "runs/improve-000/merged", "kept the champion"],
                                     ["1", "tiny", "runs/improve-001/merged", "promoted"],
                                     ["2", "runs/improve-001/merged", "runs/improve-002/merged", "kept the champion"]]
    assert rows[1][4].startswith("the candidate beat the champion beyond the interval on both")
    assert ("the candidate was worse on P&L per decision beyond the interval (-3.00 [-4.00, -2.00]); "
            "the difference in trade precision stayed inside its interval (+0.020 [-0.030, +0.070] includes 0)") in rows[0][4]
    assert rows[0][4].endswith("the gate could not recognise even the news rule")
    assert rows[2][5:] == ["12.5"] * 5  # each stage's seconds
    assert "The policy agents' mean window P&L went from +0.00 [-4.00, +4.00] in iteration 0 to +20.00 [+16.00, +24.00] " \
           "in iteration 2: it rose beyond the interval." in unescape(text)
    assert "they end above random (-20.00 [-25.00, -15.00]) and above contrarian" in unescape(text)
    assert not page.external
    assert not list(path.parent.glob(".report*"))


def test_the_verdict_says_when_the_policy_agents_did_not_rise_or_end_above_the_personas():
    state = made_up_state(2)
    state.iterations[1].play["policy"] = figure(6, 4)  # overlaps iteration 0's [-4, +4]
    state.iterations[1].play["contrarian"] = figure(30, 5)
    assert verdict(state) == ("The policy agents' mean window P&L went from +0.00 [-4.00, +4.00] in iteration 0 to +6.00 [+2.00, +10.00] "
                              "in iteration 1: it did not rise beyond the interval (the two intervals overlap). In iteration 1, by "
                              "whether the intervals overlap, they end above random (-20.00 [-25.00, -15.00]) and below contrarian "
                              "(+30.00 [+25.00, +35.00]).")
    assert verdict(made_up_state(1)).startswith("Only iteration 0 has been played (+0.00 [-4.00, +4.00]): there is no rise to measure yet.")


def test_report_needs_a_run_or_improve_and_a_loop_to_report_on(home, run_cli):
    for args in ((), ("r1", "--improve")):
        result = run_cli("report", *args)
        assert result.exit_code == 2 and result.output.strip() == "Error: report needs a RUN or --improve (the improve loop's page), not both"
    result = run_cli("report", "--improve")
    assert result.exit_code == 2 and "no improve loop in" in result.output and len(result.output.strip().splitlines()) == 1
