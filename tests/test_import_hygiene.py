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
    "clawrl_app.engine.serving.api",
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


# --- the import graph: no circle among the app's modules ---------------------------------
def module_files(root: Path, package: str) -> dict[str, Path]:
    """`{dotted name: file}` of every module under `root/package` (a package is its __init__)."""
    out = {}
    for f in sorted((root / package).rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Which of the package's modules each module imports: every import statement counts,
    inside functions and `if TYPE_CHECKING:` too (a type-only import is still a dependency)."""
    import ast

    files = module_files(root, package)

    def owner(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, f in files.items():
        here = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here[: len(here) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            for name in names:
                target = owner(name)
                if target is not None and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_among_the_apps_modules() -> None:
    assert cycles(import_graph(REPO, "clawrl_app")) == []


def test_the_circle_finder_sees_a_type_only_circle(tmp_path: Path) -> None:
    """Control: a route that names the engine's type under TYPE_CHECKING closes a circle."""
    pkg = tmp_path / "app"
    (pkg / "http").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "http" / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("from app.http.routes import router\n")
    (pkg / "http" / "routes.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine import Engine\n"
    )
    (pkg / "leaf.py").write_text("import app.engine\n")
    assert cycles(import_graph(tmp_path, "app")) == [["app.engine", "app.http.routes"]]


# --- tests mirror the packages: no test reaches for a private name of another package ----
def mirrored_package(test_file: Path) -> str:
    """The app package a test folder mirrors: tests/engine/serving -> clawrl_app.engine.serving,
    tests/ -> clawrl_app (its top-level modules only)."""
    parts = test_file.relative_to(REPO / "tests").parts[:-1]
    return ".".join(["clawrl_app", *parts])


def private_imports(test_file: Path) -> list[tuple[str, str]]:
    """`(module, name)` for every `from clawrl_app... import _name` in a test file."""
    import ast

    out = []
    for node in ast.walk(ast.parse(test_file.read_text(), str(test_file))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clawrl_app"):
            out += [
                (str(node.module), a.name)
                for a in node.names
                if a.name.startswith("_") and not a.name.endswith("__")  # __version__ is public
            ]
    return out


def test_no_test_imports_a_private_name_of_another_package() -> None:
    offenders = []
    for f in sorted((REPO / "tests").rglob("test_*.py")):
        home = mirrored_package(f)
        for module, name in private_imports(f):
            package = module.rpartition(".")[0]
            same = package == home if home == "clawrl_app" else f"{package}.".startswith(f"{home}.")
            if not same:
                offenders.append(f"{f.relative_to(REPO)}: {module}.{name}")
    assert offenders == []


def test_the_private_name_check_reads_the_imports(tmp_path: Path) -> None:
    """Control: the check finds a private import and maps folders to packages."""
    f = tmp_path / "t.py"
    f.write_text("from clawrl_app.engine.serving.api import _x, ok\n")
    assert private_imports(f) == [("clawrl_app.engine.serving.api", "_x")]
    assert mirrored_package(REPO / "tests" / "engine" / "serving" / "test_a.py") == (
        "clawrl_app.engine.serving"
    )
    assert mirrored_package(REPO / "tests" / "test_cli.py") == "clawrl_app"
