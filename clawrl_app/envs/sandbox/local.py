"""The opt-in unsafe fallback: a plain child process with rlimits, a scrubbed environment,
a wall-clock limit and a process-group kill, in the workspace folder. NO filesystem or
network isolation: the command runs as the user, with the user's files and network. Only
used when the user allows it (`--allow-unsafe`) because bubblewrap is unavailable."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from clawrl_app.envs.sandbox.base import WORKSPACE, Bind, ExecResult, SandboxError
from clawrl_app.envs.sandbox.limits import ResourceLimits
from clawrl_app.envs.sandbox.process import run_limited

PATH = "/usr/local/bin:/usr/bin:/bin"


class RlimitSandbox:
    name = "rlimit (unsafe: no filesystem or network isolation)"
    isolated = False

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
    ) -> ExecResult:
        if workspace is None:
            raise SandboxError("the unsafe sandbox needs a workspace folder to run in")
        where = (
            workspace / cwd.removeprefix(WORKSPACE).lstrip("/")
            if cwd.startswith(WORKSPACE)
            else workspace
        )
        scrubbed = {
            "PATH": f"{os.path.dirname(sys.executable)}:{PATH}",
            "HOME": str(workspace),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **dict(env or {}),
        }
        return run_limited(
            argv, env=scrubbed, limits=limits or ResourceLimits(), cwd=str(where), stdin=stdin
        )
