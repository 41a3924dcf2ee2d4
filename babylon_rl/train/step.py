"""The optimizer step of every trainer (menu_trainer, population through it, grpo, logged_trainer, tiny's warm start).

Its order is part of the numerics: the same weights come out of a run only while the gradients are zeroed,
each micro-batch's loss is run backward in turn (the gradients summed), clipped, and stepped, in this order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

if TYPE_CHECKING:
    import torch

Part = TypeVar("Part")


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, params: list[torch.Tensor], max_grad_norm: float,
                   parts: Sequence[Part], loss_of: Callable[[Part], torch.Tensor], passes: int = 1) -> tuple[float, float]:
    """`passes` steps (1, or PPO's inner epochs) over the micro-batches `parts`, the model in train mode for them and
    in eval mode after. A step zeroes the gradients, runs each part's loss backward (`loss_of` returns it scaled to
    the part's share of the step, and may record its own statistics), clips the gradients to `max_grad_norm` and
    steps. Returns the losses summed (each pass adding its 1/`passes`) and the last step's gradient norm."""
    import torch

    model.train()
    total = grad_norm = 0.0
    for _ in range(passes):
        optimizer.zero_grad(set_to_none=True)
        for part in parts:
            loss = loss_of(part)
            loss.backward()
            total += float(loss.detach()) / passes
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
        optimizer.step()
    model.eval()
    return total, grad_norm


def slices(items: Sequence[Part], size: int) -> list[Sequence[Part]]:
    """`items` in consecutive micro-batches of `size` (the last one shorter)."""
    return [items[start : start + size] for start in range(0, len(items), size)]
