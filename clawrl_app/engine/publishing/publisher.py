"""Publishing: load each new checkpoint into the serving backend without pausing it.

A new adapter is loaded under its own version name, checked against the trainer's canary
log-probs (a mismatch refuses the version), then new requests are routed to it; the old
version is unloaded once its in-flight requests finish. Serving never returns 503 or
stalls because of this. A damaged checkpoint folder (manifest or weights) is refused
before anything is loaded, with the reason logged; later checkpoints publish as usual.
With a regression guard, a candidate that passed the canary is scored against the served
version before it is activated, and refused when it regresses (`on_guard_refused` then lets
the trainer go back to the served version, at once or after `retreat_after` refusals in a
row: until then the trainer goes on from the refused version, which is never served). A
check the guard defers (a refusal resting on one answer that the user's prompts cannot yet
confirm) neither serves nor refuses the version, nor counts toward the retreat: the version
waits for those prompts and is checked again, unless a newer one is served first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawrl_app.engine.backends.base import Backend, BackendError
from clawrl_app.engine.core.checkpoints import checkpoint_problem, read_manifest
from clawrl_app.engine.core.cpu_share import ServingActivity
from clawrl_app.engine.core.events import (
    EventSink,
    GuardChecked,
    LoopFailed,
    PolicyPublished,
    PublishRefused,
    wait_for_poke,
)
from clawrl_app.engine.publishing.rollback import (
    BASE,
    RollbackError,
    ServedState,
    descendants,
    descends_from,
    left_behind,
    read_served,
    write_served,
)
from clawrl_app.engine.store import CheckpointRow, Store, StoreError
from clawrl_app.engine.store.faults import log_failure

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from clawrl_app.engine.publishing.guard import GuardVerdict, RegressionGuard

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
        guard: RegressionGuard | None = None,
        on_guard_refused: Callable[[str], Awaitable[None]] | None = None,
        retreat_after: int = 1,
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
        self.guard = guard
        self.on_guard_refused = on_guard_refused
        """Called with the served version after the guard refused `retreat_after` candidates
        in a row (the trainer goes back to it)."""
        self.retreat_after = max(1, retreat_after)
        self._refused_run: list[str] = []
        """Versions the guard refused since the last one served or the trainer's last retreat
        (the first one's descendants include the others)."""
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._paused = 0  # > 0: `run` publishes nothing (a rollback is under way)

    def poke(self) -> None:
        self._wake.set()

    @property
    def refused_in_row(self) -> int:
        """Guard refusals in a row (see `_refused_run`)."""
        return len(self._refused_run)

    async def publish(self, row: CheckpointRow, check: bool = True) -> bool:
        """Load, check and activate one checkpoint; False when refused. The publish lock is
        held throughout, except while the regression guard scores (see `_guard`)."""
        await self._lock.acquire()
        held = [True]  # False while the guard has let go of the lock (and if taking it back
        # was cancelled: then there is nothing to release)
        if self.activity is not None:
            self.activity.begin()
        try:
            return await self._publish(row, check, held)
        finally:
            if self.activity is not None:
                self.activity.end()
            if held[0]:
                self._lock.release()

    async def _publish(self, row: CheckpointRow, check: bool, held: list[bool]) -> bool:
        t0 = time.monotonic()
        name = row.version
        problem = await asyncio.to_thread(checkpoint_problem, Path(row.path))
        if problem is not None:
            self._refuse(name, f"{name} refused: its checkpoint folder {row.path}: {problem}")
            return False
        loaded = name not in self.backend.info().versions
        if loaded:
            await self.backend.load_adapter(name, Path(row.path))
        previous = self.backend.active_version
        activated = False
        try:
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
                    await self.backend.unload_adapter(name)
                    self._refuse(
                        name,
                        f"{name} not published: the server's canary log-probs differ from the "
                        f"trainer's by {gap:.3g} (tolerance {self.tolerance:g}); the served "
                        "model and the trainer do not compute the same policy",
                        gap,
                    )
                    return False
            if (
                check
                and self.guard is not None
                and (self.guard.was_deferred(name) or self.guard.due())
            ):
                verdict = await self._guard(name, previous, row.step, held)
                now_serving = self.backend.active_version
                if now_serving != (name if activated else previous):
                    # served version changed during the check (a rollback): the user's choice
                    # stands; this candidate stays unpublished (a later pass decides)
                    if loaded and now_serving != name:
                        await self.backend.unload_adapter(name)
                    log.info("%s not published: %s is served now", name, now_serving)
                    return False
                if verdict is not None and verdict.deferred:
                    await self._release(name, previous, activated, loaded)
                    log.info(
                        "%s not published yet: its refusal rests on one answer; checked "
                        "again at %d of your prompts (the trainer goes on from it)",
                        name, verdict.deferred_until,
                    )  # fmt: skip
                    return False
                if verdict is not None and not verdict.passed:
                    await self._release(name, previous, activated, loaded)
                    self._refuse(
                        name,
                        f"{name} not published: the regression guard found it worse than "
                        f"{previous}: {'; '.join(verdict.reasons)}",
                    )
                    await self._after_refusal(name, previous)
                    return False
            if not activated:
                await self.backend.activate(name)
        except BaseException:  # a failed check or switch releases the version it loaded
            await self._release(name, previous, activated, loaded)
            raise
        self.store.mark_published(name)
        self.served = name
        self._refused_run.clear()
        if self.guard is not None:  # deferred versions this one does not build on: out
            by_version = {r.version: r for r in self.store.list_checkpoints()}
            self.guard.forget_deferred(
                lambda v: v in by_version and descends_from(by_version, by_version[v], name)
            )
        if self.state_file is not None:
            write_served(self.state_file, ServedState(name))
        self.published += 1
        self.last_publish_s = time.monotonic() - t0
        self.events(PolicyPublished(name, previous))
        if previous not in ("base", name):
            asyncio.create_task(self._unload_later(previous))
        return True

    async def _guard(
        self, name: str, served: str, step: int, held: list[bool]
    ) -> GuardVerdict | None:
        """The guard's verdict on `name`; None when it could not score (then the version is
        published as without a guard: a broken check never stops learning, and says so)."""
        assert self.guard is not None
        if self.activity is not None:  # background work, like judging: the trainer goes on
            self.activity.end()
        self._lock.release()  # a rollback meanwhile must not wait for the check
        held[0] = False
        try:
            verdict = await self.guard.check(name, served, step)
        except Exception as exc:
            reason = f"the regression guard could not score {name}: {type(exc).__name__}: {exc}"
            self.guard.last_error = reason
            log.warning("%s; publishing it unchecked", reason)
            self.events(LoopFailed("guard", reason))
            return None
        finally:
            if self.activity is not None:  # first: publish() ends it whatever happens next
                self.activity.begin()
            await self._lock.acquire()
            held[0] = True
        c, s = verdict.candidate, verdict.served
        outcome = "passed" if verdict.passed else "deferred" if verdict.deferred else "REFUSED"
        log.info("guard: %s: %s", verdict.summary(), outcome)
        self.events(
            GuardChecked(
                name, served, verdict.passed, verdict.summary(), list(verdict.reasons),
                c.personal, c.general, s.personal, s.general,
                c.degeneration, s.degeneration, verdict.base_degeneration,
                verdict.deferred_until,
            )
        )  # fmt: skip
        return verdict

    async def _after_refusal(self, name: str, served: str) -> None:
        """The guard refused `name`. The trainer goes back to the served version after
        `retreat_after` refusals in a row; before that it trains on from `name` (never served),
        and its next checkpoint is checked on its own merits: learning a new habit can pass
        through a version that loops on the way to one that does not (bench/learn.py, tips25:
        three steps past a refused first step answered 7 of 10 held-out questions briefly
        without a loop)."""
        self._refused_run.append(name)
        if self.refused_in_row < self.retreat_after:
            log.info(
                "the trainer goes on from %s (refusal %d of %d before it goes back to %s)",
                name, self.refused_in_row, self.retreat_after, served,
            )  # fmt: skip
            return
        first = self._refused_run[0]
        self._refused_run.clear()
        if self.on_guard_refused is not None:
            await self.on_guard_refused(served)  # the trainer restarts
        self._refuse_built_on(first)
        self._refuse_deferred(f"the trainer went back to {served}")

    def _refuse(self, name: str, reason: str, gap: float | None = None) -> None:
        """Mark `name` refused (never tried again) and say so everywhere: the log, the status,
        the event feed (the UI, the store's events, `clawrl-app doctor`)."""
        self.store.set_checkpoint_status(name, "refused")
        self.refused += 1
        self.last_error = reason
        log.warning("%s", reason)
        tolerance = self.tolerance if gap is not None else None
        self.events(PublishRefused(name, reason, gap, tolerance))
        self.events(LoopFailed("publishing", reason))

    def _refuse_deferred(self, why: str) -> None:
        """Refuse the versions whose check the guard deferred (`why`: the trainer left
        their branch); checked later and served, they would strand the trainer's new
        checkpoints, which do not descend from them."""
        if self.guard is None:
            return
        ready = {r.version for r in self.store.list_checkpoints() if r.status == "ready"}
        for version in self.guard.forget_deferred():
            if version in ready:
                self._refuse(version, f"{version} not published: {why}")

    def _refuse_built_on(self, refused: str) -> None:
        """Refuse every ready checkpoint trained on top of `refused` (the trainer made them
        before it went back to the served version). They also descend from the served
        version, so without this the next pass would publish the newest of them: the
        refused regression plus more steps, while the trainer's new checkpoints (not its
        descendants) could then never be published."""
        rows = self.store.list_checkpoints()
        doomed = descendants(rows, refused)
        for row in rows:
            if row.version in doomed and row.status == "ready":
                self._refuse(
                    row.version,
                    f"{row.version} not published: it was trained on top of {refused}, "
                    "which the regression guard refused",
                )

    async def _release(self, name: str, previous: str, activated: bool, loaded: bool) -> None:
        try:
            if activated:
                await self.backend.activate(previous)
            if loaded:
                await self.backend.unload_adapter(name)
        except Exception as exc:  # the original failure is the one to report
            log.warning("releasing %s after a failed publish failed: %s", name, exc)

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
        rollback, checkpoints of the abandoned branch are never published by themselves),
        leaving out those whose guard check waits for more of the user's prompts."""
        rows = self.store.list_checkpoints()
        by_version = {r.version: r for r in rows}
        ready = [
            r
            for r in rows
            if r.status == "ready"
            and descends_from(by_version, r, self.served)
            and not (self.guard is not None and self.guard.waiting(r.version))
        ]
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
        try:
            served = await self.publish(row, check=False)
        except Exception as exc:  # a checkpoint that cannot be loaded never blocks start-up
            log.warning("cannot serve %s again (%s); serving the base model", row.version, exc)
            served = False
        return state if served else None

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
            if not await self.publish(row, check=False):
                raise RollbackError(f"{version} cannot be served: {self.last_error}")
        if self.state_file is not None:
            write_served(self.state_file, ServedState(version, rolled_back=True))
        return previous

    async def roll_back_to(
        self, version: str, restart_trainer: Callable[[], Awaitable[None]]
    ) -> str:
        """Serve `version` (rollback or roll-forward), restart the trainer from it, and
        refuse every checkpoint the old trainer left ready on top of it: they descend from
        `version` too, so the next pass would otherwise publish one and undo the user's
        choice. Nothing is published meanwhile. Returns the version served before."""
        self._paused += 1
        try:
            since = time.time()
            previous = await self.serve_version(version)
            await restart_trainer()
            self._refused_run.clear()
            self._refuse_deferred(f"the user went back to {version}")
            for name in sorted(left_behind(self.store.list_checkpoints(), version, since)):
                self._refuse(name, f"{name} not published: the user went back to {version}")
        finally:
            self._paused -= 1
        return previous

    async def run(self) -> None:
        while True:
            try:
                row = await asyncio.to_thread(self.newest_ready)
            except Exception as exc:
                log_failure(log, "reading checkpoints failed", exc)
                self.last_error = f"{type(exc).__name__}: {exc}"
                row = None
            if row is not None and not self._paused:
                try:
                    await self.publish(row)
                    continue
                except Exception as exc:
                    self._failed(row, exc)
            await wait_for_poke(self._wake, self.interval_s)

    def _failed(self, row: CheckpointRow, exc: Exception) -> None:
        """Publishing `row` raised: refuse it for good, unless the store failed (not the
        checkpoint), in which case a later pass tries again."""
        if isinstance(exc, StoreError) and exc.is_fault:
            log_failure(log, f"publishing {row.version} failed", exc)
            self.last_error = f"{row.version}: {exc}"
            return
        log.error("publishing %s failed", row.version, exc_info=exc)
        try:
            self._refuse(row.version, f"{row.version}: {type(exc).__name__}: {exc}")
        except Exception as again:
            log_failure(log, f"refusing {row.version} failed", again)

    def status(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "refused": self.refused,
            "refused_in_row": self.refused_in_row,
            "retreat_after": self.retreat_after,
            "last_error": self.last_error,
            "version": self.backend.active_version,
            "last_publish_s": self.last_publish_s,
            "guard": self.guard.status() if self.guard is not None else {"enabled": False},
        }
