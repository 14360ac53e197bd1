"""Killing the engine (kill -9) while it judges, then restarting, loses and duplicates nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawrl_app.engine.store import Store
from clawrl_app.paths import app_paths

pytestmark = pytest.mark.slow

SLOW_REWARD = """
import time
from pathlib import Path

def reward(turn, next_state, context):
    time.sleep(1.0)  # a slow judge, so the kill lands mid-judging
    with open(Path(__file__).with_name("calls.log"), "a") as f:
        f.write(f"{turn['id']}\\n")
    return 1
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(home: Path, model_dir: Path, plugin: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "CLAWRL_HOME": str(home),
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "4",
        "CLAWRL_TRAIN__ENABLED": "false",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clawrl_app.cli",
            "serve",
            "--port",
            str(port),
            "--custom-reward-path",
            str(plugin),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode()[-2000:])  # type: ignore[union-attr]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("engine did not become ready")


def judged_ids(home: Path) -> list[int]:
    with Store(app_paths(home).store_file) as store:
        return [
            s.id
            for sess in store.list_sessions(limit=100)
            for s in store.samples_for_session(sess.id)
            if s.state == "judged"
        ]


def test_kill_during_judging_then_restart_completes_without_duplicates(
    embedded_model: Any, tmp_path: Path
) -> None:
    plugin = tmp_path / "slow_reward.py"
    plugin.write_text(SLOW_REWARD)
    home, port = tmp_path / "home", free_port()
    proc = serve(home, embedded_model.path, plugin, port)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    sessions = 6
    try:
        for k in range(sessions):  # two main turns each: the first gets a next state
            first = [{"role": "user", "content": f"Question {k}?"}]
            r = httpx.post(
                url,
                timeout=60,
                headers={"X-Session-Id": f"r{k}"},
                json={"model": "clawrl", "messages": first, "temperature": 0},
            )
            answer = r.json()["choices"][0]["message"]["content"]
            second = [
                *first,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "thanks"},
            ]
            httpx.post(
                url,
                timeout=60,
                headers={"X-Session-Id": f"r{k}", "X-Session-Done": "1"},
                json={"model": "clawrl", "messages": second, "temperature": 0},
            )
        calls = tmp_path / "calls.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            not calls.exists() or len(calls.read_text().split()) < 2
        ):
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # mid-judging: the third call is under way
        proc.wait(10)
        before = judged_ids(home)
        assert 1 <= len(before) < sessions
        proc = serve(home, embedded_model.path, plugin, port)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(judged_ids(home)) < sessions:
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
    after = judged_ids(home)
    assert len(after) == sessions and len(set(after)) == sessions
    assert set(before) <= set(after)
    with Store(app_paths(home).store_file) as store:
        judgments = [store.get_judgment(i) for i in after]
        assert all(j is not None and j.score == 1 and j.backend == "custom" for j in judgments)
        assert store.integrity_check() == "ok"
    # the plugin ran once per sample, plus at most the one call cut off by the kill
    called = calls.read_text().split()
    assert len(set(called)) == sessions and len(called) <= sessions + 1
