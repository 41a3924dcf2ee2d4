"""The trainer on logged conversations (`grpo`, `awr` on the torch back-end): any Hugging Face causal LM with a LoRA
adapter, trained on CPU or GPU on a dataset's scored trajectories, one group per window. Its checkpoints: checkpoints.py.

Objective (GRPO with PPO clipping), per trajectory i of a group with advantage A_i and
per assistant token t:
    ratio_t = exp(logp_t - logp_old_t)
    loss_t  = -min(ratio_t * A_i, clip(ratio_t, 1 - eps, 1 + eps) * A_i) + kl_coef * KL_t
where logp_old is the policy before this step's first inner epoch (so the ratio is 1 with
one inner epoch) and KL_t is the k3 estimator against the base model, computed with the
adapter switched off (`disable_adapter`), so no second copy of the model is kept. With
`lora_r = 0` the whole model is trained instead (the documented choice for the tiny model,
where LoRA's extra layers cost more time than the 100k weights they spare) and the reference
for KL is a frozen copy of the base model. Token
losses are averaged per trajectory (only assistant tokens, from the chat template's
generation masks), then over the step's trajectories. A conversation longer than the
model's context is trained as chunks (`encode_chunks`: system prompt + consecutive
exchanges); its chunks share its advantage and its weight.

`objective="awr"` replaces the clipped term by advantage-weighted regression for logged
(off-policy) answers: loss_t = -w_i * logp_t with w_i = exp(A_i / beta), capped and scaled to
mean 1 over the step.

Memory is bounded by the settings, not the data: LoRA sits on the top `train_layers` blocks (the
blocks below keep no activations), micro-batches hold at most `micro_batch` padded tokens, only
answer positions are projected onto the vocabulary, a chunk at a time (`answer_logprobs`), and
gradient checkpointing is switched on where the plan would not fit otherwise (`memory.py`). The
plan is checked against the memory this process can use before the model loads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np

from babylon_rl.train.checkpoints import Checkpoints
from babylon_rl.train.data import Encoded, Group, encode_chunks, pad_encoded
from babylon_rl.train import memory
from babylon_rl.train.models import answer_logprobs, load_causal_lm, lora_model
from babylon_rl.train.step import optimizer_step

T = TypeVar("T")


@dataclass(frozen=True)
class TorchOptions:
    learning_rate: float = 5e-6
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    lora_r: int = 8
    inner_epochs: int = 1
    micro_batch: int = 4096  # padded tokens per forward pass (a longer chunk goes alone)
    max_length: int = 2048  # tokens per chunk of a conversation (at most the model's context)
    train_layers: int = 4  # LoRA on the top N blocks; 0 = every block
    max_grad_norm: float = 1.0
    seed: int = 0
    objective: str = "grpo"  # grpo | awr
    awr_beta: float = 1.0
    awr_max_weight: float = 20.0


@dataclass(frozen=True)
class StepStats:
    loss: float
    kl: float
    grad_norm: float
    tokens: int
    trained_tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class _Item:
    encoded: Encoded
    advantage: float
    weight: float  # 1 / (chunks of its trajectory * trajectories of the step)


class TorchTrainer(Checkpoints):
    def __init__(self, base_model: str, options: TorchOptions) -> None:
        import torch
        from transformers import AutoConfig

        self.options = options
        self.base_model = base_model
        torch.manual_seed(options.seed)
        config = AutoConfig.from_pretrained(base_model)
        self.plan = self.memory_plan(config)
        memory.check(self.plan, f"training {Path(base_model).name} on {self.options.micro_batch}-token micro-batches")
        memory.bound_allocator()
        base, self.tokenizer = load_causal_lm(base_model)
        if self.plan.checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.reference = None
        if options.lora_r == 0:  # full fine-tune; the frozen base model is the KL reference
            import copy

            self.model = base
            if options.kl_coef > 0:
                self.reference = copy.deepcopy(base).eval()
                for p in self.reference.parameters():
                    p.requires_grad_(False)
        else:
            self.model = lora_model(base, options.lora_r, options.train_layers)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self._encoded: dict[str, list[Encoded]] = {}  # trajectory id -> chunks (a dataset is immutable)
        self.optimizer = torch.optim.AdamW(self.params, lr=options.learning_rate, weight_decay=0.0)

    def memory_plan(self, config) -> memory.Plan:
        """The step's peak from the settings (`memory.plan`), with gradient checkpointing only where it is needed."""
        o = self.options
        length = self.chunk_length(config)
        return memory.choose(memory.ModelShape.of(config), max(o.micro_batch, length), o.lora_r,
                             0 if o.lora_r == 0 else o.train_layers, o.lora_r == 0 and o.kl_coef > 0, memory.CHECKPOINT_ABOVE)

    # -- tensors ------------------------------------------------------------------------
    def chunk_length(self, config) -> int:
        """Chunk length: the option, but never past the model's position limit."""
        limit = getattr(config, "max_position_embeddings", None) or self.options.max_length
        return min(self.options.max_length, int(limit))

    @property
    def max_length(self) -> int:
        return self.chunk_length(self.model.config)

    def encode(self, messages: list[dict]) -> list[Encoded]:
        return encode_chunks(self.tokenizer, messages, self.max_length)

    def encode_sample(self, sample) -> list[Encoded]:
        """The chunks of a trajectory, tokenised once per run (the chat template is the slow part)."""
        chunks = self._encoded.get(sample.trajectory_id)
        if chunks is None:
            chunks = self._encoded[sample.trajectory_id] = self.encode(sample.messages)
        return chunks

    def _batch(self, encoded: list[Encoded]):
        ids, attention, mask = pad_encoded(encoded, self.tokenizer.pad_token_id)
        return ids, attention, mask[:, 1:].float()

    def _token_logprobs(self, ids, attention, mask, model=None):
        """Log-probabilities of the answer tokens only, flat in row order (`answer_logprobs`)."""
        return answer_logprobs(model or self.model, ids, attention, mask)

    def micro_batches(self, items: list[T], length: Callable[[T], int]) -> list[list[T]]:
        """Consecutive runs of `items` (sorted by length) whose padded size stays within `micro_batch` tokens."""
        batches: list[list[T]] = []
        for item in items:
            if batches and (len(batches[-1]) + 1) * length(item) <= self.options.micro_batch:
                batches[-1].append(item)
            else:
                batches.append([item])
        return batches

    @staticmethod
    def _per_sequence(values, mask):
        """Mean over each row's answer tokens of a flat per-answer-token tensor (from `_token_logprobs`)."""
        rows = mask.bool().nonzero(as_tuple=True)[0]
        sums = values.new_zeros(mask.shape[0]).index_add(0, rows, values)
        return sums / mask.sum(1).clamp(min=1)

    def sequence_logprobs(self, conversations: list[list[dict]]) -> list[float]:
        """Mean log-probability per assistant token of each conversation under the current policy."""
        import torch

        chunks = sorted(((index, e) for index, m in enumerate(conversations) for e in self.encode(m)),
                        key=lambda pair: len(pair[1].input_ids))
        sums, counts = [0.0] * len(conversations), [0.0] * len(conversations)
        self.model.eval()
        with torch.no_grad():
            for part in self.micro_batches(chunks, lambda pair: len(pair[1].input_ids)):
                ids, attention, mask = self._batch([e for _, e in part])
                logp = self._token_logprobs(ids, attention, mask)
                totals = self._per_sequence(logp, mask) * mask.sum(1)
                for (index, _), total, count in zip(part, totals.tolist(), mask.sum(1).tolist()):
                    sums[index] += total
                    counts[index] += count
        return [s / max(c, 1.0) for s, c in zip(sums, counts)]

    # -- one step -----------------------------------------------------------------------
    def train_step(self, groups: list[Group]) -> StepStats:
        import torch

        started = time.monotonic()
        pairs = [(self.encode_sample(s), a) for g in groups for s, a in zip(g.samples, g.advantages())]
        if self.options.objective == "awr":
            pairs = list(zip([c for c, _ in pairs], self.awr_weights([a for _, a in pairs])))
        items = [_Item(e, a, 1.0 / (len(chunks) * len(pairs))) for chunks, a in pairs for e in chunks]
        items.sort(key=lambda it: len(it.encoded.input_ids))  # similar lengths share a micro-batch: little padding
        chunks = self.micro_batches(items, lambda it: len(it.encoded.input_ids))
        tensors = [self._batch([it.encoded for it in chunk]) for chunk in chunks]
        advantages = [torch.tensor([it.advantage for it in chunk]).unsqueeze(1) for chunk in chunks]
        weights = [torch.tensor([it.weight for it in chunk]) for chunk in chunks]
        old, ref = self._reference_logprobs(tensors)
        total_kl = 0.0

        def loss_of(part: tuple):
            nonlocal total_kl
            (ids, attention, mask), adv, weight, old_lp, ref_lp = part
            loss, kl = self._loss(ids, attention, mask, adv, weight, old_lp, ref_lp)
            total_kl += kl / self.options.inner_epochs
            return loss

        parts = list(zip(tensors, advantages, weights, old, ref))
        total_loss, grad_norm = optimizer_step(self.model, self.optimizer, self.params, self.options.max_grad_norm, parts, loss_of,
                                               self.options.inner_epochs)
        tokens = sum(len(it.encoded.input_ids) for it in items)
        trained = sum(sum(it.encoded.assistant_mask) for it in items)
        return StepStats(total_loss, total_kl, grad_norm, tokens, trained, time.monotonic() - started)

    def awr_weights(self, advantages: list[float]) -> list[float]:
        """exp(A / beta), capped, scaled to mean 1 over the step (so the learning rate means what it does in SFT)."""
        weights = np.minimum(np.exp(np.asarray(advantages) / self.options.awr_beta), self.options.awr_max_weight)
        return list(weights / weights.mean())

    def _reference_logprobs(self, tensors):
        """Old-policy log-probs (for the ratio; None = this epoch's detached values) and base-model ones for KL."""
        import torch

        old, ref = [], []
        with torch.no_grad():
            for ids, attention, mask in tensors:
                old.append(self._token_logprobs(ids, attention, mask) if self.options.inner_epochs > 1 else None)
                if self.options.kl_coef > 0:
                    if self.full:
                        ref.append(self._token_logprobs(ids, attention, mask, self.reference))
                    else:
                        with self.model.disable_adapter():
                            ref.append(self._token_logprobs(ids, attention, mask))
                else:
                    ref.append(None)
        return old, ref

    def _loss(self, ids, attention, mask, adv, weight, old_lp, ref_lp):
        import torch

        logp = self._token_logprobs(ids, attention, mask)
        adv = adv.squeeze(1)[mask.bool().nonzero(as_tuple=True)[0]]  # each answer token gets its row's advantage
        if self.options.objective == "awr":
            per_token = -adv * logp  # adv holds the AWR weight here (train_step)
        else:
            old_lp = logp.detach() if old_lp is None else old_lp
            ratio = torch.exp(logp - old_lp)
            eps = self.options.clip_eps
            per_token = -torch.min(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv)
        kl_value = 0.0
        if ref_lp is not None:
            delta = ref_lp - logp
            kl = torch.exp(delta) - delta - 1
            per_token = per_token + self.options.kl_coef * kl
            kl_value = float((self._per_sequence(kl.detach(), mask) * weight).sum())
        return (self._per_sequence(per_token, mask) * weight).sum(), kl_value

    # -- eval ---------------------------------------------------------------------------
    def evaluate(self, groups: list[Group]) -> dict[str, float]:
        """Validation metric `margin` (also `score`, what --keep-best maximises): per window with a reward spread, the mean assistant-token
        log-prob of the best-scored trajectory minus that of the worst-scored; averaged over
        windows. Higher means the policy prefers what the judge preferred."""
        pairs = []
        for group in groups:
            if not group.has_spread:
                continue
            ordered = sorted(group.samples, key=lambda s: s.reward)
            pairs.append((ordered[-1].messages, ordered[0].messages))
        if not pairs:
            return {}
        best = self.sequence_logprobs([p[0] for p in pairs])
        worst = self.sequence_logprobs([p[1] for p in pairs])
        margins = [b - w for b, w in zip(best, worst)]
        margin = float(np.mean(margins))
        return {"score": margin, "margin": margin, "best_logprob": float(np.mean(best)), "windows": len(pairs)}
