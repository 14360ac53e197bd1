"""The engine's view of its store's health: one event and one log line per outage.

When the disk fills up, the file turns read-only, another process locks it or it is found
damaged, the store tells its watchers; this turns that into a `StoreFailed` event (the TUI
shows it as a banner), a warning with what to do, and a `storage` entry in the status
(`/admin/status`, the dashboard). Serving goes on meanwhile: answers are sent unrecorded.

The outage ends when a turn is recorded again (or, without chat traffic, when no write
failed for `RECOVERY_QUIET_S` and the last one succeeded), not at the first write that
succeeds: on a full disk small writes still fit into free pages between failing turns.
`StoreRecovered` then says how long it lasted and how many turns were not recorded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from clawrl_app.engine.core.events import Event, EventSink, StoreFailed, StoreRecovered
from clawrl_app.engine.store import Store, StoreError

log = logging.getLogger("clawrl.storage")
RECOVERY_QUIET_S = 60.0
"""Without chat traffic, the outage is over after this long without a failed write."""


class StorageWatch:
    """Watches `store`; `unrecorded()` counts the turns answered without being recorded."""

    def __init__(self, store: Store, events: EventSink, unrecorded: Callable[[], int]) -> None:
        self.store = store
        self.events = events
        self._unrecorded = unrecorded
        self._lock = threading.Lock()
        self.fault: StoreError | None = None
        """The outage in progress (its latest error), or None."""
        self._since = 0.0
        self._last_failure = 0.0
        self._unrecorded_before = 0
        store.watch(self._changed)

    def _changed(self, fault: StoreError | None) -> None:
        # Called with the store's lock held: only count, log and publish here.
        if fault is None:
            return  # one write that fits is no proof: see turn_recorded() and status()
        with self._lock:
            self._last_failure = time.monotonic()
            new = self.fault is None or self.fault.kind != fault.kind
            if self.fault is None:
                self._since = self._last_failure
                self._unrecorded_before = self._unrecorded()
            self.fault = fault
        if new:
            log.warning("the store failed; answers are sent but not recorded: %s", fault)
            self.events(StoreFailed(fault.action or "use the store", str(fault), fault.kind))

    def turn_recorded(self) -> None:
        """A turn was recorded: recording works again (ends an outage, if any)."""
        self._end(lambda: True)

    def _end(self, condition: Callable[[], bool]) -> None:
        event: Event | None = None
        with self._lock:
            if self.fault is not None and condition():
                down_s = time.monotonic() - self._since
                lost = self._unrecorded() - self._unrecorded_before
                self.fault = None
                event = StoreRecovered(down_s, lost)
        if isinstance(event, StoreRecovered):
            log.warning(
                "the store works again after %.0f s; %d turns were answered without being recorded",
                event.down_s,
                event.unrecorded_turns,
            )
            self.events(event)

    def status(self) -> dict[str, Any]:
        """`state` ok | failed; when failed, its kind, what to do and what was not recorded."""
        self._end(
            lambda: (
                self.store.fault is None
                and time.monotonic() - self._last_failure >= RECOVERY_QUIET_S
            )
        )
        with self._lock:
            fault = self.fault
            lost = self._unrecorded() - self._unrecorded_before
        if fault is None:
            return {"state": "ok", "path": str(self.store.path)}
        return {
            "state": "failed",
            "path": str(self.store.path),
            "kind": fault.kind,
            "last_error": fault.advice or str(fault),
            "error": str(fault),
            "since": time.time() - (time.monotonic() - self._since),
            "unrecorded_turns": lost,
        }
