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
the fit is right. Each objective's target and loss are in its module (`objectives/`, the batch they read in
`menu_losses.py`); the items are made in `menu_items.py` (each decision's menu priced, its tickers renamed) and their
frozen states computed or found in `state_cache.py`; this module steps the adapter.

What is frozen is computed once (`frozen.py`): the hidden state entering the top
`train_layers` blocks, for each packed prompt + menu, in bf16. A step runs the top blocks only.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from babylon_rl.evaluate.actions import parse_action
from babylon_rl.train import memory
from babylon_rl.train.checkpoints import Checkpoints, load_adapter
from babylon_rl.train.credit import company_names
from babylon_rl.train.decisions import Task, longest_prompts
from babylon_rl.train.frozen import SplitModel, bottom_dtype, pack
from babylon_rl.train.menu_items import MenuItem, MenuOptions, answer_prefix, make_items, menu
from babylon_rl.train.menu_losses import HOLD_INDEX, MenuBatch, margins
from babylon_rl.train.menu_ranker import menu_logprobs, ranked
from babylon_rl.train.objectives import LOSSES
from babylon_rl.train.objectives.imitation import imitate
from babylon_rl.train.objectives.priced import counterfactual
from babylon_rl.train.state_cache import SharedStates, StatesOnDisk, fill_states
from babylon_rl.train.step import optimizer_step, slices

LENGTH_SAMPLE = 64  # tasks packed to estimate the frozen states' size before training


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
