"""`cli.py quickstart` end to end at a reduced size (DuckDB only, the real SmolLM2), and its refusal to overwrite."""

from __future__ import annotations

import json
from pathlib import Path

# A small world whose best agents stand out on its train windows (96 of them: 40 % of 240), with a token training budget.
SMALL = ["--agents", "10", "--windows", "240", "--steps-per-window", "3", "--steps", "2", "--groups-per-step", "4",
         "--eval-decisions-per-window", "1"]


def test_quickstart_small_end_to_end(home, run_cli):
    result = run_cli("quickstart", *SMALL)
    assert result.exit_code == 0, result.output
    out = result.output
    for stage in ("simulate into duckdb", "build", "dataset build", "model init (smollm2-135m)", "score --judge heuristic",
                  "agents: who stands above", "train --objective menu-imitate", "train --objective hindsight (",
                  "eval: trained vs base vs imitation", "report"):
        assert f"done {stage}" in out, stage
    assert "quickstart summary" in out and "logged agents" in out and "direction" in out
    marker = json.loads((home / "quickstart.json").read_text())
    artifacts = marker["artifacts"]
    for name in ("warehouse", "dataset", "base model", "imitation run", "run", "adapter", "eval", "report"):
        assert Path(artifacts[name]).exists(), name
        assert name in out
    assert (home / "runs" / "quickstart" / "checkpoints" / "step-2" / "adapter_model.safetensors").exists()  # LoRA on SmolLM2
    assert "beyond the 95 % interval" in out
    evaluation = json.loads((home / "runs" / "quickstart" / "eval.json").read_text())
    assert [p["role"] for p in evaluation["policies"]] == ["logged", "constant", "reader", "baseline", "imitation", "model", "teachers"]
    best = next(p for p in evaluation["policies"] if p["role"] == "teachers")  # the best agents' line: not learned from
    assert best["name"].startswith("the agents that stand above their peers on the train windows (") and not evaluation["teachers"]
    assert f"best agents ({best['name'].count('sim-agent')} of 10 agents" in out
    assert "stand above their peers beyond the interval" in out  # the standing table, then the teachers it gives
    # the best agents' own held-out play, window by window: compared, never needed for the claim
    assert set(evaluation["comparison"]) == {"logged", "constant", "reader", "baseline", "imitation", "teachers"}
    assert "the best agents' own held-out play, window by window (not required)" in out
    assert evaluation["menu_shares"] == 50  # the three models answered from the menu, on one shared base
    assert "news rule" in out and "recognise" in out  # the design check: could this evaluation see reading at all?
    assert ("learning shown" if evaluation["learning_shown"] else "learning NOT shown") in out
    quoted = out[out.index("not this run: the committed one-block benchmark ("):]
    assert "learning" not in quoted[: quoted.index("docs/BENCHMARKS.md#the-one-block-student")]  # quoted, never as a verdict
    assert "the learning benchmark (" not in out  # the menu objective's old benchmarks are no longer quoted
    page = (home / "runs" / "quickstart" / "report.html").read_text()
    assert "<svg" in page and "Learning" in page and "direction accuracy</b>: the share" in page

    again = run_cli("quickstart", *SMALL)
    assert again.exit_code == 2 and "already has a quickstart" in again.output and "--force" in again.output


def test_quickstart_without_an_agent_that_stands_out_trains_all_the_same_without_a_best_agents_line(home, run_cli):
    """The student needs no teacher: where no agent stands out it trains and is judged as anywhere, only the eval has no
    line for the best agents."""
    result = run_cli("quickstart", "--agents", "6", "--windows", "12", "--steps-per-window", "2", "--steps", "2", "--groups-per-step", "4")
    assert result.exit_code == 0, result.output
    assert "the eval has no best agents' line" in result.output and "done train --objective hindsight" in result.output
    evaluation = json.loads((home / "runs" / "quickstart" / "eval.json").read_text())
    assert "teachers" not in [p["role"] for p in evaluation["policies"]] and not evaluation["learning_shown"]


def test_the_one_block_benchmark_line_quotes_the_committed_held_out_eval(tmp_path) -> None:
    from babylon_rl.quickstart import HELDOUT_BENCHMARK, heldout_benchmark_line

    result = json.loads(HELDOUT_BENCHMARK.read_text())
    line = heldout_benchmark_line(HELDOUT_BENCHMARK)
    model = next(p for p in result["policies"] if p["role"] == "model")["metrics"]
    assert f"the student {model['pnl_per_decision']['value']:+.1f} P&L, {model['trade_precision']['value']:.2f} precision" in line
    assert f"{result['windows']} held-out windows" in line and line.startswith("not this run: ")
    assert "learning" not in line  # another run's figures never read as this run's verdict
    assert ("the logged agents" in line) == result["comparison"]["logged"]["beats_outside_interval"]
    result |= {"learning_shown": False}
    result["comparison"]["logged"]["beats_outside_interval"] = False
    (tmp_path / "eval.json").write_text(json.dumps(result))
    changed = heldout_benchmark_line(tmp_path / "eval.json")
    assert "the logged agents" not in changed
    assert heldout_benchmark_line(tmp_path / "absent.json") is None  # outside a checkout: nothing to quote


def test_the_commands_defaults_are_the_quickstarts() -> None:
    """`cli.py quickstart` without options runs exactly QuickstartOptions() (a default changed in one place only
    once made the quickstart replay 1 decision per window where its design, and its test, say 2)."""
    from dataclasses import fields

    from babylon_rl.quickstart import QuickstartOptions
    from cli import quickstart

    defaults = {p.name: p.default for p in quickstart.params if not getattr(p, "is_flag", False)}
    expected = {f.name: f.default for f in fields(QuickstartOptions)}
    assert set(defaults) <= set(expected)
    assert defaults == {name: expected[name] for name in defaults}
