"""The menu objective trained from frozen states: every answer priced, tickers renamed, the frozen blocks run once.

Each decision's valid menu (hold; the buys its cash covers and the sells of what it holds, up to
`shares` each: `evaluate/menu.py`, what every decision path chooses from) is priced
against the window's ground truth with the evaluation's rules (`decisions.Task.price`). The policy,
restricted to the menu, is fitted to softmax(reward / `reward_temperature`) (`objective=
"counterfactual"`), or to the logged answer's menu entry (`objective="imitate"`, the baseline), or to
the trade of the stock the latest fresh headline names that paid, weighed by what it paid, hold elsewhere
(`objective="hindsight"`), or
moved up its own expected reward over the menu (`objective="expected"`: the exact policy gradient,
GRPO with every answer sampled), or each answer's log-probability margin over hold fitted to its
reward / `reward_temperature` by least squares (`objective="value"`: the margins become the menu's
expected rewards, as a Q-function's would, and the first-ranked answer the one that pays most on
average). The softmax target puts its mass on the answer that paid most in hindsight, and some trade
nearly always did, so it learns to trade everywhere; the other two trade only where a trade pays on
average, which is what P&L and trade precision reward. The expected reward's gradient on an answer
scales with the answer's probability, so it refines what the policy already does and cannot find a
paying answer the policy never gives; least squares moves every answer by its error and stops where
the fit is right. Each objective's target and loss are in its module (`objectives/`, the batch they read in `menu_losses.py`); this module makes the items, computes
their frozen states and steps the adapter.

Why renamed tickers: the stocks are exchangeable, but a window's moves are shared by all of its
decisions, so a batch rewards whichever stock happened to win its windows (`sell ACME`), and a
policy fitted to it swings between constants (docs/history/BENCHMARKS-learning.md). Each training
decision is seen under `variants` random permutations of its tickers (and company names), the
same permutation across prompt, headlines, markets and menu, the reward of each answer that of
the stock it really names. No per-ticker constant pays across permutations; the headline does.
Validation and evaluation use the game's real names.

What is frozen is computed once (`frozen.py`): the hidden state entering the top
`train_layers` blocks, for each packed prompt + menu, in bf16. A step runs the top blocks only.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import OrderedDict
from contextlib import contextmanager
from itertools import groupby
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.evaluate.menu import valid_menu
from babylon_rl.evaluate.prompts import ANSWER_PREFIX, TICKER, DecisionPrompt
from babylon_rl.train import memory
from babylon_rl.train.credit import company_names
from babylon_rl.train.frozen import Packed, SplitModel, answer_logprobs, bottom_dtype, layout, pack, shared_prefix
from babylon_rl.train.decisions import PNL_CLIP, PNL_SCALE, Task, longest_prompts
from babylon_rl.train.menu_losses import HOLD_INDEX, MenuBatch, margins
from babylon_rl.train.objectives import LOSSES
from babylon_rl.train.objectives.imitation import imitate
from babylon_rl.train.objectives.priced import counterfactual
from babylon_rl.train.step import optimizer_step, slices
from babylon_rl.train.checkpoints import Checkpoints, load_adapter


LENGTH_SAMPLE = 64  # tasks packed to estimate the frozen states' size before training
# Frozen states are computed in batches of prompts that open alike: this many first tokens hold the system prompt with its
# example ticker (evaluate/prompts.py: 32 tokens in), one of as many variants as the game has stocks
OPENING = 64
SHARED_STATES_BYTES = 512 << 20  # the most frozen states `SharedStates` keeps for the next trainer of a process (~1,300 decisions)
STATES_ON_DISK_BYTES = 8 << 30  # the most `StatesOnDisk` keeps (~20,000 decisions of SmolLM2's ~340 packed tokens)


@dataclass(frozen=True)
class MenuOptions:
    objective: str = "counterfactual"  # counterfactual | imitate | expected | value | hindsight
    # a mix of both: imitation_weight x imitate + (1 - imitation_weight) x counterfactual (a population's distill knob)
    imitation_weight: float | None = None
    # the weight of a logged hold in the imitation loss against a logged trade's 1: the teachers hold on most of their
    # decisions, one menu entry against ten trades, and a student fitted to all of them learns to hold
    # (docs/TRAINING.md#distilling-the-best-agents---objective-distill-teacherspy-standingpy)
    hold_weight: float = 1.0
    # taken off every trade's reward in the priced objectives' targets (never in validation or evaluation): a least-squares
    # fit of a trade nobody can predict lands near 0, and its noise, across ten trades, ranks one above hold
    trade_cost: float = 0.0
    # menu-value: the starting policy's margins as a prior of this weight against the rewards' 1 (ridge): each margin is
    # fitted to (reward / T + anchor x its starting margin) / (1 + anchor), so a student's confident holds where nothing
    # pays stay below hold instead of fitting to ~0, while an answer the rewards disagree with still moves
    anchor: float = 0.0
    learning_rate: float = 2e-4
    reward_temperature: float = 0.3
    shares: int = 50
    variants: int = 1  # renamed copies of each training decision; 0 = the real names only
    answer_order: str = "action-first"  # action-first: the game's `{"action": "buy", "ticker": ...}`; ticker-first (below)
    ema: float = 0.98  # decay of the averaged adapter weights that answer in validation and eval; 0 = the raw weights
    lora_r: int = 16
    train_layers: int = 4
    max_grad_norm: float = 1.0
    cache_batch: int = 8
    micro_batch: int = 8  # items per forward and backward pass: a whole step's activations at once would not fit (train/memory.py)
    seed: int = 0
    device: str = "cpu"


RANKED_CHUNK = 256  # decisions whose frozen states an evaluation holds at once (MenuRanker)


def menu(task: Task, shares: int) -> list[str]:
    """The decision's valid menu (hold, then the buys and sells of up to `shares` the game would accept at it:
    `evaluate/menu.py`): what is priced and trained on, and what every decision path chooses from."""
    return valid_menu(task.request, shares)


def next_look(tasks: list[Task]) -> list[Task]:
    """The tasks priced at the agent's next look instead of the window's end: each stock's "end" is its price in the
    same trajectory's next decision (the window's end after its last). Headlines move prices for 10-30 minutes and
    decisions are ~20 minutes apart, so this horizon keeps the news's move and drops most of the later noise. A training
    target only: evaluation always prices to the window's end. `tasks` in the order `read_decisions` gives (a
    trajectory's decisions consecutive, in turn order)."""
    out = []
    for task, following in zip(tasks, tasks[1:] + [None]):
        if following is None or following.trajectory_id != task.trajectory_id:
            out.append(task)
            continue
        later = following.observation.prices
        stocks = {t: replace(s, end=later.get(t, s.end)) for t, s in task.truth.stocks.items()}
        out.append(replace(task, truth=replace(task.truth, stocks=stocks)))
    return out


def renamed(request: DecisionPrompt, mapping: dict[str, str], names: dict[str, list[str]]) -> DecisionPrompt:
    """The prompt with every ticker and its company's name replaced by `mapping`'s, all at once, and the price lines
    sorted by their new names as the game sorts them: in the old order, the first line would still be ACME's. `names`:
    each ticker's names as its headlines spell them (`credit.company_names`, learned from the decisions, never the
    simulator's table); each spelling of a stock's name becomes its new stock's first."""
    words = dict(mapping) | {spelling: names[b][0] for a, b in mapping.items() for spelling in names.get(a, ()) if names.get(b)}
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b")
    messages = [m | {"content": _sorted_price_lines(pattern.sub(lambda match: words[match.group(1)], str(m["content"])))}
                for m in request.messages]
    return DecisionPrompt(messages, request.markets)


def _sorted_price_lines(text: str) -> str:
    """Each run of consecutive price lines (`ACME 223 +0.1%`) in ticker order."""
    lines, out = text.split("\n"), []
    for is_price, run in groupby(lines, key=lambda line: bool(TICKER.match(line))):
        out += sorted(run) if is_price else list(run)
    return "\n".join(out)


@dataclass
class MenuItem:
    """One decision under one naming: what the policy sees (packed), what each answer earns, and the frozen states."""

    task: Task
    answers: list[str]  # the menu in the game's names: what is priced and what the policy answers
    shown: list[str]  # the same answers as the policy sees them (renamed)
    packed: Packed
    rewards: np.ndarray  # [len(answers)]
    correct: np.ndarray  # 1.0 where the answer's direction was right
    target_index: int  # the menu entry imitation fits: the logged answer's, or hindsight's (below); -1 when off the menu
    paid: float = 1.0  # hindsight: what its trade target paid or cost here (|P&L| per PNL_SCALE, clipped), its weight in the loss
    states: object = None  # bf16 [len(packed), hidden], filled by `cache_states`


TICKER_FIRST_PREFIX = '{"'


def shown_answer(answer: str, mapping: dict[str, str], answer_order: str) -> str:
    """The answer as the policy sees it: its ticker renamed by `mapping`; with `answer_order="ticker-first"` a trade names
    its stock before its direction (`{"ticker": "ACME", "action": "buy", "shares": 50}`), so that the first choice after
    hold-or-trade is which stock (a copy from the headline) and the direction is read with it in view. The same JSON
    action either way: the game parses keys in any order."""
    action = json.loads(answer)
    if action.get("ticker") in mapping:
        action["ticker"] = mapping[action["ticker"]]
    if answer_order == "ticker-first" and "ticker" in action:
        action = {"ticker": action.pop("ticker")} | action
    return json.dumps(action)


def answer_prefix(answer_order: str) -> str:
    """What the prompt is opened with before the menu's answers part: the game's `{"action": "`, or `{"` for ticker first."""
    return TICKER_FIRST_PREFIX if answer_order == "ticker-first" else ANSWER_PREFIX


def make_items(tokenizer, tasks: list[Task], options: MenuOptions, variants: int, rng: np.random.Generator,
               names: dict[str, list[str]] | None = None) -> list[MenuItem]:
    """Each task priced on its menu; `variants` renamed copies each (0: the task under its real names, once). `names`:
    the company names a renaming swaps (default: learned from `tasks`' headlines)."""
    names = company_names(tasks) if names is None and variants else names
    items = []
    for task in tasks:
        answers = menu(task, options.shares)
        priced = [task.price(a) for a in answers]
        rewards = np.array([r for r, _ in priced], dtype=np.float32)
        correct = np.array([float(o.correct) for _, o in priced], dtype=np.float32)
        index = LOSSES[options.objective].target_index(task, answers, rewards)
        paid = min(abs(priced[index][1].pnl) / PNL_SCALE, PNL_CLIP) if index >= 0 else 0.0
        tickers = sorted(task.truth.stocks)
        for _ in range(max(variants, 1)):
            mapping = dict(zip(tickers, rng.permutation(tickers))) if variants else {}
            request = renamed(task.request, mapping, names) if mapping else task.request
            shown = [shown_answer(a, mapping, options.answer_order) for a in answers]
            packed = pack(tokenizer, request, shown, answer_prefix(options.answer_order))
            items.append(MenuItem(task, answers, shown, packed, rewards, correct, index, paid))
    return items


def cache_states(split: SplitModel, items: list[MenuItem], batch: int, device: str, on_done: Callable[[int], None] = lambda n: None) -> None:
    """Fill each item's `states`: the frozen blocks run once over its packed sequence. Items are batched by their opening
    (`OPENING` tokens: the system prompt up to its example ticker), then by length, and a batch's shared opening runs once
    (`SplitModel.bottom`)."""
    import torch

    todo = sorted((i for i, item in enumerate(items) if item.states is None),
                  key=lambda i: (items[i].packed.ids[:OPENING], len(items[i].packed)))
    for start in range(0, len(todo), batch):
        chunk = [items[i] for i in todo[start : start + batch]]
        packs = [c.packed for c in chunk]
        ids, positions, mask = layout(packs, device)
        states = split.bottom(ids, positions, mask, shared_prefix(packs) if len(packs) > 1 else 0)
        for row, item in zip(states, chunk):
            item.states = row[: len(item.packed)].to(torch.bfloat16).clone()  # where they were computed: a GPU keeps them
        on_done(len(chunk))


class SharedStates:
    """The frozen states the menu trainers of one process computed, by content, for the next trainer on the same base.

    Two trainers on one base, dataset and seed (the quickstart's imitation baseline, then its menu
    run) see the same decisions under the same renamings, so the same packed sequences: the second
    takes the first's states instead of running the frozen blocks again. The key is the base model
    (its directory and files' times), the number of trained blocks, the bottom's dtype and the
    packed sequence itself, so a state is reused only where it is exactly what would be computed.
    The oldest go first beyond `SHARED_STATES_BYTES`.
    """

    def __init__(self, budget: int = SHARED_STATES_BYTES) -> None:
        self.budget = budget
        self._states: OrderedDict[tuple, object] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def model_key(base_model: str, train_layers: int, dtype) -> tuple:
        path = Path(base_model)
        stamps = tuple(sorted((f.name, f.stat().st_mtime_ns) for f in path.iterdir() if f.is_file())) if path.is_dir() else ()
        return str(path.resolve()) if path.exists() else base_model, stamps, train_layers, str(dtype)

    def fill(self, model: tuple, items: list[MenuItem]) -> None:
        """Each item without states takes the ones kept for its packed sequence, if any."""
        for item in items:
            if item.states is None:
                item.states = self._states.get((model, item.packed))

    def clear(self) -> None:
        """Let go of every kept state (no trainer of this process will ask for them again)."""
        self._states.clear()
        self._bytes = 0

    def keep(self, model: tuple, items: list[MenuItem]) -> None:
        for item in items:
            key = (model, item.packed)
            if key not in self._states:
                self._states[key] = item.states
                self._bytes += item.states.numel() * item.states.element_size()
        while self._bytes > self.budget and self._states:
            _, dropped = self._states.popitem(last=False)
            self._bytes -= dropped.numel() * dropped.element_size()


SHARED_STATES = SharedStates()


class StatesOnDisk:
    """Frozen states kept across processes, one file per packed sequence, under `HOME/.cache/frozen-states`.

    The frozen blocks are most of what a run on a CPU costs the first time it sees a decision (docs/TRAINING.md, its
    opening), and a user reruns `train` on the same dataset with other settings, then `eval`s,
    again and again. Keyed as `SharedStates` is (the base model's files and times, the trained blocks, the bottom's
    dtype, the packed sequence) and by the device kind and torch version, so a state is read back only where it is
    exactly what would be computed. Written to a temporary name, then renamed: a kill leaves a whole file or none.
    The least recently used go first beyond `budget` bytes.
    """

    def __init__(self, directory: Path, device: str, budget: int = STATES_ON_DISK_BYTES) -> None:
        self.directory = directory
        self.device = device.split(":")[0]  # cpu or cuda: their kernels' results differ in the last bits
        self.budget = budget

    def _path(self, model: tuple, packed: Packed) -> Path:
        import hashlib

        import torch

        key = repr((model, self.device, torch.__version__, packed.ids, packed.positions, packed.parents))
        return self.directory / f"{hashlib.sha256(key.encode()).hexdigest()}.pt"

    def fill(self, model: tuple, items: list[MenuItem]) -> int:
        """Each item without states takes the ones on disk for its packed sequence, if any; how many did."""
        import torch

        found = 0
        for item in items:
            if item.states is not None:
                continue
            path = self._path(model, item.packed)
            try:
                states = torch.load(path, weights_only=True)
            except (OSError, RuntimeError, EOFError):  # not there, or not a whole file: computed again
                continue
            if states.shape[0] == len(item.packed):
                item.states, found = states, found + 1
                path.touch()  # recently used: evicted last
        return found

    def keep(self, model: tuple, items: list[MenuItem]) -> None:
        import torch

        self.directory.mkdir(parents=True, exist_ok=True)
        for item in items:
            path = self._path(model, item.packed)
            if item.states is None or path.exists():
                continue
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(item.states.cpu(), tmp)
            tmp.replace(path)
        self._evict()

    def _evict(self) -> None:
        files = sorted(self.directory.glob("*.pt"), key=lambda f: f.stat().st_mtime)
        total = sum(f.stat().st_size for f in files)
        for f in files:
            if total <= self.budget:
                break
            total -= f.stat().st_size
            f.unlink(missing_ok=True)


def fill_states(split: SplitModel, model: tuple, items: list[MenuItem], batch: int, device: str, disk: StatesOnDisk | None) -> None:
    """Each item's frozen states: from this process's earlier trainers, else from disk, else computed (and kept for both)."""
    SHARED_STATES.fill(model, items)
    if disk is not None:
        disk.fill(model, items)
    cache_states(split, items, batch, device)
    SHARED_STATES.keep(model, items)
    if disk is not None:
        disk.keep(model, items)


def save_states(items: list[MenuItem], path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save([item.states for item in items], tmp)
    tmp.replace(path)


def load_states(items: list[MenuItem], path: Path) -> bool:
    """Restore cached states saved for exactly these items; False (nothing restored) when there are none or they do not fit."""
    import torch

    if not path.exists():
        return False
    states = torch.load(path)
    if len(states) != len(items) or any(s is not None and s.shape[0] != len(i.packed) for s, i in zip(states, items)):
        return False
    for item, s in zip(items, states):
        item.states = s
    return True


def menu_logprobs(split: SplitModel, items: list[MenuItem], device: str):
    """Each item's menu log-probabilities under the menu-constrained policy ([B, width]; -inf on padding), and where they are real."""
    import torch

    packs = [item.packed for item in items]
    ids, positions, mask = layout(packs, device)
    states = torch.zeros(len(items), ids.shape[1], items[0].states.shape[-1], device=device)
    for b, item in enumerate(items):
        states[b, : len(item.packed)] = item.states.to(device, torch.float32)
    logp = answer_logprobs(split, split.top_at_choices(states, positions, mask, packs), packs, at_choices=True)
    return logp, torch.isfinite(logp)


def ranked(split: SplitModel, items: list[MenuItem], device: str, batch: int = 16) -> list[int]:
    """The menu entry ranked first for each item (what greedy menu-constrained decoding answers), items of similar length batched."""
    import torch

    order = sorted((i for i in range(len(items)) if len(items[i].packed.paths) > 1), key=lambda i: len(items[i].packed))
    chosen = [0] * len(items)  # a menu of one entry (hold) needs no model
    with torch.no_grad():
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            logp, _ = menu_logprobs(split, [items[i] for i in part], device)
            for i, best in zip(part, logp.argmax(1).tolist()):
                chosen[i] = best
    return chosen


class MenuRanker:
    """Models that share one base answer decisions from their valid menus (`evaluate/menu.py`, as every decision path
    builds them: `babylon_rl/evaluate/decide.py`); the frozen blocks run once for all of them.

    The base model's blocks below the lowest adapted one are computed once for every decision
    (`cache_states`); each policy (the base itself, or a LoRA adapter on the blocks above) then
    runs only the top blocks. `RANKED_CHUNK` decisions at a time: a chunk's states are ranked under
    every policy, then dropped, so an evaluation's peak memory does not grow with its decisions.
    """

    def __init__(self, base_model: str, adapters: list[Path], shares: int, device: str = "cpu", states_dir: Path | None = None) -> None:
        """`states_dir`: where frozen states are kept across processes (`StatesOnDisk`); None computes them all."""
        from babylon_rl.train.models import load_causal_lm

        self.device = device
        self.disk = StatesOnDisk(states_dir, device) if states_dir else None
        self.adapters = list(adapters)
        self.model, self.tokenizer = load_causal_lm(base_model, device)
        self.model.eval()
        layers = self.model.config.num_hidden_layers
        lowest = min((lowest_adapted_layer(a) for a in adapters), default=layers - MenuOptions.train_layers)
        self.train_layers = layers - lowest
        self.options = MenuOptions(shares=shares, train_layers=self.train_layers, device=device)
        self.bottom_dtype = bottom_dtype(device)
        self.split = SplitModel(self.model, self.train_layers, self.bottom_dtype)
        self._states_key = SharedStates.model_key(base_model, self.train_layers, self.bottom_dtype)
        self._answers: dict[Path | None, list[str]] = {}

    def prepare(self, tasks: list[Task], on_done: Callable[[int], None] = lambda n: None) -> None:
        """Every policy's answer to every task (the base's under None, each adapter's under its path)."""
        items = make_items(self.tokenizer, tasks, self.options, 0, np.random.default_rng(0))
        self._answers = {policy: [] for policy in (None, *self.adapters)}
        for start in range(0, len(items), RANKED_CHUNK):
            chunk = items[start : start + RANKED_CHUNK]
            if self.disk:
                on_done(self.disk.fill(self._states_key, chunk))
            cache_states(self.split, chunk, self.options.cache_batch, self.device, on_done)
            if self.disk:
                self.disk.keep(self._states_key, chunk)
            for policy, answers in self._answers.items():
                answers += [item.answers[i] for item, i in zip(chunk, self._ranked(policy, chunk))]
            for item in chunk:
                item.states = None

    def answers(self, adapter: Path | None) -> list[str]:
        """Each decision's highest-ranked menu answer under the base model with `adapter` on its top blocks (None: the base)."""
        return self._answers[adapter]

    def _ranked(self, adapter: Path | None, items: list[MenuItem]) -> list[int]:
        import warnings

        from peft import PeftModel

        if adapter is None:
            return ranked(self.split, items, self.device)
        with warnings.catch_warnings():  # peft calls a transformers 5 deprecated alias
            warnings.simplefilter("ignore", FutureWarning)
            adapted = PeftModel.from_pretrained(self.model, str(adapter)).eval()
        try:
            return ranked(SplitModel(adapted, self.train_layers), items, self.device)
        finally:
            self.model = adapted.unload()  # the base back, without the adapter's layers
            self.split = SplitModel(self.model, self.train_layers, self.bottom_dtype)


def lowest_adapted_layer(adapter: Path) -> int:
    """The lowest block a LoRA adapter changes (0 when it names none: every block)."""
    layers = json.loads((adapter / "adapter_config.json").read_text()).get("layers_to_transform")
    return min(layers) if layers else 0


class MenuTrainer(Checkpoints):
    """LoRA on the top blocks, stepped on menu items from their cached frozen states (module docstring).

    `train_step` and `evaluate` take tasks (what `train/loop.py` hands every decision trainer): each
    task's items are made and their frozen states computed the first time it is seen, then reused.
    """

    def __init__(self, base_model: str, options: MenuOptions, tasks: list[Task] = (), validation: list[Task] = (),
                 init_adapter: Path | None = None, adapters: int = 1, planned_rank: int | None = None,
                 states_dir: Path | None = None) -> None:
        """`tasks` and `validation`: the train and validation decisions it will see; their frozen states (train ones
        under `variants` renamings each) and the largest pass are checked against free memory before the weights load,
        with `adapters` adapters of up to `planned_rank` (a population's members). `init_adapter`: a LoRA adapter of
        the same rank and blocks to start from (distilled, then improved). `states_dir`: where frozen states are kept
        across processes (`StatesOnDisk`)."""
        import torch

        from babylon_rl.train.models import load_causal_lm, lora_model

        self.options = options
        self.base_model = base_model
        self.plan = self.memory_plan(tasks, validation, adapters, planned_rank) if tasks and options.device == "cpu" else None
        if self.plan:
            memory.check(self.plan, f"the menu objective on {Path(base_model).name}",
                         "lower --variants (renamed copies whose states are kept) or use a dataset with fewer decisions")
        memory.bound_allocator(memory.MENU_MMAP_THRESHOLD)
        self._items: dict[int, list[MenuItem]] = {}  # id(task) -> its items, states computed once
        self.names = company_names([*tasks, *validation])  # what a renaming swaps: the names the headlines spell
        self._disk = StatesOnDisk(states_dir, options.device) if states_dir else None
        self._rng = np.random.default_rng(options.seed)
        torch.manual_seed(options.seed)
        base, self.tokenizer = load_causal_lm(base_model, options.device)
        self.model = lora_model(base, options.lora_r, options.train_layers)
        self.model.eval()
        self.split = SplitModel(self.model, options.train_layers, bottom_dtype(options.device))
        self._states_key = SharedStates.model_key(base_model, options.train_layers, bottom_dtype(options.device))
        if init_adapter is not None:
            load_adapter(self.model, init_adapter)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.averaged = [p.detach().clone() for p in self.params]
        self.start = [p.detach().clone() for p in self.params] if options.anchor else None  # the anchor's weights
        self.optimizer = torch.optim.AdamW(self.params, lr=options.learning_rate, weight_decay=0.0)
        self.steps = 0

    def memory_plan(self, tasks: list[Task], validation: list[Task] = (), adapters: int = 1, planned_rank: int | None = None) -> memory.Plan:
        """The peak from the settings and the tasks (`memory.cached_plan`): packed lengths measured on an even sample;
        train decisions keep `variants` items' states each, validation ones one (it is never renamed)."""
        from transformers import AutoConfig

        from babylon_rl.train.models import load_tokenizer

        o = self.options
        tokenizer = load_tokenizer(self.base_model)

        def tokens(task: Task) -> int:
            return len(pack(tokenizer, task.request, menu(task, o.shares), answer_prefix(o.answer_order)))

        seen = [*tasks, *validation]
        even = [tokens(t) for t in seen[:: max(1, len(seen) // LENGTH_SAMPLE)]]
        longest = max(tokens(t) for t in longest_prompts(seen, 8))
        items = len(tasks) * max(o.variants, 1) + len(validation)
        return memory.cached_plan(memory.ModelShape.of(AutoConfig.from_pretrained(self.base_model)), items,
                                  1.1 * float(np.mean(even)), max(longest, *even), o.micro_batch, planned_rank or o.lora_r,
                                  o.train_layers, bf16_bottom=bottom_dtype(o.device) is not None, adapters=adapters)

    def _logprobs(self, items: list[MenuItem]):
        return menu_logprobs(self.split, items, self.options.device)

    def step(self, items: list[MenuItem]) -> dict:
        """One AdamW step on a batch of items, `micro_batch` at a time (gradients summed); the averaged weights follow.
        `chosen`: each item's first-ranked menu entry under the weights before the step (read off the loss's own pass)."""
        import torch

        o = self.options
        started = time.monotonic()
        chosen: list[int] = []

        def loss_of(part: list[MenuItem]):
            loss, logp = self._loss(part)
            chosen.extend(logp.detach().argmax(1).tolist())
            return loss * len(part) / len(items)

        total, grad_norm = optimizer_step(self.model, self.optimizer, self.params, o.max_grad_norm, slices(items, o.micro_batch), loss_of)
        self.steps += 1
        with torch.no_grad():
            decay = min(o.ema, self.steps / (self.steps + 10)) if o.ema else 0.0
            for avg, p in zip(self.averaged, self.params):
                avg.mul_(decay).add_(p.detach(), alpha=1 - decay)
        return {"loss": total, "grad_norm": grad_norm, "seconds": time.monotonic() - started, "chosen": chosen}

    def _loss(self, items: list[MenuItem]):
        """The mean loss of these items under the options' objective (`objectives.LOSSES`), or with `imitation_weight`
        that weight of fitting the target plus the rest of counterfactual's; and their menu log-probabilities."""
        o = self.options
        # before the pass that trains: the anchor's pass swaps the weights in place, which would break its backward
        start = self._start_margins(items) if o.objective == "value" and o.anchor else None
        logp, present = self._logprobs(items)
        rewards = _padded([item.rewards for item in items], logp.shape[1], logp.device) * present
        rewards[:, HOLD_INDEX + 1 :] -= o.trade_cost * present[:, HOLD_INDEX + 1 :]
        batch = MenuBatch(items, logp, present, rewards, start)
        objective, weight = LOSSES[o.objective], o.imitation_weight
        if weight is None:
            return objective.loss(batch, o), logp
        fit = objective.loss if objective.fits_target else imitate  # a population's distill knob
        mixed = (weight * fit(batch, o) if weight > 0 else 0.0) + ((1 - weight) * counterfactual(batch, o) if weight < 1 else 0.0)
        return mixed, logp

    def _start_margins(self, items: list[MenuItem]):
        """Each menu answer's log-probability margin over hold under the weights training started from (0 off the menu)."""
        import torch

        with torch.no_grad(), self._loaded(self.start):
            logp, present = self._logprobs(items)
        return margins(logp).masked_fill(~present, 0.0)

    def choose(self, items: list[MenuItem], batch: int = 16, averaged: bool = True) -> list[int]:
        """The menu entry the policy ranks first for each item (the averaged weights unless told otherwise)."""
        with self._weights(averaged):
            return ranked(self.split, items, self.options.device, batch)

    def _weights(self, averaged: bool):
        """The averaged weights in the model for the block (when `averaged` and averaging is on), the raw ones after."""
        return self._loaded(self.averaged if averaged and self.options.ema else None)

    @contextmanager
    def _loaded(self, values: list | None) -> Iterator[None]:
        """These weights in the model for the block (none: the raw ones), the raw ones after."""
        import torch

        if values is None:
            yield
            return
        raw = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, value in zip(self.params, values):
                p.copy_(value)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(self.params, raw):
                    p.copy_(value)

    # -- the decision-trainer interface of train/loop.py ---------------------------------------
    def items_for(self, tasks: list[Task], variants: int) -> list[MenuItem]:
        """The tasks' items (made, and their frozen states computed, on first sight), in task order."""
        new = [t for t in tasks if id(t) not in self._items]
        for task in new:
            self._items[id(task)] = make_items(self.tokenizer, [task], self.options, variants, self._rng, self.names)
        made = [i for t in new for i in self._items[id(t)]]
        fill_states(self.split, self._states_key, made, self.options.cache_batch, self.options.device, self._disk)
        return [item for t in tasks for item in self._items[id(t)]]

    def train_step(self, tasks: list[Task]):
        from babylon_rl.train.decisions import StepResult

        items = self.items_for(tasks, self.options.variants)
        stats = self.step(items)
        chosen = stats["chosen"]  # what the policy answered before this step: no second pass over the batch
        rewards = [float(item.rewards[i]) for item, i in zip(items, chosen)]
        by_trajectory: dict[str, list[float]] = {}
        for item, reward in zip(items, rewards):
            by_trajectory.setdefault(item.task.trajectory_id, []).append(reward)
        correct = float(np.mean([item.correct[i] for item, i in zip(items, chosen)]))
        return StepResult(stats["loss"], 0.0, stats["grad_norm"], sum(len(i.packed) for i in items), stats["seconds"],
                          {k: float(np.mean(v)) for k, v in by_trajectory.items()}, float(np.mean(rewards)), 1.0, correct,
                          len(tasks), 0)

    def evaluate(self, tasks: list[Task]) -> dict[str, float]:
        """The averaged weights answer the validation decisions from the menu: mean reward (`score`), accuracy, P&L."""
        if not tasks:
            return {}
        _, metrics = self.scored(self.items_for(tasks, 0))
        return {"score": metrics["reward"], **metrics, "valid_rate": 1.0, "decisions": len(tasks)}

    def scored(self, items: list[MenuItem], batch: int = 16) -> tuple[list[str], dict[str, float]]:
        """The averaged weights' answers from the menu; their mean reward, direction accuracy, P&L per decision, the share
        of decisions traded and the share of those trades right in direction (the learning claim's trade precision)."""
        chosen = self.choose(items, batch)
        answers = [item.answers[i] for item, i in zip(items, chosen)]
        outcomes = [item.task.price(answer)[1] for item, answer in zip(items, answers)]
        trades = [o.correct for o, answer in zip(outcomes, answers) if parse_action(answer).kind != "hold"]
        return answers, {"reward": float(np.mean([item.rewards[i] for item, i in zip(items, chosen)])),
                         "direction_accuracy": float(np.mean([o.correct for o in outcomes])),
                         "pnl_per_decision": float(np.mean([o.pnl for o in outcomes])),
                         "trade_share": len(trades) / len(items), "trade_precision": float(np.mean(trades)) if trades else None}

    def save(self, directory: Path, state: dict, extra: dict | None = None) -> Path:
        """The averaged adapter (what answers) as the checkpoint; the raw weights and their average in its trainer state."""
        raw = {k: v for k, v in self.state().items() if k != "optimizer"}
        with self._weights(True):
            return super().save(directory, state, raw)

    def save_merged(self, directory: Path) -> Path:
        """The base with the averaged adapter (what answers in validation and eval) folded in."""
        with self._weights(True):
            return super().save_merged(directory)

    # -- checkpoints ------------------------------------------------------------------------
    def state(self) -> dict:
        """A snapshot: later steps change neither the weights nor the average it holds (a kept best checkpoint)."""
        return {"params": [p.detach().clone() for p in self.params], "averaged": [a.clone() for a in self.averaged],
                "optimizer": self.optimizer.state_dict(), "steps": self.steps} | ({"start": self.start} if self.start else {})

    def restore(self, state: dict) -> None:
        import torch

        with torch.no_grad():
            for p, value in zip(self.params, state["params"]):
                p.copy_(value)
        self.averaged = [a.clone() for a in state["averaged"]]
        if self.start is not None and "start" in state:  # a resumed run keeps the anchor it started from
            self.start = [a.clone() for a in state["start"]]
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.steps = state["steps"]


def _padded(rows: list[np.ndarray], width: int, device):
    import torch

    out = np.zeros((len(rows), width), dtype=np.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.tensor(out, device=device)
