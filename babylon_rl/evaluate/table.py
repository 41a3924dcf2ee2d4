"""The eval table and its comparison lines as the `eval` and `quickstart` summaries print them.

Sized to stay on one line per policy in an 80-column terminal and in a file: short cells, the
interval beside the P&L and the trade precision (the two metrics of the claim), the share traded and
the share of valid answers (the claim needs 95 %) as plain figures; eval.json and eval.csv keep every
interval and the direction accuracy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

if TYPE_CHECKING:
    from babylon_rl.evaluate.run import EvalResult, PolicyResult

ROLE_LABELS = {"model": "trained", "baseline": "its base", "reader": "news rule", "logged": "logged agents",
               "imitation": "imitation", "teachers": "best agents"}
REFERENCE_NAMES = {"baseline": "its base model", "constant": "the best constant", "logged": "the logged agents",
                   "imitation": "imitation of the logged answers (same budget)", "reader": "the news rule (not required)",
                   "teachers": "the best agents' own held-out play, window by window (not required)"}


def _label(p: "PolicyResult", named_baseline: str | None) -> str:
    if p.role == "constant":
        return p.name.replace("best constant: ", "const ")
    if p.role == "baseline" and named_baseline:
        return "baseline"  # another model than the trained one's base: the comparison lines name it
    return ROLE_LABELS.get(p.role, p.name)


def _pnl(interval) -> str:
    return f"{interval.value:+.1f} [{interval.low:+.0f},{interval.high:+.0f}]"


def _share(interval) -> str:
    def short(x: float) -> str:
        return f"{x:.2f}".replace("0.", ".", 1)

    return f"{short(interval.value)} [{short(interval.low)},{short(interval.high)}]"


def eval_table(result: "EvalResult") -> Table:
    table = Table(title=f"held-out: {len(result.eval_set.windows)} windows, {len(result.eval_set.decisions)} decisions, "
                        "95 % intervals over windows", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                  collapse_padding=True, title_justify="left")
    table.add_column("policy", no_wrap=True, max_width=14, overflow="ellipsis")
    for column in ("P&L/decision", "precision", "traded", "valid", "top answer"):
        table.add_column(column, justify="right", no_wrap=True)
    for p in result.policies:
        m = p.metrics
        if not m:
            continue
        top, share = p.top_answer
        table.add_row(_label(p, result.named_baseline), _pnl(m["pnl_per_decision"]), _share(m["trade_precision"]) if m["trade_share"].value else "no trade",
                      f"{m['trade_share'].value:.2f}", f"{m['valid_rate'].value:.2f}", f"{top[:9]} {share:.0%}")
    return table


def comparison_line(role: str, diff: dict, subject: str = "trained model", named_baseline: str | None = None) -> str:
    """One comparison in words: P&L and trade precision, each with its paired interval, and the verdict. `named_baseline`:
    the model --baseline named, when it is not the trained model's base."""
    p, t = diff["pnl_per_decision_diff"], diff["trade_precision_diff"]
    verdict = "BEATS" if diff["beats_outside_interval"] else "does NOT beat"
    precision = (f"trade precision {t['value']:+.3f} [{t['low']:+.3f}, {t['high']:+.3f}]" if diff["precision_estimable"] else
                 f"trade precision not compared ({diff['reference_trades']} trades: too few to estimate; P&L alone decides)")
    reference = f"the baseline {named_baseline}" if role == "baseline" and named_baseline else REFERENCE_NAMES.get(role, role)
    return f"{subject} {verdict} {reference}: P&L per decision {p['value']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}], {precision}"


def design_line(design: dict | None) -> str | None:
    """Whether this evaluation could recognise a policy that reads the news: the news rule against the best constant."""
    if design is None:
        return None
    line = comparison_line("constant", design, "the news rule")
    if design["beats_outside_interval"]:
        return f"{line}: this evaluation can recognise a policy that reads the news"
    return (f"{line}: either the headlines do not lead prices here or the held-out windows are too few to tell; this "
            "evaluation could not recognise even a policy that reads the news")
