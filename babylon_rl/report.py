"""`cli.py report RUN`: one self-contained HTML page about a training run.

Plots are matplotlib figures inlined as SVG (no external assets, no scripts): windows and
agents over time, the P&L distribution per window, judge score against P&L (the run's
dataset), reward and loss per step (metrics.csv), and the replay-eval table with its
intervals (eval.json, when `cli.py eval` has run). Written to HOME/runs/RUN/report.html
through a temp file and a rename. The improve loop's page (babylon_rl/improve_report.py) is made
with the same figure and page helpers.
"""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from babylon_rl import atomic
from babylon_rl.errors import ConfigError
from babylon_rl.settings import Home
from babylon_rl.train.runs import RunDir

STYLE = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}figure{margin:1.5em 0}figcaption{color:#555;font-size:90%}
.note{color:#777}td.words{text-align:left}"""


@dataclass(frozen=True)
class RunData:
    name: str
    config: dict
    metrics: list[dict]
    dataset: pl.DataFrame  # train + eval rows with their scores (score may be null)
    eval: dict | None
    curve: list[dict] | None = None  # curve.json, written by bench/bench_learning.py
    population: dict | None = None  # a population run's population.json (its latest checkpoint)


SPLIT_COLORS = {"train": "tab:blue", "validation": "tab:purple", "eval": "tab:orange"}


def load_run_data(home: Home, name: str) -> RunData:
    run = RunDir.for_run(home, name)
    if not run.config.exists():
        known = ", ".join(sorted(p.name for p in home.runs.iterdir() if (p / "run.json").exists())) if home.runs.is_dir() else ""
        raise ConfigError(f"unknown run {name!r} (no {run.config}); runs: {known or 'none yet, train one with python cli.py train'}")
    config = json.loads(run.config.read_text())
    metrics = list(csv.DictReader(run.metrics.open())) if run.metrics.exists() else []
    eval_path, curve_path = run.root / "eval.json", run.root / "curve.json"
    steps = run.checkpoint_steps()
    population_path = run.checkpoint(steps[-1]) / "population.json" if steps else None
    return RunData(name, config, metrics, _dataset(home, config["dataset"]),
                   json.loads(eval_path.read_text()) if eval_path.exists() else None,
                   json.loads(curve_path.read_text()) if curve_path.exists() else None,
                   json.loads(population_path.read_text()) if population_path and population_path.exists() else None)


def _dataset(home: Home, name: str) -> pl.DataFrame:
    from babylon_rl.dataset.dataset import Dataset

    dataset = Dataset.open(home, name)
    columns = ["trajectory_id", "window_id", "window_start", "agent_id", "pnl", "window_agents", "split"]
    frames = dataset.read_splits(tuple(SPLIT_COLORS), columns)
    if not frames:
        raise ConfigError(f"the run's dataset {name!r} has no split files in {dataset.path}")
    frame = pl.concat(frames)
    scores = dataset.read_scores(columns=["trajectory_id", "score"])
    if scores is not None:
        return frame.join(scores, on="trajectory_id", how="left")
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
    for split, color in SPLIT_COLORS.items():
        part = per_window.filter(pl.col("split") == split)
        ax.bar(part["window_start"].to_list(), part["agents"].to_list(), width=0.03, color=color, alpha=0.5, label=f"{split}: agents in window")
        ax.plot(part["window_start"].to_list(), part["kept"].to_list(), "o", color=color, markersize=3, label=f"{split}: trajectories kept")
    ax.set_ylabel("agents / trajectories")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars, not over them
    fig.autofmt_xdate()
    return _svg(fig)


def pnl_plot(frame: pl.DataFrame) -> str:
    """Mean P&L per window with the range of its agents: is there a spread to learn from, window by window?"""
    per_window = (frame.group_by("window_start", "split")
                  .agg(mean=pl.col("pnl").mean(), low=pl.col("pnl").quantile(0.1), high=pl.col("pnl").quantile(0.9))
                  .sort("window_start"))
    fig, ax = _figure()
    for split, color in SPLIT_COLORS.items():
        part = per_window.filter(pl.col("split") == split)
        if part.is_empty():
            continue
        x = part["window_start"].to_list()
        ax.fill_between(x, part["low"].to_list(), part["high"].to_list(), color=color, alpha=0.2, linewidth=0)
        ax.plot(x, part["mean"].to_list(), color=color, linewidth=1, label=f"{split}: mean (band: 10th-90th percentile)")
    ax.axhline(0, color="#999", linewidth=0.8)
    ax.set_ylabel("P&L per trajectory ($)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.autofmt_xdate()
    return _svg(fig)


def score_plot(frame: pl.DataFrame) -> str | None:
    scored = frame.filter(pl.col("score").is_not_null())
    if scored.is_empty():
        return None
    fig, ax = _figure(6, 4)
    for split, color in SPLIT_COLORS.items():
        part = scored.filter(pl.col("split") == split)
        ax.scatter(part["pnl"].to_list(), part["score"].to_list(), s=6, alpha=0.5, color=color, label=split)
    ax.set_xlabel("P&L ($)")
    ax.set_ylabel("judge score")
    ax.legend(fontsize=8)
    return _svg(fig)


def _smooth(values: list[float], width: int) -> list[float]:
    """Trailing mean over `width` steps: the trend through the step-to-step noise."""
    return [sum(values[max(0, i - width + 1) : i + 1]) / (i - max(0, i - width + 1) + 1) for i in range(len(values))]


def curves_plot(metrics: list[dict]) -> str | None:
    """Training curves, each raw (faint) and smoothed: reward, and for on-policy runs how often the answers are valid and right."""
    if not metrics:
        return None
    steps = [int(m["step"]) for m in metrics]
    panels = [("reward_mean", "mean reward of the step's answers", "tab:blue"), ("loss", "loss", "tab:red")]
    if metrics[0].get("correct_rate"):
        panels.insert(1, ("correct_rate", "share of sampled answers right in direction", "tab:green"))
        panels.insert(2, ("valid_rate", "share of sampled answers that are valid actions", "tab:gray"))
    _use_agg()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3))
    width = max(2, len(steps) // 8)
    for ax, (key, title, color) in zip(axes, panels):
        values = [float(m[key]) for m in metrics]
        ax.plot(steps, values, color=color, alpha=0.3, linewidth=1)
        ax.plot(steps, _smooth(values, width), color=color, linewidth=2, label=f"trailing mean of {width}")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    return _svg(fig)


def policies_plot(evaluation: dict | None) -> str | None:
    """Each policy's held-out direction accuracy and P&L per decision with its 95 % interval: compared to what, how sure?"""
    if not evaluation:
        return None
    _use_agg()
    import matplotlib.pyplot as plt

    policies = evaluation["policies"]
    # one row per policy, named once on the left: the right panel shares its rows
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 * len(policies) + 1.5), sharey=True)
    for ax, key, label in ((axes[0], "direction_accuracy", "direction accuracy"), (axes[1], "pnl_per_decision", "P&L per decision ($)")):
        for row, p in enumerate(policies):
            m = p["metrics"][key]
            color = "tab:green" if p["role"] == "model" else "tab:gray"
            ax.errorbar([m["value"]], [row], xerr=[[m["value"] - m["low"]], [m["high"] - m["value"]]], fmt="o", color=color, capsize=3)
        ax.set_xlabel(label)
        ax.grid(axis="y", color="#eee")
    axes[0].set_yticks(range(len(policies)), [p["name"] for p in policies], fontsize=8)
    axes[0].invert_yaxis()
    axes[1].axvline(0, color="#999", linewidth=0.8)
    return _svg(fig)


def heldout_curve_plot(curve: list[dict] | None) -> str | None:
    """bench/bench_learning.py's curve: held-out accuracy and P&L per decision after each number of training decisions seen."""
    if not curve:
        return None
    _use_agg()
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    steps = [c["step"] for c in curve]
    for ax, key, label in ((left, "direction_accuracy", "held-out direction accuracy"), (right, "pnl_per_decision", "held-out P&L per decision ($)")):
        ax.plot(steps, [c[key] for c in curve], marker="o", color="tab:green", label="trained policy")
        ax.fill_between(steps, [c[f"{key}_low"] for c in curve], [c[f"{key}_high"] for c in curve], color="tab:green", alpha=0.15)
        for name, style in (("constant", "--"), ("news_rule", ":")):
            if f"{name}_{key}" in curve[0]:
                ax.axhline(curve[0][f"{name}_{key}"], linestyle=style, color="#555", label=name.replace("_", " "))
        ax.set_xlabel("training decisions seen")
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7)
    return _svg(fig)


def lineage_plot(population: dict | None) -> str | None:
    """Each place of the population (rows) at each evolution (columns), coloured by its validation fitness; a line from
    the parent's place where a place was taken by a mutated clone, a ring on the elite, the hyper-parameter mutated."""
    if not population or not population["members"][0]["fitness"]:
        return None
    _use_agg()
    import matplotlib.pyplot as plt

    members = population["members"]
    row = {m["name"]: i for i, m in enumerate(members)}
    steps = [f["step"] for f in members[0]["fitness"]]
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(steps) + 3), 0.45 * len(members) + 1.6))
    for event in population["lineage"]:
        if event["parent"] is None or event["step"] not in steps:
            continue
        x = steps.index(event["step"])
        ax.plot([x, x + 0.9], [row[event["parent"]], row[event["member"]]], color="#999", linewidth=0.8, zorder=1)
        ax.annotate(event["mutated"].replace("_", " "), (x + 0.9, row[event["member"]]), fontsize=6, color="#555",
                    xytext=(3, 3), textcoords="offset points")
    xs, ys, fitness = zip(*[(x, row[m["name"]], f["score"]) for m in members for x, f in enumerate(m["fitness"])])
    dots = ax.scatter(xs, ys, c=fitness, cmap="viridis", s=90, zorder=2)
    for x, _ in enumerate(steps):
        best = max(members, key=lambda m: m["fitness"][x]["score"])
        ax.scatter([x], [row[best["name"]]], s=200, facecolors="none", edgecolors="black", linewidths=1.5, zorder=3)
    fig.colorbar(dots, ax=ax, label="validation fitness")
    ax.set_xticks(range(len(steps)), [f"step {s}" for s in steps], fontsize=7)
    ax.set_yticks(range(len(members)), [m["name"] for m in members], fontsize=8)
    ax.invert_yaxis()
    return _svg(fig)


def elite_plot(population: dict | None) -> str | None:
    """The elite's and the population's mean validation fitness at each evolution."""
    if not population or not population["members"][0]["fitness"]:
        return None
    _use_agg()
    import matplotlib.pyplot as plt

    members = population["members"]
    steps = [f["step"] for f in members[0]["fitness"]]
    scores = [[m["fitness"][x]["score"] for m in members] for x in range(len(steps))]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(steps, [max(s) for s in scores], marker="o", color="tab:green", label="elite")
    ax.plot(steps, [sum(s) / len(s) for s in scores], marker=".", color="#888", label="population mean")
    ax.set_xlabel("step")
    ax.set_ylabel("validation fitness (mean reward)")
    ax.legend(fontsize=7)
    return _svg(fig)


# -- the page ---------------------------------------------------------------------------
def eval_html(evaluation: dict | None) -> str:
    if not evaluation:
        return '<p class="note">No replay evaluation yet: run python cli.py eval --model RUN --dataset DATASET.</p>'
    rows = []
    for p in evaluation["policies"]:
        cells = [html.escape(p["name"])]
        for key, fmt in (("pnl_per_decision", "+.2f"), ("trade_precision", ".3f"), ("trade_share", ".3f"), ("direction_accuracy", ".3f"),
                         ("valid_rate", ".3f")):
            m = p["metrics"].get(key)
            cells.append(f"{m['value']:{fmt}} [{m['low']:{fmt}}, {m['high']:{fmt}}]" if m else "")
        cells.append(f"{html.escape(p.get('top_answer', ''))} {p.get('top_answer_share', 0.0):.0%}")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    from babylon_rl.evaluate.table import comparison_line

    comparisons = "".join(f"<li>{html.escape(comparison_line(role, c, named_baseline=evaluation.get('named_baseline')))}</li>" for role, c in evaluation.get("comparison", {}).items()
                          if "trade_precision_diff" in c)
    of = f" of {html.escape(evaluation['checkpoint'])}" if evaluation.get("checkpoint") else ""
    return (f"{verdict_html(evaluation)}<p>The evaluation{of}: {evaluation['windows']} held-out windows, {evaluation['decisions']} decisions of dataset "
            f"{html.escape(evaluation['dataset'])}; 95 % bootstrap intervals over windows ({evaluation['bootstrap']['resamples']} resamples).</p>"
            '<table id="eval-table"><tr><th>policy</th><th>P&amp;L per decision</th><th>trade precision</th><th>traded</th>'
            '<th>direction accuracy</th><th>valid</th><th>most frequent answer</th></tr>'
            + "".join(rows) + f"</table><ul>{comparisons}</ul>")


METRIC_SENTENCES = {
    "direction accuracy": "the share of decisions whose action was right about what the market did next "
                          "(a buy when the stock then rose more than the threshold, a sell when it fell, a bet on the side that won, a hold when nothing moved).",
    "P&amp;L per decision": "the dollars the answer would have made, each trade marked to the window's end price and each bet "
                            "settled by its market, averaged over decisions (hold and invalid answers: 0).",
    "trade precision": "the share of the buy, sell and bet answers that were right in direction: holding is neither right nor "
                       "wrong here, as it is in direction accuracy (where a hold is right only when no stock moves).",
    "valid": "the share of answers that parse as an action on a stock or market of that window.",
}
INTERVAL_SENTENCE = "The brackets are 95 % bootstrap intervals over held-out windows; a difference counts only when its own paired interval excludes 0."


def metrics_html(names: tuple[str, ...] = tuple(METRIC_SENTENCES), extra: tuple[str, ...] = (), intervals: str = INTERVAL_SENTENCE) -> str:
    """One sentence per metric (`extra`: more, as HTML), then how to read the intervals."""
    items = [f"<li><b>{name}</b>: {METRIC_SENTENCES[name]}</li>" for name in names] + [f"<li>{e}</li>" for e in extra]
    return f"<ul>{''.join(items)}<li>{intervals}</li></ul>"


def verdict_html(evaluation: dict) -> str:
    """Why learning is or is not shown, in words."""
    from babylon_rl.evaluate.run import LEARNING_REFERENCES
    from babylon_rl.evaluate.table import design_line

    comparison = {role: c for role, c in evaluation.get("comparison", {}).items() if role in LEARNING_REFERENCES}
    beaten = [role for role, c in comparison.items() if c["beats_outside_interval"]]
    missed = [role for role, c in comparison.items() if not c["beats_outside_interval"]]
    line = design_line(evaluation.get("design_check"))
    design = f"<p>{html.escape(line[0].upper() + line[1:])}.</p>" if line else ""
    if evaluation.get("learning_shown"):
        return (f"<p class='verdict'><b>Learning shown.</b> On windows no training or selection step read, the trained model beats "
                f"{', '.join(beaten)} on both P&amp;L per decision and trade precision, each beyond its 95 % interval.</p>" + design)
    reason = (f"it does not beat {', '.join(missed)} beyond the 95 % interval on both P&amp;L per decision and trade precision"
              if missed else "a required reference (the base model or the best constant action) is missing from this evaluation")
    return f"<p class='verdict'><b>Learning NOT shown</b>: {reason}.</p>" + design


def section(title: str, svg: str | None, caption: str) -> str:
    body = svg if svg else '<p class="note">no data</p>'
    return f"<section><h2>{html.escape(title)}</h2><figure>{body}<figcaption>{html.escape(caption)}</figcaption></figure></section>"


def render(data: RunData) -> str:
    c = data.config
    sections = [
        section("Held-out results by policy", policies_plot(data.eval),
                 "Compared to what, and how sure? Each policy's value on the held-out windows with its 95 % interval; green is the trained model."),
        section("Held-out curve", heldout_curve_plot(data.curve),
                 "Did it learn? Held-out accuracy and P&L after each number of training decisions seen (bench/bench_learning.py)."),
        *([section("Population lineage", lineage_plot(data.population),
                   "Who came from whom: each place at each evolution, coloured by its validation fitness; a ring marks the "
                   "elite, a line a place taken by a mutated clone of the member it starts from (the mutated hyper-parameter "
                   "named)."),
           section("The elite's curve", elite_plot(data.population),
                   "The best member's validation fitness at each evolution, and the population's mean.")] if data.population else []),
        section("Training curves", curves_plot(data.metrics),
                 f"What training saw, per step ({len(data.metrics)} steps of metrics.csv): faint raw values, bold the trailing mean."),
        section("Windows and agents over time", windows_plot(data.dataset), "Agents per window (bars) and trajectories kept in the dataset (dots), by split."),
        section("P&L per window", pnl_plot(data.dataset), "How much the logged agents' P&L differed within each window: the spread a judge and a learner work with."),
        section("Judge score vs P&L", score_plot(data.dataset), "One dot per trajectory: the judge's score against its realised P&L."),
    ]
    return page(f"babylon-rl run {data.name}", f"Run {data.name}",
                f"<p>dataset {html.escape(str(c.get('dataset')))}, base model {html.escape(str(c.get('base_model')))}, "
                f"backend {html.escape(str(c.get('backend')))}, learning rate {c.get('learning_rate')}; generated {_now()}.</p>"
                f"<section><h2>Replay evaluation on held-out windows</h2>{eval_html(data.eval)}{metrics_html()}</section>"
                + "".join(sections))


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def page(title: str, heading: str, body: str) -> str:
    """A whole self-contained page: the style inline, no scripts, no external assets."""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(heading)}</h1>{body}</body></html>\n")


def write_report(home: Home, name: str) -> Path:
    page = render(load_run_data(home, name))
    target = RunDir.for_run(home, name).root / "report.html"
    atomic.write_text(target, page)
    return target
