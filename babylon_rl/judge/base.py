"""What every judge returns for one group, and the settings of the LLM judges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from babylon_rl.judge.cache import Score
from babylon_rl.judge.dataset import WindowGroup

TRUNCATED_SUFFIX = " (judged on a transcript shortened in the middle to fit the token budget)"


@dataclass
class GroupOutcome:
    """Scores by trajectory_id for the whole group, or an error and no scores at all."""

    scores: dict[str, Score] | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    truncated: int = 0


@dataclass(frozen=True)
class LLMSettings:
    model: str
    base_url: str | None
    api_key: str | None = field(repr=False)
    timeout: float = 60.0
    max_retries: int = 3  # transport retries (429, 5xx, timeouts), exponential backoff by the openai client
    attempts: int = 3  # judge attempts per group when the reply is malformed or has wrong ids
    max_judge_tokens: int = 60_000


class Judge(Protocol):
    name: str
    model: str
    rubric_version: str

    async def score_group(self, group: WindowGroup) -> GroupOutcome: ...

    async def aclose(self) -> None: ...
