"""How far one optimizer step may move the weights: in proportion to the batch's signal.

Adam divides each gradient by its own running magnitude, so its first steps move every
weight by about the learning rate whatever the gradient's size: a batch that says almost
nothing (a hint whose teacher barely differs from the policy, gradient norm 0.005) moves the
adapter as far as one that says a lot (0.5-1.5). On a user who rejected every answer at
first, two such steps from the base made 4 of 10 held-out answers loop
(docs/benchmarks/learning.md). `signal_lr` scales the step's rate by the gradient's norm up
to `signal_norm`, above which the step is the full learning rate.
"""

from __future__ import annotations

from typing import Any


def signal_lr(lr: float, grad_norm: float, signal_norm: float) -> float:
    """lr * min(1, grad_norm / signal_norm); `lr` itself when `signal_norm` <= 0 (off)."""
    if signal_norm <= 0:
        return lr
    if grad_norm < 0 or grad_norm != grad_norm:  # NaN: leave it to the caller's checks
        return lr
    return lr * min(1.0, grad_norm / signal_norm)


def set_lr(optimizer: Any, lr: float) -> None:
    """Every parameter group of `optimizer` at `lr` (for this step)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
