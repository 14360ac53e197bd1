"""Sharing the CPU between the endpoint and the trainer (embedded default, no GPU).

On a CPU-only machine both processes compete for the same few cores, and a training step
makes chat answers several times slower. So the endpoint raises a one-byte flag in a
small shared file (mmap) while it is generating an answer, and the trainer checks the
flag at pause points (before each decoder layer's forward, after each layer's gradient)
and sleeps while it is up. The pause per step is capped, so a constant stream of requests
delays training but cannot stop it. Torch-free: the engine imports this module.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

FLAG_BYTES = 8
POLL_S = 0.005


class BusyFlag:
    """A one-byte flag shared between processes through a 0600 file mapped in memory."""

    def __init__(self, path: Path | str, create: bool = False) -> None:
        self.path = Path(path)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            if os.fstat(fd).st_size < FLAG_BYTES:
                os.ftruncate(fd, FLAG_BYTES)
            self._map = mmap.mmap(fd, FLAG_BYTES)
        finally:
            os.close(fd)
        if create:
            self.set(False)

    def set(self, busy: bool) -> None:
        self._map[0] = 1 if busy else 0

    def busy(self) -> bool:
        return self._map[0] == 1

    def close(self) -> None:
        with contextlib.suppress(ValueError, BufferError):
            self._map.close()


class ServingActivity:
    """Counts the answers being generated; the flag is up while the count is above zero."""

    def __init__(self, flag: BusyFlag) -> None:
        self.flag = flag
        self._count = 0
        self._lock = threading.Lock()

    def begin(self) -> None:
        with self._lock:
            self._count += 1
            if self._count == 1:
                self.flag.set(True)

    def end(self) -> None:
        with self._lock:
            self._count = max(0, self._count - 1)
            if self._count == 0:
                self.flag.set(False)

    @property
    def active(self) -> int:
        return self._count


class PauseBudget:
    """How long the trainer may still pause in the current step (reset at each step)."""

    def __init__(self, max_pause_s: float) -> None:
        self.max_pause_s = max_pause_s
        self.paused_s = 0.0

    def reset(self) -> None:
        self.paused_s = 0.0

    @property
    def left_s(self) -> float:
        return max(0.0, self.max_pause_s - self.paused_s)


def wait_while_busy(
    busy: Callable[[], bool],
    budget: PauseBudget,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = POLL_S,
) -> float:
    """Sleep while `busy()` holds and the budget lasts; returns the seconds paused."""
    if budget.left_s <= 0 or not busy():
        return 0.0
    t0 = clock()
    deadline = t0 + budget.left_s
    while busy() and clock() < deadline:
        sleep(poll_s)
    waited = clock() - t0
    budget.paused_s += waited
    return waited
