"""Reward advantages of binary RL (REFERENCE §4): A = r - baseline, per sample, no autograd.

The baseline (`train.baseline`) is taken once over the whole batch (`batch_baseline`) before
the trainer splits it into micro-batches and ranks, so the advantages do not depend on how
memory or the number of GPUs splits the batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor

BaselineKind = Literal["ema", "batch_mean", "none"]


def _upcast(x: Tensor) -> Tensor:
    """At least float32 (float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def ema_baseline_update(
    baseline: float | None, rewards: Sequence[float], decay: float = 0.9
) -> float:
    """Exponential moving mean of batch-mean rewards: decay·old + (1 − decay)·mean(rewards).

    The first call (`baseline=None`) returns the batch mean. An empty batch leaves the
    baseline unchanged; with no baseline yet that is an error (there is nothing to return).
    Pass the rewards of samples that carry an RL signal.
    """
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"decay must be in [0, 1), got {decay}")
    if len(rewards) == 0:
        if baseline is None:
            raise ValueError("no rewards and no baseline yet")
        return baseline
    batch_mean = math.fsum(rewards) / len(rewards)
    return batch_mean if baseline is None else decay * baseline + (1.0 - decay) * batch_mean


def _signal_mean(rewards_B: Tensor, signal_B: Tensor) -> Tensor:
    """Mean reward over samples with an RL signal; 0 when there are none."""
    total = torch.where(signal_B, rewards_B, 0.0).sum()  # ()
    return total / signal_B.sum().clamp(min=1)  # ()


_BASELINES: dict[str, Callable[[Tensor, Tensor, float | None], Tensor | float]] = {
    "none": lambda r_B, s_B, ema: 0.0,
    "batch_mean": lambda r_B, s_B, ema: _signal_mean(r_B, s_B),
    # Before the first EMA update the best estimate is this batch's mean.
    "ema": lambda r_B, s_B, ema: _signal_mean(r_B, s_B) if ema is None else ema,
}


def rl_advantages(
    rewards_B: Tensor,
    has_reward_B: Tensor,
    baseline_kind: BaselineKind,
    ema_value: float | None = None,
) -> Tensor:
    """r − baseline for samples with an RL signal, exactly 0 for the others (REFERENCE §4).

    A sample has a signal when `has_reward_B` is set and r ≠ 0. `batch_mean` averages r over
    those samples only; `ema` uses `ema_value` (this batch's mean while it is None); `none`
    is upstream's A = r. Returns a detached tensor of shape (B,).
    """
    if baseline_kind not in _BASELINES:
        raise ValueError(f"unknown baseline {baseline_kind!r}; known: {sorted(_BASELINES)}")
    with torch.no_grad():
        r_B = _upcast(rewards_B.detach())  # (B,)
        signal_B = has_reward_B.bool() & (r_B != 0)  # (B,)
        return advantages_from(r_B, signal_B, _BASELINES[baseline_kind](r_B, signal_B, ema_value))


def batch_baseline(
    kind: BaselineKind,
    rewards: Sequence[float],
    has_reward: Sequence[bool],
    ema_value: float | None = None,
    earlier: float | None = None,
) -> float:
    """The reward baseline of a whole batch as one number, by `rl_advantages`'s rules
    (`batch_mean`: the mean reward of the samples with a signal, r != 0; `ema`: `ema_value`,
    this batch's mean while it is None; `none`: 0). The trainer takes it once over the
    global batch before splitting it into micro-batches and ranks, so the advantages do
    not depend on how memory or the number of GPUs splits the batch.

    `earlier` (the moving mean of the rewards before this batch, or None) credits a
    `batch_mean` batch whose every signal is an acceptance (r > 0): its baseline is
    `accepted_baseline`'s, below the batch's own mean when earlier answers fared worse."""
    if kind not in _BASELINES:
        raise ValueError(f"unknown baseline {kind!r}; known: {sorted(_BASELINES)}")
    if kind == "none":
        return 0.0
    signal = [r for r, h in zip(rewards, has_reward, strict=True) if h and r != 0]
    mean = math.fsum(signal) / len(signal) if signal else 0.0
    if kind == "batch_mean" and signal and min(signal) > 0 and earlier is not None:
        return accepted_baseline(mean, earlier)
    return mean if kind == "batch_mean" or ema_value is None else ema_value


def accepted_baseline(mean: float, earlier: float) -> float:
    """The baseline of a batch of accepted answers only (every r > 0, mean `mean`) against
    the moving mean `earlier` of the rewards before it: min(mean, max(0, earlier)).

    Under the batch's own mean such a batch has no contrast, and the answers a user just
    started to accept (brevity/rated, 2026-12-02: four +1 in a row after 13 of 14 -1, all
    skipped) would teach nothing. They are credited at r - max(0, earlier): +r where
    earlier answers were mostly rejected (upstream's A = r, never more), less as the
    acceptances grow common, and nothing once earlier answers fared as well (no push to
    repeat what the policy already does). The rule is one-sided on purpose: a batch of
    rejections only keeps its no-push (pushing down every sampled token of answers that
    were merely too long turned them into loops, issue #29), while pushing up answers the
    user accepted is rejection-sampling fine-tuning on the policy's own words."""
    return min(mean, max(0.0, earlier))


def advantages_from(rewards_B: Tensor, has_reward_B: Tensor, baseline: float | Tensor) -> Tensor:
    """r − `baseline` for samples with an RL signal (r != 0), exactly 0 for the others;
    detached, (B,). `baseline` comes from `batch_baseline` (or `rl_advantages`)."""
    with torch.no_grad():
        r_B = _upcast(rewards_B.detach())  # (B,)
        signal_B = has_reward_B.bool() & (r_B != 0)  # (B,)
        return torch.where(signal_B, r_B - baseline, 0.0)  # (B,)


def carries_contrast(
    kind: BaselineKind,
    rewards: Sequence[float],
    has_reward: Sequence[bool],
    centred: Sequence[bool],
    has_teacher: Sequence[bool],
    ema_value: float | None = None,
    earlier: float | None = None,
) -> bool:
    """Whether a batch gives the optimizer anything to follow: a teacher (hint) term on some
    sample, an env advantage != 0, or a chat reward that differs from the batch's baseline
    (`batch_baseline`'s rules over the samples that are not centred). A batch of equal
    rewards and no hint moves nothing through the loss, but an optimizer step on it would
    still move the weights: AdamW's momentum repeats the previous steps' direction at ~0.9
    of their size whatever the new gradient is, so the trainer takes no step on it.
    `earlier`: as in `batch_baseline` (a batch of acceptances after worse answers has one)."""
    n = len(rewards)
    if not n == len(has_reward) == len(centred) == len(has_teacher):
        raise ValueError("rewards, has_reward, centred and has_teacher differ in length")
    if any(has_teacher):
        return True
    if any(c and h and r != 0 for r, h, c in zip(rewards, has_reward, centred, strict=True)):
        return True
    plain = [(r, h) for r, h, c in zip(rewards, has_reward, centred, strict=True) if not c]
    base = batch_baseline(kind, [r for r, _ in plain], [h for _, h in plain], ema_value, earlier)
    return any(h and r != 0 and r != base for r, h in plain)
