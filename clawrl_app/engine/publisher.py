"""Publishing: load each new checkpoint into the serving backend without pausing it.

A new adapter is loaded under its own version name, checked against the trainer's canary
log-probs (a mismatch refuses the version), then new requests are routed to it; the old
version is unloaded once its in-flight requests finish. Serving never returns 503 or
stalls because of this.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from clawrl_app.engine.backends.base import Backend, BackendError
from clawrl_app.engine.checkpoints import read_manifest
from clawrl_app.engine.cpu_share import ServingActivity
from clawrl_app.engine.events import (
    EventSink,
    LoopFailed,
    PolicyPublished,
    PublishRefused,
    wait_for_poke,
)
from clawrl_app.engine.rollback import BASE, ServedState, read_served, write_served
from clawrl_app.engine.store import CheckpointRow, Store

log = logging.getLogger("clawrl.publisher")


def canary_gap(expected: list[float], served: list[float]) -> float:
    """Largest absolute difference between the trainer's and the server's log-probs."""
    if len(expected) != len(served):
        return float("inf")
    return max((abs(a - b) for a, b in zip(expected, served, strict=True)), default=0.0)


class Publisher:
    """Watches the store for ready checkpoints and serves the newest one."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        *,
        events: EventSink | None = None,
        tolerance: float = 1e-3,
        interval_s: float = 0.25,
        state_file: Path | None = None,
        activity: ServingActivity | None = None,
    ) -> None:
        self.store = store
        self.state_file = state_file
        self.served = BASE
        self.backend = backend
        self.events: EventSink = events or (lambda e: None)
        self.tolerance = tolerance
        self.interval_s = interval_s
        self.published = 0
        self.refused = 0
        self.last_error: str | None = None
        self.last_publish_s: float | None = None
        self.activity = activity
        """Raised while publishing, like an answer: a CPU-sharing trainer pauses meanwhile."""
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    def poke(self) -> None:
        self._wake.set()

    async def publish(self, row: CheckpointRow, check: bool = True) -> bool:
        """Load, check and activate one checkpoint; False when refused."""
        async with self._lock:
            if self.activity is not None:
                self.activity.begin()
            try:
                return await self._publish(row, check)
            finally:
                if self.activity is not None:
                    self.activity.end()

    async def _publish(self, row: CheckpointRow, check: bool) -> bool:
        t0 = time.monotonic()
        name = row.version
        if name not in self.backend.info().versions:
            await self.backend.load_adapter(name, Path(row.path))
        previous = self.backend.active_version
        activated = False
        if check:
            try:
                gap = await self._canary(name, Path(row.path))
            except BackendError:  # full weights on SGLang: scorable only once served
                await self.backend.activate(name)
                activated = True
                gap = await self._canary(name, Path(row.path))
            if gap > self.tolerance:
                if activated:
                    await self.backend.activate(previous)
                self.store.set_checkpoint_status(name, "refused")
                await self.backend.unload_adapter(name)
                self._refused(
                    name,
                    f"{name} not published: the server's canary log-probs differ from the "
                    f"trainer's by {gap:.3g} (tolerance {self.tolerance:g}); the served model "
                    "and the trainer do not compute the same policy",
                    gap,
                )
                return False
        if not activated:
            await self.backend.activate(name)
        self.store.mark_published(name)
        self.served = name
        if self.state_file is not None:
            write_served(self.state_file, ServedState(name))
        self.published += 1
        self.last_publish_s = time.monotonic() - t0
        self.events(PolicyPublished(name, previous))
        if previous not in ("base", name):
            asyncio.create_task(self._unload_later(previous))
        return True

    def _refused(self, name: str, why: str, gap: float | None = None) -> None:
        """Say it everywhere: the log, the status, the event feed (UI, store, doctor)."""
        log.warning("%s", why)
        self.refused += 1
        self.last_error = why
        self.events(PublishRefused(name, why, gap, self.tolerance if gap is not None else None))
        self.events(LoopFailed("publishing", why))

    async def _canary(self, name: str, path: Path) -> float:
        manifest = read_manifest(path)
        gap = 0.0
        for c in manifest.canary:
            served = await self.backend.score(c["prompt_ids"], c["response_ids"], name, urgent=True)
            gap = max(gap, canary_gap(c["logprobs"], served))
        return gap

    async def _unload_later(self, version: str) -> None:
        try:
            await self.backend.unload_adapter(version)  # waits for its in-flight requests
        except Exception as exc:
            log.warning("unloading %s failed: %s", version, exc)

    def newest_ready(self) -> CheckpointRow | None:
        """The newest unpublished checkpoint that descends from what is served now (after a
        rollback, checkpoints of the abandoned branch are never published by themselves)."""
        rows = self.store.list_checkpoints()
        by_version = {r.version: r for r in rows}

        def descends(row: CheckpointRow) -> bool:
            parent = row.parent
            while parent is not None:
                if parent == self.served:
                    return True
                parent = by_version[parent].parent if parent in by_version else None
            return self.served == BASE

        ready = [r for r in rows if r.status == "ready" and descends(r)]
        return max(ready, key=lambda r: (r.step, r.created)) if ready else None

    async def restore_served(self) -> ServedState | None:
        """At start-up: serve what was served before the restart (a rollback included)."""
        state = read_served(self.state_file) if self.state_file is not None else None
        if state is None:
            row = self.store.served_checkpoint()
            state = ServedState(row.version) if row is not None else None
        if state is None or state.version == BASE:
            return state
        row = self.store.get_checkpoint(state.version)
        if row is None or not Path(row.path).exists():
            return None
        await self.publish(row, check=False)
        return state

    async def serve_version(self, version: str) -> str:
        """Serve `version` now (rollback / roll-forward); returns the previous version."""
        previous = self.backend.active_version
        if version == BASE:
            async with self._lock:
                await self.backend.activate(BASE)
                self.served = BASE
                if previous != BASE:
                    asyncio.create_task(self._unload_later(previous))
        else:
            row = self.store.get_checkpoint(version)
            if row is None:
                raise ValueError(f"unknown checkpoint {version}")
            await self.publish(row, check=False)
        if self.state_file is not None:
            write_served(self.state_file, ServedState(version, rolled_back=True))
        return previous

    async def run(self) -> None:
        while True:
            try:
                row = await asyncio.to_thread(self.newest_ready)
            except Exception as exc:
                log.exception("reading checkpoints failed")
                self.last_error = f"{type(exc).__name__}: {exc}"
                row = None
            if row is not None:
                try:
                    await self.publish(row)
                    continue
                except Exception as exc:  # never retry a broken checkpoint forever
                    log.exception("publishing %s failed", row.version)
                    self.store.set_checkpoint_status(row.version, "refused")
                    self._refused(
                        row.version,
                        f"{row.version} not published: {type(exc).__name__}: {exc}",
                    )
            await wait_for_poke(self._wake, self.interval_s)

    def status(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "refused": self.refused,
            "last_error": self.last_error,
            "version": self.backend.active_version,
            "last_publish_s": self.last_publish_s,
        }
