"""Resource limits of one sandboxed command (ENVS.md §5.6, §5.8)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceLimits:
    """Applied to every command: rlimits in the child before exec, a wall-clock kill of the
    whole process group, a cap on the output kept (head + tail) and a size cap on /tmp."""

    wall_s: float = 20.0
    cpu_s: int = 30
    address_space_mb: int | None = 1024  # None: unlimited (browsers, JITs)
    file_size_mb: int = 64
    open_files: int = 256
    tmp_size_mb: int = 64
    output_bytes: int = 16_384  # kept per stream: first and last half of it
    processes: int = 256  # new processes the command may have alive at once
    workspace_mb: int = 256  # checked after each step by the env
