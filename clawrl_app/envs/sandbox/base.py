"""The sandbox protocol: run one command with OS isolation (ENVS.md §5.6).

A `Sandbox` runs `argv` with the workspace mounted read-write at `/workspace` (or
read-only), optional extra read-only binds, a scrubbed environment and `ResourceLimits`.
It never raises for what the command does (non-zero exit, timeout, huge output): that is
in the `ExecResult`. It raises `SandboxError` only when the sandbox itself could not run
(an infrastructure failure: the episode is aborted, not punished).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from clawrl_app.envs.sandbox.limits import ResourceLimits

WORKSPACE = "/workspace"


class SandboxError(RuntimeError):
    """The sandbox could not run the command (not the command's own failure)."""


class SandboxUnavailable(SandboxError):
    """No usable isolation here (and the unsafe fallback was not allowed); says what to do."""


@dataclass(frozen=True)
class ExecResult:
    exit_code: int  # -signal when killed by a signal
    stdout: str  # capped (head + "[... N bytes cut ...]" + tail) and control characters stripped
    stderr: str
    duration_s: float
    timed_out: bool = False
    truncated: bool = False  # some output was cut


@dataclass(frozen=True)
class Bind:
    """A host path made visible inside the sandbox at `dest` (read-only unless `rw`)."""

    src: Path
    dest: str
    rw: bool = False


class Sandbox(Protocol):
    name: str  # "bubblewrap" or "rlimit (unsafe: no filesystem or network isolation)"
    isolated: bool  # filesystem + network + pid isolation

    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path | None,
        workspace_rw: bool = True,
        binds: Sequence[Bind] = (),
        env: Mapping[str, str] | None = None,
        limits: ResourceLimits | None = None,
        stdin: str | None = None,
        cwd: str = WORKSPACE,
    ) -> ExecResult: ...
