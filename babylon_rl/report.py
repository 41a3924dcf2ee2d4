"""`cli.py report RUN`: one self-contained HTML page about a training run.

Plots are matplotlib figures inlined as SVG (no external assets, no scripts): windows and
agents over time, the P&L distribution per window, judge score against P&L (the run's
dataset), reward and loss per step (metrics.csv), and the replay-eval table with its
intervals (eval.json, when `cli.py eval` has run). Written to HOME/runs/RUN/report.html
through a temp file and a rename.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home
from babylon_rl.train.runs import RunDir

STYLE = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}figure{margin:1.5em 0}figcaption{color:#555;font-size:90%}
.note{color:#777}"""


@dataclass(frozen=True)
class RunData:
    name: str
    config: dict
    metrics: list[dict]
    dataset: pl.DataFrame  # train + eval rows with their scores (score may be null)
    eval: dict | None


def load_run_data(home: Home, name: str) -> RunData:
    run = RunDir.for_run(home, name)
    if not run.config.exists():
        known = ", ".join(sorted(p.name for p in home.runs.iterdir() if (p / "run.json").exists())) if home.runs.is_dir() else ""
        raise ConfigError(f"unknown run {name!r} (no {run.config}); runs: {known or 'none yet, train one with python cli.py train'}")
    config = json.loads(run.config.read_text())
    metrics = list(csv.DictReader(run.metrics.open())) if run.metrics.exists() else []
    eval_path = run.root / "eval.json"
    return RunData(name, config, metrics, _dataset(home, config["dataset"]), json.loads(eval_path.read_text()) if eval_path.exists() else None)


def _dataset(home: Home, name: str) -> pl.DataFrame:
    path = home.datasets / name
    columns = ["trajectory_id", "window_id", "window_start", "agent_id", "pnl", "window_agents", "split"]
    frames = [pl.read_parquet(path / f"{s}.parquet", columns=columns) for s in ("train", "eval") if (path / f"{s}.parquet").exists()]
    if not frames:
        raise ConfigError(f"the run's dataset {name!r} is not in {path}")
    frame = pl.concat(frames)
    scores = path / "scores.parquet"
    if scores.exists():
        return frame.join(pl.read_parquet(scores, columns=["trajectory_id", "score"]), on="trajectory_id", how="left")
    return frame.with_columns(score=pl.lit(None, dtype=pl.Float64))


# -- figures ----------------------------------------------------------------------------
def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _use_agg() -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files


def _figure(width: float = 9, height: float = 3.2):
    _use_agg()
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def windows_plot(frame: pl.DataFrame) -> str:
    per_window = (frame.group_by("window_id", "window_start", "split")
                  .agg(agents=pl.col("window_agents").first(), kept=pl.len()).sort("window_start"))
    fig, ax = _figure()
    for split, color in (("train", "tab:blue"), ("eval", "tab:orange")):
        part = per_window.filter(pl.col("split") == split)
        ax.bar(part["window_start"].to_list(), part["agents"].to_list(), width=0.03, color=color, alpha=0.5, label=f"{split}: agents in window")
        ax.plot(part["window_start"].to_list(), part["kept"].to_list(), "o", color=color, markersize=3, label=f"{split}: trajectories kept")
    ax.set_ylabel("agents / trajectories")
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return _svg(fig)


def pnl_plot(frame: pl.DataFrame) -> str:
    ordered = frame.sort("window_start")
    windows = ordered["window_id"].unique(maintain_order=True).to_list()
    data = [ordered.filter(pl.col("window_id") == w)["pnl"].to_list() for w in windows]
    fig, ax = _figure()
    ax.boxplot(data, showfliers=True, flierprops={"markersize": 2})
    step = max(1, len(windows) // 12)
    ax.set_xticks(range(1, len(windows) + 1, step), [w[5:] for w in windows[::step]], rotation=30, fontsize=7)
    ax.axhline(0, color="#999", linewidth=0.8)
    ax.set_ylabel("P&L per trajectory ($)")
    return _svg(fig)


def score_plot(frame: pl.DataFrame) -> str | None:
    scored = frame.filter(pl.col("score").is_not_null())
    if scored.is_empty():
        return None
    fig, ax = _figure(6, 4)
    for split, color in (("train", "tab:blue"), ("eval", "tab:orange")):
        part = scored.filter(pl.col("split") == split)
        ax.scatter(part["pnl"].to_list(), part["score"].to_list(), s=6, alpha=0.5, color=color, label=split)
    ax.set_xlabel("P&L ($)")
    ax.set_ylabel("judge score")
    ax.legend(fontsize=8)
    return _svg(fig)


def curves_plot(metrics: list[dict]) -> str | None:
    if not metrics:
        return None
    steps = [int(m["step"]) for m in metrics]
    _use_agg()
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.plot(steps, [float(m["reward_mean"]) for m in metrics], marker="o", markersize=3)
    left.set_title("reward (mean judge score of the step's groups)", fontsize=9)
    right.plot(steps, [float(m["loss"]) for m in metrics], marker="o", markersize=3, color="tab:red")
    right.set_title("loss", fontsize=9)
    for ax in (left, right):
        ax.set_xlabel("step")
    return _svg(fig)


# -- the page ---------------------------------------------------------------------------
def eval_html(evaluation: dict | None) -> str:
    if not evaluation:
        return '<p class="note">No replay evaluation yet: run python cli.py eval --model RUN --dataset DATASET.</p>'
    rows = []
    for p in evaluation["policies"]:
        cells = [html.escape(p["name"])]
        for key, fmt in (("direction_accuracy", ".3f"), ("pnl_per_decision", "+.2f"), ("valid_rate", ".3f")):
            m = p["metrics"][key]
            cells.append(f"{m['value']:{fmt}} [{m['low']:{fmt}}, {m['high']:{fmt}}]")
        cells.append(f"{html.escape(p.get('top_answer', ''))} {p.get('top_answer_share', 0.0):.0%}")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    comparisons = "".join(
        f"<li>model vs {html.escape(role)}: direction accuracy {c['direction_accuracy_diff']['value']:+.3f} "
        f"[{c['direction_accuracy_diff']['low']:+.3f}, {c['direction_accuracy_diff']['high']:+.3f}]"
        f"{' (outside the interval)' if c['beats_outside_interval'] else ''}</li>"
        for role, c in evaluation.get("comparison", {}).items())
    if "learning_shown" in evaluation:
        comparisons += f"<li>learning shown (beats the baseline and the best constant action): {evaluation['learning_shown']}</li>"
    return (f"<p>{evaluation['windows']} held-out windows, {evaluation['decisions']} decisions of dataset "
            f"{html.escape(evaluation['dataset'])}; 95 % bootstrap intervals over windows ({evaluation['bootstrap']['resamples']} resamples).</p>"
            '<table id="eval-table"><tr><th>policy</th><th>direction accuracy</th><th>P&amp;L per decision</th><th>valid</th><th>most frequent answer</th></tr>'
            + "".join(rows) + f"</table><ul>{comparisons}</ul>")


def _section(title: str, svg: str | None, caption: str) -> str:
    body = svg if svg else '<p class="note">no data</p>'
    return f"<section><h2>{html.escape(title)}</h2><figure>{body}<figcaption>{html.escape(caption)}</figcaption></figure></section>"


def render(data: RunData) -> str:
    c = data.config
    sections = [
        _section("Windows and agents over time", windows_plot(data.dataset), "Agents per window (bars) and trajectories kept in the dataset (dots)."),
        _section("P&L distribution per window", pnl_plot(data.dataset), "P&L of each trajectory, one box per window."),
        _section("Judge score vs P&L", score_plot(data.dataset), "One dot per trajectory: the judge's score against its realised P&L."),
        _section("Reward and loss", curves_plot(data.metrics), f"From metrics.csv ({len(data.metrics)} steps)."),
    ]
    created = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>babylon-rl run {html.escape(data.name)}</title>"
            f"<style>{STYLE}</style></head><body><h1>Run {html.escape(data.name)}</h1>"
            f"<p>dataset {html.escape(str(c.get('dataset')))}, base model {html.escape(str(c.get('base_model')))}, "
            f"backend {html.escape(str(c.get('backend')))}, learning rate {c.get('learning_rate')}; generated {created}.</p>"
            f"<section><h2>Replay evaluation on held-out windows</h2>{eval_html(data.eval)}</section>"
            + "".join(sections) + "</body></html>\n")


def write_report(home: Home, name: str) -> Path:
    page = render(load_run_data(home, name))
    target = RunDir.for_run(home, name).root / "report.html"
    tmp = target.with_name(".report.html.tmp")
    tmp.write_text(page)
    os.replace(tmp, target)
    return target
