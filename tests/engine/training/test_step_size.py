"""`step_size.signal_lr`: a step's rate in proportion to its gradient's norm, up to lr."""

from __future__ import annotations

import math

import pytest
import torch

from clawrl_app.engine.training.step_size import set_lr, signal_lr


@pytest.mark.parametrize(
    ("grad_norm", "signal_norm", "expected"),
    [
        (0.005, 0.25, 1e-5),  # a batch that says little: 2 % of the rate
        (0.125, 0.25, 2.5e-4),
        (0.25, 0.25, 5e-4),
        (1.7, 0.25, 5e-4),  # a strong signal: the full rate, never more
        (0.0, 0.25, 0.0),
        (0.005, 0.0, 5e-4),  # off
        (math.nan, 0.25, 5e-4),  # not this function's business
    ],
)
def test_signal_lr(grad_norm: float, signal_norm: float, expected: float) -> None:
    assert signal_lr(5e-4, grad_norm, signal_norm) == pytest.approx(expected)


def test_set_lr_sets_every_group_and_adam_then_moves_in_proportion() -> None:
    """Adam's first step moves each weight by ~lr whatever the gradient's size (the reason
    for `signal_lr`); at the scaled rate a 50x weaker gradient moves it 50x less."""

    def first_step(grad: float, lr: float) -> float:
        w = torch.nn.Parameter(torch.zeros(3))
        opt = torch.optim.AdamW([w, torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        set_lr(opt, lr)
        assert all(g["lr"] == lr for g in opt.param_groups)
        w.grad = torch.full((3,), grad)
        opt.step()
        return float(w.abs().max())

    assert first_step(1e-4, 5e-4) == pytest.approx(first_step(5e-3, 5e-4), rel=1e-3)
    weak = first_step(1e-4, signal_lr(5e-4, 0.005, 0.25))
    strong = first_step(5e-3, signal_lr(5e-4, 0.25, 0.25))
    assert weak == pytest.approx(strong / 50, rel=1e-3)
