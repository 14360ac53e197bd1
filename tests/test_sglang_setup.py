"""`make run` sets SGLang up on NVIDIA machines (issue #30): the Makefile's decision with the
GPU check faked (a `nvidia-smi` on PATH that succeeds or fails), the marker the install
leaves for the app, the plan's choice of backend from it, and doctor's line.

No SGLang is installed here: `make -n` prints what `make run` would do without doing it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawrl_app.config import Settings
from clawrl_app.doctor import sglang_line
from clawrl_app.gpu_inventory import GPU, SGLANG_MARKER, Inventory, installed_sglang
from clawrl_app.hardware import ModelInfo, plan, sglang_python

ROOT = Path(__file__).resolve().parents[1]
PIN = "sglang[all]==0.5.23"


def dry_run(tmp_path: Path, gpu: bool, *args: str) -> str:
    """`make -n run` in a folder with only the Makefile and its input, `nvidia-smi` faked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexit {0 if gpu else 1}\n")
    smi.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, work / name)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MAKEFLAGS", None)
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(work), "run", *args],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_installs_sglang_only_where_an_nvidia_gpu_is(tmp_path: Path) -> None:
    with_gpu = dry_run(tmp_path, gpu=True)
    assert f"installing {PIN} into .venv-sglang" in with_gpu
    assert "clawrl-sglang-python" in with_gpu  # the app is told where it is
    assert "the torch backend serves instead" in with_gpu  # what a failed install says
    assert "torch==2.13.0" not in with_gpu  # GPU machines: pip picks the CUDA torch
    no_gpu = dry_run(tmp_path, gpu=False)
    assert "sglang" not in no_gpu and "torch==2.13.0" in no_gpu  # the CPU path unchanged
    skipped = dry_run(tmp_path, True, "SGLANG=0")
    assert "sglang" not in skipped


def test_the_app_finds_the_interpreter_make_run_installed(tmp_path: Path) -> None:
    assert installed_sglang(str(tmp_path)) is None  # no marker
    python = tmp_path / "sglang-env" / "bin" / "python"
    (tmp_path / SGLANG_MARKER).write_text(f"{python}\n")
    assert installed_sglang(str(tmp_path)) is None  # names one that is gone
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert installed_sglang(str(tmp_path)) == str(python)


def inventory(gpus: int, installed: str | None) -> Inventory:
    cards = tuple(GPU(i, "Fake 80GB", 79.65) for i in range(gpus))
    return Inventory(cards, False, 16, 64.0, sglang_installed=installed)


def test_the_plan_serves_with_sglang_from_that_environment_and_doctor_says_so() -> None:
    settings, model = Settings(), ModelInfo.estimate("1.5B", 1.5)
    env = "/home/u/clawrl-app/.venv-sglang/bin/python"
    p = plan(inventory(1, env), model, settings)
    assert p.backend == "sglang"
    assert any("installed in the environment `make run` installed" in r for r in p.reasons)
    assert sglang_python(inventory(1, env), settings.hardware) == env
    assert sglang_line(inventory(1, env), settings) == f"{env} (installed by `make run`)"
    # the user's own setting wins over what make run installed
    mine = settings.model_copy(
        update={"hardware": settings.hardware.model_copy(update={"sglang_python": sys.executable})}
    )
    assert sglang_python(inventory(1, env), mine.hardware) == sys.executable
    assert "hardware.sglang_python" in sglang_line(inventory(1, env), mine)
    # a failed install: the torch backend serves, and both say what to do
    failed = plan(inventory(1, None), model, settings)
    assert failed.backend == "torch"
    assert any("`make run`" in r for r in failed.reasons)
    assert "torch backend serves" in sglang_line(inventory(1, None), settings)
    assert "not needed" in sglang_line(inventory(0, None), settings)
