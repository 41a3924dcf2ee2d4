"""`--objective imitate`'s step: the LoRA of `--on-policy` supervised on every logged answer to the replayed decisions'
compact prompts, the imitation baseline of the replayed objectives (the menu family's is `menu-imitate`:
objectives/imitation.py). `grpo.GrpoTrainer` runs it.
"""

from __future__ import annotations

import time

from babylon_rl.policy import answer_logprobs, encode_answers, encode_prompts
from babylon_rl.train.decisions import StepResult, Task
from babylon_rl.train.replay_contract import ReplayTrainer, masked_mean
from babylon_rl.train.step import optimizer_step, slices


def imitate_step(trainer: ReplayTrainer, tasks: list[Task]) -> StepResult:
    """One supervised step on the logged agents' answers to the same compact prompts (the imitation baseline)."""
    o = trainer.options
    started = time.monotonic()
    tokens_seen = 0

    def loss_of(part: list[Task]):
        nonlocal tokens_seen
        batch = encode_prompts(trainer.tokenizer, [t.request for t in part], o.device)
        answers, mask = encode_answers(trainer.tokenizer, [t.logged_answer for t in part], o.device)
        logp = answer_logprobs(trainer.model, batch, answers, mask, 1)
        tokens_seen += int(batch.attention.sum()) + int(mask.sum())
        return -(masked_mean(logp, mask.float())).sum() / len(tasks)

    parts = slices(tasks, o.micro_batch)
    loss_total, grad_norm = optimizer_step(trainer.model, trainer.optimizer, trainer.params, o.max_grad_norm, parts, loss_of)
    return StepResult(loss_total, 0.0, grad_norm, tokens_seen, time.monotonic() - started,
                      {t.trajectory_id: 0.0 for t in tasks}, 0.0, 1.0, 0.0, len(tasks), 0)
