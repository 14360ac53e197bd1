"""Sharing the CPU between the endpoint and the trainer: the flag, the pause budget and the
pause points inside a real training forward/backward of the embedded model."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.engine.core.cpu_share import BusyFlag, PauseBudget, ServingActivity, wait_while_busy


def _raise_flag(path: str) -> None:
    BusyFlag(path).set(True)


def test_flag_is_shared_between_processes_and_private(tmp_path: Path) -> None:
    flag = BusyFlag(tmp_path / "busy.flag", create=True)
    assert not flag.busy()
    assert (tmp_path / "busy.flag").stat().st_mode & 0o777 == 0o600
    proc = mp.get_context("spawn").Process(target=_raise_flag, args=(str(flag.path),))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    assert flag.busy()  # written by the other process, read through our mapping


def test_flag_file_must_exist_unless_created(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        BusyFlag(tmp_path / "missing.flag")


def test_activity_raises_the_flag_while_any_answer_is_generated(tmp_path: Path) -> None:
    flag = BusyFlag(tmp_path / "busy.flag", create=True)
    act = ServingActivity(flag)
    act.begin()
    act.begin()
    act.end()
    assert flag.busy() and act.active == 1  # one answer still running
    act.end()
    assert not flag.busy()
    act.end()  # an unmatched end never goes negative
    assert act.active == 0 and not flag.busy()


class FakeClock:
    """Time that advances only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_wait_returns_at_once_when_serving_is_idle() -> None:
    budget = PauseBudget(30)
    clock = FakeClock()
    assert wait_while_busy(lambda: False, budget, clock=clock, sleep=clock.sleep) == 0.0
    assert budget.paused_s == 0.0 and clock.now == 100.0


def test_wait_lasts_until_serving_ends() -> None:
    budget = PauseBudget(30)
    clock = FakeClock()
    # busy for 1.0 s of (fake) time, checked every 0.25 s
    waited = wait_while_busy(
        lambda: clock.now < 101.0, budget, clock=clock, sleep=clock.sleep, poll_s=0.25
    )
    assert waited == pytest.approx(1.0)
    assert budget.paused_s == pytest.approx(1.0) and budget.left_s == pytest.approx(29.0)


def test_budget_caps_the_pause_per_step_and_reset_restores_it() -> None:
    budget = PauseBudget(2.0)
    clock = FakeClock()
    always = lambda: True  # noqa: E731  (a request stream that never ends)
    first = wait_while_busy(always, budget, clock=clock, sleep=clock.sleep, poll_s=0.5)
    assert first == pytest.approx(2.0)  # 4 polls of 0.5 s, then the budget is spent
    assert wait_while_busy(always, budget, clock=clock, sleep=clock.sleep) == 0.0
    budget.reset()
    assert budget.left_s == 2.0


def test_zero_budget_never_pauses() -> None:
    clock = FakeClock()
    assert wait_while_busy(lambda: True, PauseBudget(0), clock=clock, sleep=clock.sleep) == 0.0


def test_pause_points_hold_a_real_forward_and_backward(embedded_model: Any, tmp_path: Path) -> None:
    """Each decoder layer of the embedded model pauses in forward and in backward while the
    flag is up; the gradients are the same as without pause points."""
    import torch

    from clawrl_app.engine.training.pause_points import decoder_layers, install_pause_points
    from clawrl_app.models import load_model

    model, _tok = load_model(embedded_model)  # its own copy: hooks stay on the module
    n_layers = len(decoder_layers(model))
    assert n_layers == model.config.num_hidden_layers
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    for p in model.parameters():
        p.requires_grad_(False)
    head = model.get_input_embeddings().weight
    head.requires_grad_(True)
    model.zero_grad(set_to_none=True)
    model(ids).logits.sum().backward()
    reference = head.grad.clone()  # type: ignore[union-attr]

    flag = BusyFlag(tmp_path / "busy.flag", create=True)
    budget = PauseBudget(30)
    calls: list[float] = []

    def pause() -> None:
        calls.append(wait_while_busy(flag.busy, budget))

    handles = install_pause_points(model, pause)
    assert handles == n_layers
    flag.set(True)
    t0 = time.monotonic()
    threading.Timer(0.3, flag.set, args=(False,)).start()
    model.zero_grad(set_to_none=True)
    model(ids).logits.sum().backward()
    assert time.monotonic() - t0 >= 0.3  # held until serving ended
    assert len(calls) == 2 * n_layers  # before each layer, and at each layer's gradient
    # the first layer waited from its pre-hook until the flag dropped (the ms before the
    # first hook ran are not paused; under load they can be tens of ms)
    assert budget.paused_s > 0.2
    assert torch.allclose(head.grad, reference)  # type: ignore[arg-type]
