"""The terminal verifier: the task's pytest files, in a separate sandbox run, with the
workspace read-only at /workspace and the tests (never visible during the episode)
read-only at /verifier; results from JUnit XML written to a folder only the verifier sees.
Score = passed / total; our own failure (no XML) is an infrastructure error, not -1."""

from __future__ import annotations

import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from clawrl_app.envs.base import Verdict
from clawrl_app.envs.sandbox import Bind, ResourceLimits, Sandbox, SandboxError
from clawrl_app.envs.sandbox.bwrap import python_argv
from clawrl_app.envs.workspace import read_capped

MAX_XML = 1 << 20


def parse_junit(xml_text: str) -> dict[str, str]:
    """Test id -> "passed" | "failed" | "error" | "skipped"."""
    root = ET.fromstring(xml_text)
    out = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        out[name] = (
            "failed" if "failure" in kinds else "error" if "error" in kinds
            else "skipped" if "skipped" in kinds else "passed"
        )  # fmt: skip
    return out


def run_verifier(sandbox: Sandbox, workspace: Path, tests: Path, timeout_s: float) -> Verdict:
    results = Path(tempfile.mkdtemp(prefix="clawrl-verify-"))
    try:
        argv = [*python_argv(), "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "--rootdir", "/verifier", "--junitxml", "/results/junit.xml", "/verifier"]  # fmt: skip
        r = sandbox.run(
            argv, workspace=workspace, workspace_rw=False,
            binds=[Bind(tests, "/verifier"), Bind(results, "/results", rw=True)],
            env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # the app's own plugins: 1 s each run
            limits=ResourceLimits(wall_s=timeout_s, cpu_s=int(timeout_s) + 5), cwd="/tmp",
        )  # fmt: skip
        # never through a link: the tests run the agent's code, which can replace the file
        data = read_capped(results / "junit.xml", MAX_XML)
        if not data or len(data) > MAX_XML:
            return Verdict(0.0, False, {"output": r.stdout[-2000:] + r.stderr[-2000:]},
                           infra_error=f"the verifier wrote no results (exit {r.exit_code})")  # fmt: skip
        try:
            tests_run = parse_junit(data.decode("utf-8", "replace"))
        except ET.ParseError as exc:
            return Verdict(0.0, False, infra_error=f"unreadable verifier results: {exc}")
    except SandboxError as exc:
        return Verdict(0.0, False, infra_error=str(exc))
    finally:
        shutil.rmtree(results, ignore_errors=True)
    if not tests_run:
        return Verdict(0.0, False, infra_error="the verifier collected no tests")
    passed = sum(v == "passed" for v in tests_run.values())
    score = passed / len(tests_run)
    # all passed must agree with pytest's own exit status (a script cannot fake the file)
    if score == 1.0 and r.exit_code != 0:
        score = (len(tests_run) - 1) / len(tests_run)
    return Verdict(score, score == 1.0, {"tests": tests_run, "exit_code": r.exit_code})
