"""The HTTP boundary: FastAPI on uvicorn, OpenAI's chat-completions shape.

POST /v1/chat/completions, GET /v1/models, GET /health (503 while the weights load, 200 when
ready). Every error is `{"error": {"message", "type", "param", "code"}}`: 400 for a bad body or a
prompt longer than the model's context, and for a field the server does not know or cannot honour (`request`),
401 for a wrong key, 404 for an unknown model, 413 for a body over 4 MB (counted as it arrives), 429 with
Retry-After when the queue is full, 503 while loading, 504 past `--request-timeout`. A request over the batch's
token budget is a 400 naming the param to lower. A client that hangs up, or a request past its time, has its
work stopped (`bounds`, `engine.Job.cancel`). Tokenisation runs off the event loop.
`stream: true` answers server-sent events (`streaming`). Without a key, nothing shows a filesystem path: models
are listed by name.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import threading
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from babylon_rl.evaluate.prefix_cache import DEFAULT_PREFIX_CACHE_MB
from babylon_rl.model_names import is_path
from babylon_rl.serve import bounds, streaming
from babylon_rl.serve.engine import DEFAULT_MAX_BATCH_TOKENS, Batcher, Job, QueueFull, Sampling
from babylon_rl.serve.prompting import Prepared, prepare
from babylon_rl.serve.registry import Loaded, Pool, Served, load_pool
from babylon_rl.serve.request import ChatRequest, refusal

log = logging.getLogger("uvicorn.error")  # uvicorn configures this one: our lines share its format
API_KEY_ENV = "BABYLON_RL_API_KEY"
MAX_BODY_BYTES = 4_000_000  # far past any model's context here: a bigger body is refused before it is read
DEFAULT_MAX_TOKENS = {"decision": 32, "chat": 128}


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    device: str = "cpu"
    max_batch: int = 16
    batch_wait_ms: float = 10.0
    max_queue: int = 64
    max_tokens: int = 512  # the most a request may ask for
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS  # a batch's rows x (prompt + max_tokens), padded
    prefix_cache_mb: int = DEFAULT_PREFIX_CACHE_MB  # earlier decision prompts' frozen-block work kept (0: none)
    request_timeout: float | None = 300.0  # seconds to the answer (a stream: to its first token, then to its end)
    graceful_seconds: int = 60  # SIGTERM: in-flight requests get this long to finish


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param, self.headers = status, message, type_, code, param, headers


def _error(status: int, message: str, type_: str, code: str | None = None, param: str | None = None,
           headers: dict | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


# -- the app ---------------------------------------------------------------------------------
class State:
    """What the app holds: the plan, the loaded pool once ready, the batcher."""

    def __init__(self, plan: list[Served], options: ServeOptions) -> None:
        self.plan, self.options = plan, options
        self.pool: Pool | None = None
        self.failure: str | None = None
        self.batcher: Batcher | None = None
        self.on_failure = lambda: None  # set by `serve`: stop the server when the weights cannot load

    def load(self) -> None:
        try:
            self.pool = load_pool(self.plan, self.options.device)
            log.info("ready: %s", ", ".join(s.id for s in self.plan))
        except Exception as exc:  # noqa: BLE001 (any failure to load is reported on one line, then the server stops)
            self.failure = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.error("cannot load the models: %s", self.failure)
            self.on_failure()


def create_app(state: State) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        options = state.options
        state.batcher = Batcher(options.max_batch, options.batch_wait_ms / 1000, options.max_queue, options.max_batch_tokens,
                                options.prefix_cache_mb << 20)
        task = asyncio.create_task(state.batcher.run())
        threading.Thread(target=state.load, name="babylon-load", daemon=True).start()
        yield
        task.cancel()
        state.batcher.close()

    app = FastAPI(title="babylon-rl", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    _handlers(app)
    auth = Depends(_auth(state.options.api_key))

    app.add_middleware(bounds.BodyLimit, limit=MAX_BODY_BYTES)

    @app.get("/health")
    async def health() -> JSONResponse:
        if state.pool is None:  # why it failed is in the server log: an error may name the files, /health is never guarded
            failure = "the models could not load; the server log has the reason" if state.failure else None
            return JSONResponse({"status": "failed" if state.failure else "loading", "error": failure}, status_code=503)
        return JSONResponse({"status": "ok", "models": [s.id for s in state.plan], "work": asdict(state.batcher.work)})

    @app.get("/v1/models", dependencies=[auth])
    async def models() -> dict:
        return {"object": "list", "data": [_model_card(s, state.options.api_key is not None) for s in state.plan]}

    @app.post("/v1/chat/completions", dependencies=[auth], response_model=None)
    async def chat(request: ChatRequest, http: Request) -> JSONResponse | StreamingResponse:
        return await _complete(state, request, http)

    return app


def _model_card(s: Served, guarded: bool) -> dict:
    """A model as /v1/models lists it: its files' directory (`root`) only to clients holding the key, else its name."""
    aliases = [a for a in s.aliases if guarded or not is_path(a)]
    return {"id": s.id, "object": "model", "created": 0, "owned_by": "babylon-rl", "root": str(s.ref.path) if guarded else s.id,
            "parent": s.parent, "aliases": aliases}


def _auth(key: str | None):
    async def check(request: Request) -> None:
        if key is None:
            return
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(token.encode(), key.encode()):
            raise ApiError(401, "Incorrect or missing API key: send Authorization: Bearer KEY", code="invalid_api_key")

    return check


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.type, exc.code, exc.param, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])  # an unknown field named first
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        if first.get("type") == "json_invalid":
            return _error(400, "the request body is not valid JSON", "invalid_request_error", "invalid_json")
        if first.get("type") == "extra_forbidden":
            return _error(400, f"{where}: unknown field; this server does not know it (README: the fields served), leave it "
                               "out", "invalid_request_error", "unknown_parameter", where)
        return _error(400, f"{where or 'body'}: {first.get('msg')}", "invalid_request_error", "invalid_value", where or None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), "invalid_request_error", None)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s: %s: %s", request.url.path, type(exc).__name__, exc)
        return _error(500, "internal error while answering; the server log has its one line", "server_error")


async def _complete(state: State, body: ChatRequest, http: Request) -> JSONResponse | StreamingResponse:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + state.options.request_timeout if state.options.request_timeout else None
    job = await _job(state, body, _model(state, body))
    queue = streaming.listen(job) if body.stream else None
    try:
        state.batcher.submit(job)
    except QueueFull:
        raise ApiError(429, f"the queue is full ({state.options.max_queue} requests wait): retry shortly", "rate_limit_error",
                       "queue_full", headers={"Retry-After": "1"}) from None
    await _wait(state, job, {job.started, job.future} if queue is not None else {job.future}, http, deadline)
    if queue is not None:
        return _streamed(body, job, queue, len(job.ids), deadline, state.options.request_timeout)
    return _response(body, job.loaded.served.id, job.prepared, len(job.ids), job.future.result())


def _model(state: State, body: ChatRequest) -> Loaded:
    """The loaded model the request names; a 400 for a field refused, 503 while loading, 404 for a model not served."""
    refused = refusal(body)
    if refused is not None:
        raise ApiError(400, refused.message, code=refused.code, param=refused.param)
    if state.pool is None:
        raise ApiError(503, "the model is still loading; retry when GET /health answers 200", "server_error", "loading",
                       headers={"Retry-After": "2"})
    loaded = state.pool.get(body.model)
    if loaded is None:
        served = ", ".join(s.id for s in state.plan)
        raise ApiError(404, f"model {body.model!r} is not served here; served: {served}", code="model_not_found", param="model")
    return loaded


async def _job(state: State, body: ChatRequest, loaded: Loaded) -> Job:
    """The request tokenised (off the event loop) into a job; a 400 past the model's context or the batch's budget."""
    loop = asyncio.get_running_loop()
    messages = [m.model_dump() for m in body.messages]
    prepared, ids = await asyncio.to_thread(_encode, loaded.tokenizer, messages, body.wants_json)
    sampling = _sampling(body, prepared, state.options.max_tokens)
    if len(ids) + sampling.max_tokens > loaded.context:
        raise ApiError(400, f"the prompt is {len(ids)} tokens and {sampling.max_tokens} more were asked for, past the model's "
                            f"context of {loaded.context}: shorten the messages or lower max_tokens",
                       code="context_length_exceeded", param="messages")
    job = Job(loaded, prepared, ids, sampling, body.stops, loop.create_future(), started=loop.create_future())
    if not state.batcher.fits(job):
        raise _over_budget(job, state.batcher.max_tokens)
    return job


def _encode(tokenizer, messages: list[dict], wants_json: bool) -> tuple[Prepared, list[int]]:
    prepared = prepare(tokenizer, messages, wants_json)
    return prepared, list(tokenizer(prepared.text, add_special_tokens=False)["input_ids"])


async def _wait(state: State, job: Job, waited: set, http: Request, deadline: float | None) -> None:
    """Until one of `waited` is done; a client that hangs up first, or a deadline that passes, cancels the job's work."""
    try:
        await bounds.settled(waited, http.receive, deadline)
    except bounds.Gone:
        job.cancel()
        raise ApiError(499, "the client closed the request before its answer", code="client_closed") from None
    except bounds.TimedOut:
        job.cancel()
        raise timed_out(state.options.request_timeout) from None


def timed_out(seconds: float | None) -> ApiError:
    return ApiError(504, f"no answer within {seconds:g} s (serve --request-timeout): retry later, or ask for fewer tokens",
                    "server_error", "request_timeout")


def _over_budget(job: Job, budget: int) -> ApiError:
    """A 400 for a request that would not fit a batch even alone, naming what to lower."""
    n, prompt, asked = job.sampling.n, len(job.ids), job.sampling.max_tokens
    param = "messages" if prompt >= budget else "n" if n > 1 and prompt + asked <= budget else "max_tokens"
    advice = {"messages": "shorten the messages", "n": "lower n", "max_tokens": "lower max_tokens"}[param]
    return ApiError(400, f"this request takes n x (prompt + max_tokens) = {n} x ({prompt} + {asked}) = {job.tokens():,} "
                         f"tokens, more than a batch holds here ({budget:,}; serve --max-batch-tokens): {advice}",
                    code="batch_tokens_exceeded", param=param)


def _streamed(body: ChatRequest, job: Job, queue: asyncio.Queue, prompt_tokens: int, deadline: float | None,
              timeout: float | None) -> StreamingResponse:
    """The answer as server-sent events; past `deadline` an error event (`timed_out`'s) ends it, and its work."""
    chunks = streaming.Chunks(_completion_id(), job.loaded.served.id, body.include_usage)
    late = timed_out(timeout)
    ending = streaming.Ending(deadline, {"message": late.message, "type": late.type, "param": None, "code": late.code})
    return StreamingResponse(streaming.events(job, queue, chunks, prompt_tokens, ending), media_type="text/event-stream",
                             headers={"X-Babylon-Prompt": job.prepared.mode, "Cache-Control": "no-cache"})


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def _sampling(body: ChatRequest, prepared: Prepared, limit: int) -> Sampling:
    asked = body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS[prepared.mode]
    if asked > limit:
        raise ApiError(400, f"max_tokens {asked} is more than this server allows ({limit}; serve --max-tokens)",
                       code="invalid_value", param="max_tokens")
    temperature = 1.0 if body.temperature is None else body.temperature
    return Sampling(temperature, body.top_p or 1.0, body.n or 1, body.seed, asked)


def _response(body: ChatRequest, model_id: str, prepared: Prepared, prompt_tokens: int, choices) -> JSONResponse:
    completion = sum(c.tokens for c in choices)
    payload = {
        "id": _completion_id(), "object": "chat.completion", "created": int(time.time()), "model": model_id,
        "choices": [{"index": i, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason,
                     "logprobs": None} for i, c in enumerate(choices)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion},
        "babylon": {"prompt": prepared.mode, "reason": prepared.reason},
    }
    return JSONResponse(payload, headers={"X-Babylon-Prompt": prepared.mode})


# -- running it ------------------------------------------------------------------------------
# oneDNN (torch's CPU matmuls) keeps a compiled primitive for every shape it meets, up to 1,024 of them; every prompt
# length is a new shape, so a server that answers prompts one at a time (the prefix cache's way) grew without bound
# by hundreds of MB. 64 kept primitives cost no speed (docs/BENCHMARKS.md#serve); read at the first matmul, so set
# here, and an environment that names them wins.
ONEDNN_CACHES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "LRU_CACHE_CAPACITY": "64"}


def serve(plan: list[Served], options: ServeOptions, on_listening=lambda url: None) -> int:
    """Serve until SIGTERM or Ctrl-C (uvicorn finishes in-flight requests first); 2 if the weights could not load."""
    import uvicorn

    for name, value in ONEDNN_CACHES.items():
        os.environ.setdefault(name, value)
    state = State(plan, options)
    config = uvicorn.Config(create_app(state), host=options.host, port=options.port, log_level="info", access_log=True,
                            timeout_graceful_shutdown=options.graceful_seconds, lifespan="on")
    server = uvicorn.Server(config)
    state.on_failure = lambda: setattr(server, "should_exit", True)
    on_listening(f"http://{options.host}:{options.port}/v1")
    server.run()
    return 2 if state.failure else 0
