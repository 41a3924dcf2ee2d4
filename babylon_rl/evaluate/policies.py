"""Who answers the decision points: the logged agents, a local model or an OpenAI-compatible endpoint.

A policy maps decision prompts (`prompts.DecisionPrompt`: the compact observation of one step)
to answer texts, in order. Local models decide through the one decision path (`babylon_rl/evaluate/decide.py`:
each answer chosen from the decision's menu of valid actions, as the game gets them from `serve`).
Endpoints get the prompt's messages, temperature 0, and a failed request counts as an invalid
answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

from babylon_rl.errors import ConfigError
from babylon_rl.evaluate.menu import on_menu
from babylon_rl.evaluate.prompts import DecisionPrompt
from babylon_rl.model_names import ModelRef

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Reply:
    """One answer with what the game logs about its call (the simulator's policy agents)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int


class Policy(Protocol):
    name: str

    def answer(self, prompts: Sequence[DecisionPrompt], on_done: Progress) -> list[str]: ...


@dataclass
class ConstantPolicy:
    """The same answer at every decision point (the best constant action, constant.py)."""

    text: str
    name: str
    menu_shares: int | None = None  # answer from each decision's valid menu (hold where the game would refuse it)

    def answer(self, prompts: Sequence[DecisionPrompt], on_done: Progress) -> list[str]:
        on_done(len(prompts))
        return [_on_menu(self.text, p, self.menu_shares) for p in prompts]


@dataclass
class ReaderPolicy:
    """The rule that reads the simulator's headlines (rules.py), the best constant where no fresh headline tells:
    a reference beside the model, never trained, that says whether the evaluation could recognise reading."""

    fallback: str
    name: str = "news rule (reference)"
    shares: int = 10
    menu_shares: int | None = None  # answer from each decision's valid menu (hold where the game would refuse it)

    def answer(self, prompts: Sequence[DecisionPrompt], on_done: Progress) -> list[str]:
        from babylon_rl.evaluate.rules import news_rule

        on_done(len(prompts))
        return [_on_menu(news_rule(prompt, self.fallback, self.shares), prompt, self.menu_shares) for prompt in prompts]


def _on_menu(answer: str, prompt: DecisionPrompt, menu_shares: int | None) -> str:
    return on_menu(answer, prompt, menu_shares) if menu_shares else answer


@dataclass
class MenuPolicy:
    """A local model answering each decision from its valid menu, as `LocalPolicy` does, its frozen blocks computed once
    and shared with the other local models of the evaluation on the same base (train/menu_ranker.py's MenuRanker)."""

    ranker: object
    adapter: Path | None  # None: the base model itself
    name: str

    def answer(self, prompts: Sequence[DecisionPrompt], on_done: Progress) -> list[str]:
        answers = self.ranker.answers(self.adapter)
        on_done(len(prompts))
        return answers


@dataclass
class LocalPolicy:
    """A local model deciding through the one decision path (`babylon_rl/evaluate/decide.py`: each answer chosen from the
    decision's valid menu of `shares`-share trades; default: its run's menu size)."""

    ref: ModelRef
    name: str
    max_new_tokens: int = 32  # `generate` only: free-form writing is not how it decides
    batch_size: int = 16
    device: str = "cpu"
    shares: int | None = None
    _model: object = field(default=None, repr=False)
    _tokenizer: object = field(default=None, repr=False)
    _decider: object = field(default=None, repr=False)

    def load(self) -> "LocalPolicy":
        import babylon_rl.train  # noqa: F401  (offline defaults before transformers loads)
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from babylon_rl.evaluate.decide import Decider, run_shares, top_layers
        from babylon_rl.train.models import set_threads

        hf_logging.disable_progress_bar()
        tokenizer = AutoTokenizer.from_pretrained(str(self.ref.path))
        if self.ref.adapter:
            import warnings

            from peft import PeftModel

            base = AutoModelForCausalLM.from_pretrained(self.ref.base_model)
            with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias
                warnings.simplefilter("ignore", FutureWarning)
                model = PeftModel.from_pretrained(base, str(self.ref.path))
        else:
            model = AutoModelForCausalLM.from_pretrained(str(self.ref.path))
        model.to(self.device).eval()
        set_threads(model)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._model, self._tokenizer = model, tokenizer
        layers = top_layers(model, self.ref.path if self.ref.adapter else None)
        self._decider = Decider(model, tokenizer, layers, self.device, self.shares or run_shares(self.ref.run_dir), self.batch_size)
        return self

    def replies(self, prompts: Sequence[DecisionPrompt]) -> list[Reply]:
        """One decision for each prompt, the model kept loaded (the simulator asks at every step); the batch's time is
        every answer's latency, as each agent waited for all of them."""
        import time

        if self._model is None:
            self.load()
        began = time.perf_counter()
        decided = [d[0] for d in self._decider.decide(list(prompts))]
        latency_ms = round((time.perf_counter() - began) * 1000)
        return [Reply(d.answer, d.prompt_tokens, d.answer_tokens, latency_ms) for d in decided]

    def answer(self, prompts: Sequence[DecisionPrompt], on_done: Progress) -> list[str]:
        """Load, decide, let go: an evaluation holds one model in memory at a time."""
        try:
            answers = [reply.text for reply in self.replies(prompts)]
            on_done(len(prompts))
            return answers
        finally:
            self._model = self._tokenizer = self._decider = None

    def generate(self, prompts: Sequence[DecisionPrompt]) -> list[str]:
        """The model's free-form greedy writing (what an export served without the menu answers); not a decision path."""
        from babylon_rl.policy import greedy_answers

        if self._model is None:
            self.load()
        return greedy_answers(self._model, self._tokenizer, list(prompts), self.device, self.max_new_tokens, self.batch_size)


@dataclass
class EndpointPolicy:
    """An OpenAI-compatible chat-completions endpoint (key from OPENAI_API_KEY, else a placeholder)."""

    base_url: str
    model: str
    name: str
    max_new_tokens: int = 48
    concurrency: int = 8
    timeout: float = 60.0
    max_retries: int = 2
    failures: int = 0
    last_error: str = ""

    def answer(self, prompts: Sequence[DecisionPrompt], on_done: Progress) -> list[str]:
        return [reply.text for reply in self.replies(prompts, on_done)]

    def replies(self, prompts: Sequence[DecisionPrompt], on_done: Progress = lambda n: None) -> list[Reply]:
        return asyncio.run(self._answer_all(prompts, on_done))

    async def _answer_all(self, prompts: Sequence[DecisionPrompt], on_done: Progress) -> list[Reply]:
        import os

        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=self.base_url, api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                             timeout=self.timeout, max_retries=self.max_retries)
        gate = asyncio.Semaphore(self.concurrency)
        failures_before = self.failures

        async def one(prompt: DecisionPrompt) -> Reply:
            async with gate:
                reply = await self._complete(client, prompt.messages)
            on_done(1)
            return reply

        try:
            answers = await asyncio.gather(*(one(p) for p in prompts))
        finally:
            await client.close()
        if prompts and self.failures - failures_before == len(prompts):
            raise ConfigError(f"every request to {self.base_url} (model {self.model!r}) failed: {self.last_error}")
        return list(answers)

    async def _complete(self, client, prompt: Sequence[dict]) -> Reply:
        """The reply's text and token counts (0 where the server reports none); a failed request is an empty answer."""
        import time

        import openai

        began = time.perf_counter()
        try:
            reply = await client.chat.completions.create(
                model=self.model, messages=list(prompt), temperature=0, max_tokens=self.max_new_tokens)
            content = reply.choices[0].message.content if reply.choices else None
            text = content if isinstance(content, str) else ""
            usage = reply.usage
        except (openai.APIError, ValueError, TypeError, AttributeError, IndexError) as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            text, usage = "", None
        latency_ms = round((time.perf_counter() - began) * 1000)
        return Reply(text, getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0, latency_ms)
