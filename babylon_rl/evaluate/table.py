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
