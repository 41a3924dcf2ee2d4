"""The versioned trading rubric and the RULER prompt built from it.

Bump RUBRIC_VERSION whenever RUBRIC or the prompt layout changes: it is part of the
judge cache key, so a new version re-scores everything once.
"""

from __future__ import annotations

from textwrap import dedent

RUBRIC_VERSION = "trading-v1"

RUBRIC = dedent(
    """
    You judge LLM trading agents that played the same one-hour window of a market game
    (stocks and prediction markets). You are given the window's GROUND TRUTH (what prices
    and prediction markets really did, and when news broke), which the agents could NOT
    see while acting. Score each trajectory between 0 and 1, relative to the others:
    - P&L against what the market really did: capturing available moves scores high;
      losing money in a market that offered easy gains scores low.
    - Timing: acting on news and price moves when they became visible, not before or far too late.
    - Risk management: position size relative to balance, not betting everything on one
      instrument, cutting losers, no reckless leverage.
    - Use of the information available at the time: decisions that follow from the
      observations the agent actually had. Never reward knowledge of the future.
    - Luck vs skill: a profit from a random or unjustified bet is worth less than a
      profit from a well-reasoned decision; a sound decision that lost to an unforeseeable
      move deserves partial credit.
    - Errors (invalid actions, malformed answers) count against a trajectory.
    - If one trajectory is only slightly better than another, keep the score gap small;
      if it is much better, make it large.
    """
).strip()

OUTPUT_INSTRUCTIONS = dedent(
    """
    Reply with JSON only: {"scores": [{"id": "<trajectory id>", "score": <0..1>,
    "explanation": "<one or two sentences>"}, ...]} with exactly one entry for every
    trajectory id given, each id once, and no other ids.
    """
).strip()

TRUNCATION_NOTE = (
    "Some transcripts were shortened in the middle to fit the judge's token budget; "
    "the cut is marked [truncated ...]. The final outcome line is always kept."
)


def system_prompt() -> str:
    return f"{RUBRIC}\n\n{OUTPUT_INSTRUCTIONS}"


def user_prompt(window_id: str, context_text: str, shared_instructions: str | None, blocks: list[tuple[str, str]],
                truncated: bool) -> str:
    """Ground truth first (the shared prefix), then one <trajectory id=..> block per trajectory."""
    parts = [f'<ground_truth window="{window_id}">\n{context_text.strip() or "(no ground truth recorded)"}\n</ground_truth>']
    if shared_instructions:
        parts.append(f"<agent_instructions>\n{shared_instructions}\n</agent_instructions>")
    if truncated:
        parts.append(TRUNCATION_NOTE)
    parts.extend(f'<trajectory id="{tid}">\n{text}\n</trajectory>' for tid, text in blocks)
    ids = ", ".join(tid for tid, _ in blocks)
    parts.append(f"Score every trajectory: {ids}.")
    return "\n\n".join(parts)
