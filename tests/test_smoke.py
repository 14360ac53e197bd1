"""`clawrl-app doctor --smoke`: every stage passes on the embedded model without touching the
user's home, and a failing stage is reported with exit 1.

Failures are forced two ways: a setting (a model path that does not exist fails the first
stage, no model needed) and the `clawrl_app.smoke.STAGES` seam (a monkeypatched stage fails
after the engine started, so the engine must be stopped and the temporary home removed).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from clawrl_app import smoke
from clawrl_app.cli import main

STAGE_NAMES = [name for name, _ in smoke.STAGES]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` with its size and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where `tempfile` makes the smoke test's temporary home (checked gone afterwards)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def user_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`CLAWRL_HOME` for the command; no CLAWRL_* setting from the caller's environment."""
    import os

    for key in list(os.environ):
        if key.startswith("CLAWRL_") and "__" in key:
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWRL_HOME", str(home))
    return home


def test_doctor_help_describes_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    out = capsys.readouterr().out
    assert "--smoke" in out and "temporary home" in out


def test_a_model_that_does_not_exist_fails_the_engine_stage_with_exit_1(
    user_home: Path,
    private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CLAWRL_MODEL__PATH", str(user_home / "no-such-model"))
    assert main(["doctor", "--smoke"]) == 1
    out = capsys.readouterr().out
    assert "FAIL engine" in out and "does not exist" in out
    assert "smoke test FAILED at engine" in out and "what to do:" in out
    assert all(f"SKIP {name}" in out for name in STAGE_NAMES[1:])
    assert not list(private_tmp.glob("clawrl-smoke-*"))  # the temporary home is gone
    assert not user_home.exists()


@pytest.mark.slow
def test_smoke_passes_on_the_embedded_model_and_leaves_the_users_home_alone(
    embedded_model: Any,
    private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the user's home is the one that holds the converted embedded model: the command must
    # find it there (no second conversion) and write nothing there (cache included)
    home = Path(embedded_model.path).parents[2]
    assert Path(embedded_model.path).parent == home / "cache" / "models"
    monkeypatch.setenv("CLAWRL_HOME", str(home))
    before = snapshot(home)
    assert main(["doctor", "--smoke"]) == 0
    out = capsys.readouterr().out
    for name in STAGE_NAMES:
        assert f"PASS {name}" in out, out
    assert "serving clawrl-v1" in out and "smoke test passed: 6 stages" in out
    assert snapshot(home) == before
    assert not list(private_tmp.glob("clawrl-smoke-*"))  # (torch may leave its own caches)


@pytest.mark.slow
def test_a_stage_failing_after_start_stops_the_engine_and_cleans_up(
    embedded_model: Any,
    user_home: Path,
    private_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    started: list[Any] = []

    def broken_chat(run: smoke.SmokeRun) -> str:
        started.append(run.thread)
        raise smoke.StageFailed("forced by the test", "nothing: this is a test")

    stages = dict(smoke.STAGES)
    stages["chat"] = broken_chat
    monkeypatch.setattr(smoke, "STAGES", list(stages.items()))
    monkeypatch.setenv("CLAWRL_MODEL__PATH", str(embedded_model.path))
    assert main(["doctor", "--smoke"]) == 1
    out = capsys.readouterr().out
    assert "PASS engine" in out and "FAIL chat" in out and "forced by the test" in out
    assert "what to do: nothing: this is a test" in out and "SKIP canary" in out
    assert started and not started[0]._thread.is_alive()  # the engine was stopped
    assert not list(private_tmp.glob("clawrl-smoke-*"))  # (torch may leave its own caches)
    assert not user_home.exists()
