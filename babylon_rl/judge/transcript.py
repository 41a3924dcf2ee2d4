"""Compact transcripts of trajectories for the judge, and fitting a group into a token budget.

A transcript drops the system prompt (sent once as the shared prefix when every agent
of the group had the same one), writes each observation as `OBS:` and each answer as
`ACT:`, and ends with one `OUTCOME:` line (P&L, trades, win rate, errors). When a group
is too long for `--max-judge-tokens`, every transcript over its even share is cut in the
middle (head and tail kept, the outcome line always kept) and the cut is marked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from babylon_rl.judge.dataset import WindowGroup, Trajectory

_SPACES = re.compile(r"[ \t]+")
TRUNCATION_MARK = "[truncated: {n} characters of the middle omitted]"


def estimate_tokens(text: str) -> int:
    """~4 characters per token (tiktoken would fetch its vocabulary over the network)."""
    return (len(text) + 3) // 4


def short_ids(group: WindowGroup) -> dict[str, Trajectory]:
    """T1..Tn in trajectory_id order: stable for the same group, mapped back by id."""
    ordered = sorted(group.trajectories, key=lambda t: t.trajectory_id)
    return {f"T{i}": traj for i, traj in enumerate(ordered, start=1)}


def _system_prompt(traj: Trajectory) -> str | None:
    first = traj.messages[0] if traj.messages else None
    return str(first.get("content") or "") if first and first.get("role") == "system" else None


def shared_system_prompt(group: WindowGroup) -> str | None:
    prompts = {_system_prompt(t) for t in group.trajectories}
    return prompts.pop() if len(prompts) == 1 else None


def _compact(text: str) -> str:
    return "\n".join(_SPACES.sub(" ", line).strip() for line in str(text).strip().splitlines() if line.strip())


def outcome_line(traj: Trajectory) -> str:
    win = "n/a" if traj.win_rate is None else f"{traj.win_rate:.0%}"
    return (f"OUTCOME: P&L {traj.pnl:+.2f} | trades {traj.trades} | win rate {win} | "
            f"actions {traj.actions} | errors {traj.errors}")


def render(traj: Trajectory, include_system: bool) -> str:
    lines: list[str] = []
    for message in traj.messages:
        role = message.get("role")
        content = _compact(message.get("content") or "")
        if role == "system":
            if include_system:
                lines.append(f"INSTRUCTIONS: {content}")
        elif role == "assistant":
            lines.append(f"ACT: {content}")
        else:
            lines.append(f"OBS: {content}")
    return "\n".join(lines)


def truncate_middle(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 60, 20)
    head, tail = text[: keep // 2], text[len(text) - keep // 2:]
    omitted = len(text) - len(head) - len(tail)
    return f"{head}\n{TRUNCATION_MARK.format(n=omitted)}\n{tail}"


@dataclass(frozen=True)
class Rendered:
    blocks: list[tuple[str, str]]  # (short id, transcript)
    shared_instructions: str | None
    truncated_ids: frozenset[str]  # short ids whose transcript was cut


def render_group(group: WindowGroup, fixed_tokens: int, max_tokens: int) -> Rendered:
    """Transcripts under short ids, cut evenly so the whole prompt stays within max_tokens."""
    ids = short_ids(group)
    shared = shared_system_prompt(group)
    bodies = {sid: render(t, include_system=shared is None) for sid, t in ids.items()}
    total = sum(estimate_tokens(b) for b in bodies.values())
    budget = max_tokens - fixed_tokens - 20 * len(ids)
    if total <= budget:
        return Rendered([(sid, f"{b}\n{outcome_line(ids[sid])}") for sid, b in bodies.items()], shared, frozenset())
    share_chars = max(budget, 50 * len(ids)) * 4 // len(ids)
    blocks, cut = [], set()
    for sid, body in bodies.items():
        short = truncate_middle(body, share_chars)
        if short != body:
            cut.add(sid)
        blocks.append((sid, f"{short}\n{outcome_line(ids[sid])}"))
    return Rendered(blocks, shared, frozenset(cut))
