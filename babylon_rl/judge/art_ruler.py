"""`--judge art-ruler`: OpenPipe ART's own `art.rewards.ruler_score_group` (its exact judge prompt).

Each window becomes an `art.TrajectoryGroup`: one `art.Trajectory` per dataset row whose
messages are [the window's ground truth as a shared first system message] + the
agent's messages + a final OUTCOME message, with `metadata["trajectory_id"]`. ART
passes our trading rubric as its grading standards, calls the endpoint through LiteLLM
(`openai/<model>`, `api_base`, `api_key`, our own AsyncOpenAI client) and returns the
trajectories in order with `.reward`.

ART assigns the judge's scores by position. Before any score is kept we check that the
returned group has the same length, that every returned trajectory carries the
trajectory_id and messages we sent at that position, and, from the raw reply captured
on the HTTP client, that the judge's ids are exactly 1..n, each once; the scores are
then taken from the reply by id (a reordered reply is re-mapped, not mis-assigned).
Scores outside [0, 1] on a 0-10 or 0-100 scale are rescaled, then clipped.
"""

from __future__ import annotations

import json

import httpx
from openai import AsyncOpenAI

from babylon_rl.art_compat import import_art
from babylon_rl.judge import rubric
from babylon_rl.judge.base import TRUNCATED_SUFFIX, GroupOutcome, LLMSettings
from babylon_rl.judge.cache import Score
from babylon_rl.judge.dataset import WindowGroup, Trajectory
from babylon_rl.judge.ruler import InvalidReply, describe_error
from babylon_rl.judge.transcript import estimate_tokens, outcome_line
from babylon_rl.settings import scrub


def litellm_model(model: str) -> str:
    """LiteLLM's name for a model served by an OpenAI-compatible endpoint."""
    return model if model.startswith("openai/") else f"openai/{model}"


def _compact_messages(messages: list[dict], max_chars: int) -> tuple[list[dict], bool]:
    """Keep the first and last turns within max_chars, replacing the middle with one marker turn."""
    if sum(len(str(m.get("content") or "")) for m in messages) <= max_chars:
        return messages, False
    head: list[dict] = []
    tail: list[dict] = []
    used = 0
    for i in range(len(messages)):
        pick = messages[i // 2] if i % 2 == 0 else messages[len(messages) - 1 - i // 2]
        size = len(str(pick.get("content") or ""))
        if used + size > max_chars or len(head) + len(tail) >= len(messages):
            break
        (head if i % 2 == 0 else tail).append(pick)
        used += size
    omitted = len(messages) - len(head) - len(tail)
    marker = {"role": "user", "content": f"[truncated: {omitted} turns of the middle omitted to fit the token budget]"}
    return head + [marker] + list(reversed(tail)), True


def _context_message(group: WindowGroup) -> dict:
    return {"role": "system", "content": f"GROUND TRUTH of window {group.window_id} (the agents did not see it):\n"
                                         f"{group.context_text}"}


def trajectory_messages(group: WindowGroup, traj: Trajectory, max_chars: int) -> tuple[list[dict], bool]:
    body = [{"role": m.get("role", "user"), "content": str(m.get("content") or "")} for m in traj.messages]
    body, cut = _compact_messages(body, max_chars)
    return [_context_message(group), *body, {"role": "user", "content": outcome_line(traj)}], cut


def _rescale(values: list[float]) -> list[float]:
    top = max(values, default=0.0)
    divisor = 100.0 if top > 10 else 10.0 if top > 1 else 1.0
    return [min(max(v / divisor, 0.0), 1.0) for v in values]


def reply_scores(body: dict | None, n: int) -> dict[str, tuple[float, str]]:
    """The captured reply's scores by ART's ids '1'..'n'; InvalidReply unless each id is there once."""
    try:
        content = body["choices"][0]["message"]["content"]  # type: ignore[index]
        items = json.loads(content)["scores"]
        ids = [str(item["trajectory_id"]).strip() for item in items]
        values = _rescale([float(item["score"]) for item in items])
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise InvalidReply(f"malformed reply: {type(exc).__name__}") from None
    if len(ids) != len(set(ids)) or set(ids) != {str(i) for i in range(1, n + 1)}:
        raise InvalidReply(f"reply ids {sorted(ids)} are not 1..{n} each once")
    return {i: (v, str(item.get("explanation", ""))) for i, v, item in zip(ids, values, items)}


class _Capture:
    """An httpx client that keeps the last chat-completions reply body it received."""

    def __init__(self, timeout: float) -> None:
        self.body: dict | None = None
        self.http = httpx.AsyncClient(timeout=timeout, event_hooks={"response": [self._hook]})

    async def _hook(self, response: httpx.Response) -> None:
        await response.aread()
        if response.status_code == 200:
            try:
                self.body = response.json()
            except ValueError:
                self.body = None


class ArtRulerJudge:
    name = "art-ruler"
    rubric_version = f"art-ruler/{rubric.RUBRIC_VERSION}"

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.model = settings.model

    async def aclose(self) -> None:
        return None

    def _art_group(self, group: WindowGroup) -> tuple[object, list[object], int]:
        art = import_art()

        ordered = sorted(group.trajectories, key=lambda t: t.trajectory_id)
        share = max(self.settings.max_judge_tokens * 4 - len(group.context_text), 2000) // max(len(ordered), 1)
        sent, cut = [], 0
        for traj in ordered:
            messages, was_cut = trajectory_messages(group, traj, share)
            cut += was_cut
            sent.append(art.Trajectory(messages_and_choices=messages, reward=0.0,
                                       metadata={"trajectory_id": traj.trajectory_id, "truncated": was_cut}))
        return art.TrajectoryGroup(sent), sent, cut

    async def _call(self, group_in: object, capture: _Capture) -> object:
        import_art()
        from art.rewards import ruler_score_group

        client = AsyncOpenAI(api_key=self.settings.api_key or "no-key", base_url=self.settings.base_url,
                             timeout=self.settings.timeout, max_retries=self.settings.max_retries,
                             http_client=capture.http)
        params = {"api_base": self.settings.base_url, "api_key": self.settings.api_key or "no-key",
                  "client": client, "max_retries": self.settings.max_retries, "num_retries": 0,
                  "timeout": self.settings.timeout, "temperature": 0}
        return await ruler_score_group(group_in, judge_model=litellm_model(self.model),  # type: ignore[arg-type]
                                       extra_litellm_params=params, rubric=rubric.RUBRIC)

    @staticmethod
    def _verify(sent: list, returned: object) -> None:
        trajectories = getattr(returned, "trajectories", None)
        if trajectories is None or len(trajectories) != len(sent):
            raise InvalidReply("ART returned a group of a different size")
        for mine, theirs in zip(sent, trajectories):
            if theirs.metadata.get("trajectory_id") != mine.metadata["trajectory_id"] or theirs.messages() != mine.messages():
                raise InvalidReply("ART returned trajectories in a different order than sent")

    def _scores(self, sent: list, body: dict | None) -> dict[str, Score]:
        identical = all(t.messages() == sent[0].messages() for t in sent)
        by_id = reply_scores(body, 1 if identical else len(sent))
        result = {}
        for position, traj in enumerate(sent, start=1):
            value, why = by_id["1" if identical else str(position)]
            tid, cut = str(traj.metadata["trajectory_id"]), bool(traj.metadata["truncated"])
            result[tid] = Score(tid, value, why + (TRUNCATED_SUFFIX if cut else ""), cut)
        return result

    async def score_group(self, group: WindowGroup) -> GroupOutcome:
        group_in, sent, cut = self._art_group(group)
        outcome = GroupOutcome(truncated=cut)
        last_error = "no attempt made"
        for _ in range(self.settings.attempts):
            capture = _Capture(self.settings.timeout)
            outcome.requests += 1
            try:
                returned = await self._call(group_in, capture)
                self._verify(sent, returned)
                outcome.scores = self._scores(sent, capture.body)
            except (InvalidReply, ValueError) as exc:  # ART raises ValueError/ValidationError on a bad reply
                last_error = scrub(str(exc).splitlines()[0][:200], self.settings.api_key)
                continue
            except Exception as exc:  # noqa: BLE001 - LiteLLM's transport errors after its bounded retries
                outcome.error = describe_error(exc, self.settings.api_key)
                return outcome
            finally:
                self._count_tokens(outcome, capture.body, sent)
                await capture.http.aclose()
            return outcome
        outcome.error = f"{last_error} (after {self.settings.attempts} attempt(s))"
        outcome.scores = None
        return outcome

    @staticmethod
    def _count_tokens(outcome: GroupOutcome, body: dict | None, sent: list) -> None:
        usage = (body or {}).get("usage") or {}
        outcome.prompt_tokens += int(usage.get("prompt_tokens") or sum(estimate_tokens(json.dumps(t.messages())) for t in sent))
        outcome.completion_tokens += int(usage.get("completion_tokens") or 0)
