"""The real app as a user runs it: `clawrl-app serve` in its own process group, killed with
SIGKILL at any moment and started again on the same home and port.

Shared by tests/reliability/test_kill9.py and bench/chaos.py. Everything started here is
tracked (the app and every process it spawned), so `close()` can stop all of it, also
processes the app left behind when it was killed (a trainer in its own process group).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from clawrl_app.config import UPSTREAM_ENV


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def app_env(home: Path, model_dir: Path, port: int, extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without the developer's CLAWRL_* and upstream variables,
    plus the app's home, model, port and `extra` settings (`CLAWRL_SECTION__FIELD`)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("CLAWRL_") and k not in UPSTREAM_ENV
    }
    env.update(
        CLAWRL_HOME=str(home),
        CLAWRL_MODEL__PATH=str(model_dir),
        CLAWRL_SERVER__PORT=str(port),
        CUDA_VISIBLE_DEVICES="",
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        CLAWRL_GUARD__ENABLED="false",  # the guard's own tests turn it on
        CLAWRL_HARDWARE__BACKEND="torch",  # llama.cpp has its own end-to-end tests
        CLAWRL_TRAIN__ANCHOR_COEF="0",  # the anchor's own tests turn it on
    )
    env.update(extra)
    return env


@dataclass
class Start:
    """One start of the app: how long until /readyz said 200 (None: it never did)."""

    pid: int
    ready_s: float | None
    version: str | None = None
    error: str | None = None


@dataclass
class Kill:
    """One kill -9: which processes died with the app and which outlived it."""

    at: float
    tree: bool
    during_start: bool = False
    """Before /readyz said 200 (model loading, migrations, the trainer starting)."""
    killed: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    survivor_lifetimes_s: list[float] = field(default_factory=list)
    """How long each survivor lived on after the kill (it is killed at `close()` at the latest)."""


class AppProcess:
    """`clawrl-app serve` on `home` and `port`; its output is appended to `log_path`."""

    def __init__(self, home: Path, env: dict[str, str], port: int, log_path: Path) -> None:
        self.home = home
        self.env = env
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._spawned_at = 0.0
        self.starts: list[Start] = []
        self.kills: list[Kill] = []
        self._seen: dict[int, psutil.Process] = {}  # every process of ours, by pid

    # -- start ------------------------------------------------------------------------
    def start(self, ready_timeout_s: float = 180.0) -> Start:
        """Start the app and wait for /readyz 200; a start that fails is recorded, not raised."""
        self.spawn()
        return self.wait_ready(ready_timeout_s)

    def spawn(self) -> None:
        """Start `clawrl-app serve` without waiting for it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== start {len(self.starts) + 1} at {time.time():.3f} ===\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "clawrl_app.cli", "serve"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: kill -9 takes all of it
            )
        self._spawned_at = time.monotonic()
        self._track()

    def wait_ready(self, ready_timeout_s: float = 180.0) -> Start:
        """Wait for /readyz 200 of the process `spawn` started; records the start."""
        assert self.proc is not None
        start = Start(self.proc.pid, None)
        t0 = self._spawned_at
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() - t0 < ready_timeout_s:
                self._track()
                self.note_survivor_exits()  # the previous run's leftovers, while we wait
                if self.proc.poll() is not None:
                    start.error = f"exited with code {self.proc.returncode} before ready"
                    break
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    r = client.get(f"{self.base}/readyz")
                    if r.status_code == 200:
                        start.ready_s = time.monotonic() - t0
                        start.version = str(r.json().get("version"))
                        break
                time.sleep(0.2)
            else:
                start.error = f"/readyz not 200 within {ready_timeout_s:.0f} s"
        self.starts.append(start)
        return start

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _track(self) -> None:
        """Remember the app and all its descendants (the trainer starts in its own group)."""
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                self._seen.setdefault(p.pid, p)

    def processes(self) -> list[psutil.Process]:
        """The app and its descendants alive now."""
        self._track()
        if self.proc is None:
            return []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        return []

    # -- kill -------------------------------------------------------------------------
    def kill9(self, tree: bool = False, during_start: bool = False) -> Kill:
        """SIGKILL the app's process group (`tree`: also every descendant, whatever its
        group, as an OOM killer of the whole session would). Returns who outlived it."""
        assert self.proc is not None
        family = self.processes()
        kill = Kill(time.time(), tree, during_start)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if tree:
            for p in family:
                with contextlib.suppress(psutil.Error):
                    p.kill()
        self.proc.wait(30)
        _, alive = psutil.wait_procs(family, timeout=2)
        kill.killed = [p.pid for p in family if p not in alive]
        kill.survivors = [p.pid for p in alive]
        self.kills.append(kill)
        return kill

    def survivors_alive(self) -> list[psutil.Process]:
        """Processes that outlived a kill of the app and still run."""
        out = []
        for k in self.kills:
            for pid in k.survivors:
                p = self._seen.get(pid)
                if p is not None and p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
        return out

    def note_survivor_exits(self) -> None:
        """Record how long each survivor of a kill lived on (call it now and then)."""
        now = time.time()
        for k in self.kills:
            for i, pid in enumerate(k.survivors):
                if len(k.survivor_lifetimes_s) > i:
                    continue
                p = self._seen.get(pid)
                if p is None or not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                    k.survivor_lifetimes_s.append(now - k.at)
                else:
                    break  # keep the order: lifetimes[i] belongs to survivors[i]

    # -- stop -------------------------------------------------------------------------
    def stop(self, timeout_s: float = 60.0) -> int | None:
        """Stop the app the normal way (SIGTERM, as Ctrl-C does); SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self._track()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)

    def close(self) -> list[int]:
        """Stop the app and kill whatever of ours still runs; returns the pids killed here."""
        self.stop()
        self.note_survivor_exits()
        leftovers = [
            p for p in self._seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]
        for p in leftovers:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(leftovers, timeout=5)
        self.note_survivor_exits()
        return [p.pid for p in leftovers]

    def __enter__(self) -> AppProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
