"""`code_interpreter {code}`: `python3 -I` in the sandbox, 10 s, 512 MiB, no network,
output capped at 1024 characters (upstream's values). OS isolation, not a regex list."""

from __future__ import annotations

from clawrl_app.envs.base import Observation
from clawrl_app.envs.sandbox import ResourceLimits, SandboxError, SandboxUnavailable, make_sandbox
from clawrl_app.envs.sandbox.bwrap import python_argv

LIMITS = ResourceLimits(wall_s=10.0, cpu_s=10, address_space_mb=512, output_bytes=2048)
MAX_CHARS = 1024


def run_python(code: str, allow_unsafe: bool = False) -> Observation:
    try:
        sandbox = make_sandbox(allow_unsafe)
    except SandboxUnavailable as exc:
        return Observation(f"error: {exc}", infra_error=str(exc))
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="clawrl-py-") as ws:
        try:
            r = sandbox.run([*python_argv(), "-I", "-"], workspace=Path(ws), limits=LIMITS,
                            stdin=code)  # fmt: skip
        except SandboxError as exc:
            return Observation(f"error: {exc}", infra_error=str(exc))
    text = r.stdout + (("\n" + r.stderr) if r.stderr.strip() else "")
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS] + f"\n[... {len(text) - MAX_CHARS} characters cut ...]"
    if r.timed_out:
        text += "\n[timed out after 10 s]"
    return Observation(
        text.strip() or "(no output: print() the result)",
        exit_code=r.exit_code, duration_s=r.duration_s, timed_out=r.timed_out,
        error="timed out" if r.timed_out else None,
    )  # fmt: skip
