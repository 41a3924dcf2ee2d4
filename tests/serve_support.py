"""A home with the real default model and a run of LoRA checkpoints, and a `serve` process for the tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import babylon_rl.train  # noqa: F401  (offline environment before transformers is imported)
from babylon_rl.settings import Home

ROOT = Path(__file__).resolve().parent.parent
RUN = "demo"
# A full action request as the game sends it (a persona's system prompt, the long observation, instructions).
GAME_REQUEST = [
    {"role": "system", "content": "You are sim-agent-0000, an autonomous trader in the Babylon market game. Answer with "
                                  "exactly one JSON object."},
    {"role": "user", "content": (
        "It is 10:04 UTC; window 2025-01-15T10:00 closes in 56 min.\nPrices:\n"
        "  ACME $197.34 (+0.38% since your last look)\n  BOLT $103.07 (-0.32% since your last look)\n"
        "  CRUX $28.99 (+0.14% since your last look)\nNews so far this window:\n"
        "  [10:03] CRUX: Regulators open a probe into Crux Biotech\nPrediction markets:\n"
        '  pm-75cb2-83304c56-0 "Will ACME close the hour below $197.60?" YES at 50%\n'
        "Your portfolio: cash $10,000.00; positions: none; open bets: none; P&L so far $+0.00.\n"
        "What do you do?\nThink it through in two or three sentences before you act.")},
]


def make_run_home(root: Path) -> Path:
    """HOME/models/smollm2-135m and HOME/runs/demo/checkpoints/step-{1,2}: LoRA adapters with random B weights (a
    trained adapter starts with B = 0, which would be the base itself), run.json, a dataset manifest and an eval of step-2."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from babylon_rl.train.models import lora_model
    from babylon_rl.train.pretrained import init_default_model

    home = Home(root)
    base_dir = init_default_model(home).path
    run = root / "runs" / RUN
    for step, seed, scale in ((1, 1, 0.25), (2, 2, 1.0)):  # step 2 strong enough to choose another menu entry than the base
        torch.manual_seed(seed)  # lora_A's initial weights
        model = lora_model(AutoModelForCausalLM.from_pretrained(base_dir), rank=4, top_layers=8)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * scale)
        out = run / "checkpoints" / f"step-{step}"
        model.save_pretrained(out)
        AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)
    (run / "run.json").write_text(json.dumps({"dataset": "ds", "objective": "distill", "base_model": str(base_dir),
                                              "on_policy": False, "backend": "torch"}))
    (root / "datasets" / "ds").mkdir(parents=True)
    (root / "datasets" / "ds" / "manifest.json").write_text(json.dumps({"content_hash": "sha256:feedbeef"}))
    interval = {"value": 0.61, "low": 0.52, "high": 0.70}
    evaluation = json.dumps({
        "dataset": "ds", "checkpoint": "demo@2", "windows": 12, "decisions": 96, "learning_shown": False,
        "claim": "P&L per decision",
        "policies": [{"name": "demo@2", "role": "model", "metrics": {"direction_accuracy": interval}},
                     {"name": "smollm2-135m", "role": "baseline", "metrics": {"direction_accuracy": interval}}]})
    kept = run / "evals" / "step-2" / "ds"  # where an eval keeps its copy by checkpoint (`write_outputs`)
    kept.mkdir(parents=True)
    for path in (run / "eval.json", kept / "eval.json"):
        path.write_text(evaluation)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`cli.py serve` in a process of its own on a free port; `wait_ready` polls /health."""

    def __init__(self, home: Path, *args: str, env: dict | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = home / f"serve-{self.port}.log"
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "BABYLON_RL_TORCH_THREADS": "1", **(env or {})}
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "--home", str(home), "serve", *args,
                                      "--port", str(self.port)], cwd=ROOT, env=environment,
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120) -> list[int]:
        """Poll /health until 200; the status codes seen on the way."""
        seen, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {self.output()}")
            try:
                seen.append(httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code)
                if seen[-1] == 200:
                    return seen
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"serve not ready after {timeout}s: {self.output()}")

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
