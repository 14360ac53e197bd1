"""Shipped data files are found both in a source checkout and in an installed wheel.

On a GPU machine the installed wheel (not an editable checkout) looked for
`site-packages/assets/general_set.jsonl` and `clawrl-app serve` exited at start: the wheel
puts `assets/` inside the package (`clawrl_app/assets/`, pyproject's force-include).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from clawrl_app import paths
from clawrl_app.general_eval import GENERAL_SET_FILE, load_general_set
from clawrl_app.judge_eval import CALIBRATION_FILE, calibration_path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_puts_assets_inside_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    force = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force == {"assets": "clawrl_app/assets"}


def test_assets_are_found_in_the_source_tree() -> None:
    assert calibration_path() == ROOT / "assets" / CALIBRATION_FILE
    assert len(load_general_set()) >= 30


def test_assets_are_found_inside_an_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of `paths.py` laid out as the wheel installs it, with no assets/ beside it."""
    pkg = tmp_path / "site-packages" / "clawrl_app"
    (pkg / "assets").mkdir(parents=True)
    shutil.copy(paths.__file__, pkg / "paths.py")
    shutil.copy(ROOT / "assets" / GENERAL_SET_FILE, pkg / "assets" / GENERAL_SET_FILE)
    spec = importlib.util.spec_from_file_location("installed_paths", pkg / "paths.py")
    assert spec is not None and spec.loader is not None
    installed = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "installed_paths", installed)  # dataclasses look it up
    spec.loader.exec_module(installed)
    assert installed.asset_path(GENERAL_SET_FILE) == pkg / "assets" / GENERAL_SET_FILE
    with pytest.raises(FileNotFoundError, match="reinstall clawrl-app"):
        installed.asset_path(CALIBRATION_FILE)
