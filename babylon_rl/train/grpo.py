"""GRPO on the policy's own answers: replayed decisions, k samples each, priced by the window's ground truth.

For each decision of a training window (its compact observation prompt, `evaluate/prompts.py`)
the policy samples k answers. Each answer is parsed into an action and priced against what the
market did afterwards, with the evaluation's own rules (`evaluate/scoring.py`): a stock trade
marked to the window's end price, a bet by the market's resolution, hold 0, an unparseable
answer `INVALID_REWARD`. A trade's reward adds the P&L (in `PNL_SCALE` dollars, clipped) and
±`DIRECTION_BONUS` for the direction being right, the two things the evaluation's claim reads
(P&L and trade precision); a hold's is 0.
Advantages are normalised within the k answers of one decision (a GRPO group); the loss is
the clipped ratio over `inner_epochs` passes plus a k3 KL to the base model (the adapter
switched off).

Tokens are the CPU's budget, so:
- the prompt is encoded once for its k answers: one forward pass over the prompt fills a KV
  cache that is repeated k times, and only the answer tokens run k times, in sampling and in the
  loss (gradients flow back through the repeated cache into the prompt's pass);
- LoRA sits on the top `train_layers` blocks only: the blocks below are frozen and keep no
  activations for the backward pass.

`GrpoTrainer` is the trainer of every objective on replayed decisions: it owns the model, its memory plan and its
validation answers, and steps `--on-policy` grpo (here), `imitate` (imitate_step.py) or `counterfactual`
(counterfactual_step.py); what the steps share is in replay_contract.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from babylon_rl.evaluate.prompts import DecisionPrompt
from babylon_rl.policy import PromptBatch, answer_logprobs, decode_answers, encode_answers, encode_prompts, greedy_answers, sample_answers
from babylon_rl.train import memory
from babylon_rl.evaluate.scoring import Outcome
from babylon_rl.train.counterfactual_step import counterfactual_step
from babylon_rl.train.decisions import LONGEST_SAMPLE, StepResult, Task, longest_prompts
from babylon_rl.train.imitate_step import imitate_step
from babylon_rl.train.replay_contract import masked_mean
from babylon_rl.train.step import optimizer_step, slices
from babylon_rl.train.checkpoints import Checkpoints

SPREAD_EPS = 1e-6  # a decision whose answers' rewards spread less than this teaches nothing


@dataclass(frozen=True)
class GrpoOptions:
    learning_rate: float = 2e-4
    samples: int = 4  # k answers per decision
    temperature: float = 1.0
    max_new_tokens: int = 32
    inner_epochs: int = 2
    clip_eps: float = 0.2
    kl_coef: float = 0.02
    lora_r: int = 16
    train_layers: int = 4  # LoRA on the top N blocks; 0 = every block
    micro_batch: int = 2  # prompts per forward pass, each with its k answers: what keeps a CPU run in its memory plan
    objective: str = "grpo"  # grpo | counterfactual (every menu answer priced) | imitate (the logged answers: the baseline)
    reward_temperature: float = 0.3  # counterfactual: the target is softmax(reward / this) over the menu
    max_grad_norm: float = 1.0
    seed: int = 0
    device: str = "cpu"


@dataclass
class Rollout:
    """One micro-batch of decisions with their k sampled answers each ([B*k, A] tensors), rewards and advantages ([B, k])."""

    batch: PromptBatch
    tokens: object
    mask: object
    rewards: np.ndarray
    advantages: np.ndarray
    outcomes: list[Outcome]
    texts: list[str]

    @property
    def used(self) -> int:
        """Decisions whose answers scored differently: the only ones that carry loss."""
        return int((np.abs(self.advantages).sum(1) > 0).sum())

    @property
    def rows(self) -> np.ndarray:
        """1.0 for each answer of a decision with a spread, 0.0 otherwise (flat, [B*k])."""
        return np.repeat((np.abs(self.advantages).sum(1) > 0).astype(np.float32), self.advantages.shape[1])


def group_advantages(rewards: np.ndarray) -> np.ndarray:
    """(r - mean) / std within each row (one decision's k answers); 0 for a row without spread."""
    mean, std = rewards.mean(1, keepdims=True), rewards.std(1, keepdims=True)
    return np.where(std > SPREAD_EPS, (rewards - mean) / (std + 1e-6), 0.0)


class GrpoTrainer(Checkpoints):
    """LoRA on a causal LM's top blocks, trained on its own sampled answers, or on imitate's or counterfactual's step
    (see the module docstring)."""

    def __init__(self, base_model: str, options: GrpoOptions, tasks: list[Task] = ()) -> None:
        """`tasks`: the decisions it will see; the largest pass over them is checked against free memory before the weights load."""
        import torch

        from babylon_rl.train.models import load_causal_lm, lora_model

        self.options = options
        self.base_model = base_model
        torch.manual_seed(options.seed)
        self.plan = self.memory_plan(tasks) if tasks and options.device == "cpu" else None
        if self.plan:
            memory.check(self.plan, f"{options.objective} on {Path(base_model).name}", self.remedy)
            memory.bound_allocator()
        base, self.tokenizer = load_causal_lm(base_model, options.device)
        self.model = lora_model(base, options.lora_r, options.train_layers)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=options.learning_rate, weight_decay=0.0)
        self.generator = torch.Generator(device=options.device).manual_seed(options.seed)

    # -- memory ---------------------------------------------------------------------------
    def memory_plan(self, tasks: list[Task]) -> memory.Plan:
        """The peak of this objective's largest pass (`memory.decision_plan`): `micro_batch` of the longest prompts, each
        with its answers (k samples, the menu, or the logged answer) at their longest."""
        from transformers import AutoConfig

        from babylon_rl.train.models import load_tokenizer

        o = self.options
        tokenizer = load_tokenizer(self.base_model)
        longest = longest_prompts(tasks)
        prompt_tokens = int(encode_prompts(tokenizer, [t.request for t in longest], "cpu").ids.shape[1])
        if o.objective == "grpo":
            answers, answer_tokens = o.samples, o.max_new_tokens
        else:
            texts = [a for t in longest for a in t.menu] if o.objective == "counterfactual" else \
                sorted((t.logged_answer for t in tasks), key=len)[-LONGEST_SAMPLE:]
            answers = max(len(t.menu) for t in tasks) if o.objective == "counterfactual" else 1
            answer_tokens = int(encode_answers(tokenizer, texts, "cpu")[0].shape[1])
        return memory.decision_plan(memory.ModelShape.of(AutoConfig.from_pretrained(self.base_model)), o.micro_batch,
                                    prompt_tokens, answers, answer_tokens, o.lora_r, o.train_layers)

    @property
    def remedy(self) -> str:
        """The options that make this objective's passes smaller."""
        lower = "--samples (answers per decision) or " if self.options.objective == "grpo" else ""
        return f"lower {lower}--train-layers (blocks that keep activations)"

    # -- one step -------------------------------------------------------------------------
    def train_step(self, tasks: list[Task]) -> StepResult:
        """One step of the options' objective: GRPO on its own answers (`grpo_step`), or imitate's or counterfactual's."""
        steps = {"imitate": imitate_step, "counterfactual": counterfactual_step, "grpo": GrpoTrainer.grpo_step}
        return steps[self.options.objective](self, tasks)

    def grpo_step(self, tasks: list[Task]) -> StepResult:
        """Sample k answers per decision, price them, then update on the decisions whose answers scored differently."""
        started = time.monotonic()
        rollouts = [self._rollout(part) for part in slices(tasks, self.options.micro_batch)]
        sampled = time.monotonic()
        loss, kl, grad_norm, tokens = self._update([r for r in rollouts if r.used])
        rewards = np.concatenate([r.rewards for r in rollouts])  # [decisions, k]
        outcomes = [o for r in rollouts for o in r.outcomes]
        by_trajectory: dict[str, list[float]] = {}
        for task, value in zip(tasks, rewards.mean(1)):
            by_trajectory.setdefault(task.trajectory_id, []).append(float(value))
        used = sum(r.used for r in rollouts)
        return StepResult(
            loss, kl, grad_norm, tokens, time.monotonic() - started,
            {k: float(np.mean(v)) for k, v in by_trajectory.items()}, float(rewards.mean()),
            float(np.mean([o.valid for o in outcomes])), float(np.mean([o.correct for o in outcomes])),
            used, len(tasks) - used, sampled - started, [t for r in rollouts for t in r.texts],
        )

    def _rollout(self, tasks: list[Task]) -> "Rollout":
        """k sampled answers for each of a micro-batch of decisions, priced, with their group advantages."""
        o = self.options
        self.model.eval()
        batch = encode_prompts(self.tokenizer, [t.request for t in tasks], o.device)
        tokens, mask = sample_answers(self.model, self.tokenizer, batch, o.samples, o.max_new_tokens, o.temperature, self.generator)
        texts = decode_answers(self.tokenizer, tokens, mask)
        priced = [task.price(texts[i * o.samples + j]) for i, task in enumerate(tasks) for j in range(o.samples)]
        rewards = np.array([r for r, _ in priced]).reshape(len(tasks), o.samples)
        return Rollout(batch, tokens, mask, rewards, group_advantages(rewards), [outcome for _, outcome in priced], texts)

    def _update(self, rollouts: list["Rollout"]) -> tuple[float, float, float, int]:
        """`inner_epochs` passes of the clipped ratio (against the first pass) plus KL to the base; returns loss, KL, grad norm, tokens."""
        import torch

        o = self.options
        if not rollouts:
            return 0.0, 0.0, 0.0, 0
        sequences = sum(r.used for r in rollouts) * o.samples  # the loss is a mean over the answers of decisions with a spread
        references = [self._reference_logprobs(r.batch, r.tokens, r.mask) for r in rollouts]
        olds: list = [None] * len(rollouts)
        kl_total, tokens = 0.0, 0

        def loss_of(i: int):
            nonlocal kl_total, tokens
            r = rollouts[i]
            advantage = torch.tensor(r.advantages.reshape(-1), dtype=torch.float32, device=o.device)[:, None]
            rows = torch.tensor(r.rows, device=o.device)
            mask = r.mask.float()
            logp = answer_logprobs(self.model, r.batch, r.tokens, r.mask, o.samples)
            if olds[i] is None:
                olds[i] = logp.detach()
            ratio = torch.exp(logp - olds[i])
            per_token = -torch.min(ratio * advantage, ratio.clamp(1 - o.clip_eps, 1 + o.clip_eps) * advantage)
            if references[i] is not None:
                delta = references[i] - logp
                kl = torch.exp(delta) - delta - 1  # k3 estimator of KL(policy || base)
                per_token = per_token + o.kl_coef * kl
                kl_total += float((masked_mean(kl.detach(), mask) * rows).sum()) / (sequences * o.inner_epochs)
            tokens += int(r.batch.attention.sum()) + int(mask.sum())
            return (masked_mean(per_token, mask) * rows).sum() / sequences

        loss_total, grad_norm = optimizer_step(self.model, self.optimizer, self.params, o.max_grad_norm, range(len(rollouts)), loss_of,
                                               o.inner_epochs)
        return loss_total, kl_total, grad_norm, tokens

    def _reference_logprobs(self, batch: PromptBatch, answers, mask):
        import torch

        if self.options.kl_coef <= 0:
            return None
        with torch.no_grad(), self.model.disable_adapter():
            return answer_logprobs(self.model, batch, answers, mask, self.options.samples)

    # -- greedy answers (validation) ------------------------------------------------------------
    def answer(self, requests: list[DecisionPrompt]) -> list[str]:
        return greedy_answers(self.model, self.tokenizer, requests, self.options.device, self.options.max_new_tokens)

    def evaluate(self, tasks: list[Task]) -> dict[str, float]:
        """Greedy answers on the validation decisions: mean reward (`score`, what --keep-best maximises), accuracy, P&L."""
        if not tasks:
            return {}
        priced = [task.price(text) for task, text in zip(tasks, self.answer([t.request for t in tasks]))]
        return {"score": float(np.mean([r for r, _ in priced])),
                "direction_accuracy": float(np.mean([o.correct for _, o in priced])),
                "pnl_per_decision": float(np.mean([o.pnl for _, o in priced])),
                "valid_rate": float(np.mean([o.valid for _, o in priced])), "decisions": len(tasks)}
