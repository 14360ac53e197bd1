"""Finding our own cgroup in the pids hierarchy, from /proc files (v1, v2, none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrl_app.envs.sandbox.pids_cgroup import PidsCgroup, _own_pids_dir

V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
)
V2_MOUNTS = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def proc(tmp_path: Path, mounts: str, cgroup: str) -> Path:
    (tmp_path / "mountinfo").write_text(mounts)
    (tmp_path / "cgroup").write_text(cgroup)
    return tmp_path


def test_v1_uses_the_pids_line(tmp_path: Path) -> None:
    p = proc(tmp_path, V1_MOUNTS, "9:name=systemd:/\n8:pids:/user.slice/app\n1:cpu:/other\n")
    assert _own_pids_dir(p) == Path("/sys/fs/cgroup/pids/user.slice/app")


def test_v2_uses_the_unified_line(tmp_path: Path) -> None:
    p = proc(tmp_path, V2_MOUNTS, "0::/user.slice/user-1000.slice/app.scope\n")
    assert _own_pids_dir(p) == Path("/sys/fs/cgroup/user.slice/user-1000.slice/app.scope")


def test_no_pids_controller_or_unreadable_proc(tmp_path: Path) -> None:
    assert _own_pids_dir(proc(tmp_path, V1_MOUNTS.splitlines()[0] + "\n", "8:pids:/\n")) is None
    assert _own_pids_dir(tmp_path / "missing") is None


def test_create_refuses_a_folder_that_is_not_a_cgroup(tmp_path: Path) -> None:
    assert PidsCgroup.create(10, base=tmp_path) is None  # no cgroup.procs there
    assert list(tmp_path.iterdir()) == []


def test_a_cgroup_no_process_can_enter_is_no_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """`process_cap` (what `env list` reports and the fork-bomb test trusts) checks that a
    process really enters the group, not only that the folder could be made."""
    import os

    from clawrl_app.envs.sandbox import pids_cgroup

    def refuse(self: PidsCgroup) -> None:
        raise PermissionError("cgroup.procs: permission denied")

    monkeypatch.setattr(pids_cgroup.PidsCgroup, "enter", refuse)
    assert pids_cgroup.process_cap() == (None if os.getuid() == 0 else "RLIMIT_NPROC")
