"""Opening the store file and running SQL on it: permissions, WAL, migrations, transactions.

One connection per store, guarded by a lock so the API thread and backend threads can share
it; every write is a short `BEGIN IMMEDIATE` transaction (nested ones are savepoints), so a
crash loses only the transaction in flight. Other processes see committed rows at once.

Faults of the file or the disk (read-only, locked, full, damaged) become `StoreError`s that
say what happened and what to do; the store remembers the current fault and tells its
watchers once when it begins and once when a write succeeds again, so the engine can keep
answering unrecorded and show one banner instead of an error per request.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clawrl_app.engine.store.faults import StoreError, advice_for, store_error
from clawrl_app.engine.store.rows import R, _build
from clawrl_app.engine.store.schema import MIGRATIONS, _statements

Params = Sequence[Any] | Mapping[str, Any]
"""Query parameters: positional (`?`) or named (`:name`); never numbered (`?NNN`), which
Python 3.12 warns about and 3.14 refuses when given a sequence."""

StoreWatcher = Callable[["StoreError | None"], None]
"""Told when the store starts failing (the error) and when a write succeeds again (None)."""


class StoreBase:
    """The connection, its transactions and the read helpers the per-area mixins build on."""

    def __init__(self, path: Path) -> None:
        """Open (or create, mode 0600) the store at `path` and bring its schema up to date."""
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0  # open write transactions; nested ones are savepoints
        self._sidecars_private = False
        self._conn: sqlite3.Connection | None = None
        self._watchers: list[StoreWatcher] = []
        self.fault: StoreError | None = None
        """The fault of the file or disk that made the last operation fail (None: healthy)."""
        self.fault_since: float | None = None
        """When the current fault began (`time.time()`)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Create the file private before SQLite sees it (SQLite gives -wal/-shm its mode).
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            if os.stat(self.path).st_mode & 0o077:
                os.chmod(self.path, 0o600)
        except OSError as e:
            kind = "full" if e.errno == errno.ENOSPC else "readonly"
            advice = advice_for(kind, self.path)
            raise StoreError(
                f"cannot create or open the store file {self.path}: {e.strerror or e}. {advice}",
                kind,
                advice,
            ) from e
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=5.0, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            self._setup()
        except BaseException as e:
            self.close()
            if isinstance(e, sqlite3.Error):
                raise self._error("open the database", e) from e
            raise

    def _migrations(self) -> list[str]:
        """The migration scripts to apply (`Store` reads them from its package namespace)."""
        return MIGRATIONS

    def _setup(self) -> None:
        conn = self._connection()
        conn.execute("PRAGMA busy_timeout = 5000")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        migrations = self._migrations()
        known = len(migrations)
        if version > known:
            raise StoreError(
                f"the store {self.path} has schema version {version} but this clawrl-app "
                f"knows only up to {known}: a newer clawrl-app wrote it. Upgrade "
                "clawrl-app (pip install -U clawrl-app) to open it."
            )
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"the store {self.path} cannot use WAL mode (got {mode!r})")
        # WAL + NORMAL: a commit survives a crash or kill -9 of any process (the WAL is
        # written before COMMIT returns); only an OS crash or power loss can drop the last
        # commits. FULL would fsync every commit (0.2 ms -> 0.6 ms per turn recorded).
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        # A deleted session's text is overwritten, not left in free pages (see privacy.py).
        conn.execute("PRAGMA secure_delete = ON")
        for target in range(version + 1, known + 1):
            with self._tx() as cur:
                # Another process may have migrated while we waited for the write lock.
                if cur.execute("PRAGMA user_version").fetchone()[0] >= target:
                    continue
                for statement in _statements(migrations[target - 1]):
                    cur.execute(statement)
                cur.execute(f"PRAGMA user_version = {target}")
        self._make_sidecars_private()

    def _make_sidecars_private(self) -> None:
        done = True
        for suffix in ("-wal", "-shm"):
            sidecar = self.path.with_name(self.path.name + suffix)
            try:
                os.chmod(sidecar, 0o600)
            except FileNotFoundError:
                done = False
            except OSError as e:
                raise StoreError(f"cannot make {sidecar} private (chmod 600): {e}") from e
        self._sidecars_private = done

    def _error(self, action: str, e: sqlite3.Error) -> StoreError:
        err = store_error(self.path, action, e)
        if err.is_fault:
            self._report(err)
        return err

    # -- health: faults of the file or disk, told to watchers once per change ----------------
    def watch(self, watcher: StoreWatcher) -> None:
        """Call `watcher(error)` when the store starts failing (or fails differently) and
        `watcher(None)` when a write succeeds again. Called with the store's lock held:
        it must be quick and must not use the store."""
        self._watchers.append(watcher)

    def _report(self, err: StoreError) -> None:
        changed = self.fault is None or self.fault.kind != err.kind
        if self.fault is None:
            self.fault_since = time.time()
        self.fault = err
        if changed:
            self._tell(err)

    def _healthy(self) -> None:
        if self.fault is not None:
            self.fault, self.fault_since = None, None
            self._tell(None)

    def _tell(self, err: StoreError | None) -> None:
        for watcher in self._watchers:
            try:
                watcher(err)
            except Exception:  # a watcher's bug must not turn into a store failure
                logging.getLogger("clawrl.store").exception("store watcher failed")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {self.path} is closed")
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        """A write transaction; nested calls become savepoints of the outer one."""
        with self._lock:
            conn = self._connection()
            savepoint = f"sp{self._depth}" if self._depth else None
            try:
                conn.execute(f"SAVEPOINT {savepoint}" if savepoint else "BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self._error("start a write", e) from e
            self._depth += 1
            try:
                yield conn.cursor()
            except BaseException as exc:
                self._depth -= 1
                self._undo(conn, savepoint)
                if isinstance(exc, sqlite3.Error):
                    raise self._error("write", exc) from exc
                raise
            self._depth -= 1
            try:
                conn.execute(f"RELEASE {savepoint}" if savepoint else "COMMIT")
            except sqlite3.Error as e:
                self._undo(conn, savepoint)
                raise self._error("commit", e) from e
            if not self._sidecars_private:
                self._make_sidecars_private()
            if not savepoint:
                self._healthy()

    @staticmethod
    def _undo(conn: sqlite3.Connection, savepoint: str | None) -> None:
        if not conn.in_transaction:
            return
        try:
            if savepoint:
                conn.execute(f"ROLLBACK TO {savepoint}")
                conn.execute(f"RELEASE {savepoint}")
            else:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the original error matters more; SQLite rolls back on close anyway

    def _rows(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._connection().execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise self._error("read", e) from e

    def _all(self, cls: type[R], sql: str, params: Params = ()) -> list[R]:
        return [_build(cls, r) for r in self._rows(sql, params)]

    def _one(self, cls: type[R], sql: str, params: Params = ()) -> R | None:
        rows = self._all(cls, sql, params)
        return rows[0] if rows else None

    def _update(self, sql: str, params: Params) -> bool:
        with self._tx() as cur:
            return cur.execute(sql, params).rowcount > 0

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Group several store calls into one all-or-nothing transaction (calls inside
        that fail undo only themselves). Holds the store's lock: keep the block short."""
        with self._tx():
            yield

    def close(self) -> None:
        """Close the connection; later calls raise `StoreError`."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def schema_version(self) -> int:
        """The schema version of the open file (`PRAGMA user_version`)."""
        return int(self._rows("PRAGMA user_version")[0][0])

    def quick_check(self) -> str:
        """SQLite's quick check (the integrity check without index contents): "ok" when
        sound, else what is wrong. About 0.2 s for a 500 MB file."""
        problems = [str(r[0]) for r in self._rows("PRAGMA quick_check")]
        return "ok" if problems == ["ok"] else "\n".join(problems)

    def ensure_sound(self) -> None:
        """Raise a `StoreError` (kind "corrupt", with what to do) unless `quick_check` is ok."""
        problems = self.quick_check()
        if problems != "ok":
            first = "; ".join(problems.splitlines()[:3])
            advice = advice_for("corrupt", self.path)
            raise StoreError(f"store {self.path} is damaged ({first}). {advice}", "corrupt", advice)

    def integrity_check(self) -> str:
        """SQLite's integrity check plus a foreign-key check: "ok" when the file is sound."""
        problems = [str(r[0]) for r in self._rows("PRAGMA integrity_check")]
        problems += [f"foreign key: {tuple(r)}" for r in self._rows("PRAGMA foreign_key_check")]
        return "ok" if problems == ["ok"] else "\n".join(problems)
