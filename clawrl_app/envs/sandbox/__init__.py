"""OS isolation for the commands agentic environments run (ENVS.md §5.6, §5.9)."""

from clawrl_app.envs.sandbox.base import (
    WORKSPACE,
    Bind,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
)
from clawrl_app.envs.sandbox.limits import ResourceLimits
from clawrl_app.envs.sandbox.probe import SandboxStatus, launch_overhead_ms, make_sandbox, probe

__all__ = [
    "WORKSPACE",
    "Bind",
    "ExecResult",
    "ResourceLimits",
    "Sandbox",
    "SandboxError",
    "SandboxStatus",
    "SandboxUnavailable",
    "launch_overhead_ms",
    "make_sandbox",
    "probe",
]
