"""kill -9 of the app leaves no trainer behind. The trainer runs in its own process group
(so stopping it never touches the endpoint), so a crash of the app used to leave it
running: idle for as long as no sample came (holding its memory), or finishing the step
under way and registering it while the next start's trainer took the same samples."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.reliability.app_process import AppProcess, app_env, free_port

pytestmark = pytest.mark.slow


def trainers(app: AppProcess) -> list[psutil.Process]:
    """The trainer process itself (the child of `accelerate launch`)."""
    out = []
    for p in app.processes():
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if cmd[1:3] == ["-m", "clawrl_app.engine.training.trainer"]:
            out.append(p)
    return out


def wait_idle_trainer(app: AppProcess, timeout_s: float = 400.0) -> psutil.Process:
    """The trainer once it has loaded and only polls the store (< 0.05 core over 1 s): it
    writes nothing any more, so a broken output pipe cannot end it by accident."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = trainers(app)
        if not found:
            time.sleep(0.5)
            continue
        try:
            t0 = sum(found[0].cpu_times()[:2])
            time.sleep(1.0)
            if sum(found[0].cpu_times()[:2]) - t0 < 0.05:
                return found[0]
        except psutil.Error:
            pass
    raise AssertionError("the trainer did not start and settle")


@pytest.mark.timeout(600)
def test_the_trainer_of_a_killed_app_exits_by_itself(embedded_model: Any, tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    env = app_env(home, embedded_model.path, port, {"CLAWRL_TRAIN__BATCH_SIZE": "2"})
    with AppProcess(home, env, port, tmp_path / "app.log") as app:
        assert app.start().ready_s is not None, app.log_path.read_text()[-3000:]
        orphan = wait_idle_trainer(app)
        assert app.proc is not None
        # its own process group: the kill below cannot reach it (it may notice and exit
        # within kill9's 2 s grace, so "survived the kill" is not the right check)
        assert os.getpgid(orphan.pid) != os.getpgid(app.proc.pid)
        app.kill9(tree=False)  # the app's process group only, as a crash would
        _, alive = psutil.wait_procs([orphan], timeout=15)
        assert not alive, "the trainer of the killed app is still running"
