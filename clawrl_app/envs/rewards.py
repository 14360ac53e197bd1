"""Rewards of env rollouts (ENVS.md §5.4): outcome maps, step-judge (PRM) composition and
group-relative advantages. Pure functions.

Every model turn of an episode is its own training sample ("dynamic history"), so the
result is one value per turn. `sequence` mode: the episode's reward `outcome + coef *
mean(step scores)` for each of its turns, centred on the group's mean. `step` mode: each
turn's `outcome + coef * step score`, centred on the mean of the group's turns at the same
step index. Episodes that are not trainable (infrastructure failures) get None and never
count in the group's statistics. Values are clipped to [-1, 1], the range of the store's
reward column and of the binary-RL advantage the trainer expects; a group whose values
are all equal teaches nothing and gets zeros (the trainer skips reward-0 samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from clawrl_app.envs.base import Episode

DEFAULT_COEF = 0.5  # below the outcome's weight: a judge cannot cancel the verifier


def pass_fraction_reward(score: float) -> float:
    """Terminal: 2 * (fraction of tests passed) - 1."""
    return 2.0 * max(0.0, min(1.0, score)) - 1.0


def binary_reward(success: bool) -> float:
    """Tool-call, SWE, browser: +1 solved, -1 otherwise."""
    return 1.0 if success else -1.0


def _clip(x: float) -> float:
    return max(-1.0, min(1.0, x))


def centre(values: Sequence[float], scale_std: bool = False) -> list[float]:
    """Values minus their mean (divided by their std when `scale_std`); zeros when all equal."""
    if not values:
        return []
    mean = sum(values) / len(values)
    dev = [v - mean for v in values]
    if all(abs(d) < 1e-12 for d in dev):
        return [0.0] * len(values)
    if scale_std:
        std = math.sqrt(sum(d * d for d in dev) / len(dev))
        dev = [d / std for d in dev]
    return dev


def episode_reward(ep: Episode, coef: float = DEFAULT_COEF) -> float | None:
    """`outcome + coef * mean(step scores)` (sequence mode); None when not trainable."""
    if not ep.trainable or ep.outcome_reward is None:
        return None
    steps = [t.judge_score for t in ep.turns if t.judge_score is not None]
    return ep.outcome_reward + (coef * sum(steps) / len(steps) if steps else 0.0)


def turn_advantages(
    group: Sequence[Episode],
    *,
    mode: str = "sequence",
    coef: float = DEFAULT_COEF,
    scale_std: bool = False,
) -> list[list[float] | None]:
    """One advantage per turn of each episode of a rollout group (same task)."""
    if mode not in ("sequence", "step"):
        raise ValueError(f"reward mode must be sequence or step, not {mode!r}")
    out: list[list[float] | None] = [None] * len(group)
    live = [i for i, ep in enumerate(group) if ep.trainable and ep.outcome_reward is not None]
    if mode == "sequence":
        rewards = [episode_reward(group[i], coef) or 0.0 for i in live]
        for i, adv in zip(live, centre(rewards, scale_std), strict=True):
            out[i] = [_clip(adv)] * len(group[i].turns)
        return out
    per_turn = {
        i: [
            float(group[i].outcome_reward or 0.0) + coef * (t.judge_score or 0.0)
            for t in group[i].turns
        ]
        for i in live
    }
    for i in live:
        out[i] = [0.0] * len(group[i].turns)
    depth = max((len(v) for v in per_turn.values()), default=0)
    for k in range(depth):
        at = [i for i in live if k < len(per_turn[i])]
        for i, adv in zip(at, centre([per_turn[i][k] for i in at], scale_std), strict=True):
            out[i][k] = _clip(adv)  # type: ignore[index]
    return out
