"""The options of a scoring run, apart from the scoring code so that the CLI can parse them without loading it."""

from __future__ import annotations

import os
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr

JudgeKind = Literal["ruler", "heuristic", "art-ruler"]
JUDGES: tuple[str, ...] = get_args(JudgeKind)


class ScoreOptions(BaseModel):
    """Everything a scoring run needs; unset LLM settings come from JUDGE_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY."""

    model_config = ConfigDict(frozen=True)

    judge: JudgeKind = "heuristic"
    judge_model: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    concurrency: int = Field(8, ge=1)
    timeout: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    attempts: int = Field(3, ge=1, le=10)
    max_judge_tokens: int = Field(60_000, ge=1_000)
    price_in: float = Field(0.0, ge=0)
    price_out: float = Field(0.0, ge=0)

    def resolved(self) -> "ScoreOptions":
        key = self.api_key or (SecretStr(os.environ["OPENAI_API_KEY"]) if os.environ.get("OPENAI_API_KEY") else None)
        return self.model_copy(update={
            "judge_model": self.judge_model or os.environ.get("JUDGE_MODEL") or None,
            "base_url": self.base_url or os.environ.get("OPENAI_BASE_URL") or None,
            "api_key": key,
        })
