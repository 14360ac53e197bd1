"""Run one command as a child process with rlimits, a wall-clock limit that kills its whole
process group, and capped output. Shared by the bubblewrap and the rlimit sandboxes."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from clawrl_app.envs.sandbox.base import ExecResult, SandboxError
from clawrl_app.envs.sandbox.limits import ResourceLimits
from clawrl_app.envs.sandbox.pids_cgroup import PidsCgroup
from clawrl_app.envs.sandbox.text import CappedReader

MB = 1024 * 1024


def user_process_count(uid: int | None = None) -> int:
    """How many processes the real user `uid` (default: ours) has now (from /proc)."""
    uid = os.getuid() if uid is None else uid
    n = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        n += int(line.split()[1]) == uid
                        break
        except OSError:
            continue  # it ended meanwhile
    return n


def _rlimits(limits: ResourceLimits, nproc: int, group: PidsCgroup | None) -> None:
    """In the child, before exec. RLIMIT_NPROC counts every process of the real user (the
    user's desktop too), so it is set to what the user has now plus the command's budget:
    a fork bomb stops there instead of filling the machine's pid table before the wall
    limit kills it. The kernel never applies RLIMIT_NPROC to root, so where a pids cgroup
    could be made the child enters it first: that cap holds for every user."""
    if group is not None:
        with contextlib.suppress(OSError):  # then the rlimit alone applies
            group.enter()
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_mb * MB,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.address_space_mb is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_mb * MB,) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_limited(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    limits: ResourceLimits,
    cwd: str | None = None,
    stdin: str | None = None,
) -> ExecResult:
    """Run `argv`; never raises for what the command does, SandboxError if it cannot start."""
    nproc = user_process_count() + limits.processes
    group = PidsCgroup.create(limits.processes)
    try:
        return _run(argv, env=env, limits=limits, cwd=cwd, stdin=stdin, nproc=nproc, group=group)
    finally:
        if group is not None:
            group.close()  # every process it left, in or out of its process group


def _run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    limits: ResourceLimits,
    cwd: str | None,
    stdin: str | None,
    nproc: int,
    group: PidsCgroup | None,
) -> ExecResult:
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,  # its own process group: killed as a whole
            preexec_fn=lambda: _rlimits(limits, nproc, group),  # noqa: PLW1509 (no threads touched here)
            close_fds=True,
        )
    except OSError as exc:
        raise SandboxError(f"could not start {argv[0]}: {exc}") from exc
    assert proc.stdout is not None and proc.stderr is not None
    out = CappedReader(proc.stdout, limits.output_bytes)
    err = CappedReader(proc.stderr, limits.output_bytes)
    if stdin is not None and proc.stdin is not None:
        try:
            proc.stdin.write(stdin.encode())
            proc.stdin.close()
        except OSError:
            pass
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _kill_group(proc)  # whatever it left behind in its group goes too
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    out.join(2.0)
    err.join(2.0)
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return ExecResult(
        exit_code=code,
        stdout=out.text(),
        stderr=err.text(),
        duration_s=time.monotonic() - t0,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
    )
