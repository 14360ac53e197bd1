"""Host-side handling of an episode's workspace: a private copy of the task's files, and
file access that never leaves it (the agent can create symlinks to anywhere: host code
must not follow them)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from clawrl_app.envs.sandbox.base import WORKSPACE


class OutsideWorkspace(ValueError):
    """A path that is not inside the workspace (or reaches outside through a link)."""


def new_workspace(files: Path | None, root: Path | None = None) -> Path:
    """A fresh 0700 folder holding a copy of `files` (links inside `files` are refused)."""
    ws = Path(tempfile.mkdtemp(prefix="clawrl-ws-", dir=root))
    os.chmod(ws, 0o700)
    if files is not None and files.is_dir():
        for src in files.rglob("*"):
            if src.is_symlink():
                raise OutsideWorkspace(f"task file {src} is a link; task packs may not hold links")
        shutil.copytree(files, ws, dirs_exist_ok=True, symlinks=True)
        os.chmod(ws, 0o700)  # copytree gave the folder the mode of `files`
    return ws


def resolve_inside(ws: Path, path: str) -> Path:
    """The host path of `path` (`/workspace/x`, `x` or `./x`) if it stays inside `ws` with
    every existing component resolved; OutsideWorkspace otherwise."""
    rel = path[len(WORKSPACE) :] if path == WORKSPACE or path.startswith(WORKSPACE + "/") else path
    if os.path.isabs(rel) and not path.startswith(WORKSPACE):
        raise OutsideWorkspace(f"{path} is outside {WORKSPACE}")
    target = (ws / rel.lstrip("/")).resolve()
    root = ws.resolve()
    if target != root and root not in target.parents:
        raise OutsideWorkspace(f"{path} is outside {WORKSPACE}")
    return target


def read_text_capped(ws: Path, path: str, limit: int = 65536) -> str:
    """The start of a workspace file; never through a link."""
    target = resolve_inside(ws, path)
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutsideWorkspace(f"{path} is not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    text = data[:limit].decode("utf-8", "replace")
    return text + ("\n[... cut ...]" if len(data) > limit else "")


def write_text(ws: Path, path: str, content: str) -> Path:
    """Write a workspace file (parents created); never through a link."""
    target = resolve_inside(ws, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    resolve_inside(ws, str(target.parent.relative_to(ws.resolve())))  # parents stayed inside
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, content.encode())
    finally:
        os.close(fd)
    return target


def snapshot(ws: Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime_ns) of every file (links not followed)."""
    out = {}
    for p in ws.rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            out[str(p.relative_to(ws))] = (st.st_size, st.st_mtime_ns)
    return out


def changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def tree_size_bytes(ws: Path) -> int:
    return sum(size for size, _ in snapshot(ws).values())


def read_capped(path: Path, limit: int) -> bytes:
    """Up to `limit + 1` bytes of a regular file, never through a link; b"" if absent (or
    a link, which sandboxed code may have put there: ELOOP)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove a folder the agent may have made read-only in places; quiet if gone.

    On an error only real folders of the tree are unlocked: the failing entry's parent
    (rmtree never descends through links) and the entry itself when it is a folder. A
    plain `chmod` of the entry would follow an agent-made link to a host file."""
    root = os.path.realpath(path)

    def unlock(func, p, exc):  # type: ignore[no-untyped-def]
        parent = os.path.dirname(p)
        if parent.startswith(root) and not os.path.islink(parent):
            os.chmod(parent, 0o700)
        if not os.path.islink(p) and os.path.isdir(p):
            os.chmod(p, 0o700)
        func(p)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=unlock)
