"""What the menu objectives train on and the ranker answers from: each decision's valid menu, priced, under renamed tickers.

Each decision's valid menu (hold; the buys its cash covers and the sells of what it holds, up to
`shares` each: `evaluate/menu.py`, what every decision path chooses from) is priced
against the window's ground truth with the evaluation's rules (`decisions.Task.price`); a `MenuItem` holds it with
its packed prompt + menu (`frozen.pack`), each answer's reward and the entry its objective fits (`MenuLoss.target`).
The trainer's options (`MenuOptions`) live here, where the items are made from them.

Why renamed tickers: the stocks are exchangeable, but a window's moves are shared by all of its
decisions, so a batch rewards whichever stock happened to win its windows (`sell ACME`), and a
policy fitted to it swings between constants (docs/history/BENCHMARKS-learning.md). Each training
decision is seen under `variants` random permutations of its tickers (and company names), the
same permutation across prompt, headlines, markets and menu, the reward of each answer that of
the stock it really names. No per-ticker constant pays across permutations; the headline does.
Validation and evaluation use the game's real names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from itertools import groupby

import numpy as np

from babylon_rl.evaluate.menu import valid_menu
from babylon_rl.evaluate.prompts import ANSWER_PREFIX, TICKER, DecisionPrompt
from babylon_rl.train.credit import company_names
from babylon_rl.train.decisions import PNL_CLIP, PNL_SCALE, Task
from babylon_rl.train.frozen import Packed, pack
from babylon_rl.train.objectives import LOSSES


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
