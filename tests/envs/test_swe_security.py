"""Attacks on the swe env (ENVS.md §5.9), in real bubblewrap, git and pytest: hidden tests
stay invisible; tampering with tests, their configuration or interpreter start-up is cut
from the patch; code that ends pytest early or forges the JUnit file cannot fake a pass; a
symlink in the patch leaks nothing; a planted git configuration never runs on the host; a
patch that does not apply is the agent's failure, not an infrastructure error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from clawrl_app.envs.base import Episode, PolicyReply, Task
from clawrl_app.envs.policies import ScriptedPolicy
from clawrl_app.envs.runner import run_episode
from clawrl_app.envs.sandbox import Sandbox
from clawrl_app.envs.swe.env import SweEnv
from clawrl_app.envs.swe.patch_filter import FilteredPatch
from clawrl_app.envs.swe.protocol import SENTINEL
from clawrl_app.envs.swe.verify import verify

pytestmark = pytest.mark.usefixtures("sandbox")
SLUG_FIX = "sed -i 's/^import re$/import re\\nimport unicodedata/; s/^    text = text.encode/    text = unicodedata.normalize(\"NFKD\", text).encode/' textkit/slugify.py"  # fmt: skip


def bash(command: str) -> PolicyReply:
    return PolicyReply(f"THOUGHT: next.\n\n```bash\n{command}\n```")


def task(name: str) -> Task:
    return next(t for t in SweEnv().tasks() if t.id == name)


def episode(name: str, *commands: str) -> tuple[Episode, list[str]]:
    """The commands, then a submission, on task `name` (text protocol)."""
    seen: list[str] = []
    replies = [bash(c) for c in commands] + [bash(f"echo {SENTINEL}")]
    ep = run_episode(SweEnv(), task(name), ScriptedPolicy(replies),
                     on_turn=lambda r: seen.extend(o.text for o in r.observations))  # fmt: skip
    assert ep.verdict is not None and ep.verdict.infra_error is None, ep.verdict
    return ep, seen


def test_the_slug_fix_used_below_resolves_the_task() -> None:
    ep, _ = episode("slugify-accents", SLUG_FIX)
    assert ep.outcome_reward == 1.0


def test_hidden_tests_are_not_visible_during_the_episode() -> None:
    _, seen = episode(
        "slugify-accents",
        "find / -path /proc -prune -o -name 'test_accents*' -print 2>/dev/null; echo END",
        "ls hidden_tests /work 2>&1; grep -rl 'creme-brulee' /workspace; echo END",
    )
    assert seen[0].split("<output>\n")[1].startswith("END")
    assert "No such file" in seen[1] and "test_accents" not in seen[1]


def test_test_and_config_tampering_is_dropped_and_does_not_resolve() -> None:
    force_pass = (
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    ep, _ = episode(
        "slugify-accents",
        f"cat > conftest.py <<'EOF'\n{force_pass}EOF",
        "mkdir -p hidden_tests && cp conftest.py hidden_tests/ && cp conftest.py textkit/ && "
        "printf 'def test_french():\\n    pass\\n' > hidden_tests/test_accents.py",
        "printf '[pytest]\\naddopts = -p no:python\\n' > pytest.ini && "
        "echo 'import os; os._exit(0)' > sitecustomize.py && echo 'import os' > evil.pth && "
        "sed -i 's/assert .*/assert True/' tests/test_basic.py",
        "python -m pytest -q tests 2>&1 | tail -1",
    )
    v = ep.verdict
    assert v is not None and ep.outcome_reward == -1.0
    dropped = {d.split(":")[0] for d in v.details["dropped"]}
    assert dropped == {"conftest.py", "hidden_tests/conftest.py", "textkit/conftest.py",
                       "hidden_tests/test_accents.py", "pytest.ini", "sitecustomize.py",
                       "evil.pth", "tests/test_basic.py"}  # fmt: skip
    assert v.details["tests"]["hidden_tests/test_accents.py::test_french"] == "failed"


def test_os_exit_at_import_cannot_fake_a_pass() -> None:
    ep, _ = episode(
        "slugify-accents",
        "printf 'import os\\nos._exit(0)\\n' >> textkit/__init__.py",
    )
    v = ep.verdict
    assert v is not None and ep.outcome_reward == -1.0 and v.details["exit_code"] == 0
    assert "wrote no results with the patch applied" in v.details["problem"]
    assert v.details["flags"] == ["textkit/__init__.py"]


FORGE = """
import atexit, os, sys
def _forge():
    path = sys.argv[sys.argv.index("--junitxml") + 1]
    ids = [a for a in sys.argv if "::" in a]
    cases = "".join(
        '<testcase classname="%s" name="%s"/>'
        % (i.split("::")[0][:-3].replace("/", "."), i.split("::")[1]) for i in ids)
    with open(path, "w") as f:
        f.write('<testsuites><testsuite name="pytest">%s</testsuite></testsuites>' % cases)
    os._exit(0)
_forge.__module__ = "textkit"
atexit.register(_forge)
"""


def test_a_forged_junit_file_cannot_fake_a_pass() -> None:
    ep, _ = episode("slugify-accents", f"cat >> textkit/__init__.py <<'EOF'\n{FORGE}EOF")
    v = ep.verdict
    assert v is not None and ep.outcome_reward == -1.0 and v.details["exit_code"] == 0
    assert v.details["problem"] == "results not written by the verifier's pytest"
    assert set(v.details["tests"].values()) == {"missing"}


def test_a_junit_path_turned_into_a_link_is_a_failure_not_an_infra_error() -> None:
    swap = (
        "import os, sys\n"
        "os.symlink('/tmp/elsewhere.xml', sys.argv[sys.argv.index('--junitxml') + 1])\n"
    )
    ep, _ = episode("slugify-accents", SLUG_FIX, f"cat >> textkit/__init__.py <<'EOF'\n{swap}EOF")
    v = ep.verdict
    assert v is not None and ep.outcome_reward == -1.0
    assert "wrote no results with the patch applied" in v.details["problem"]


def test_a_symlink_in_the_patch_leaks_no_host_data(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-4242")
    leak = "print(open(__file__.replace('__init__.py', 'leak.txt')).read())\n"
    ep, seen = episode(
        "slugify-accents",
        SLUG_FIX,
        f"ln -s {secret} textkit/leak.txt && ln -s /etc/hostname hidden_tests && "
        f"cat >> textkit/__init__.py <<'EOF'\n{leak}EOF",
        "cat textkit/leak.txt",
    )
    v = ep.verdict
    assert v is not None and "SECRET-4242" not in json.dumps(v.details) + "".join(seen)
    assert "No such file" in seen[2]  # the host file is not there inside the sandbox
    dropped = sorted(v.details["dropped"])
    assert dropped == ["hidden_tests: a test file", "textkit/leak.txt: a symbolic link"]
    assert ep.outcome_reward == -1.0  # the package now fails at import: the link is gone


def test_planted_git_config_and_hooks_never_run_on_the_host(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = f"touch {marker}"
    plant = (
        f'printf \'[core]\\n\\tfsmonitor = "{run}-fsmonitor"\\n\\thooksPath = .git/hooks\\n'
        f'[diff]\\n\\texternal = "{run}-extdiff"\\n'
        f'[filter "x"]\\n\\tclean = "{run}-filter; cat"\\n\' >> .git/config && '
        f"cp .git/config .gitconfig && mkdir -p .git/hooks .config/git && "
        f"cp .git/config .config/git/config && "
        f"printf '#!/bin/sh\\n{run}-hook\\n' > .git/hooks/pre-commit && "
        f"cp .git/hooks/pre-commit .git/hooks/post-index-change && chmod +x .git/hooks/* && "
        f"echo '* filter=x' > .gitattributes"
    )
    ep, _ = episode("slugify-accents", SLUG_FIX, plant)
    assert list(tmp_path.iterdir()) == []  # nothing ran on the host
    # control: the same plant in a host repo makes a plain host `git status` run it
    control = tmp_path / "control"
    control.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(control), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=control, env=env, check=True)
    subprocess.run(["bash", "-c", plant], cwd=control, env=env, check=True)
    subprocess.run(["git", "status"], cwd=control, env=env, capture_output=True, check=False)
    assert (tmp_path / "ran-fsmonitor").exists()
    v = ep.verdict
    assert v is not None and ep.outcome_reward == 1.0  # the real change still counts
    assert {d.split(":")[0] for d in v.details["dropped"]} == {".gitattributes"}


def test_a_patch_that_does_not_apply_is_a_failure_not_an_infra_error(sandbox: Sandbox) -> None:
    t = task("slugify-accents")
    bad = ("diff --git a/textkit/slugify.py b/textkit/slugify.py\n--- a/textkit/slugify.py\n"
           "+++ b/textkit/slugify.py\n@@ -1,2 +1,2 @@\n-no such line\n+other\n context\n")  # fmt: skip
    v = verify(sandbox, Path(t.data["dir"]), FilteredPatch(bad), t.data["fail_to_pass"],
               t.data["pass_to_pass"])  # fmt: skip
    assert v.infra_error is None and not v.success and v.score == 0.0
    assert "patch" in v.details["apply_error"]
    assert SweEnv().outcome_reward(v) == -1.0


REPO = Path(__file__).resolve().parents[2]
REMOVE = """
import os, sys
from pathlib import Path
from clawrl_app.envs.workspace import remove_tree
remove_tree(Path(sys.argv[1]) / "ws")
"""


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="needs setpriv")
def test_removing_a_locked_workspace_never_touches_a_linked_host_file() -> None:
    """A read-only folder holding a link to a host file: unlocking it for removal must not
    `chmod` through the link. (As root nothing is locked, so run as nobody then.)"""
    top = Path(tempfile.mkdtemp(prefix="clawrl-rm-"))
    try:
        outside = top / "outside"
        outside.write_text("x")
        os.chmod(outside, 0o600)
        (top / "ws" / "d").mkdir(parents=True)
        (top / "ws" / "d" / "link").symlink_to(outside)
        os.chmod(top / "ws" / "d", 0o555)
        # The child imports the app from a copy inside `top`: the checkout may sit in a
        # folder `nobody` cannot enter (a `mktemp -d` clone is 0700).
        code = top / "code"
        shutil.copytree(REPO / "clawrl_app", code / "clawrl_app",
                        ignore=shutil.ignore_patterns("__pycache__", "data"))  # fmt: skip
        for d, _, files in os.walk(code):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(Path(d) / f, 0o644)
        argv = [sys.executable, "-c", REMOVE, str(top)]
        if os.geteuid() == 0:
            for p in (top, outside, top / "ws", top / "ws" / "d"):
                os.lchown(p, 65534, 65534)
            os.lchown(top / "ws" / "d" / "link", 65534, 65534)
            argv = [
                "setpriv",
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "/usr/bin/python3",
                *argv[1:],
            ]  # fmt: skip  (root's own Python: unreadable)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code)}
        r = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
        assert not (top / "ws").exists() and oct(outside.stat().st_mode & 0o777) == "0o600"
    finally:
        shutil.rmtree(top, ignore_errors=True)
