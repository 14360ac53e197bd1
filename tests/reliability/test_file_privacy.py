"""Everything clawrl-app writes is owner-only: folders 0700, files 0600, whatever the umask.

Conversations, judgments, weights learned from them and the converted model all live under
the app's folders; on a shared machine another account must not read them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clawrl_app import models
from clawrl_app.models import ResolvedModel, load_model, resolve_model
from clawrl_app.paths import app_paths
from tests.conftest import start_engine


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common default umask, under which plain mkdir/open give 0755/0644."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def loose_paths(root: Path) -> list[str]:
    """Every path under `root` (itself included) that is not owner-only."""
    loose = []
    for p in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        if mode != (0o700 if p.is_dir() else 0o600):
            loose.append(f"{p.relative_to(root.parent)} {oct(mode)}")
    return loose


@pytest.mark.usefixtures("umask_022")
def test_platformdirs_folders_are_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CLAWRL_HOME: the `clawrl-app` folders and the parents created for them."""
    monkeypatch.delenv("CLAWRL_HOME", raising=False)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "xdg" / var.lower()))
    paths = app_paths().ensure()
    assert paths.log_dir.parent.name == "clawrl-app"  # ~/.local/state/clawrl-app/log
    assert loose_paths(tmp_path / "xdg") == []
    # a folder an older version created 0755 is tightened on the next start
    os.chmod(paths.data_dir, 0o755)
    paths.ensure()
    assert stat.S_IMODE(paths.data_dir.stat().st_mode) == 0o700


@pytest.mark.slow
@pytest.mark.usefixtures("umask_022")
def test_everything_under_a_fresh_home_is_private(
    embedded_model: ResolvedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Convert the embedded model into a new CLAWRL_HOME, start an engine on it, chat once:
    the home itself, the model cache, the store and every other file are owner-only.

    Only the 20-second GGUF read is replaced by the same real weights (as in
    tests/test_models.py); saving, verification and the rename run for real."""

    def read_gguf(gguf: Path, progress: bool = False) -> tuple[Any, Any]:
        return load_model(embedded_model)

    monkeypatch.setattr(models, "_load_gguf", read_gguf)
    home = tmp_path / "home"  # not there yet: the app creates it
    converted = resolve_model(None, app_paths(home), progress=False)
    assert converted.path.parent == app_paths(home).models_dir
    running = start_engine(
        home,
        {"CLAWRL_SERVER__PORT": "0", "CLAWRL_TRAIN__ENABLED": "false"},  # the embedded model
    )
    try:
        import openai

        client = openai.OpenAI(base_url=running.url, api_key="local")
        client.chat.completions.create(
            model="clawrl", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert running.engine.model.path == converted.path
        assert running.engine.store.session_stats()["turns"] == 1
    finally:
        running.stop()
    files = [p.name for p in home.rglob("*") if p.is_file()]
    assert "model.safetensors" in files and "clawrl.sqlite3" in files
    assert loose_paths(home) == []
