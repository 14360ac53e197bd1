"""A pids cgroup of its own for one sandboxed command, where this process may make one.

RLIMIT_NPROC is the process cap for an ordinary user, but the kernel never applies it to
root (the user the app runs as in containers and CI), whatever capabilities are dropped:
a fork bomb run as root fills the host's pid table before the wall limit kills it. A pids
cgroup caps the command's whole tree for every user, and lists every process of it, so the
kill at the end reaches them all, even ones that left the process group.

Used when the pids controller is mounted and our own cgroup in it is writable (root, or a
delegated systemd scope); otherwise `create` returns None and the rlimit alone applies.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

_counter = itertools.count()
PROC_SELF = Path("/proc/self")


def _own_pids_dir(proc: Path = PROC_SELF) -> Path | None:
    """The folder of this process's own cgroup in the pids hierarchy (v1 or v2)."""
    try:
        mountinfo = (proc / "mountinfo").read_text()
        membership = (proc / "cgroup").read_text()
    except OSError:
        return None
    v1_mount = v2_mount = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup" and "pids" in tail[2].split(","):
            v1_mount = (fields[3], fields[4])
        elif tail[0] == "cgroup2":
            v2_mount = (fields[3], fields[4])
    for line in membership.splitlines():
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if v1_mount and "pids" in controllers.split(","):
            return _inside(v1_mount, path)
        if hid == "0" and not controllers and v2_mount and not v1_mount:
            return _inside(v2_mount, path)
    return None


def _inside(mount: tuple[str, str], path: str) -> Path:
    root, point = mount
    rel = path[len(root) :] if root != "/" and path.startswith(root) else path
    return Path(point) / rel.lstrip("/")


class PidsCgroup:
    """`create` it before the child starts; the child calls `enter()` before exec."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._procs = str(path / "cgroup.procs")

    @classmethod
    def create(cls, max_pids: int, base: Path | None = None) -> PidsCgroup | None:
        parent = base if base is not None else _own_pids_dir()
        if parent is None or not (parent / "cgroup.procs").exists():
            return None
        path = parent / f"clawrl-sandbox-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        try:
            path.mkdir()
        except OSError:
            return None
        group = cls(path)
        try:
            (path / "pids.max").write_text(f"{max_pids}\n")
        except OSError:  # no pids controller here (v2 without it delegated)
            group.remove()
            return None
        return group

    def enter(self) -> None:
        """In the child, before exec: move it (and so all it starts) into the group."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def members(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self, timeout_s: float = 10.0) -> bool:
        """SIGKILL every member until the group is empty; True when it is."""
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.members()
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()

    def close(self) -> None:
        """Kill what is left and remove the group (left behind, empty, if it cannot)."""
        if self.kill_all():
            for _ in range(50):  # the kernel drops the last member a moment after it dies
                try:
                    self.path.rmdir()
                    return
                except OSError:
                    time.sleep(0.02)


def process_cap() -> str | None:
    """What caps a sandboxed command's processes here: a pids cgroup, RLIMIT_NPROC (not
    applied to root), or None (root without a writable pids cgroup: only the wall limit)."""
    group = PidsCgroup.create(4)
    if group is not None:
        try:  # made is not enough: a process must be able to enter it
            entered = subprocess.run(["/bin/true"], preexec_fn=group.enter, check=False)  # noqa: PLW1509
            if entered.returncode == 0:
                return "pids cgroup"
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            group.close()
    return "RLIMIT_NPROC" if os.getuid() != 0 else None
