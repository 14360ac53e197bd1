"""The SWE verifier (ENVS.md §5.7.B, §5.9): the filtered patch on a *fresh pristine copy* of
the task's repo (never the agent's workspace), the hidden tests copied in, and the task's
FAIL_TO_PASS + PASS_TO_PASS test ids run by pytest in the sandbox with the repo read-only.

Resolved iff every listed id passed in the JUnit XML *and* pytest exited 0. The XML is
written to a folder outside the repo and must carry a per-run random suite name, so a file
the tested code writes itself does not count. A patch that does not apply is the agent's
failure (score 0), not ours. When the patched run leaves no XML at all, the pristine repo
is run as a control: if that produces XML, the patch broke the run (score 0: e.g. code that
calls `os._exit(0)` at import); if not, the verifier itself is broken (`infra_error`).
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawrl_app.envs.base import Verdict
from clawrl_app.envs.sandbox import Bind, ExecResult, ResourceLimits, Sandbox, SandboxError
from clawrl_app.envs.sandbox.bwrap import python_argv
from clawrl_app.envs.swe.patch_filter import FilteredPatch
from clawrl_app.envs.swe.repo import GIT_ENV, SAFE_OPTIONS
from clawrl_app.envs.terminal.verify import parse_junit
from clawrl_app.envs.workspace import read_capped, remove_tree

MAX_XML = 1 << 20


@dataclass(frozen=True)
class TestRun:
    """One pytest run: per-id status (None when no trustworthy XML came back)."""

    statuses: dict[str, str] | None
    exit_code: int
    output: str
    problem: str = ""  # why statuses is None


def junit_key(node_id: str) -> str:
    """The `parse_junit` key of a pytest node id: `hidden_tests/test_x.py::C::t` ->
    `hidden_tests.test_x.C::t` (pytest's JUnit classname is the dotted path plus classes)."""
    path, *rest = node_id.split("::")
    module = path.removesuffix(".py").replace("/", ".")
    return ".".join([module, *rest[:-1]]) + "::" + (rest[-1] if rest else "")


def fresh_copy(repo: Path, hidden_tests: Path, root: Path) -> Path:
    """The pristine repo with the hidden tests in, in a new folder under `root`."""
    dest = root / "repo"
    shutil.copytree(repo, dest, symlinks=True)
    shutil.copytree(hidden_tests, dest / "hidden_tests", symlinks=True)
    return dest


def apply_patch(sandbox: Sandbox, repo: Path, patch_file: Path) -> ExecResult:
    """`git apply` inside the sandbox (the copy has no .git: git acts like `patch`)."""
    return sandbox.run(
        ["git", *SAFE_OPTIONS, "apply", "--whitespace=nowarn", "/verifier/patch.diff"],
        workspace=repo, binds=[Bind(patch_file.parent, "/verifier")],
        env={**GIT_ENV, "HOME": "/tmp", "GIT_CEILING_DIRECTORIES": "/"},
        limits=ResourceLimits(wall_s=30, cpu_s=30),
    )  # fmt: skip


def run_tests(sandbox: Sandbox, repo: Path, ids: list[str], timeout_s: float) -> TestRun:
    """pytest on `ids` from the repo root (read-only, so the package imports: not `-I`),
    JUnit XML into a verifier-only folder, checked for this run's random suite name."""
    results = Path(tempfile.mkdtemp(prefix="clawrl-swe-results-"))
    nonce = f"clawrl-{secrets.token_hex(8)}"
    try:
        argv = [*python_argv(), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "--rootdir", "/workspace", "--junitxml", "/results/junit.xml",
                "-o", f"junit_suite_name={nonce}", *ids]  # fmt: skip
        r = sandbox.run(
            argv, workspace=repo, workspace_rw=False,
            binds=[Bind(results, "/results", rw=True)],
            env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # the host's plugins: slow, not ours
            limits=ResourceLimits(wall_s=timeout_s, cpu_s=int(timeout_s) + 5),
        )  # fmt: skip
        output = (r.stdout[-3000:] + r.stderr[-1000:]).strip()
        data = read_capped(results / "junit.xml", MAX_XML)
        if not data or len(data) > MAX_XML:
            return TestRun(None, r.exit_code, output, "pytest wrote no results")
        try:
            root = ET.fromstring(data)
        except ET.ParseError as exc:
            return TestRun(None, r.exit_code, output, f"unreadable results: {exc}")
        suites = [s.get("name") for s in root.iter("testsuite")]
        if suites != [nonce]:
            return TestRun({}, r.exit_code, output, "results not written by the verifier's pytest")
        return TestRun(parse_junit(data.decode("utf-8", "replace")), r.exit_code, output)
    finally:
        shutil.rmtree(results, ignore_errors=True)


def verify(
    sandbox: Sandbox,
    task_dir: Path,
    filtered: FilteredPatch,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    timeout_s: float = 60.0,
) -> Verdict:
    """Score 1 if the patch resolves the task, else 0; `infra_error` only for our failures."""
    details: dict[str, Any] = {"dropped": filtered.dropped, "flags": filtered.flags,
                               "patch_bytes": len(filtered.patch.encode())}  # fmt: skip
    ids = [*fail_to_pass, *pass_to_pass]
    work = Path(tempfile.mkdtemp(prefix="clawrl-swe-verify-"))
    try:
        repo = fresh_copy(task_dir / "repo", task_dir / "hidden_tests", work)
        if filtered.patch.strip():
            (work / "in").mkdir()
            (work / "in" / "patch.diff").write_text(filtered.patch)
            applied = apply_patch(sandbox, repo, work / "in" / "patch.diff")
            if applied.exit_code != 0:
                details["apply_error"] = (applied.stderr or applied.stdout)[-2000:]
                return Verdict(0.0, False, details)
        run = run_tests(sandbox, repo, ids, timeout_s)
        details.update(exit_code=run.exit_code, output=run.output[-2000:])
        if run.statuses is None:
            control = fresh_copy(task_dir / "repo", task_dir / "hidden_tests", work / "control")
            if run_tests(sandbox, control, ids, timeout_s).statuses is None:
                return Verdict(0.0, False, details, infra_error=f"verifier: {run.problem}")
            details["problem"] = f"{run.problem} with the patch applied (the pristine repo did)"
            return Verdict(0.0, False, details)
        if run.problem:
            details["problem"] = run.problem
        details["tests"] = {i: run.statuses.get(junit_key(i), "missing") for i in ids}
        resolved = (
            not run.problem
            and run.exit_code == 0
            and all(s == "passed" for s in details["tests"].values())
        )
        return Verdict(1.0 if resolved else 0.0, resolved, details)
    except SandboxError as exc:
        return Verdict(0.0, False, details, infra_error=str(exc))
    finally:
        remove_tree(work)
