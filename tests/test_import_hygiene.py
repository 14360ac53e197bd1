"""Module-scope import discipline, checked in fresh interpreters, plus the import-linter contracts.

The engine stays headless (no `textual`), and the CLI's start-up path never pulls in torch
and friends: `clawrl-app --help` must answer instantly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

UI = ("textual", "textual_plotext", "clawrl_app.tui")
HEAVY_ML = ("torch", "transformers", "peft", "accelerate", "bitsandbytes")
CLI_PATH = [
    "clawrl_app.config",
    "clawrl_app.paths",
    "clawrl_app.hardware",
    "clawrl_app.models",
    "clawrl_app.cli",
]
ENGINE = [
    "clawrl_app.engine.api",
    "clawrl_app.engine.orchestrator",
    "clawrl_app.engine.store",
]

# Imports each module in order and reports which watched packages each one newly loaded,
# so a failure names the module that pulled them in. The CLI start-up path goes first:
# nothing else has loaded anything yet when it is measured.
PROBE = """
import importlib, json, sys
modules, watched = json.loads(sys.argv[1]), json.loads(sys.argv[2])
def loaded():
    return {w for w in watched if w in sys.modules}
initial = seen = loaded()
report = {}
for name in modules:
    importlib.import_module(name)
    now = loaded()
    report[name] = sorted(now - seen)
    seen = now
print(json.dumps({"initial": sorted(initial), "by_module": report, "final": sorted(seen)}))
"""


@pytest.fixture(scope="module")
def probe() -> dict[str, object]:
    """One fresh interpreter importing the CLI path, then the engine modules."""
    watched = [*UI, *HEAVY_ML, "pydantic"]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([*CLI_PATH, *ENGINE]), json.dumps(watched)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    assert result["initial"] == [], "loaded by the bare interpreter (sitecustomize?)"
    return result


def test_cli_start_up_path_does_not_import_torch(probe: dict[str, object]) -> None:
    report = probe["by_module"]
    assert isinstance(report, dict)
    for module in CLI_PATH:
        assert not set(report[module]) & set(HEAVY_ML), module
        assert not set(report[module]) & set(UI), module


def test_engine_and_cli_do_not_import_textual(probe: dict[str, object]) -> None:
    report, final = probe["by_module"], probe["final"]
    assert isinstance(report, dict) and isinstance(final, list)
    for module in ENGINE:
        assert not set(report[module]) & set(UI), module
    assert not set(final) & set(UI)  # after the CLI *and* the engine modules


def test_probe_detects_an_import(probe: dict[str, object]) -> None:
    """Control: the probe does see a watched package that a module imports."""
    report = probe["by_module"]
    assert isinstance(report, dict)
    assert report["clawrl_app.config"] == ["pydantic"]
    assert report["clawrl_app.paths"] == []


LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_lint_imports_is_installed() -> None:
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} missing: install the dev extra"


def test_import_linter_contracts_hold() -> None:
    done = subprocess.run(
        [str(LINT_IMPORTS)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" not in done.stdout.replace("0 broken", "")
