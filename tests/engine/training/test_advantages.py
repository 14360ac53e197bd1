"""Reward baselines and advantages (clawrl_app.engine.training.advantages): tiny tensors,
expected numbers derived by hand (float64, as in test_losses.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from clawrl_app.engine.training.advantages import (
    accepted_baseline,
    advantages_from,
    batch_baseline,
    carries_contrast,
    ema_baseline_update,
    rl_advantages,
)
from tests.engine.training.test_losses import b, t


def test_ema_baseline_update_math() -> None:
    assert ema_baseline_update(None, [1.0, -1.0, 1.0]) == pytest.approx(1 / 3)  # first: mean
    assert ema_baseline_update(0.5, [1.0, 1.0]) == pytest.approx(0.55)  # 0.9·0.5 + 0.1·1
    # decay 0.5: 0.5·0.2 + 0.5·mean(-1, 0) = 0.1 - 0.25 = -0.15
    assert ema_baseline_update(0.2, [-1.0, 0.0], decay=0.5) == pytest.approx(-0.15)
    # two steps: 1.0, then 0.9·1 + 0.1·(-1) = 0.8
    assert ema_baseline_update(ema_baseline_update(None, [1.0]), [-1.0]) == pytest.approx(0.8)
    assert ema_baseline_update(0.3, []) == 0.3  # nothing observed: unchanged
    with pytest.raises(ValueError):
        ema_baseline_update(None, [])
    with pytest.raises(ValueError):
        ema_baseline_update(0.0, [1.0], decay=1.0)


@pytest.mark.parametrize(
    ("kind", "ema", "expected"),
    [
        ("none", None, [1.0, -1.0, 0.0, 1.0]),  # upstream: A = r
        ("batch_mean", None, [2 / 3, -4 / 3, 0.0, 2 / 3]),  # mean over signal (1-1+1)/3 = 1/3
        ("ema", 0.5, [0.5, -1.5, 0.0, 0.5]),
        ("ema", None, [2 / 3, -4 / 3, 0.0, 2 / 3]),  # no EMA yet: this batch's mean
    ],
)
def test_rl_advantages_baselines(kind: Any, ema: float | None, expected: list[float]) -> None:
    rewards = t([1.0, -1.0, 0.0, 1.0], grad=True)
    adv = rl_advantages(rewards, b([True, True, False, True]), kind, ema)
    assert adv.shape == (4,)
    assert not adv.requires_grad
    assert torch.allclose(adv, t(expected))
    assert adv[2].item() == 0.0  # exactly 0, not 0 - baseline


def test_rl_advantages_zero_reward_is_exactly_zero_even_when_flagged() -> None:
    # all flagged, but r = 0 carries no signal: batch mean over the rest = (1+1-1)/3 = 1/3
    adv = rl_advantages(t([1.0, 1.0, -1.0, 0.0]), b([True] * 4), "batch_mean", None)
    assert torch.allclose(adv, t([2 / 3, 2 / 3, -4 / 3, 0.0]))
    assert adv[3].item() == 0.0


def test_rl_advantages_without_signal_and_unknown_kind() -> None:
    adv = rl_advantages(t([1.0, -1.0]), b([False, False]), "batch_mean", None)
    assert torch.equal(adv, t([0.0, 0.0]))
    with pytest.raises(ValueError):
        rl_advantages(t([1.0]), b([True]), "mean", None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "rewards", "centred", "teacher", "ema", "expected"),
    [
        ("batch_mean", [1.0, 1.0], [False, False], [False, False], None, False),  # all liked
        ("batch_mean", [-1.0, -1.0], [False, False], [False, False], None, False),
        ("batch_mean", [1.0, -1.0], [False, False], [False, False], None, True),
        ("batch_mean", [-1.0, -1.0], [False, False], [True, False], None, True),  # a hint
        ("batch_mean", [0.5, 0.5], [True, True], [False, False], None, True),  # env advantages
        ("batch_mean", [0.0, 0.0], [True, True], [False, False], None, False),  # a flat group
        ("batch_mean", [1.0, 0.0, 0.0], [False, True, True], [False] * 3, None, False),
        ("ema", [-1.0, -1.0], [False, False], [False, False], -0.5, True),  # r - ema != 0
        ("ema", [-1.0, -1.0], [False, False], [False, False], -1.0, False),
        ("none", [-1.0, -1.0], [False, False], [False, False], None, True),  # upstream A = r
    ],
)
def test_carries_contrast(
    kind: Any,
    rewards: list[float],
    centred: list[bool],
    teacher: list[bool],
    ema: float | None,
    expected: bool,
) -> None:
    has = [True] * len(rewards)
    assert carries_contrast(kind, rewards, has, centred, teacher, ema) is expected
    # a sample without a reward carries none, whatever its value
    assert not carries_contrast("batch_mean", [1.0, -1.0], [True, False], [False] * 2, [False] * 2)
    with pytest.raises(ValueError, match="differ in length"):
        carries_contrast(kind, rewards, has, centred, [False], ema)


def test_a_batch_of_acceptances_is_credited_against_the_rewards_before_it() -> None:
    """All +1 after mostly -1: A = +1 (baseline max(0, earlier) = 0); after a mix: A = 1 - 0.5;
    after as good: no contrast; a batch of -1 after +1s still has none (one-sided)."""
    ones, has, flat = [1.0] * 4, [True] * 4, [False] * 4
    assert accepted_baseline(1.0, -0.8) == 0.0 and accepted_baseline(1.0, 0.5) == 0.5
    assert accepted_baseline(0.5, 0.9) == 0.5  # never above the batch's own mean
    assert batch_baseline("batch_mean", ones, has, None, earlier=-0.8) == 0.0
    assert batch_baseline("batch_mean", ones, has, None, earlier=0.5) == 0.5
    assert batch_baseline("batch_mean", ones, has, None, earlier=None) == 1.0  # no history
    assert carries_contrast("batch_mean", ones, has, flat, flat, None, earlier=-0.8)
    assert carries_contrast("batch_mean", ones, has, flat, flat, None, earlier=0.5)
    assert not carries_contrast("batch_mean", ones, has, flat, flat, None, earlier=1.0)
    assert not carries_contrast("batch_mean", ones, has, flat, flat, None, earlier=None)
    assert not carries_contrast("batch_mean", [-1.0] * 4, has, flat, flat, None, earlier=0.9)
    # a mixed batch keeps its own mean; `ema` and `none` are unchanged
    assert batch_baseline("batch_mean", [1.0, -1.0], [True] * 2, None, earlier=-1.0) == 0.0
    assert batch_baseline("ema", ones, has, 0.2, earlier=-1.0) == 0.2
    assert batch_baseline("none", ones, has, None, earlier=-1.0) == 0.0
    adv = advantages_from(t(ones), b(has), batch_baseline("batch_mean", ones, has, None, 0.25))
    assert torch.allclose(adv, t([0.75] * 4))
