"""One trainer per store, and never a trainer without its engine.

The trainer runs in its own process group (so stopping it never touches the endpoint),
which also means a crash of the engine (kill -9, OOM) leaves it running: an orphan that
would train on, register checkpoints and race the next engine's trainer for the same
samples. Two file locks (flock: the kernel drops them when their process dies, however
it dies) prevent that:

- the engine holds the *owner lease* (`trainer.lease` in the data dir), a file holding a
  fresh token per start; the trainer gets the token in its config and stops as soon as the
  lease is free (its engine died) or holds another token (a newer engine took over): it
  checks between steps, at the pause points inside a step and before registering a
  checkpoint, and drops the step under way (the next engine's trainer redoes it);
- each trainer process holds the *trainer lock* (`trainer.lock`) while it lives, so a new
  trainer waits for an old one to be gone before it reads the store or cleans the
  checkpoint folder.

POSIX only, like the rest of the process handling (process groups, signals).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import uuid
from pathlib import Path

log = logging.getLogger("clawrl.trainer")
LEASE_FILE = "trainer.lease"
LOCK_FILE = "trainer.lock"


class OwnerLease:
    """The engine's side: hold the lease while the engine lives; `token` names this start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token: str | None = None
        self._fd: int | None = None

    def acquire(self, wait_s: float = 5.0) -> str | None:
        """Take the lease and write a new token; None when another live engine holds it
        (then its trainers are not ours to stop, and ours run without the check)."""
        if self._fd is not None:
            return self.token
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:  # a trainer's liveness probe holds a shared lock for a moment: retry
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    log.warning("%s is held by another engine on this store", self.path)
                    return None
                time.sleep(0.05)
        token = uuid.uuid4().hex
        os.ftruncate(fd, 0)
        os.pwrite(fd, token.encode(), 0)
        os.fsync(fd)
        self._fd, self.token = fd, token
        return token

    def release(self) -> None:
        """Drop the lease (the engine stopped its trainer); a dead engine drops it anyway."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd, self.token = None, None


def owner_alive(path: Path, token: str) -> bool:
    """The trainer's side: is the engine that started us still running, and still ours?"""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: an engine lives; is it the one that started us?
            return os.pread(fd, 64, 0).decode(errors="replace") == token
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False  # nobody holds it: our engine died
    finally:
        os.close(fd)


def hold_trainer_lock(path: Path, poll_s: float = 0.5) -> int:
    """Block until no other trainer process holds `path`; the returned descriptor keeps the
    lock for the rest of this process's life."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    waited = False
    while True:
        with contextlib.suppress(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if waited:
                log.info("the previous trainer process has exited")
            return fd
        if not waited:
            log.info("waiting for the previous trainer process to exit")
            waited = True
        time.sleep(poll_s)
