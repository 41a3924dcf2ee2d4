"""What bounds a request's work at the HTTP boundary: its body, its client, its time.

- `BodyLimit` (plain ASGI, so every message still passes through, a client's disconnect included) counts a
  body's bytes as they arrive, `Content-Length` or chunked: past the limit the request is answered 413 in
  OpenAI's shape and the rest is never read.
- `settled` waits for a request's answer (or its first token) while watching its client and its deadline:
  a client that hangs up, or a deadline that passes, ends the wait (`Gone`, `TimedOut`), and the caller
  cancels the request's work (`engine.Job.cancel`).
"""

from __future__ import annotations

import asyncio
import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    """Raised from `receive` once the body passes the limit (FastAPI passes an HTTPException on as it is)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit:,} bytes: shorten the messages")


class Gone(Exception):
    """The client hung up before its answer."""


class TimedOut(Exception):
    """The request's deadline passed before its answer."""


def too_large_body(limit: int) -> bytes:
    error = {"message": BodyTooLarge(limit).detail, "type": "invalid_request_error", "param": None,
             "code": "request_too_large"}
    return json.dumps({"error": error}).encode()


class BodyLimit:
    """Counts each request body's bytes as they arrive; over `limit`, a 413 in OpenAI's shape replaces any answer."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _declared_length(scope) > self.limit:
            await self._refuse(send)
            return
        seen, over, answered = 0, False, False

        async def counted() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    over = True
                    raise BodyTooLarge(self.limit)
            return message

        async def guarded(message: Message) -> None:
            nonlocal answered
            if not over:
                await send(message)
            elif not answered and message["type"] == "http.response.start":  # whatever the app answers, the 413 goes
                answered = True
                await self._refuse(send)

        try:
            await self.app(scope, counted, guarded)
        except BodyTooLarge:
            if not answered:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = too_large_body(self.limit)
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def until_disconnected(receive: Receive) -> None:
    """Returns when the client hangs up (the body is read by then: `receive` waits for the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def settled(waited: set[asyncio.Future], receive: Receive, deadline: float | None) -> None:
    """Returns once one of `waited` is done; `Gone` if the client hangs up first, `TimedOut` if `deadline` (loop time)
    passes first."""
    loop = asyncio.get_running_loop()
    watcher = asyncio.ensure_future(until_disconnected(receive))
    timeout = None if deadline is None else max(0.0, deadline - loop.time())
    try:
        done, _ = await asyncio.wait({*waited, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if done & waited:
        return
    if watcher in done:
        watcher.exception()  # a receive that failed is a client gone too: retrieved, never logged as unhandled
        raise Gone
    raise TimedOut


async def next_before(queue: asyncio.Queue, deadline: float | None):
    """The queue's next item; `TimedOut` if `deadline` (loop time) passes first."""
    if deadline is None:
        return await queue.get()
    try:
        return await asyncio.wait_for(queue.get(), max(0.0, deadline - asyncio.get_running_loop().time()))
    except asyncio.TimeoutError:
        raise TimedOut from None
