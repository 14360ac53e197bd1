"""A training step's figures: share-weighted totals over micro-batches, and the metrics row
the trainer registers with each checkpoint (the Dashboard's curves, `/admin/status`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from clawrl_app.engine.training.train_data import TrainItem


def weighted_totals(
    parts: list[tuple[float, torch.Tensor, Mapping[str, float]]],
) -> dict[str, float]:
    """Share-weighted sums over micro-batches of the loss and of each statistic."""
    losses = torch.stack([loss.float() for _, loss, _ in parts]).tolist() if parts else []
    totals: dict[str, float] = {}
    for (share, _, stats), loss in zip(parts, losses, strict=True):
        totals["loss"] = totals.get("loss", 0.0) + loss * share
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + float(v) * share
    return totals


def step_metrics(
    items: Sequence[TrainItem],
    totals: Mapping[str, float],
    grad_norm: float,
    lr: float,
    updates: int,
    step_s: float,
    paused_s: float,
) -> dict[str, float]:
    """The step's metrics from the global batch `items` and the summed `totals` of its last
    update; non-finite values are left out."""
    rewards = [it.reward for it in items]
    metrics = {
        "loss": totals.get("loss", 0.0),
        "pg_loss": totals.get("pg_loss", 0.0),
        "clip_frac": totals.get("clip_frac", 0.0),
        "ratio_mean": totals.get("ratio_mean", 1.0),
        "kl": totals.get("kl", 0.0),
        "entropy": totals.get("entropy", 0.0),
        "reward/mean": sum(rewards) / len(rewards),
        "adv/mean": totals.get("adv_mean", 0.0),
        "adv/std": totals.get("adv_std", 0.0),
        "samples/rl": float(sum(it.has_reward and it.teacher_logprobs is None for it in items)),
        "samples/opd": float(
            sum(not it.has_reward and it.teacher_logprobs is not None for it in items)
        ),
        "samples/both": float(
            sum(it.has_reward and it.teacher_logprobs is not None for it in items)
        ),
        "samples/replayed": float(sum(it.replayed for it in items)),
        "tokens": float(sum(len(it.response_ids) for it in items)),
        "optim/grad_norm": grad_norm,
        "optim/lr": lr,
        "optim/updates": float(updates),
        "time/step_s": step_s,
        "time/paused_s": paused_s,
    }
    return {k: v for k, v in metrics.items() if math.isfinite(v)}
