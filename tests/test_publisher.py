"""Publisher ordering for backends that can only score a version once it is served.

Contract test: SGLang full-weight checkpoints need a GPU, so the backend here is a small
stand-in with that one property (score() refuses a version that is not active); the store,
the checkpoint folders and the publisher are real.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from clawrl_app.engine.admin_api import checkpoint_rows
from clawrl_app.engine.backends.base import BackendError, BackendInfo
from clawrl_app.engine.checkpoints import MANIFEST
from clawrl_app.engine.publisher import Publisher
from clawrl_app.engine.store import Store


class ServedOnlyScoring:
    def __init__(self) -> None:
        self.active = "base"
        self.versions = ["base"]
        self.calls: list[str] = []

    @property
    def active_version(self) -> str:
        return self.active

    def info(self) -> BackendInfo:
        return BackendInfo("m", 8192, (2,), list(self.versions))

    async def load_adapter(self, version: str, path: Path) -> None:
        self.calls.append(f"load {version}")
        self.versions.append(version)

    async def activate(self, version: str) -> None:
        self.calls.append(f"activate {version}")
        self.active = version

    async def unload_adapter(self, version: str) -> None:
        self.calls.append(f"unload {version}")
        self.versions.remove(version)

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        version: str | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]:
        if version != self.active:
            raise BackendError(f"{version} is not served yet")
        return [-0.5] * len(response_ids)


def checkpoint(tmp: Path, store: Store, version: str, canary_lp: float) -> Any:
    d = tmp / version
    d.mkdir()
    manifest = {
        "version": version,
        "step": 1,
        "parent": None,
        "mode": "full",
        "method": "combine",
        "metrics": {},
        "sessions": [],
        "samples": [],
        "canary": [{"prompt_ids": [1, 2], "response_ids": [3, 4], "logprobs": [canary_lp] * 2}],
    }
    (d / MANIFEST).write_text(json.dumps(manifest))
    save_file({"w": np.zeros(4, dtype=np.float32)}, str(d / "model.safetensors"))
    return store.register_checkpoint(version, d, None, 1, {}, [], [])


def test_full_version_is_activated_then_checked(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        be = ServedOnlyScoring()
        pub = Publisher(store, be)  # type: ignore[arg-type]
        assert asyncio.run(pub.publish(checkpoint(tmp_path, store, "v1", -0.5)))
        assert be.calls == ["load v1", "activate v1"] and be.active == "v1"
        assert store.get_checkpoint("v1").status == "published"  # type: ignore[union-attr]
        (row,) = checkpoint_rows(store, be.active)  # what GET /admin/checkpoints sends
        assert row["served"] and row["published_at"] >= row["created"]


def test_failed_canary_after_activation_restores_the_previous_version(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        be = ServedOnlyScoring()
        pub = Publisher(store, be)  # type: ignore[arg-type]
        assert not asyncio.run(pub.publish(checkpoint(tmp_path, store, "v1", -0.1)))
        assert be.calls == ["load v1", "activate v1", "activate base", "unload v1"]
        assert be.active == "base" and store.get_checkpoint("v1").status == "refused"  # type: ignore[union-attr]
        assert "canary" in (pub.last_error or "")


def test_a_refused_publish_is_logged_with_its_numbers_and_shown_by_doctor(
    tmp_path: Path, caplog: Any
) -> None:
    """On the H100, QLoRA refusals were visible only as a store event: now the log, the
    event feed (UI) and `clawrl-app doctor` all carry the gap and the tolerance."""
    import logging

    from clawrl_app.engine.event_log import EventLog
    from clawrl_app.engine.events import Event, PublishRefused
    from clawrl_app.paths import app_paths

    paths = app_paths(tmp_path / "home")
    paths.ensure()
    events: list[Event] = []
    with Store(paths.store_file) as store:
        log_events = EventLog(store)
        be = ServedOnlyScoring()
        pub = Publisher(
            store,
            be,  # type: ignore[arg-type]
            tolerance=0.05,
            events=lambda e: (events.append(e), log_events(e)),  # type: ignore[func-returns-value]
        )
        with caplog.at_level(logging.WARNING, logger="clawrl.publisher"):
            assert not asyncio.run(pub.publish(checkpoint(tmp_path, store, "v1", -1.77)))
        log_events.close()
    refused = [e for e in events if isinstance(e, PublishRefused)]
    assert len(refused) == 1 and refused[0].version == "v1"
    assert refused[0].gap == 1.27 and refused[0].tolerance == 0.05  # |-1.77 - -0.5|
    assert any(
        "differ from the trainer's by 1.27 (tolerance 0.05)" in r.message for r in caplog.records
    )

    import subprocess
    import sys

    env = {**__import__("os").environ, "CLAWRL_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-m", "clawrl_app.cli", "doctor", "--no-model"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Publishing" in out.stdout and "v1 not published" in out.stdout
    assert "by 1.27 (tolerance 0.05)" in out.stdout
