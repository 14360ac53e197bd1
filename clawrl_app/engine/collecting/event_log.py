"""Persists engine events to the store's `events` table off the request path.

Events are queued and written by one background thread, so publishing an event never
waits for SQLite; `close()` drains what is queued.
"""

from __future__ import annotations

import logging
import queue
import threading

from clawrl_app.engine.core.events import EPHEMERAL_EVENTS, Event
from clawrl_app.engine.store import Store
from clawrl_app.engine.store.faults import log_failure

log = logging.getLogger("clawrl.events")
_STOP = object()


class EventLog:
    """A queue of events and the thread that appends them to the store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="clawrl-event-log", daemon=True)
        self._thread.start()

    def __call__(self, event: Event) -> None:
        """An EventSink: queue the event for writing (high-rate status snapshots are not kept)."""
        if event.kind not in EPHEMERAL_EVENTS:
            self._queue.put(event)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, Event)
            try:
                self._store.add_event(item.kind, item.payload())
            except Exception as exc:
                log_failure(log, f"could not store event {item.kind}", exc)

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        self._queue.put(_STOP)
        self._thread.join(10)
