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

A streaming request (`Job.on_text`) gets a chat answer's text as its tokens come, step by step
(`prompting.streamable`: the part no later token can change); a game decision is chosen from its
menu in one pass, so it comes whole when chosen.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from babylon_rl.serve.prompting import CHAT, DECISION, Prepared, finish, streamable
from babylon_rl.serve.registry import Loaded


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

    def key(self) -> tuple:
        return (self.loaded.served.id, self.prepared.mode, self.sampling.key())


class QueueFull(Exception):
    """More requests wait than the server holds: the client should retry later (429)."""


class Batcher:
    def __init__(self, max_batch: int, batch_wait: float, max_queue: int) -> None:
        self.max_batch, self.batch_wait = max_batch, batch_wait
        self.queue: asyncio.Queue[Job] = asyncio.Queue(max_queue)
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="babylon-model")
        self.batches = 0

    def submit(self, job: Job) -> None:
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull from None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect(loop)
            for group in _groups(jobs):
                try:
                    results = await loop.run_in_executor(self.executor, run_group, group)
                except Exception as exc:  # noqa: BLE001 (the requests get a 500 in OpenAI's shape; the server goes on)
                    for job in group:
                        if not job.future.done():
                            job.future.set_exception(exc)
                    continue
                for job, choices in zip(group, results):
                    if not job.future.done():
                        job.future.set_result(choices)
            self.batches += 1

    async def _collect(self, loop) -> list[Job]:
        jobs = [await self.queue.get()]
        deadline = loop.time() + self.batch_wait
        while len(jobs) < self.max_batch:
            remaining = deadline - loop.time()
            try:
                jobs.append(self.queue.get_nowait() if remaining <= 0 else await asyncio.wait_for(self.queue.get(), remaining))
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
        return [job for job in jobs if not job.future.done()]  # a client that went away is not answered

    def close(self) -> None:
        self.executor.shutdown(wait=True)


def _groups(jobs: list[Job]) -> list[list[Job]]:
    groups: dict[tuple, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[job.key()].append(job)
    return list(groups.values())


def run_group(jobs: list[Job]) -> list[list[Choice]]:
    """One pass of the model over jobs of one key: their prompts padded into one batch, n answers each; game decisions
    chosen from their valid menus (`run_decisions`)."""
    import torch

    from babylon_rl.policy import pad_prompts, sample_answers

    first = jobs[0]
    if first.prepared.mode == DECISION:
        return run_decisions(jobs)
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
                                      sampling.top_p, stops, _on_step(jobs, tokenizer))
    stop_ids = set((stops if stops is not None else _stop_ids(tokenizer)).tolist())
    results = []
    for index, job in enumerate(jobs):
        rows = range(index * sampling.n, (index + 1) * sampling.n)
        results.append([_choice(tokenizer, job, tokens[r], mask[r], stop_ids) for r in rows])
    return results


def run_decisions(jobs: list[Job]) -> list[list[Choice]]:
    """Game decisions of one key, through the one decision path (`babylon_rl/evaluate/decide.py`): each answer is an entry of its
    prompt's valid menu, the first-ranked at temperature 0, else drawn from the menu's softmax."""
    import torch

    first = jobs[0]
    sampling = first.sampling
    with torch.no_grad(), _active(first.loaded) as model:
        decided = _decider(first.loaded, model).decide([job.prepared.decision for job in jobs], sampling.temperature,
                                                       sampling.n, [_generator(job, "cpu") for job in jobs])
    return [[_menu_choice(job, d.answer) for d in choices] for job, choices in zip(jobs, decided)]


def _generator(job: Job, device: str):
    """The request's own generator, seeded with its seed; None when unseeded or greedy (torch's own then)."""
    import torch

    if job.sampling.seed is None or not job.sampling.temperature:
        return None
    return torch.Generator(device).manual_seed(job.sampling.seed)


def _on_step(jobs: list[Job], tokenizer) -> Callable | None:
    """`sample_answers`' step hook sending each streaming job's new text on; None when no job streams."""
    streams = [_Stream(job, tokenizer, index * job.sampling.n) for index, job in enumerate(jobs) if job.on_text]
    if not streams:
        return None

    def step(token, live) -> None:
        token, live = token.tolist(), live.tolist()
        for stream in streams:
            stream.step(token, live)

    return step


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


def _decider(loaded: Loaded, model):
    from babylon_rl.evaluate.decide import Decider, run_shares, top_layers

    adapter = loaded.served.ref.path if loaded.adapter else None
    key = (id(loaded.model), top_layers(model, adapter), run_shares(loaded.served.ref.run_dir))
    if key not in _DECIDERS:
        device = str(next(loaded.model.parameters()).device)
        _DECIDERS[key] = Decider(model, loaded.tokenizer, key[1], device, key[2])
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
