"""`cli.py report --improve`, and `improve` after every iteration: one self-contained HTML page about the loop.

From HOME/improve/state.json alone: the mean window P&L per agent of the policy agents and of each
persona by iteration, the gate's held-out figures (candidate and champion) by iteration, a table of
who played, who was measured, what was decided and why, and each stage's seconds, and a verdict in
words. The figures and the page come from babylon_rl/report.py's helpers; it is written to
HOME/improve/report.html through a temp file and a rename.
"""

from __future__ import annotations

import html
from pathlib import Path

from babylon_rl import atomic
from babylon_rl.console import interval_text
from babylon_rl.improve_state import STAGES, ImproveState, Iteration, load_state
from babylon_rl.report import _figure, _now, _svg, _use_agg, metrics_html, page, section
from babylon_rl.settings import Home

GATE_METRICS = (("direction_accuracy", "direction accuracy", 3), ("pnl_per_decision", "P&L per decision ($)", 2))
# what promotes (evaluate/run.py): P&L and trade precision; the champion's precision is None where it traded too little to estimate
CLAIM_METRICS = (("pnl_per_decision", "P&L per decision", 2), ("trade_precision", "trade precision", 3))
PERSONA_COLORS = ("tab:blue", "tab:orange", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")  # green: policy
REFERENCES = ("random", "contrarian")  # personas the policy agents should end above
PNL_SENTENCE = ("<b>mean window P&amp;L per agent</b>: what an agent made in one window of the iteration, averaged over "
                "the agents of that kind and then over the iteration's windows; the policy agents are the ones the champion played.")
INTERVALS_SENTENCE = ("The brackets are 95 % bootstrap intervals over windows: the held-out ones at the gate, the iteration's own for "
                      "P&amp;L per agent. The gate's differences count only when their paired interval excludes 0; two iterations' "
                      "or two agents' figures are said to differ beyond the interval only when their intervals do not overlap "
                      "(unpaired, so a cautious test).")


def write_improve_report(home: Home, state: ImproveState | None = None) -> Path:
    """HOME/improve/report.html from `state` (default: the one state.json holds)."""
    target = home.improve_state.with_name("report.html")
    atomic.write_text(target, render(state or load_state(home)))
    return target


# -- figures ----------------------------------------------------------------------------
def _errorbar(ax, x: list[float], figures: list[dict], **style) -> None:
    values = [f["value"] for f in figures]
    spans = [[f["value"] - f["low"] for f in figures], [f["high"] - f["value"] for f in figures]]
    ax.errorbar(x, values, yerr=spans, fmt="o-", capsize=3, **style)


def pnl_plot(state: ImproveState) -> str | None:
    """Mean window P&L per agent by iteration: the policy agents (bold) and each persona, each with its interval."""
    played = [it for it in state.iterations if it.play]
    if not played:
        return None
    kinds = ["policy"] + sorted({k for it in played for k in it.play if k != "policy"})
    fig, ax = _figure()
    for offset, kind in enumerate(kinds):
        its = [it for it in played if kind in it.play]
        if not its:
            continue
        x = [it.iteration + (offset - (len(kinds) - 1) / 2) * 0.04 for it in its]  # side by side, not on top of each other
        style = {"color": "tab:green", "linewidth": 2, "zorder": 3} if kind == "policy" else \
            {"color": PERSONA_COLORS[(offset - 1) % len(PERSONA_COLORS)], "alpha": 0.6, "linewidth": 1}
        _errorbar(ax, x, [it.play[kind] for it in its], label="policy agents" if kind == "policy" else kind, **style)
    ax.axhline(0, color="#999", linewidth=0.8)
    ax.set_xticks([it.iteration for it in played])
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean window P&L per agent ($)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def gate_plot(state: ImproveState) -> str | None:
    """The gate's held-out direction accuracy and P&L per decision by iteration, candidate beside champion."""
    gated = [it for it in state.iterations if "candidate" in it.gate and "champion" in it.gate]
    if not gated:
        return None
    _use_agg()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, (key, label, _) in zip(axes, GATE_METRICS):
        for side, color, shift in (("champion", "tab:gray", -0.06), ("candidate", "tab:green", 0.06)):
            _errorbar(ax, [it.iteration + shift for it in gated], [it.gate[side][key] for it in gated], color=color, label=side)
        ax.set_xticks([it.iteration for it in gated])
        ax.set_xlabel("iteration")
        ax.set_title(f"held-out {label}", fontsize=9)
        ax.legend(fontsize=7)
    axes[1].axhline(0, color="#999", linewidth=0.8)
    return _svg(fig)


# -- words ------------------------------------------------------------------------------
def gate_reason(it: Iteration) -> str:
    """Why the candidate was promoted or not, in words."""
    if it.promoted is None:
        return "the gate has not run yet"
    if it.promoted:
        reason = "the candidate beat the champion beyond the interval on both P&L per decision and trade precision"
    else:
        reason = "; ".join(_missed(it.gate[key], label, digits) for key, label, digits in CLAIM_METRICS
                           if it.gate.get(key) and it.gate[key]["low"] <= 0) or "the candidate made no trade"
    if it.gate.get("could_recognise_news_rule") is False:
        reason += "; the gate could not recognise even the news rule"
    return reason


def _missed(diff: dict, label: str, digits: int) -> str:
    if diff["high"] < 0:
        return f"the candidate was worse on {label} beyond the interval ({interval_text(diff, digits)})"
    return f"the difference in {label} stayed inside its interval ({interval_text(diff, digits)} includes 0)"


def _beyond(a: dict, b: dict) -> int:
    """+1 when a's interval lies wholly above b's, -1 wholly below, 0 when they overlap."""
    return 1 if a["low"] > b["high"] else -1 if a["high"] < b["low"] else 0


def verdict(state: ImproveState) -> str:
    """Did the policy agents' P&L rise from the first iteration to the last beyond the interval, and do they end above
    the random and contrarian personas?"""
    played = [it for it in state.iterations if "policy" in it.play]
    if not played:
        return "No iteration has been played and built yet: nothing to judge."
    first, last = played[0], played[-1]
    return f"{_rise(first, last)} {_against_personas(last)}"


def _rise(first: Iteration, last: Iteration) -> str:
    start, end = first.play["policy"], last.play["policy"]
    if first is last:
        return f"Only iteration {first.iteration} has been played ({interval_text(start)}): there is no rise to measure yet."
    how = {1: "rose beyond the interval", -1: "fell beyond the interval",
           0: "did not rise beyond the interval (the two intervals overlap)"}[_beyond(end, start)]
    return (f"The policy agents' mean window P&L went from {interval_text(start)} in iteration {first.iteration} to "
            f"{interval_text(end)} in iteration {last.iteration}: it {how}.")


def _against_personas(last: Iteration) -> str:
    policy = last.play["policy"]
    parts = []
    for persona in (p for p in REFERENCES if p in last.play):
        side = {1: "above", -1: "below", 0: "not distinguishable from"}[_beyond(policy, last.play[persona])]
        parts.append(f"{side} {persona} ({interval_text(last.play[persona])})")
    if not parts:
        return f"Iteration {last.iteration} had no random or contrarian persona to compare with."
    return f"In iteration {last.iteration}, by whether the intervals overlap, they end {' and '.join(parts)}."


# -- the page ---------------------------------------------------------------------------
def table_html(state: ImproveState) -> str:
    head = ["iteration", "champion (played)", "candidate", "promoted", "why", *(f"{s} s" for s in STAGES)]
    rows = []
    for it in state.iterations:
        promoted = "" if it.promoted is None else "promoted" if it.promoted else "kept the champion"
        cells = [str(it.iteration), it.champion, it.candidate or "", promoted, gate_reason(it),
                 *(f"{it.seconds[s]:,.1f}" if s in it.seconds else "" for s in STAGES)]
        rows.append("<tr>" + "".join(f"<td{' class=words' if i == 4 else ''}>{html.escape(c)}</td>" for i, c in enumerate(cells)) + "</tr>")
    return ('<table id="iterations"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
            + "".join(rows) + "</table>")


def render(state: ImproveState) -> str:
    o = state.options
    intro = (f"<p>{len(state.iterations)} iteration(s) of {o.get('windows')} windows each, {o.get('policy_agents')} policy agents "
             f"among {o.get('agents')} personas, news strength {o.get('news_strength')}; champion now "
             f"{html.escape(state.champion)}; generated {_now()}.</p>")
    body = (intro + f"<p class='verdict'><b>Verdict.</b> {html.escape(verdict(state))}</p>"
            + metrics_html(("direction accuracy", "P&amp;L per decision"), (PNL_SENTENCE,), INTERVALS_SENTENCE)
            + section("Mean window P&L per agent by iteration", pnl_plot(state),
                      "Did the agents the champion plays make more as the loop went on, and more than the personas? "
                      "Green: the policy agents; bars: 95 % bootstrap intervals over the iteration's windows.")
            + section("The gate, by iteration", gate_plot(state),
                      "What the gate measured on held-out windows neither model trained on: the candidate (green) beside "
                      "the champion it had to beat (gray), with 95 % intervals.")
            + f"<section><h2>Iterations</h2>{table_html(state)}</section>")
    return page("babylon-rl improve", "The closed loop: improve", body)
