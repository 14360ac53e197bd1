"""Faults of the store's file or disk: what kind, and what the user can do about it.

SQLite reports a read-only file, a lock held by another process, a full disk or a damaged
file as result codes; here they become a `StoreError` whose message names the file, says
what happened and what to do, and whose `kind` lets the engine keep answering unrecorded.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

FAULT_KINDS = ("readonly", "locked", "full", "corrupt", "io")
"""Store errors caused by the file or the disk rather than by what was asked of the store."""


class StoreError(Exception):
    """A store failure with a message meant for the user (what failed and what to do)."""

    def __init__(
        self, message: str, kind: str = "other", advice: str = "", action: str = ""
    ) -> None:
        super().__init__(message)
        self.kind = kind
        """One of `FAULT_KINDS` for a fault of the file or the disk, else "other"."""
        self.advice = advice
        """What the user can do about it (also part of the message)."""
        self.action = action
        """What the store was doing, e.g. "write" or "open the database"."""

    @property
    def is_fault(self) -> bool:
        """True when the file or the disk failed (not the request): answers go on unrecorded."""
        return self.kind in FAULT_KINDS


# SQLite's primary result codes (extended codes keep them in the low byte), by fault kind.
_FAULT_CODES = {
    8: "readonly",  # SQLITE_READONLY
    14: "readonly",  # SQLITE_CANTOPEN: the file or its -wal/-shm cannot be opened
    3: "readonly",  # SQLITE_PERM
    5: "locked",  # SQLITE_BUSY
    6: "locked",  # SQLITE_LOCKED
    13: "full",  # SQLITE_FULL
    11: "corrupt",  # SQLITE_CORRUPT
    26: "corrupt",  # SQLITE_NOTADB
    10: "io",  # SQLITE_IOERR
}
_FAULT_WORDS = (
    ("readonly", "readonly"),
    ("unable to open", "readonly"),
    ("locked", "locked"),
    ("busy", "locked"),
    ("full", "full"),
    ("not a database", "corrupt"),
    ("malformed", "corrupt"),
    ("disk i/o error", "io"),
)


def fault_kind(e: sqlite3.Error) -> str:
    """The kind of a SQLite error: one of `FAULT_KINDS`, or "other"."""
    code = getattr(e, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        return _FAULT_CODES.get(code & 0xFF, "other")
    msg = str(e).lower()
    return next((kind for word, kind in _FAULT_WORDS if word in msg), "other")


def advice_for(kind: str, path: Path) -> str:
    """What the user can do about a fault of `kind` on the store file `path`."""
    sidecars = f"{path.name}-wal and {path.name}-shm"
    return {
        "readonly": f"clawrl-app cannot write {path}: make it and its folder {path.parent} "
        "writable by you (and check that the disk is not mounted read-only), or point "
        "CLAWRL_HOME at a writable folder.",
        "locked": f"Another process holds a lock on {path} (a second clawrl-app, or a tool "
        "such as sqlite3 or DB Browser): close it; a running clawrl-app retries by itself.",
        "full": f"The disk holding {path.parent} is full: free some space. clawrl-app keeps "
        "answering and records again once it can; nothing already recorded is lost.",
        "corrupt": f"The file {path} is damaged or is not a clawrl-app store: stop "
        f"clawrl-app, move it away together with its {sidecars} files (e.g. add .broken to "
        "their names), then restore them from a backup or start again with a new empty store.",
        "io": f"The disk holding {path} reported an I/O error: check the disk and its free "
        "space, then try again.",
    }.get(kind, "")


def store_error(path: Path, action: str, e: sqlite3.Error) -> StoreError:
    """A `StoreError` for SQLite error `e` while doing `action`, with its kind and advice."""
    kind = fault_kind(e)
    advice = advice_for(kind, path)
    message = f"store {path}: could not {action}: {e}." + (f" {advice}" if advice else "")
    return StoreError(message, kind, advice, action)


def check_store_file(path: Path) -> str:
    """SQLite's `quick_check` of the store file at `path`, without migrating or creating it:
    "ok", or what is wrong. Raises `StoreError` when the file cannot be read at all."""
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=rw", uri=True, timeout=5.0)
    except sqlite3.Error as e:
        raise store_error(Path(path), "open the database", e) from e
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.Error as e:
        raise store_error(Path(path), "check the database", e) from e
    finally:
        conn.close()
    problems = [str(r[0]) for r in rows]
    return "ok" if problems == ["ok"] else "\n".join(problems)


def log_failure(logger: logging.Logger, what: str, exc: BaseException) -> None:
    """Log a loop's failed pass: a store fault in one debug line (the engine reports each
    fault once, with what to do), anything else as an error with its traceback."""
    if isinstance(exc, StoreError) and exc.is_fault:
        logger.debug("%s: %s", what, exc)
    else:
        logger.error("%s", what, exc_info=exc)
