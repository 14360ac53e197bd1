"""`clawrl-app serve` as a subprocess for bench/gpu.py: start, wait ready, admin routes,
memory per process (GPU memory from nvidia-smi, else RSS), and a stop that leaves nothing.

The trainer is started by the engine in its own session (process group), so stopping the
server's group alone could orphan it: every descendant seen while the server ran is
remembered and killed if it outlives the server's own shutdown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

MIB = 1024**2


def say(msg: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[gpu-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gpu_memory_by_pid() -> dict[int, float] | None:
    """MiB of GPU memory per process from nvidia-smi; None where nvidia-smi is absent."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    usage: dict[int, float] = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            with contextlib.suppress(ValueError):
                usage[int(parts[0])] = usage.get(int(parts[0]), 0.0) + float(parts[1])
    return usage


class Server:
    """One `clawrl-app serve` process with its own home, port and settings."""

    def __init__(
        self, name: str, work: Path, env: dict[str, str], backend: str, use_gpu: bool
    ) -> None:
        self.name = name
        self.home = work / f"home-{name}"
        self.port = free_port()
        self.log_path = work / f"serve-{name}.log"
        self.env = {
            **os.environ,
            **env,
            "CLAWRL_HOME": str(self.home),
            "CLAWRL_SERVER__PORT": str(self.port),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        if not use_gpu:
            self.env["CUDA_VISIBLE_DEVICES"] = ""  # the plan then puts everything on the CPU
        self.backend = backend
        self.use_gpu = use_gpu
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.peak_mib: dict[str, float] = {}
        self.pids_unmatched = False
        """nvidia-smi lists GPU processes but none of ours (another PID namespace)."""
        self.http = httpx.Client(base_url=self.base, timeout=60)
        self._halt = threading.Event()
        self._monitor: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/v1"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, timeout_s: float) -> float:
        """Start and wait until /readyz answers 200; returns the seconds it took."""
        exe = Path(sys.executable).with_name("clawrl-app")
        cmd = [str(exe), "serve", "--backend", self.backend, "--port", str(self.port)]
        say(f"{self.name}: {' '.join(cmd[1:])} (home {self.home}, log {self.log_path})")
        self.home.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        self._monitor = threading.Thread(target=self._watch, name=f"mem-{self.name}", daemon=True)
        self._monitor.start()
        last = 0.0
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name}: clawrl-app serve exited with {self.proc.returncode}:\n"
                    + self.log_tail()
                )
            with contextlib.suppress(httpx.HTTPError):
                if self.http.get("/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            if time.monotonic() - last > 15:
                say(f"{self.name}: waiting for /readyz ({time.monotonic() - t0:.0f} s)")
                last = time.monotonic()
            time.sleep(0.25)
        raise TimeoutError(f"{self.name}: not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def stop(self, grace_s: float = 60.0) -> None:
        """SIGTERM the server (it stops its trainer), then kill whatever it left behind."""
        self._halt.set()
        if self._monitor is not None:
            self._monitor.join(10)
        self._remember_tree()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                say(f"{self.name}: did not stop within {grace_s:.0f} s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        left = [p for p in self.seen.values() if _alive(p)]
        for p in left:  # is_running() checks the creation time: never a recycled pid
            with contextlib.suppress(psutil.Error):
                p.kill()
        if left:
            say(f"{self.name}: killed {len(left)} leftover process(es)")
        self.http.close()

    # -- processes and memory -----------------------------------------------------------
    def _remember_tree(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        for p in tree:
            self.seen.setdefault(p.pid, p)
        return tree

    def roles(self) -> dict[str, list[psutil.Process]]:
        """`serving` (the server process, and an SGLang child) and `trainer` (its tree)."""
        tree = self._remember_tree()
        if not tree:
            return {}
        trainer_pid = None
        with contextlib.suppress(httpx.HTTPError, KeyError, TypeError, ValueError):
            trainer_pid = self.status()["training"]["pid"]
        trainer: list[psutil.Process] = []
        if trainer_pid is not None:
            with contextlib.suppress(psutil.Error):
                t = psutil.Process(trainer_pid)
                trainer = [t, *t.children(recursive=True)]
        ids = {p.pid for p in trainer}
        return {"serving": [p for p in tree if p.pid not in ids], "trainer": trainer}

    def memory_mib(self) -> dict[str, float]:
        """MiB per role now: GPU memory (nvidia-smi) when serving on a GPU, else RSS."""
        roles = self.roles()
        gpu = gpu_memory_by_pid() if self.use_gpu else None
        if gpu:
            ours = {p.pid for procs in roles.values() for p in procs}
            self.pids_unmatched = not ours & set(gpu)
        out = {}
        for role, procs in roles.items():
            if gpu is not None:
                out[role] = sum(gpu.get(p.pid, 0.0) for p in procs)
            else:
                total = 0.0
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss / MIB
                out[role] = total
        return out

    def _watch(self) -> None:
        while not self._halt.wait(1.0):
            try:
                for role, mib in self.memory_mib().items():
                    self.peak_mib[role] = max(self.peak_mib.get(role, 0.0), mib)
            except Exception as exc:  # the server may be going away; never kill the bench
                say(f"{self.name}: memory sample failed: {exc}")

    # -- admin routes --------------------------------------------------------------------
    def _get(self, path: str, **params: Any) -> Any:
        r = self.http.get(path, params=params or None)
        r.raise_for_status()
        return r.json()

    def status(self) -> dict[str, Any]:
        return dict(self._get("/admin/status"))

    def checkpoints(self) -> list[dict[str, Any]]:
        return list(self._get("/admin/checkpoints")["data"])

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:  # the route pages 500 at a time
            page = self._get("/admin/events", since=since)["data"]
            out += page
            if len(page) < 500:
                return out
            since = page[-1]["id"]

    def metric(self, name: str) -> list[float]:
        return [v for _, v in self._get("/admin/metrics", names=name)["data"].get(name, [])]

    def feedback(self, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post("/v1/feedback", json=body)
        r.raise_for_status()
        return dict(r.json())


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
