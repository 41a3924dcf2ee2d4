"""`cli.py quickstart` end to end at a reduced size (DuckDB only), and its refusal to overwrite."""

from __future__ import annotations

import json
from pathlib import Path

SMALL = ["--agents", "6", "--windows", "8", "--steps-per-window", "5", "--steps", "3", "--groups-per-step", "2",
         "--warmup-steps", "10"]


def test_quickstart_small_end_to_end(home, run_cli):
    result = run_cli("quickstart", *SMALL)
    assert result.exit_code == 0, result.output
    out = result.output
    for stage in ("simulate into duckdb", "build", "dataset build", "model init-tiny", "score --judge heuristic",
                  "train --backend torch", "eval: base vs trained vs best constant vs logged agents", "report"):
        assert f"done {stage} in" in out, stage
    assert "quickstart summary" in out and "logged agents" in out and "direction" in out
    marker = json.loads((home / "quickstart.json").read_text())
    artifacts = marker["artifacts"]
    for name in ("warehouse", "dataset", "base model", "run", "adapter", "eval", "report"):
        assert Path(artifacts[name]).exists(), name
        assert name in out
    assert (home / "runs" / "quickstart" / "checkpoints" / "step-3" / "model.safetensors").exists()  # lora_r 0: the whole tiny model
    assert "outside the 95 % interval" in out
    assert (home / "datasets" / "quickstart" / "scores.parquet").exists()
    evaluation = json.loads((home / "runs" / "quickstart" / "eval.json").read_text())
    assert [p["role"] for p in evaluation["policies"]] == ["logged", "constant", "baseline", "model"]
    assert "<svg" in (home / "runs" / "quickstart" / "report.html").read_text()

    again = run_cli("quickstart", *SMALL)
    assert again.exit_code == 2 and "already has a quickstart" in again.output and "--force" in again.output
