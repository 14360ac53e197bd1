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
