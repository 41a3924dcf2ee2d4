"""`stream: true`: the answer as server-sent events, as OpenAI and vLLM send them.

One `chat.completion.chunk` id for the whole answer: first a role delta per choice
(`{"role": "assistant", "content": ""}`), then content deltas as the engine sends text on (a chat answer
token by token; a game decision whole, once chosen from its menu), then per choice an empty delta with
its `finish_reason`; with `stream_options.include_usage` a last chunk with `usage` and no choices; then
`data: [DONE]`. A failure after the first byte is an `{"error": ...}` event in OpenAI's shape, then `[DONE]`;
so is a deadline that passes mid-stream (`Ending`), and the job's work stops. A client that hangs up mid-stream
closes the stream (Starlette watches for it), and the job's work stops at the next token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from babylon_rl.serve.bounds import TimedOut, next_before
from babylon_rl.serve.engine import Choice, Job

log = logging.getLogger("uvicorn.error")
DONE = object()  # the job's future settled: what the queue holds after its last text


def listen(job: Job) -> asyncio.Queue:
    """A queue that gets the job's text as `(choice index, text)` pairs while the model runs, then `DONE`."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    job.on_text = lambda index, text: loop.call_soon_threadsafe(queue.put_nowait, (index, text))
    job.future.add_done_callback(lambda _: queue.put_nowait(DONE))  # settled after the model's thread sent its last text
    return queue


class Chunks:
    """The chunks of one streamed completion: one id, one created time, one model."""

    def __init__(self, completion_id: str, model_id: str, include_usage: bool) -> None:
        self.head = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model_id}
        self.include_usage = include_usage

    def delta(self, index: int, delta: dict, finish_reason: str | None = None) -> str:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._event({**self.head, "choices": [choice], **({"usage": None} if self.include_usage else {})})

    def usage(self, prompt_tokens: int, completion_tokens: int) -> str:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        return self._event({**self.head, "choices": [], "usage": usage})

    @staticmethod
    def _event(payload: dict) -> str:
        return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


@dataclass(frozen=True)
class Ending:
    """When a stream must end (loop time; None: never), and the error event it ends with then."""

    deadline: float | None = None
    error: dict | None = None


async def events(job: Job, queue: asyncio.Queue, chunks: Chunks, prompt_tokens: int,
                 ending: Ending = Ending()) -> AsyncIterator[str]:
    """The whole stream of one job: role deltas, text as it comes, the rest of each answer, finish, usage, [DONE]. Left
    before its end (the client gone: the generator closed; or the deadline passed), the job's work is cancelled."""
    try:
        async for event in _events(job, queue, chunks, prompt_tokens, ending.deadline):
            yield event
    except TimedOut:
        job.cancel()
        yield Chunks._event({"error": ending.error})
        yield "data: [DONE]\n\n"
    finally:
        if not job.future.done():
            job.cancel()


async def _events(job: Job, queue: asyncio.Queue, chunks: Chunks, prompt_tokens: int,
                  deadline: float | None) -> AsyncIterator[str]:
    sent = [""] * job.sampling.n
    for index in range(job.sampling.n):
        yield chunks.delta(index, {"role": "assistant", "content": ""})
    while (item := await next_before(queue, deadline)) is not DONE:
        index, text = item
        sent[index] += text
        yield chunks.delta(index, {"content": text})
    try:
        choices: list[Choice] = job.future.result()
    except Exception as exc:  # noqa: BLE001 (the headers are sent: the failure is an event in OpenAI's shape)
        log.error("internal error while streaming: %s: %s", type(exc).__name__, exc)
        error = {"message": "internal error while answering; the server log has its one line", "type": "server_error",
                 "param": None, "code": None}
        yield Chunks._event({"error": error})
        yield "data: [DONE]\n\n"
        return
    for index, choice in enumerate(choices):
        for event in _finish(chunks, index, choice, sent[index]):
            yield event
    if chunks.include_usage:
        yield chunks.usage(prompt_tokens, sum(c.tokens for c in choices))
    yield "data: [DONE]\n\n"


def _finish(chunks: Chunks, index: int, choice: Choice, sent: str) -> list[str]:
    """What is left of a choice's text once the stream sent `sent`, and its finish_reason."""
    if not choice.text.startswith(sent):
        log.warning("a streamed answer differs from the finished one after %d characters", len(sent))
    rest = choice.text[len(sent):] if choice.text.startswith(sent) else ""
    return ([chunks.delta(index, {"content": rest})] if rest else []) + [chunks.delta(index, {}, choice.finish_reason)]
