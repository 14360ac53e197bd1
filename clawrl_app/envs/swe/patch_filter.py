"""What a submitted patch may change (ENVS.md §5.7.B, §5.9): the agent's diff is applied to
a pristine copy of the repo before the hidden tests run, so everything that could change
how tests run or what they see is cut out of it first: test files, `conftest.py`, pytest
and packaging configuration, `sitecustomize.py`/`usercustomize.py`, `.pth` files, and any
path outside the repo, the verifier's `hidden_tests/` folder, and symbolic links (a link
made by the patch could point the verifier's run at a file outside the repo). Pure
functions over `git diff` text.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

FILE_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+)$")
CONFIG_FILES = {"pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "setup.py",
                "conftest.py", "sitecustomize.py", "usercustomize.py", "noxfile.py"}  # fmt: skip
SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode|index \S+) 120000$", re.MULTILINE)
TEST_FOLDERS = ("tests", "test", "testing", "hidden_tests")
SUSPICIOUS = re.compile(r"\bos\._exit\b|\bsys\.modules\b|\batexit\b|\bimport pytest\b|_pytest")


@dataclass(frozen=True)
class FilteredPatch:
    patch: str  # what may be applied
    dropped: list[str] = field(default_factory=list)  # paths cut out, with the reason
    flags: list[str] = field(
        default_factory=list
    )  # kept paths whose added lines look like test tampering


def forbidden_reason(path: str) -> str | None:
    """Why the patch may not touch `path` (a repo-relative path), or None."""
    norm = posixpath.normpath(path)
    if path.startswith("/") or norm == ".." or norm.startswith("../"):
        return "outside the repository"
    parts = norm.split("/")
    name = parts[-1]
    if name in CONFIG_FILES:
        return "test or packaging configuration"
    if name.endswith(".pth"):
        return "a .pth file (runs code at interpreter start)"
    if any(p in TEST_FOLDERS for p in parts[:-1]) or norm == "hidden_tests":
        return "a test file"
    if name.startswith("test_") or name.endswith("_test.py"):
        return "a test file"
    if parts[0] == ".git" or name == ".gitattributes":
        return "git metadata"
    return None


def split_files(diff: str) -> list[tuple[str, str, str]]:
    """(old path, new path, text) for each file section of a `git diff`."""
    out: list[tuple[str, str, str]] = []
    current: list[str] = []
    paths: tuple[str, str] | None = None
    for line in diff.splitlines(keepends=True):
        m = FILE_HEADER.match(line.rstrip("\n"))
        if m:
            if paths is not None:
                out.append((*paths, "".join(current)))
            paths, current = (m.group(1), m.group(2)), [line]
        elif paths is not None:
            current.append(line)
    if paths is not None:
        out.append((*paths, "".join(current)))
    return out


def filter_patch(diff: str) -> FilteredPatch:
    """Keep the file sections of `diff` that touch neither side's forbidden paths."""
    kept: list[str] = []
    dropped: list[str] = []
    flags: list[str] = []
    for old, new, text in split_files(diff):
        reason = forbidden_reason(old) or forbidden_reason(new)
        if reason is None and SYMLINK_MODE.search(text):
            reason = "a symbolic link"
        if reason is not None:
            dropped.append(f"{new}: {reason}")
            continue
        added = "".join(ln[1:] for ln in text.splitlines(keepends=True)
                        if ln.startswith("+") and not ln.startswith("+++"))  # fmt: skip
        if SUSPICIOUS.search(added):
            flags.append(new)
        kept.append(text)
    return FilteredPatch("".join(kept), dropped, flags)
