"""The SWE patch filter: a submitted patch cannot change tests, their configuration or the
interpreter's start-up, nor reach outside the repo (ENVS.md §5.9 reward hacking)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clawrl_app.envs.swe.patch_filter import filter_patch, forbidden_reason


@pytest.mark.parametrize(
    ("path", "why"),
    [("tests/test_x.py", "test"), ("pkg/tests/helpers.py", "test"), ("test_y.py", "test"),
     ("conftest.py", "configuration"), ("pkg/conftest.py", "configuration"),
     ("pytest.ini", "configuration"), ("pyproject.toml", "configuration"),
     ("setup.cfg", "configuration"), ("sitecustomize.py", "configuration"),
     ("x.pth", ".pth"), ("../outside.py", "outside"), ("/etc/passwd", "outside"),
     ("pkg/../../up.py", "outside"), (".git/hooks/pre-commit", "git"),
     ("hidden_tests/helpers.py", "test"), ("hidden_tests", "test")],
)  # fmt: skip
def test_forbidden_paths(path: str, why: str) -> None:
    reason = forbidden_reason(path)
    assert reason is not None and why in reason


def test_source_files_are_allowed() -> None:
    for path in ("textkit/slugify.py", "pkg/sub/mod.py", "README.md", "pkg/contest.py"):
        assert forbidden_reason(path) is None


@pytest.mark.skipif(
    shutil.which("git") is None, reason="git is missing: sudo apt-get install -y git"
)
def test_a_real_git_diff_keeps_the_fix_and_drops_the_tampering(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout  # fmt: skip

    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (tmp_path / "tests" / "test_mod.py").write_text("def test_f():\n    assert False\n")
    git("init", "-q")
    git("-c", "user.email=a@b", "-c", "user.name=a", "add", "-A")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "base")
    (tmp_path / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    (tmp_path / "tests" / "test_mod.py").write_text("def test_f():\n    assert True\n")
    (tmp_path / "conftest.py").write_text("import os\nos._exit(0)\n")
    (tmp_path / "pkg" / "hook.py").write_text("import atexit\n")
    git("add", "-A")
    result = filter_patch(git("diff", "--cached", "--binary"))
    assert "return 2" in result.patch and "assert True" not in result.patch
    assert "os._exit" not in result.patch
    assert sorted(d.split(":")[0] for d in result.dropped) == ["conftest.py", "tests/test_mod.py"]
    assert result.flags == ["pkg/hook.py"]  # kept, but flagged as suspicious
    git("reset", "-q", "--hard")
    (tmp_path / "fix.patch").write_text(result.patch)
    git("apply", "fix.patch")
    assert "return 2" in (tmp_path / "pkg" / "mod.py").read_text()
    assert "assert False" in (tmp_path / "tests" / "test_mod.py").read_text()


def test_symbolic_links_are_dropped() -> None:
    link = (
        "diff --git a/pkg/data.txt b/pkg/data.txt\nnew file mode 120000\nindex 0000000..e69de29\n"
        "--- /dev/null\n+++ b/pkg/data.txt\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    )
    retarget = (
        "diff --git a/pkg/l b/pkg/l\nindex 1111111..2222222 120000\n--- a/pkg/l\n+++ b/pkg/l\n"
    )
    code = "diff --git a/pkg/mod.py b/pkg/mod.py\nindex 1111111..2222222 100644\n"
    result = filter_patch(link + retarget + code)
    assert result.patch == code
    assert result.dropped == ["pkg/data.txt: a symbolic link", "pkg/l: a symbolic link"]
