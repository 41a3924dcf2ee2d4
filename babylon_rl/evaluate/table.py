"""The eval table as rich renders it (the `eval` and `quickstart` summaries)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from babylon_rl.evaluate.run import EvalResult


def _cell(interval, fmt: str) -> str:
    return f"{interval.value:{fmt}} [{interval.low:{fmt}}, {interval.high:{fmt}}]"


def eval_table(result: "EvalResult") -> Table:
    table = Table(title=f"replay eval on {result.options.dataset}: {len(result.eval_set.windows)} held-out windows, "
                        f"{len(result.eval_set.decisions)} decisions (95 % bootstrap intervals over windows)")
    table.add_column("policy")
    for column in ("direction accuracy", "P&L per decision", "valid", "most frequent answer"):
        table.add_column(column, justify="right")
    for p in result.policies:
        m = p.metrics
        top, share = p.top_answer
        table.add_row(p.name, _cell(m["direction_accuracy"], ".3f"), _cell(m["pnl_per_decision"], "+.2f"),
                      _cell(m["valid_rate"], ".3f"), f"{top} {share:.0%}")
    return table


def design_line(design: dict | None) -> str | None:
    """Whether this evaluation could recognise a policy that reads the news: the news rule against the best constant."""
    if design is None:
        return None
    d, p = design["direction_accuracy_diff"], design["pnl_per_decision_diff"]
    diff = f"direction accuracy {d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], P&L per decision {p['value']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}]"
    if design["beats_outside_interval"]:
        return f"the news rule beats the best constant beyond the interval ({diff}): this evaluation can recognise a policy that reads the news"
    return (f"the news rule does NOT beat the best constant beyond the interval ({diff}): either the headlines do not lead prices "
            "here or the held-out windows are too few to tell; this evaluation could not recognise even a policy that reads the news")
