"""Start the trainer as N rank processes that live and die together.

`python -m clawrl_app.engine.training.rank_launch --nproc N -- <trainer args>` starts N
copies of `python -m clawrl_app.engine.training.trainer <trainer args>` with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free loopback
port). Unlike torchrun's agent, which puts each worker in a session of its own, the ranks
stay in this launcher's process group, the one the supervisor starts and signals: stopping
the trainer (SIGTERM, then SIGKILL to the group) reaches every rank, and no rank outlives
it. If one rank exits with an error (a crash, an OOM kill, `kill -9`), the others are
terminated (SIGTERM, SIGKILL after `--grace-s`) and the launcher exits with that rank's
code, so the supervisor restarts the whole trainer with backoff. Each rank also asks the
kernel for SIGTERM should the launcher die first (Linux).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

TRAINER_MODULE = "clawrl_app.engine.training.trainer"


def free_port() -> int:
    """A TCP port free on the loopback interface right now (the ranks' rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(base: dict[str, str], rank: int, world: int, port: int) -> dict[str, str]:
    """The environment of rank `rank` of `world` on this machine."""
    return {
        **base,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def exit_code(rc: int) -> int:
    """A shell-style exit code for a child's return code (a signal N becomes 128 + N)."""
    return 128 - rc if rc < 0 else rc


class RankGroup:
    """The N rank processes; `wait()` returns once all succeeded or one failed."""

    def __init__(self, cmd: Sequence[str], world: int, grace_s: float = 10.0) -> None:
        port = free_port()
        env = dict(os.environ)
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        self.grace_s = grace_s
        self.procs = [
            subprocess.Popen(list(cmd), env=rank_env(env, r, world, port), preexec_fn=preexec)
            for r in range(world)
        ]

    def terminate(self) -> None:
        """SIGTERM every live rank, SIGKILL those still alive after the grace period."""
        live = [p for p in self.procs if p.poll() is None]
        for p in live:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        deadline = time.monotonic() + self.grace_s
        for p in live:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait()

    def wait(self, poll_s: float = 0.1) -> int:
        """0 when every rank exited 0; else the first failing rank's code (the others are
        terminated first)."""
        while True:
            codes = [p.poll() for p in self.procs]
            failed = [rc for rc in codes if rc is not None and rc != 0]
            if failed:
                self.terminate()
                return exit_code(failed[0])
            if all(rc == 0 for rc in codes):
                return 0
            time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="clawrl-rank-launch",
        description="Run the trainer as N rank processes in one process group.",
    )
    ap.add_argument("--nproc", type=int, required=True, help="number of ranks (>= 1)")
    ap.add_argument("--grace-s", type=float, default=10.0, help="SIGTERM-to-SIGKILL delay")
    ap.add_argument("trainer_args", nargs=argparse.REMAINDER, help="-- then the trainer's")
    args = ap.parse_args(argv)
    if args.nproc < 1:
        ap.error("--nproc must be at least 1")
    rest = args.trainer_args[1:] if args.trainer_args[:1] == ["--"] else args.trainer_args
    group = RankGroup([sys.executable, "-m", TRAINER_MODULE, *rest], args.nproc, args.grace_s)

    def stop(signum: int, _frame: FrameType | None) -> None:
        group.terminate()
        sys.exit(exit_code(-signum))

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return group.wait()


if __name__ == "__main__":
    sys.exit(main())
