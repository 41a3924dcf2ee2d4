"""Dynamic batching: requests that arrive together are answered in one pass of the model.

Requests wait in a bounded queue (`max_queue`; a full queue is refused, never grown). The batcher
takes the first waiting request, waits up to `batch_wait` for more (at most `max_batch`), splits
them into groups that can share a pass (same model, same kind of prompt, same sampling), and runs
each group on one worker thread: a chat through `babylon_rl.policy.sample_answers`, a game decision
through the one decision path (`babylon_rl.evaluate.decide`: an entry of its valid menu). While the model
runs, new requests queue up, and form the next batch.

A request's seed seeds a generator of its own (`torch.Generator`), and every token of its answers is
drawn from it alone (sampling row by row), so the same request with the same seed gets the same
answers alone or batched with any others; seeds do not split a batch.

A game decision's prompt that opens as an earlier one did (the system turn; a tick's prices and news) runs the frozen
blocks over the rest of it only (`evaluate/prefix_cache.py`: `prefix_cache_bytes` of them kept, one cache for the
adapters of one base that train the same blocks).

A streaming request (`Job.on_text`) gets a chat answer's text as its tokens come, step by step
(`prompting.streamable`: the part no later token can change); a game decision is chosen from its
menu in one pass, so it comes whole when chosen.

Work is bounded. A request nobody waits for any more (its client went away, or its time ran out:
`Job.cancel`) is never run if it still waits, and its rows end at the next token if it runs; it
frees its place in the queue at once. A batch holds at most `max_tokens` tokens, counted as the
padded batch takes them: its rows (each request's `n`) x (the longest prompt + the largest
`max_tokens`); a request that would not fit even alone is refused before it queues (`fits`).
`Work` counts what the model did (`/health` shows it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from babylon_rl.evaluate.prefix_cache import DEFAULT_PREFIX_CACHE_MB, PrefixCache
from babylon_rl.serve.prompting import CHAT, DECISION, Prepared, finish, streamable
from babylon_rl.serve.registry import Loaded

log = logging.getLogger("uvicorn.error")
DEFAULT_MAX_BATCH_TOKENS = 32_768  # KV cache of SmolLM2-135M in float32: 46 KB a token, so ~1.5 GB at most


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float
    n: int
    seed: int | None
    max_tokens: int

    def key(self) -> tuple:
        """What requests must share to share a pass (not the seed: each request draws from its own generator)."""
        if self.temperature == 0:
            return (0.0, 1.0, self.n)
        return (self.temperature, self.top_p, self.n)


@dataclass
class Choice:
    text: str
    finish_reason: str
    tokens: int


@dataclass
class Job:
    loaded: Loaded
    prepared: Prepared
    ids: list[int]
    sampling: Sampling
    stops: list[str]
    future: asyncio.Future
    queued_at: float = field(default_factory=time.perf_counter)
    on_text: Callable[[int, str], None] | None = None  # streaming: (choice index, new text), called from the model's thread
    started: asyncio.Future | None = None  # set once its group goes to the model
    gone: threading.Event = field(default_factory=threading.Event)  # nobody waits for it: read by the model's thread

    def key(self) -> tuple:
        return (self.loaded.served.id, self.prepared.mode, self.sampling.key())

    def tokens(self) -> int:
        """What it takes of a batch's budget alone: n rows x (its prompt + max_tokens)."""
        return self.sampling.n * (len(self.ids) + self.sampling.max_tokens)

    def cancel(self) -> None:
        """Nobody waits for its answer any more: never run if it still waits, its rows ended at the next token if it runs.
        Call it on the event loop."""
        self.gone.set()
        if not self.future.done():
            self.future.cancel()


def batch_tokens(jobs: list[Job]) -> int:
    """The tokens a batch of `jobs` takes, padded as it runs: its rows x (the longest prompt + the largest max_tokens)."""
    rows = sum(job.sampling.n for job in jobs)
    return rows * (max(len(job.ids) for job in jobs) + max(job.sampling.max_tokens for job in jobs))


@dataclass
class Work:
    """What the model did: requests run, requests dropped before their turn, requests stopped while running, tokens
    generated, game decisions' prompt tokens and those of them whose frozen-block work an earlier prompt's gave
    (`evaluate/prefix_cache.py`); counted from the model's thread, read as they are."""

    batches: int = 0
    requests: int = 0
    dropped: int = 0
    stopped: int = 0
    tokens: int = 0
    decision_prompt_tokens: int = 0
    reused_prompt_tokens: int = 0


class QueueFull(Exception):
    """More requests wait than the server holds: the client should retry later (429)."""


class Batcher:
    def __init__(self, max_batch: int, batch_wait: float, max_queue: int,
                 max_tokens: int = DEFAULT_MAX_BATCH_TOKENS, prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_MB << 20) -> None:
        self.max_batch, self.batch_wait, self.max_queue, self.max_tokens = max_batch, batch_wait, max_queue, max_tokens
        self.prefix_cache_bytes = prefix_cache_bytes
        self.waiting: deque[Job] = deque()
        self.arrived = asyncio.Event()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="babylon-model")
        self.work = Work()

    def fits(self, job: Job) -> bool:
        return job.tokens() <= self.max_tokens

    def submit(self, job: Job) -> None:
        self._drop_gone()
        if len(self.waiting) >= self.max_queue:
            raise QueueFull
        self.waiting.append(job)
        self.arrived.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for group in _groups(await self._collect()):
                await self._run(loop, group)
            self.work.batches += 1

    async def _run(self, loop, group: list[Job]) -> None:
        group = [job for job in group if not job.future.done()]  # gone while the groups before it ran
        if not group:
            return
        for job in group:
            if job.started is not None and not job.started.done():
                job.started.set_result(None)
        self.work.requests += len(group)
        try:
            results = await loop.run_in_executor(self.executor, run_group, group, self.work, self.prefix_cache_bytes)
        except Exception as exc:  # noqa: BLE001 (the requests get a 500 in OpenAI's shape; the server goes on)
            for job in group:
                if not job.future.done():
                    job.future.set_exception(exc)
            return
        for job, choices in zip(group, results):
            if not job.future.done():
                job.future.set_result(choices)

    async def _collect(self) -> list[Job]:
        """The next batch: the first waiting request, and those that come within `batch_wait`, up to `max_batch` requests
        and `max_tokens` tokens (a request that would pass the budget waits, first in line, for the next batch)."""
        loop = asyncio.get_running_loop()
        await self._live(None)
        jobs = [self.waiting.popleft()]
        deadline = loop.time() + self.batch_wait
        while len(jobs) < self.max_batch and await self._live(deadline):
            if batch_tokens([*jobs, self.waiting[0]]) > self.max_tokens:
                break
            jobs.append(self.waiting.popleft())
        return jobs

    async def _live(self, deadline: float | None) -> bool:
        """True once a request nobody gave up on waits; False if `deadline` (loop time) passes first."""
        loop = asyncio.get_running_loop()
        while True:
            self._drop_gone()
            if self.waiting:
                return True
            self.arrived.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return False

    def _drop_gone(self) -> None:
        """Requests nobody waits for any more leave the queue unrun, freeing their places."""
        if any(job.future.done() for job in self.waiting):
            kept = deque(job for job in self.waiting if not job.future.done())
            self.work.dropped += len(self.waiting) - len(kept)
            log.info("dropped %d queued request(s) before their turn: their clients went away or their time ran out",
                     len(self.waiting) - len(kept))
            self.waiting = kept

    def close(self) -> None:
        self.executor.shutdown(wait=True)


def _groups(jobs: list[Job]) -> list[list[Job]]:
    groups: dict[tuple, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[job.key()].append(job)
    return list(groups.values())


def run_group(jobs: list[Job], work: Work | None = None, prefix_cache_bytes: int = 0) -> list[list[Choice]]:
    """One pass of the model over jobs of one key: their prompts padded into one batch, n answers each; game decisions
    chosen from their valid menus (`run_decisions`, reusing up to `prefix_cache_bytes` of earlier prompts' work). A job
    given up on ends at the next token; `work` counts tokens."""
    import torch

    from babylon_rl.policy import pad_prompts, sample_answers

    first = jobs[0]
    if first.prepared.mode == DECISION:
        return run_decisions(jobs, prefix_cache_bytes, work)
    loaded, sampling = first.loaded, first.sampling
    tokenizer = loaded.tokenizer
    device = str(next(loaded.model.parameters()).device)
    batch = pad_prompts(tokenizer, [job.ids for job in jobs], device)
    generators = [g for job in jobs for g in [_generator(job, device)] * sampling.n]  # a request's n rows share its own
    per_row = generators if any(g is not None for g in generators) else None
    stops = torch.tensor([tokenizer.eos_token_id]) if first.prepared.mode == CHAT else None
    longest = max(job.sampling.max_tokens for job in jobs)
    with torch.no_grad(), _active(loaded) as model:
        tokens, mask = sample_answers(model, tokenizer, batch, sampling.n, longest, sampling.temperature, per_row,
                                      sampling.top_p, stops, _on_step(jobs, tokenizer, work or Work()))
    stop_ids = set((stops if stops is not None else _stop_ids(tokenizer)).tolist())
    results = []
    for index, job in enumerate(jobs):
        rows = range(index * sampling.n, (index + 1) * sampling.n)
        results.append([_choice(tokenizer, job, tokens[r], mask[r], stop_ids) for r in rows])
    return results


def run_decisions(jobs: list[Job], prefix_cache_bytes: int = 0, work: Work | None = None) -> list[list[Choice]]:
    """Game decisions of one key, through the one decision path (`babylon_rl/evaluate/decide.py`): each answer is an entry of its
    prompt's valid menu, the first-ranked at temperature 0, else drawn from the menu's softmax. With `prefix_cache_bytes`,
    the frozen blocks' work on earlier prompts is kept and reused (`evaluate/prefix_cache.py`)."""
    import torch

    first = jobs[0]
    sampling = first.sampling
    if all(job.gone.is_set() for job in jobs):
        return [[] for _ in jobs]
    with torch.no_grad(), _active(first.loaded) as model:
        decider = _decider(first.loaded, model, prefix_cache_bytes)
        reused_before = decider.prefix_cache.stats.reused_tokens if decider.prefix_cache else 0
        decided = decider.decide([job.prepared.decision for job in jobs], sampling.temperature, sampling.n,
                                 [_generator(job, "cpu") for job in jobs])
    if work is not None:
        work.decision_prompt_tokens += sum(choices[0].prompt_tokens for choices in decided if choices)
        if decider.prefix_cache is not None:
            work.reused_prompt_tokens += decider.prefix_cache.stats.reused_tokens - reused_before
    return [[_menu_choice(job, d.answer) for d in choices] for job, choices in zip(jobs, decided)]


def _generator(job: Job, device: str):
    """The request's own generator, seeded with its seed; None when unseeded or greedy (torch's own then)."""
    import torch

    if job.sampling.seed is None or not job.sampling.temperature:
        return None
    return torch.Generator(device).manual_seed(job.sampling.seed)


def _on_step(jobs: list[Job], tokenizer, work: Work) -> Callable:
    """`sample_answers`' step hook: counts the tokens, sends each streaming job's new text on, and ends the rows of the
    jobs nobody waits for any more (None while every job is waited for)."""
    import torch

    streams = [_Stream(job, tokenizer, index * job.sampling.n) for index, job in enumerate(jobs) if job.on_text]
    rows = [job for job in jobs for _ in range(job.sampling.n)]
    stopped: set[int] = set()

    def step(token, live):
        work.tokens += int(live.sum())
        if streams:
            token_list, live_list = token.tolist(), live.tolist()
            for stream in streams:
                stream.step(token_list, live_list)
        gone = [job.gone.is_set() for job in rows]
        if not any(gone):
            return None
        _count_stopped(jobs, stopped, work)
        return torch.tensor(gone, device=live.device)

    return step


def _count_stopped(jobs: list[Job], stopped: set[int], work: Work) -> None:
    """Counts each job given up on while it runs once (`Work.stopped`)."""
    for index, job in enumerate(jobs):
        if job.gone.is_set() and index not in stopped:
            stopped.add(index)
            work.stopped += 1
            log.info("stopped a running request: its client went away or its time ran out")


class _Stream:
    """A streaming job's answers as they grow: the tokens of its rows kept, and the text no later token can change
    sent on as it grows (`prompting.streamable`); what is held back comes with the finished answer."""

    def __init__(self, job: Job, tokenizer, first_row: int) -> None:
        self.job, self.tokenizer, self.first_row = job, tokenizer, first_row
        self.ids: list[list[int]] = [[] for _ in range(job.sampling.n)]
        self.sent = [0] * job.sampling.n

    def step(self, token: list[int], live: list[bool]) -> None:
        for index, ids in enumerate(self.ids):
            row = self.first_row + index
            if not live[row] or len(ids) >= self.job.sampling.max_tokens:
                continue
            ids.append(token[row])
            text = streamable(self.job.prepared, self.tokenizer.decode(ids, skip_special_tokens=True), self.job.stops)
            if len(text) > self.sent[index]:
                self.job.on_text(index, text[self.sent[index]:])
                self.sent[index] = len(text)


_DECIDERS: dict[tuple, object] = {}  # (model object, top blocks, menu size) -> Decider: one frozen-block copy per base


def _decider(loaded: Loaded, model, prefix_cache_bytes: int):
    from babylon_rl.evaluate.decide import Decider, run_shares, top_layers

    adapter = loaded.served.ref.path if loaded.adapter else None
    key = (id(loaded.model), top_layers(model, adapter), run_shares(loaded.served.ref.run_dir), prefix_cache_bytes)
    if key not in _DECIDERS:
        device = str(next(loaded.model.parameters()).device)
        cache = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes else None
        _DECIDERS[key] = Decider(model, loaded.tokenizer, key[1], device, key[2], prefix_cache=cache)
    return _DECIDERS[key]


def _menu_choice(job: Job, answer: str) -> Choice:
    """A chosen menu entry as the client gets it: cut to the job's max_tokens ("length"), else whole ("stop")."""
    tokenizer, prefix = job.loaded.tokenizer, job.prepared.prefix
    ids = tokenizer(answer[len(prefix):], add_special_tokens=False)["input_ids"]
    kept = ids[: job.sampling.max_tokens]
    whole = len(kept) == len(ids)
    content, reason = finish(job.prepared, answer[len(prefix):] if whole else tokenizer.decode(kept), job.stops, hit_stop=whole)
    return Choice(content, reason, len(kept))


def _stop_ids(tokenizer):
    from babylon_rl.policy import stop_tokens

    return stop_tokens(tokenizer)


def _choice(tokenizer, job: Job, tokens, mask, stop_ids: set[int]) -> Choice:
    """One answer cut to this job's own max_tokens; it stopped if a stop token came within them."""
    ids = tokens[mask.bool()].tolist()[: job.sampling.max_tokens]
    hit_stop = bool(ids) and ids[-1] in stop_ids
    text = tokenizer.decode(ids, skip_special_tokens=True)
    content, reason = finish(job.prepared, text, job.stops, hit_stop)
    return Choice(content, reason, len(ids))


class _active:
    """The loaded model with its adapter switched on, or with every adapter off for the base itself."""

    def __init__(self, loaded: Loaded) -> None:
        self.loaded = loaded
        self._off = None

    def __enter__(self):
        model = self.loaded.model
        if self.loaded.adapter:
            model.set_adapter(self.loaded.adapter)
        elif hasattr(model, "disable_adapter"):
            self._off = model.disable_adapter()
            self._off.__enter__()
        return model

    def __exit__(self, *exc) -> None:
        if self._off is not None:
            self._off.__exit__(*exc)
