"""The default sandbox: one bubblewrap container per command (ENVS.md §5.6).

New user, pid, network, IPC, UTS and cgroup namespaces (`--unshare-all`), no nested user
namespaces, all capabilities dropped, a cleared environment, the system's `/usr` and the
Python interpreter read-only, a private `/tmp` of fixed size, a minimal `/etc` we write
ourselves (no host secrets), and only the episode's workspace writable at `/workspace`.
The process dies with its parent, and when the command's process ends its pid namespace
goes, taking background processes with it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from clawrl_app.envs.sandbox.base import WORKSPACE, Bind, ExecResult, SandboxError
from clawrl_app.envs.sandbox.limits import ResourceLimits
from clawrl_app.envs.sandbox.process import run_limited

PATH = "/usr/local/bin:/usr/bin:/bin"
ETC_FILES = {
    "passwd": "root:x:0:0:root:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}
ETC_LINKS = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime")


def interpreter_prefixes() -> list[str]:
    """Folders that must be visible for this Python (and its venv) to run inside."""
    out: list[str] = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        real = os.path.realpath(p)
        if real.startswith("/usr"):
            continue  # already bound
        if not any(real == o or real.startswith(o + "/") for o in out):
            out.append(real)
    return out


def python_argv() -> list[str]:
    """The interpreter to run inside the sandbox (this app's own, bound read-only)."""
    return [sys.executable]


class BubblewrapSandbox:
    name = "bubblewrap"
    isolated = True

    def __init__(self, bwrap: str | None = None) -> None:
        found = bwrap or shutil.which("bwrap")
        if found is None:
            raise FileNotFoundError("bwrap")
        self.bwrap = found
        self._etc = Path(tempfile.mkdtemp(prefix="clawrl-etc-"))
        # removed with the sandbox (or at exit): one per environment reset would pile up
        weakref.finalize(self, shutil.rmtree, self._etc, ignore_errors=True)
        for name, text in ETC_FILES.items():
            (self._etc / name).write_text(text)
        self.as_root = os.geteuid() == 0

    def _argv(
        self,
        workspace: Path | None,
        workspace_rw: bool,
        binds: Sequence[Bind],
        env: Mapping[str, str],
        limits: ResourceLimits,
        cwd: str,
    ) -> list[str]:
        a = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
             "--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]  # fmt: skip
        if self.as_root:
            a += ["--cap-drop", "ALL"]
        a += ["--ro-bind", "/usr", "/usr"]
        for d in ("bin", "lib", "lib64", "lib32", "sbin"):
            p = Path("/") / d
            if p.is_symlink():
                a += ["--symlink", os.readlink(p), f"/{d}"]
            elif p.is_dir():
                a += ["--ro-bind", str(p), f"/{d}"]
        a += ["--dir", "/etc"]
        for name in ETC_FILES:
            a += ["--ro-bind", str(self._etc / name), f"/etc/{name}"]
        for name in ETC_LINKS:
            if os.path.exists(f"/etc/{name}"):
                a += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        a += ["--proc", "/proc", "--dev", "/dev"]
        a += ["--size", str(limits.tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"]
        for prefix in interpreter_prefixes():  # after /tmp: a venv may live under /tmp
            a += ["--ro-bind", prefix, prefix]
        if workspace is not None:
            a += ["--bind" if workspace_rw else "--ro-bind", str(workspace), WORKSPACE]
        else:
            a += ["--dir", WORKSPACE]
        for b in binds:
            a += ["--bind" if b.rw else "--ro-bind", str(b.src), b.dest]
        a += ["--remount-ro", "/"]  # the root bwrap built (/etc, mount points) stays as is
        base_env = {
            "PATH": f"{os.path.dirname(sys.executable)}:{PATH}",
            "HOME": WORKSPACE,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TMPDIR": "/tmp",
        }
        for k, v in {**base_env, **dict(env)}.items():
            a += ["--setenv", k, v]
        a += ["--chdir", cwd]
        return a

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
        lim = limits or ResourceLimits()
        outer = self._argv(workspace, workspace_rw, binds, env or {}, lim, cwd)
        # the host environment is not passed on (--clearenv inside; nothing secret outside)
        r = run_limited([*outer, "--", *argv], env={"PATH": PATH}, limits=lim, stdin=stdin)
        if r.exit_code == 1 and r.stderr.startswith("bwrap: "):  # the sandbox, not the command
            raise SandboxError(f"the sandbox could not run the command: {r.stderr.strip()}")
        return r
