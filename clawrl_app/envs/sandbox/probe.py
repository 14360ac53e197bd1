"""Which isolation works here, checked once per process (ENVS.md §5.6)."""

from __future__ import annotations

import functools
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass

from clawrl_app.envs.sandbox.base import Sandbox, SandboxError, SandboxUnavailable
from clawrl_app.envs.sandbox.limits import ResourceLimits

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf "
    "install bubblewrap`)"
)
USERNS_HINT = (
    "bubblewrap needs unprivileged user namespaces: `sudo sysctl -w "
    "kernel.unprivileged_userns_clone=1` (Debian), or on Ubuntu >= 23.10 allow them for bwrap "
    "(an AppArmor profile, or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)"
)


@dataclass(frozen=True)
class SandboxStatus:
    name: str
    isolated: bool
    ok: bool
    detail: str
    launch_ms: float | None = None


@functools.lru_cache(maxsize=1)
def probe() -> SandboxStatus:
    """Try `bwrap ... true` once; say what works and, if not, what to do."""
    if shutil.which("bwrap") is None:
        return SandboxStatus("bubblewrap", True, False, f"bwrap not found: {INSTALL_HINT}")
    from clawrl_app.envs.sandbox.bwrap import BubblewrapSandbox

    try:
        sb = BubblewrapSandbox()
        t0 = time.monotonic()
        r = sb.run(["/bin/true"], workspace=None, limits=ResourceLimits(wall_s=10))
        ms = (time.monotonic() - t0) * 1000
    except (SandboxError, OSError) as exc:
        return SandboxStatus("bubblewrap", True, False, f"bwrap failed ({exc}); {USERNS_HINT}")
    if r.exit_code != 0:
        why = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return SandboxStatus("bubblewrap", True, False, f"bwrap failed ({why[0]}); {USERNS_HINT}")
    from clawrl_app.envs.sandbox.pids_cgroup import process_cap

    cap = process_cap()
    caps = (
        f"processes capped by {cap}"
        if cap
        else "no process cap: run as root without a writable pids cgroup, a fork bomb is "
        "stopped only by the wall limit"
    )
    return SandboxStatus("bubblewrap", True, True, f"isolated (namespaces, no network); {caps}", ms)


def make_sandbox(allow_unsafe: bool = False) -> Sandbox:
    """Bubblewrap when it works; the unsafe rlimit fallback only when allowed."""
    status = probe()
    if status.ok:
        from clawrl_app.envs.sandbox.bwrap import BubblewrapSandbox

        return BubblewrapSandbox()
    if allow_unsafe:
        from clawrl_app.envs.sandbox.local import RlimitSandbox

        return RlimitSandbox()
    raise SandboxUnavailable(
        f"no isolating sandbox: {status.detail}. Or run without isolation at your own risk "
        "with --allow-unsafe (the model's commands then run as you)."
    )


def launch_overhead_ms(n: int = 20) -> float:
    """Median extra time of `bwrap ... true` over a plain `true` subprocess, in ms."""
    from clawrl_app.envs.sandbox.bwrap import BubblewrapSandbox

    sb = BubblewrapSandbox()
    plain, boxed = [], []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run(["/bin/true"], check=False)
        plain.append(time.monotonic() - t0)
        t0 = time.monotonic()
        sb.run(["/bin/true"], workspace=None)
        boxed.append(time.monotonic() - t0)
    return (statistics.median(boxed) - statistics.median(plain)) * 1000
