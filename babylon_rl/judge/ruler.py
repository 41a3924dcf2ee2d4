"""RULER with the trading rubric: one chat-completions request per window group.

The request carries the rubric (system), the window's ground truth once, then one
compact transcript per trajectory under a short id (T1..Tn, trajectory_id order). The
reply must be `{"scores": [{"id", "score", "explanation"}]}`: asked for with a JSON
schema `response_format`, falling back to JSON mode and then to plain JSON when the
endpoint rejects it. Scores are matched by id; a reply with missing, repeated or
unknown ids, scores outside [0, 1] or no JSON is retried (`attempts`), then the group
fails as a whole. Transport errors (429, 5xx, timeouts, refused connections) are
retried with exponential backoff by the openai client (`max_retries`).

Throughput: the client uses openai's aiohttp transport (`DefaultAioHttpClient`, the
`openai[aiohttp]` extra) because httpx's connection pool costs ~2.5 ms of CPU per
request, and it posts the body with `client.post` (the SDK's documented generic call:
same retries, timeouts and errors) because `chat.completions.create` walks the whole
prompt through the SDK's TypedDict transform (~1.5 ms per request). At 16 groups in
flight and 100 ms latency the event loop has ~6 ms per request in all (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import re

import openai
from openai import AsyncOpenAI, DefaultAioHttpClient
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, Field, ValidationError

from babylon_rl.judge import rubric
from babylon_rl.judge.base import TRUNCATED_SUFFIX, GroupOutcome, LLMSettings
from babylon_rl.judge.cache import Score
from babylon_rl.judge.dataset import WindowGroup
from babylon_rl.judge.transcript import estimate_tokens, render_group, shared_system_prompt, short_ids, truncate_middle
from babylon_rl.settings import scrub

RESPONSE_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "trajectory_scores",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "scores": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "score": {"type": "number"},
                            "explanation": {"type": "string"},
                        },
                        "required": ["id", "score", "explanation"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["scores"],
            "additionalProperties": False,
        },
    },
}
RESPONSE_FORMATS: tuple[dict | None, ...] = (RESPONSE_SCHEMA, {"type": "json_object"}, None)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


class ItemScore(BaseModel):
    id: str
    score: float = Field(ge=0.0, le=1.0)
    explanation: str = ""


class JudgeReply(BaseModel):
    scores: list[ItemScore]


class InvalidReply(ValueError):
    """The judge answered, but not with exactly one valid score per id."""


def parse_reply(content: str | None, expected: set[str]) -> dict[str, ItemScore]:
    """Scores by id; raises InvalidReply unless the ids are exactly `expected`, each once."""
    text = _FENCE.sub("", (content or "").strip())
    start, end = text.find("{"), text.rfind("}")
    try:
        reply = JudgeReply.model_validate_json(text[start:end + 1] if start >= 0 else text)
    except ValidationError as exc:
        raise InvalidReply(f"malformed reply: {exc.errors()[0]['msg']}") from None
    ids = [item.id.strip() for item in reply.scores]
    if len(ids) != len(set(ids)):
        raise InvalidReply("reply repeats trajectory ids")
    if set(ids) != expected:
        missing, unknown = sorted(expected - set(ids)), sorted(set(ids) - expected)
        raise InvalidReply(f"reply ids do not match: missing {missing}, unknown {unknown}")
    return {item.id.strip(): item for item in reply.scores}


def build_messages(group: WindowGroup, max_tokens: int) -> tuple[list[dict], frozenset[str]]:
    """The chat messages for one group and the short ids whose transcripts were cut.

    The ground truth may take at most 40 % of the budget; the transcripts share the rest evenly.
    """
    system = rubric.system_prompt()
    context = truncate_middle(group.context_text, max_tokens * 4 * 2 // 5)
    shared = shared_system_prompt(group)
    fixed = estimate_tokens(system) + estimate_tokens(context) + estimate_tokens(shared or "") + 200
    rendered = render_group(group, fixed, max_tokens)
    user = rubric.user_prompt(group.window_id, context, rendered.shared_instructions,
                              rendered.blocks, bool(rendered.truncated_ids) or context != group.context_text)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], rendered.truncated_ids


def _root_cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def describe_error(exc: BaseException, secret: str | None) -> str:
    root = _root_cause(exc)
    # The aiohttp transport reports a refused connection as a connect timeout; the root cause tells them apart.
    if isinstance(exc, openai.APIConnectionError) and isinstance(root, OSError) and not isinstance(root, TimeoutError):
        text = f"cannot reach the endpoint ({root})"
    elif isinstance(exc, openai.APITimeoutError):
        text = "request timed out"
    elif isinstance(exc, openai.APIConnectionError):
        text = f"cannot reach the endpoint ({exc.__cause__ or exc})"
    elif isinstance(exc, openai.APIStatusError):
        text = f"HTTP {exc.status_code}: {str(exc.message)[:200]}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return scrub(text, secret)


class RulerJudge:
    name = "ruler"
    rubric_version = rubric.RUBRIC_VERSION

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.model = settings.model
        self._format = 0  # index into RESPONSE_FORMATS; lowered once when the endpoint rejects a format
        self.client = AsyncOpenAI(
            api_key=settings.api_key or "no-key", base_url=settings.base_url,
            timeout=settings.timeout, max_retries=settings.max_retries, http_client=DefaultAioHttpClient(),
        )

    async def aclose(self) -> None:
        await self.client.close()

    async def _request(self, messages: list[dict], outcome: GroupOutcome, fmt: int) -> str | None:
        kwargs: dict = {"model": self.model, "messages": messages, "temperature": 0}
        response_format = RESPONSE_FORMATS[fmt]
        if response_format is not None:
            kwargs["response_format"] = response_format
        outcome.requests += 1
        response = await self.client.post("/chat/completions", body=kwargs, cast_to=ChatCompletion)
        usage = response.usage
        outcome.prompt_tokens += usage.prompt_tokens if usage else sum(estimate_tokens(m["content"]) for m in messages)
        content = response.choices[0].message.content if response.choices else None
        outcome.completion_tokens += usage.completion_tokens if usage else estimate_tokens(content or "")
        return content

    async def score_group(self, group: WindowGroup) -> GroupOutcome:
        ids = short_ids(group)
        messages, truncated = build_messages(group, self.settings.max_judge_tokens)
        outcome = GroupOutcome(truncated=len(truncated))
        attempt, last_error = 0, "no attempt made"
        while attempt < self.settings.attempts:
            attempt += 1
            fmt = self._format
            try:
                content = await self._request(messages, outcome, fmt)
                parsed = parse_reply(content, set(ids))
            except InvalidReply as exc:
                last_error = str(exc)
                continue
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                last_error = describe_error(exc, self.settings.api_key)
                if fmt + 1 < len(RESPONSE_FORMATS):
                    self._format = max(self._format, fmt + 1)  # the endpoint rejects this format: use a simpler one
                    attempt -= 1  # not the judge's fault; bounded by the number of formats
                    continue
                break
            except openai.APIError as exc:  # the client already retried 429/5xx/timeouts with backoff
                outcome.error = describe_error(exc, self.settings.api_key)
                return outcome
            outcome.scores = {
                traj.trajectory_id: Score(
                    traj.trajectory_id, parsed[sid].score,
                    parsed[sid].explanation + (TRUNCATED_SUFFIX if sid in truncated else ""), sid in truncated,
                )
                for sid, traj in ids.items()
            }
            return outcome
        outcome.error = f"{last_error} (after {attempt} attempt(s))"
        return outcome

