"""The SWE episode's repository: a private copy of the task's `repo/` committed as a fixed
baseline, and the agent's patch against it (ENVS.md §5.7.B).

Git safety. Once the episode starts, everything in the workspace, `.git/` included, is the
agent's: a planted `.git/config` can name an `core.fsmonitor` program, hooks, an external
diff or clean/smudge filters, and `$HOME/.gitconfig` is `/workspace/.gitconfig` inside the
sandbox. So the host's git touches the workspace only in `make_workspace`, before the agent
exists; the patch is computed later *inside the sandbox* (workspace read-only) with a private
copy of the baseline's git dir that the agent never saw (`GIT_DIR`), no system or global
configuration, and every program-running option switched off on the command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clawrl_app.envs.sandbox import Bind, ResourceLimits, Sandbox
from clawrl_app.envs.workspace import new_workspace, read_capped, remove_tree

BASELINE_DATE = "2024-01-01T00:00:00+0000"
IDENTITY = {"name": "clawrl", "email": "clawrl@localhost"}
MAX_PATCH_BYTES = 1 << 20
# Read no configuration but the baseline's own (no /etc/gitconfig, no ~/.gitconfig).
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": IDENTITY["name"],
    "GIT_AUTHOR_EMAIL": IDENTITY["email"],
    "GIT_COMMITTER_NAME": IDENTITY["name"],
    "GIT_COMMITTER_EMAIL": IDENTITY["email"],
    "GIT_AUTHOR_DATE": BASELINE_DATE,
    "GIT_COMMITTER_DATE": BASELINE_DATE,
}
# Options that could run a program or rewrite content, off whatever a config file says.
SAFE_OPTIONS = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "core.attributesFile=/dev/null",
]  # fmt: skip  (external diff and textconv programs are off through DIFF_FLAGS)
DIFF_FLAGS = ["--binary", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames"]


class PatchError(RuntimeError):
    """The agent's changes could not be turned into a patch (e.g. too large)."""


@dataclass(frozen=True)
class Baseline:
    """A prepared episode: the agent's workspace and the private git dir of its baseline."""

    workspace: Path  # bound at /workspace during the episode
    private: Path  # outside the workspace: holds `baseline.git`, never shown to the agent
    commit: str

    @property
    def git_dir(self) -> Path:
        return self.private / "baseline.git"


def _host_git(args: list[str], cwd: Path) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), **GIT_ENV}
    r = subprocess.run(["git", *SAFE_OPTIONS, *args], cwd=cwd, env=env, check=True,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    return r.stdout.strip()


def check_repo_files(repo: Path) -> None:
    """A task's repo must be plain files: no links (host code would follow them) and no
    `.git` (its config would be read by the host's git)."""
    for p in repo.rglob("*"):
        if p.name == ".git":
            raise ValueError(f"{p}: task repos may not hold a .git folder")
        if p.is_symlink():
            raise ValueError(f"{p}: task repos may not hold links")


def make_workspace(repo: Path, root: Path | None = None) -> Baseline:
    """Copy `repo` into a fresh 0700 folder, `git init` it and commit the baseline with a
    fixed identity and date (so every episode of a task has the same commit id), then keep a
    private copy of the git dir. Only trusted task files exist at this point."""
    check_repo_files(repo)
    ws = new_workspace(repo, root)
    os.chmod(ws, 0o700)  # new_workspace's copytree copies the task folder's mode onto it
    private = Path(tempfile.mkdtemp(prefix="clawrl-swe-", dir=root))
    os.chmod(private, 0o700)
    try:
        # --template= : no sample hooks or other template files in .git
        _host_git(["init", "-q", "--template=", "-b", "main"], ws)
        for key, value in (
            ("core.hooksPath", "/dev/null"),
            ("user.name", IDENTITY["name"]),
            ("user.email", IDENTITY["email"]),
            ("commit.gpgsign", "false"),
        ):
            _host_git(["config", key, value], ws)
        _host_git(["add", "-A"], ws)
        _host_git(["commit", "-q", "--no-verify", "-m", "baseline"], ws)
        commit = _host_git(["rev-parse", "HEAD"], ws)
        shutil.copytree(ws / ".git", private / "baseline.git", symlinks=True)
    except (OSError, subprocess.SubprocessError):
        remove_tree(ws)
        remove_tree(private)
        raise
    return Baseline(ws, private, commit)


def diff_script(commit: str) -> str:
    """The shell script run in the sandbox: stage everything (skipping unreadable files),
    then write the staged diff against the baseline to /out/patch.diff."""
    git = "git " + " ".join(SAFE_OPTIONS)
    flags = " ".join(DIFF_FLAGS)
    return (
        f"{git} add -A --ignore-errors 2>/out/add.err; "
        f"{git} diff --cached {flags} {commit} -- >/out/patch.diff"
    )


def compute_patch(sandbox: Sandbox, base: Baseline, timeout_s: float = 60.0) -> tuple[str, str]:
    """(`git diff --cached --binary` of the workspace against the baseline, git's warnings).

    Runs in the sandbox with the workspace read-only and a throwaway copy of the private
    baseline git dir as `GIT_DIR`: the agent's `.git/` and `.gitconfig` are never read.
    SandboxError when the sandbox fails; PatchError when git could not diff."""
    scratch = Path(tempfile.mkdtemp(prefix="clawrl-swe-diff-", dir=base.private))
    try:
        git_dir, out = scratch / "git", scratch / "out"
        shutil.copytree(base.git_dir, git_dir, symlinks=True)
        out.mkdir()
        env = {**GIT_ENV, "GIT_DIR": "/baseline.git", "GIT_WORK_TREE": "/workspace",
               "HOME": "/tmp", "XDG_CONFIG_HOME": "/tmp"}  # fmt: skip
        r = sandbox.run(
            ["/bin/sh", "-c", diff_script(base.commit)],
            workspace=base.workspace, workspace_rw=False,
            binds=[Bind(git_dir, "/baseline.git", rw=True), Bind(out, "/out", rw=True)],
            env=env, cwd="/workspace",
            limits=ResourceLimits(wall_s=timeout_s, cpu_s=int(timeout_s) + 5,
                                  address_space_mb=2048),
        )  # fmt: skip
        warnings = read_capped(out / "add.err", 4000).decode("utf-8", "replace")
        if r.exit_code != 0:
            raise PatchError(f"git diff failed (exit {r.exit_code}): {r.stderr[-500:]}")
        data = read_capped(out / "patch.diff", MAX_PATCH_BYTES)
        if len(data) > MAX_PATCH_BYTES:
            raise PatchError(f"the patch is larger than {MAX_PATCH_BYTES} bytes")
        return data.decode("utf-8", "replace"), warnings
    finally:
        remove_tree(scratch)
