"""The sandbox against real attacks (ENVS.md §5.10), each run in real bubblewrap."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from clawrl_app.envs.sandbox import ResourceLimits, Sandbox
from clawrl_app.envs.sandbox.bwrap import python_argv
from clawrl_app.envs.sandbox.local import RlimitSandbox
from clawrl_app.envs.sandbox.pids_cgroup import PidsCgroup, process_cap


def sh(sb: Sandbox, ws: Path, script: str, **kw: object) -> tuple[int, str]:
    r = sb.run(["/bin/sh", "-c", script], workspace=ws, **kw)  # type: ignore[arg-type]
    return r.exit_code, r.stdout + r.stderr


def test_no_network_not_even_the_hosts_loopback(sandbox: Sandbox, tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        f"for addr in [('1.1.1.1', 53), ('127.0.0.1', {port})]:\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    try:\n"
        "        s.connect(addr); print('CONNECTED', addr)\n"
        "    except OSError as e:\n"
        "        print('refused', addr, e.errno)\n"
    )
    r = sandbox.run([*python_argv(), "-c", code], workspace=tmp_path)
    listener.close()
    assert r.stdout.count("refused") == 2 and "CONNECTED" not in r.stdout, r


def test_host_files_secrets_and_environment_are_invisible(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-the-host")
    secret = Path.home() / ".clawrl-test-secret"
    secret.write_text("secret")
    try:
        code, out = sh(sandbox, tmp_path, f"cat {secret}; ls /root/.ssh; env; cat /etc/shadow; "
                                          f"ls {Path(__file__).parent}; echo HOME=$HOME")  # fmt: skip
    finally:
        secret.unlink()
    assert "sk-secret" not in out and "secret\n" not in out.replace("sk-secret", "")
    assert "No such file" in out and "HOME=/workspace" in out
    assert "test_sandbox_security.py" not in out


def test_only_the_workspace_is_writable_and_read_only_mode_holds(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    code, out = sh(sandbox, tmp_path, "echo x > /usr/evil; echo x > /etc/evil; "
                                      "echo ok > /workspace/mine; echo done")  # fmt: skip
    assert (tmp_path / "mine").read_text() == "ok\n"
    assert not Path("/usr/evil").exists() and not Path("/etc/evil").exists()
    assert out.count("Read-only file system") + out.count("Permission denied") >= 2
    code, out = sh(sandbox, tmp_path, "echo y > /workspace/mine", workspace_rw=False)
    assert code != 0 and (tmp_path / "mine").read_text() == "ok\n"


def test_background_processes_die_with_the_command(sandbox: Sandbox, tmp_path: Path) -> None:
    marker = f"sleep {4000 + os.getpid() % 1000}"
    sh(sandbox, tmp_path, f"setsid nohup {marker} >/dev/null 2>&1 & echo started")
    time.sleep(0.5)
    alive = [
        p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
    ]
    assert alive == []


def test_fork_bomb_and_timeout_are_contained(sandbox: Sandbox, tmp_path: Path) -> None:
    """The kernel never applies RLIMIT_NPROC to root: run as root (CI, containers) only the
    pids cgroup holds the bomb to ResourceLimits.processes, so the peak is checked too."""
    if process_cap() is None:
        pytest.skip("root without a writable pids cgroup: no process cap here")
    # this test's own descendants, not the host's pid table: another test worker (or any
    # other program) starting processes meanwhile must not move the figures
    me = psutil.Process()

    def ours() -> int:
        try:
            return len(me.children(recursive=True))
        except psutil.Error:  # a child vanished mid-walk: count again
            return ours()

    before = ours()
    peak, done = [before], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], ours())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    r = sandbox.run(["/bin/sh", "-c", "f() { f | f & }; f; sleep 60"], workspace=tmp_path,
                    limits=ResourceLimits(wall_s=2, processes=64))  # fmt: skip
    done.set()
    watcher.join()
    # it ends at the wall limit, or sooner when the cap is full as the outer shell forks its
    # `sleep 60` (which of the two is a race): held either way, and never past the limit
    assert (r.timed_out or "Cannot fork" in r.stderr) and time.monotonic() - t0 < 10
    assert peak[0] < before + 64 + 20  # the cap held: the host's pid table never fills up
    assert ours() <= before  # nothing of it is left on the host
    r = sandbox.run(["/bin/sleep", "60"], workspace=tmp_path, limits=ResourceLimits(wall_s=1))
    assert r.timed_out and r.duration_s < 5


def test_a_pids_cgroup_caps_and_kills_a_tree_that_left_its_process_group(
    tmp_path: Path,
) -> None:
    """Where a pids cgroup can be made: its cap holds for a process that is root, and closing
    it kills a member that left the command's process group (setsid)."""
    group = PidsCgroup.create(5)
    if group is None:
        pytest.skip("no writable pids cgroup here")
    proc = subprocess.Popen(
        ["/bin/sh", "-c", "setsid sleep 300 & for i in 1 2 3 4 5 6 7 8; do sleep 300 & done; wait"],
        preexec_fn=group.enter, stderr=subprocess.PIPE,  # noqa: PLW1509
    )  # fmt: skip
    try:

        def refused() -> int:  # pids.events reads "max <forks refused>"
            return int((group.path / "pids.events").read_text().split()[-1])

        deadline = time.monotonic() + 5
        while refused() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refused() > 0
        members = group.members()
        assert 2 <= len(members) <= 5  # the shell and some sleeps: the rest could not fork
        proc.kill()
        proc.wait()
        group.close()
        assert not group.path.exists()
        assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie"
                   for p in members)  # fmt: skip
    finally:
        proc.kill()
        group.close()


def test_output_is_capped_and_cleaned(sandbox: Sandbox, tmp_path: Path) -> None:
    r = sandbox.run(
        [*python_argv(), "-c", "print('\\x1b[31mred\\x1b[0m'); print('x' * 10_000_000)"],
        workspace=tmp_path, limits=ResourceLimits(output_bytes=4096),
    )  # fmt: skip
    assert r.truncated and len(r.stdout) < 5000 and "bytes cut" in r.stdout
    assert r.stdout.startswith("red\n")  # escape sequences stripped


def test_tmp_is_size_capped_and_no_nested_namespaces(sandbox: Sandbox, tmp_path: Path) -> None:
    code, out = sh(sandbox, tmp_path, "dd if=/dev/zero of=/tmp/big bs=1M count=100 2>&1; "
                                      "unshare -U true && echo NESTED; grep CapEff /proc/self/status",
                   limits=ResourceLimits(tmp_size_mb=8))  # fmt: skip
    assert "No space left" in out and "NESTED" not in out
    assert "CapEff:\t0000000000000000" in out


def test_python_and_pytest_run_inside(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    r = sandbox.run([*python_argv(), "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "test_x.py"], workspace=tmp_path, limits=ResourceLimits(wall_s=60))  # fmt: skip
    assert r.exit_code == 0 and "1 passed" in r.stdout, r


def test_the_unsafe_fallback_still_limits_time_output_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-the-host")
    sb = RlimitSandbox()
    assert not sb.isolated
    r = sb.run(["/bin/sh", "-c", "env; yes | head -c 100000; sleep 30"], workspace=tmp_path,
               limits=ResourceLimits(wall_s=1, output_bytes=2048))  # fmt: skip
    assert r.timed_out and r.truncated and "sk-secret" not in r.stdout


def test_a_sandbox_that_cannot_start_the_command_is_an_infrastructure_error(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    from clawrl_app.envs.sandbox import SandboxError

    with pytest.raises(SandboxError, match="could not run"):
        sandbox.run(["/no/such/program"], workspace=tmp_path)
    assert sandbox.run(["/bin/sh", "-c", "exit 1"], workspace=tmp_path).exit_code == 1


def test_the_sandbox_removes_its_private_etc_when_dropped() -> None:
    """One sandbox per environment reset: each wrote an /etc folder that was never removed
    (thousands piled up in the temp folder). No bwrap run is needed to see it."""
    import gc

    from clawrl_app.envs.sandbox.bwrap import BubblewrapSandbox

    sb = BubblewrapSandbox(bwrap="/bin/true")
    etc = sb._etc
    assert (etc / "passwd").is_file()
    del sb
    gc.collect()
    assert not etc.exists()
