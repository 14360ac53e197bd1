"""A shutdown stage that hangs is left behind after its bound, and the log says where it hangs."""

from __future__ import annotations

import asyncio
import logging

import pytest

from clawrl_app.engine.orchestrator import _bounded


def test_a_hanging_stage_is_left_behind_and_the_stuck_task_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    released = False

    async def stubborn() -> None:
        """A loop that swallows its cancellation until released (what is being diagnosed)."""
        while not released:
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                continue

    async def go() -> float:
        nonlocal released
        task = asyncio.create_task(stubborn(), name="stubborn-loop")
        await asyncio.sleep(0)
        task.cancel()
        t0 = asyncio.get_running_loop().time()
        await _bounded("loops", asyncio.gather(task, return_exceptions=True), timeout_s=0.2)
        waited = asyncio.get_running_loop().time() - t0
        released = True
        await asyncio.gather(task, return_exceptions=True)
        return waited

    with caplog.at_level(logging.WARNING, logger="clawrl.engine"):
        waited = asyncio.run(go())
    assert waited < 2.0, "the bound holds even though the task ignores its cancellation"
    assert "stopping the loops took over 0 s" in caplog.text
    assert "still running: stubborn-loop at stubborn" in caplog.text


def test_a_stage_that_ends_in_time_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def quick() -> None:
        await asyncio.sleep(0.01)

    with caplog.at_level(logging.WARNING, logger="clawrl.engine"):
        asyncio.run(_bounded("endpoint", quick(), timeout_s=5))
    assert caplog.text == ""
