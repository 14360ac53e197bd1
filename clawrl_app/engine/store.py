"""The app's one durable store: SQLite in WAL mode, and all of the project's SQL.

The four loops (serving, collection, judging, training) never call each other; they meet
here. One connection per `Store`, guarded by a lock so the API thread and backend threads
can share it; every write is a short `BEGIN IMMEDIATE` transaction, so a crash loses only
the transaction in flight. Other processes see committed rows at once (WAL).

Token ids are stored as little-endian int32 blobs and log-probs as float64 blobs, so they
round-trip exactly. JSON columns come back parsed. Times are Unix seconds (`time.time()`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REVIEW_STATES = ("pending", "approved", "excluded")
TURN_TYPES = ("main", "side")
SAMPLE_STATES = ("pending", "judged", "trained", "excluded", "skipped")
CHECKPOINT_STATUSES = ("ready", "published", "refused", "pruned")

# Index i brings the schema from version i to i + 1; each runs in one transaction.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY, source TEXT NOT NULL, created REAL NOT NULL,
        last_seen REAL NOT NULL, closed_at REAL, close_reason TEXT,
        review_state TEXT NOT NULL DEFAULT 'pending'
            CHECK (review_state IN ('pending', 'approved', 'excluded')),
        note TEXT NOT NULL DEFAULT '');
    CREATE INDEX sessions_by_created ON sessions(created);
    CREATE INDEX sessions_open_by_last_seen ON sessions(last_seen) WHERE closed_at IS NULL;
    CREATE TABLE turns (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL, type TEXT NOT NULL CHECK (type IN ('main', 'side')),
        request_json TEXT NOT NULL, response_text TEXT NOT NULL, response_json TEXT NOT NULL,
        prompt_ids BLOB NOT NULL, response_ids BLOB NOT NULL, logprobs BLOB NOT NULL,
        policy_version TEXT NOT NULL, latency_ms REAL NOT NULL,
        prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        finish_reason TEXT, created REAL NOT NULL,
        UNIQUE (session_id, idx));
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY,
        turn_id INTEGER NOT NULL UNIQUE REFERENCES turns(id) ON DELETE CASCADE,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        next_state_role TEXT, next_state_text TEXT, next_state_json TEXT,
        state TEXT NOT NULL DEFAULT 'pending'
            CHECK (state IN ('pending', 'judged', 'trained', 'excluded', 'skipped')),
        created REAL NOT NULL, claimed_at REAL, judged_at REAL, eligible_at REAL,
        trained_at REAL, trained_in TEXT, skip_reason TEXT);
    CREATE INDEX samples_by_state ON samples(state, claimed_at);
    CREATE INDEX samples_by_session ON samples(session_id);
    CREATE TABLE judgments (
        id INTEGER PRIMARY KEY,
        sample_id INTEGER NOT NULL UNIQUE REFERENCES samples(id) ON DELETE CASCADE,
        backend TEXT NOT NULL, votes_json TEXT NOT NULL,
        score REAL NOT NULL CHECK (score BETWEEN -1 AND 1),
        judge_score REAL CHECK (judge_score BETWEEN -1 AND 1),
        hint TEXT, hint_candidates_json TEXT NOT NULL, hint_rule TEXT, teacher_logprobs BLOB,
        user_rating INTEGER CHECK (user_rating IN (-1, 0, 1)), user_hint TEXT,
        created REAL NOT NULL);
    CREATE TABLE checkpoints (
        version TEXT PRIMARY KEY, path TEXT NOT NULL, parent TEXT, step INTEGER NOT NULL,
        created REAL NOT NULL, metrics_json TEXT NOT NULL, sessions_json TEXT NOT NULL,
        samples_json TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'ready'
            CHECK (status IN ('ready', 'published', 'refused', 'pruned')),
        published_at REAL, pinned INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX checkpoints_by_step ON checkpoints(step);
    CREATE TABLE metrics (
        id INTEGER PRIMARY KEY, step INTEGER NOT NULL, name TEXT NOT NULL,
        value REAL NOT NULL, version TEXT, ts REAL NOT NULL);
    CREATE INDEX metrics_by_name ON metrics(name, id);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY, ts REAL NOT NULL, kind TEXT NOT NULL,
        payload_json TEXT NOT NULL);
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)

# Token ids: int32 on disk; pick the native typecode that has 4 bytes.
_INT32 = "i" if array("i").itemsize == 4 else "l"
_SWAP = sys.byteorder == "big"

R = TypeVar("R")


class StoreError(Exception):
    """A store failure with a message meant for the user (what failed and what to do)."""


@dataclass(frozen=True)
class SessionRow:
    """One conversation."""

    id: str
    source: str
    created: float
    last_seen: float
    closed_at: float | None
    close_reason: str | None
    review_state: str
    note: str


@dataclass(frozen=True)
class NewTurn:
    """A turn to record; `record_turn` assigns id, idx and created."""

    session_id: str
    type: str
    request: dict[str, Any]
    response_text: str
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    logprobs: Sequence[float]
    policy_version: str
    response: dict[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None


@dataclass(frozen=True)
class TurnRow:
    """One recorded request/response pair, with tokens and behaviour log-probs."""

    id: int
    session_id: str
    idx: int
    type: str
    request: dict[str, Any]
    response_text: str
    response: dict[str, Any]
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    policy_version: str
    latency_ms: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    created: float


@dataclass(frozen=True)
class SampleRow:
    """A main turn linked to its next state, on its way through judging and training."""

    id: int
    turn_id: int
    session_id: str
    next_state_role: str | None
    next_state_text: str | None
    next_state: Any
    state: str
    created: float
    claimed_at: float | None
    judged_at: float | None
    eligible_at: float | None
    trained_at: float | None
    trained_in: str | None
    skip_reason: str | None


@dataclass(frozen=True)
class JudgmentRow:
    """The judge's verdict on a sample; `score` is the reward (a user rating overrides)."""

    id: int
    sample_id: int
    backend: str
    votes: list[Any]
    score: float
    judge_score: float | None
    hint: str | None
    hint_candidates: list[Any]
    hint_rule: str | None
    teacher_logprobs: list[float] | None
    user_rating: int | None
    user_hint: str | None
    created: float


@dataclass(frozen=True)
class CheckpointRow:
    """A trained policy version and where it came from."""

    version: str
    path: str
    parent: str | None
    step: int
    created: float
    metrics: dict[str, Any]
    sessions: list[str]
    samples: list[int]
    status: str
    published_at: float | None
    pinned: bool


@dataclass(frozen=True)
class MetricRow:
    """One appended metric value."""

    id: int
    step: int
    name: str
    value: float
    version: str | None
    ts: float


@dataclass(frozen=True)
class EventRow:
    """One appended event for the UI feed."""

    id: int
    ts: float
    kind: str
    payload: dict[str, Any]


def _pack(typecode: str, values: Sequence[Any]) -> bytes:
    """Values as a little-endian array blob (int32 ids or float64 log-probs)."""
    a = array(typecode, values)
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def _unpack(typecode: str, blob: bytes) -> list[Any]:
    a = array(typecode)
    a.frombytes(blob)
    if _SWAP:
        a.byteswap()
    return a.tolist()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")


def _statements(script: str) -> list[str]:
    """Split a migration script into complete statements (triggers may contain ';')."""
    out: list[str] = []
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n\t;"):
                out.append(buf.strip())
            buf = ""
    return out


# Columns whose stored form differs from the row object's field: column -> (field, decode).
_DECODED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "prompt_ids": ("prompt_ids", lambda b: _unpack(_INT32, b)),
    "response_ids": ("response_ids", lambda b: _unpack(_INT32, b)),
    "logprobs": ("logprobs", lambda b: _unpack("d", b)),
    "teacher_logprobs": ("teacher_logprobs", lambda b: _unpack("d", b)),
    "pinned": ("pinned", bool),
    **{
        f"{name}_json": (name, json.loads)
        for name in ("request", "response", "next_state", "votes", "hint_candidates")
        + ("metrics", "sessions", "samples", "payload")
    },
}


def _build(cls: type[R], row: sqlite3.Row) -> R:
    """A row object from a `SELECT *` row, decoding blobs and JSON."""
    values: dict[str, Any] = {}
    for column, value in zip(row.keys(), row, strict=True):
        name, decode = _DECODED.get(column, (column, None))
        values[name] = decode(value) if decode is not None and value is not None else value
    return cls(**values)


class Store:
    """The SQLite store: open with `Store(path)`, close with `close()` or a `with` block."""

    def __init__(self, path: Path) -> None:
        """Open (or create, mode 0600) the store at `path` and bring its schema up to date."""
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0  # open write transactions; nested ones are savepoints
        self._sidecars_private = False
        self._conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Create the file private before SQLite sees it (SQLite gives -wal/-shm its mode).
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            if os.stat(self.path).st_mode & 0o077:
                os.chmod(self.path, 0o600)
        except OSError as e:
            raise StoreError(
                f"cannot create or open the store file {self.path}: {e.strerror or e}. Make "
                "sure its folder is writable by you, or point CLAWRL_HOME at a writable folder."
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

    def _setup(self) -> None:
        conn = self._connection()
        conn.execute("PRAGMA busy_timeout = 5000")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        known = len(MIGRATIONS)
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
        for target in range(version + 1, known + 1):
            with self._tx() as cur:
                # Another process may have migrated while we waited for the write lock.
                if cur.execute("PRAGMA user_version").fetchone()[0] >= target:
                    continue
                for statement in _statements(MIGRATIONS[target - 1]):
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
        msg = str(e)
        advice = ""
        if "readonly" in msg or "unable to open" in msg:
            advice = f" Check that you can write to {self.path} and its folder."
        elif "locked" in msg or "busy" in msg:
            advice = " Another process holds the store; stop it or try again."
        elif "full" in msg:
            advice = " The disk is full; free some space."
        elif "not a database" in msg or "malformed" in msg:
            advice = " The file is not a clawrl-app store or is damaged; move it away."
        return StoreError(f"store {self.path}: could not {action}: {msg}.{advice}")

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

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._connection().execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise self._error("read", e) from e

    def _all(self, cls: type[R], sql: str, params: Sequence[Any] = ()) -> list[R]:
        return [_build(cls, r) for r in self._rows(sql, params)]

    def _one(self, cls: type[R], sql: str, params: Sequence[Any] = ()) -> R | None:
        rows = self._all(cls, sql, params)
        return rows[0] if rows else None

    def _update(self, sql: str, params: Sequence[Any]) -> bool:
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        """The schema version of the open file (`PRAGMA user_version`)."""
        return int(self._rows("PRAGMA user_version")[0][0])

    def integrity_check(self) -> str:
        """SQLite's integrity check plus a foreign-key check: "ok" when the file is sound."""
        problems = [str(r[0]) for r in self._rows("PRAGMA integrity_check")]
        problems += [f"foreign key: {tuple(r)}" for r in self._rows("PRAGMA foreign_key_check")]
        return "ok" if problems == ["ok"] else "\n".join(problems)

    # -- sessions -------------------------------------------------------------------------

    def ensure_session(self, session_id: str, source: str, now: float | None = None) -> SessionRow:
        """Create the session if it is new, else bump its `last_seen`; return it."""
        t = _now(now)
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO sessions (id, source, created, last_seen) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET last_seen = max(last_seen, excluded.last_seen)",
                (session_id, source, t, t),
            )
            row = cur.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return _build(SessionRow, row)

    def get_session(self, session_id: str) -> SessionRow | None:
        """The session with this id, or None."""
        return self._one(SessionRow, "SELECT * FROM sessions WHERE id = ?", (session_id,))

    def list_sessions(self, limit: int = 100, review_state: str | None = None) -> list[SessionRow]:
        """Sessions, newest (by creation) first, optionally only one review state."""
        if review_state is not None:
            _check(review_state, REVIEW_STATES, "review_state")
        return self._all(
            SessionRow,
            "SELECT * FROM sessions WHERE ?1 IS NULL OR review_state = ?1 "
            "ORDER BY created DESC, rowid DESC LIMIT ?2",
            (review_state, limit),
        )

    def close_session(self, session_id: str, reason: str, now: float | None = None) -> bool:
        """Close an open session (idle, done, ...); False if unknown or already closed."""
        return self._update(
            "UPDATE sessions SET closed_at = ?, close_reason = ? "
            "WHERE id = ? AND closed_at IS NULL",
            (_now(now), reason, session_id),
        )

    def idle_sessions(self, last_seen_before: float) -> list[SessionRow]:
        """Open sessions last seen before the given time, oldest first."""
        return self._all(
            SessionRow,
            "SELECT * FROM sessions WHERE closed_at IS NULL AND last_seen < ? ORDER BY last_seen",
            (last_seen_before,),
        )

    def set_review_state(self, session_id: str, state: str) -> bool:
        """Set pending/approved/excluded (ValueError otherwise); False if unknown session."""
        _check(state, REVIEW_STATES, "review_state")
        sql = "UPDATE sessions SET review_state = ? WHERE id = ?"
        return self._update(sql, (state, session_id))

    def set_session_note(self, session_id: str, note: str) -> bool:
        """Set the user's note on a session; False if unknown session."""
        return self._update("UPDATE sessions SET note = ? WHERE id = ?", (note, session_id))

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its turns, samples and judgments; False if unknown."""
        return self._update("DELETE FROM sessions WHERE id = ?", (session_id,))

    def session_stats(self) -> dict[str, int]:
        """Dashboard counts: sessions (open, per review state), turns, samples per state."""
        stats = {"sessions": 0, "sessions_open": 0, "turns": 0, "turns_main": 0, "samples": 0}
        stats |= {f"sessions_{s}": 0 for s in REVIEW_STATES}
        stats |= {f"samples_{s}": 0 for s in SAMPLE_STATES}
        sql = "SELECT review_state, count(*), sum(closed_at IS NULL) FROM sessions GROUP BY 1"
        for state, n, n_open in self._rows(sql):
            stats[f"sessions_{state}"] = n
            stats["sessions"] += n
            stats["sessions_open"] += n_open
        for kind, n in self._rows("SELECT type, count(*) FROM turns GROUP BY type"):
            stats["turns"] += n
            stats["turns_main"] += n if kind == "main" else 0
        for state, n in self._rows("SELECT state, count(*) FROM samples GROUP BY state"):
            stats[f"samples_{state}"] = n
            stats["samples"] += n
        return stats

    # -- turns ----------------------------------------------------------------------------

    def record_turn(self, turn: NewTurn, now: float | None = None) -> TurnRow:
        """Append a turn to its (existing) session with the next idx; bumps `last_seen`."""
        _check(turn.type, TURN_TYPES, "turn type")
        t = _now(now)
        with self._tx() as cur:
            cur.execute(
                "UPDATE sessions SET last_seen = max(last_seen, ?) WHERE id = ?",
                (t, turn.session_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"cannot record a turn for unknown session {turn.session_id!r}")
            cur.execute(
                "INSERT INTO turns (session_id, idx, type, request_json, response_text, "
                "response_json, prompt_ids, response_ids, logprobs, policy_version, latency_ms, "
                "prompt_tokens, completion_tokens, finish_reason, created) VALUES (?1, "
                "(SELECT coalesce(max(idx), -1) + 1 FROM turns WHERE session_id = ?1), "
                "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                (turn.session_id, turn.type, _dumps(turn.request), turn.response_text,
                 _dumps(turn.response), _pack(_INT32, turn.prompt_ids),
                 _pack(_INT32, turn.response_ids), _pack("d", turn.logprobs),
                 turn.policy_version, turn.latency_ms, turn.prompt_tokens,
                 turn.completion_tokens, turn.finish_reason, t),
            )  # fmt: skip
            row = cur.execute("SELECT * FROM turns WHERE id = ?", (cur.lastrowid,)).fetchone()
        return _build(TurnRow, row)

    def get_turn(self, turn_id: int) -> TurnRow | None:
        """The turn with this id, or None."""
        return self._one(TurnRow, "SELECT * FROM turns WHERE id = ?", (turn_id,))

    def turns_for_session(self, session_id: str, type: str | None = None) -> list[TurnRow]:
        """A session's turns in order, optionally only main or only side turns."""
        return self._all(
            TurnRow,
            "SELECT * FROM turns WHERE session_id = ?1 AND (?2 IS NULL OR type = ?2) ORDER BY idx",
            (session_id, type),
        )

    def last_main_turn(self, session_id: str) -> TurnRow | None:
        """The session's latest main turn, or None."""
        return self._one(
            TurnRow,
            "SELECT * FROM turns WHERE session_id = ? AND type = 'main' ORDER BY idx DESC LIMIT 1",
            (session_id,),
        )

    def main_turns_without_sample(self, limit: int = 500) -> list[TurnRow]:
        """Main turns the collector has not handled yet (no sample row), oldest first."""
        return self._all(
            TurnRow,
            "SELECT t.* FROM turns t LEFT JOIN samples s ON s.turn_id = t.id "
            "WHERE t.type = 'main' AND s.id IS NULL ORDER BY t.id LIMIT ?",
            (limit,),
        )

    def next_main_turn(self, session_id: str, after_idx: int) -> TurnRow | None:
        """The session's first main turn after index `after_idx`, or None."""
        return self._one(
            TurnRow,
            "SELECT * FROM turns WHERE session_id = ? AND type = 'main' AND idx > ? "
            "ORDER BY idx LIMIT 1",
            (session_id, after_idx),
        )

    # -- samples and judgments ------------------------------------------------------------

    def create_sample(
        self,
        turn_id: int,
        session_id: str,
        next_state_role: str | None,
        next_state_text: str | None,
        next_state_json: Any = None,
        now: float | None = None,
    ) -> int | None:
        """Create the turn's pending sample and return its id; None if the turn already has
        one (a sample made by a user rating without a next state gets this next state)."""
        next_state = (next_state_role, next_state_text, _dumps(next_state_json))
        with self._tx() as cur:
            old = cur.execute(
                "SELECT id, next_state_role FROM samples WHERE turn_id = ?", (turn_id,)
            ).fetchone()
            if old is None:
                cur.execute(
                    "INSERT INTO samples (turn_id, session_id, next_state_role, next_state_text, "
                    "next_state_json, created) VALUES (?, ?, ?, ?, ?, ?)",
                    (turn_id, session_id, *next_state, _now(now)),
                )
                return cur.lastrowid
            if old["next_state_role"] is None and next_state_role is not None:
                cur.execute(
                    "UPDATE samples SET next_state_role = ?, next_state_text = ?, "
                    "next_state_json = ? WHERE id = ?",
                    (*next_state, old["id"]),
                )
            return None

    def get_sample(self, sample_id: int) -> SampleRow | None:
        """The sample with this id, or None."""
        return self._one(SampleRow, "SELECT * FROM samples WHERE id = ?", (sample_id,))

    def samples_for_session(self, session_id: str) -> list[SampleRow]:
        """A session's samples in turn order."""
        return self._all(
            SampleRow,
            "SELECT s.* FROM samples s JOIN turns t ON t.id = s.turn_id "
            "WHERE s.session_id = ? ORDER BY t.idx",
            (session_id,),
        )

    def claim_pending_samples(
        self, limit: int, now: float | None = None, stale_after_s: float = 300
    ) -> list[SampleRow]:
        """Claim up to `limit` pending samples for judging: unclaimed ones, or ones claimed
        over `stale_after_s` ago by a judge that died. Excluded sessions are skipped."""
        t = _now(now)
        with self._tx() as cur:
            ids = [
                r[0]
                for r in cur.execute(
                    "SELECT s.id FROM samples s JOIN sessions ss ON ss.id = s.session_id "
                    "WHERE s.state = 'pending' AND (s.claimed_at IS NULL OR s.claimed_at < ?) "
                    "AND ss.review_state != 'excluded' ORDER BY s.id LIMIT ?",
                    (t - stale_after_s, limit),
                )
            ]
            cur.executemany("UPDATE samples SET claimed_at = ? WHERE id = ?", [(t, i) for i in ids])
            marks = ",".join("?" * len(ids))
            rows = cur.execute(f"SELECT * FROM samples WHERE id IN ({marks}) ORDER BY id", ids)
            return [_build(SampleRow, r) for r in rows]

    def release_claims(self) -> int:
        """Drop every claim on pending samples (at start-up: the judge that held them died)."""
        with self._tx() as cur:
            return cur.execute(
                "UPDATE samples SET claimed_at = NULL WHERE state = 'pending' AND claimed_at IS NOT NULL"
            ).rowcount

    def record_judgment(
        self,
        sample_id: int,
        backend: str,
        votes: Sequence[Any],
        score: float,
        hint: str | None,
        hint_candidates: Sequence[Any],
        hint_rule: str | None,
        teacher_logprobs: Sequence[float] | None,
        eligible_at: float | None,
        now: float | None = None,
    ) -> JudgmentRow:
        """Store (or replace) the judge's verdict and mark the sample judged. `score` stays
        overridden by a user rating given before or after."""
        t = _now(now)
        teacher = None if teacher_logprobs is None else _pack("d", teacher_logprobs)
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO judgments (sample_id, backend, votes_json, score, judge_score, "
                "hint, hint_candidates_json, hint_rule, teacher_logprobs, created) VALUES "
                "(?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT(sample_id) DO UPDATE SET "
                "backend = ?2, votes_json = ?3, score = coalesce(user_rating, ?4), "
                "judge_score = ?4, hint = ?5, hint_candidates_json = ?6, hint_rule = ?7, "
                "teacher_logprobs = ?8",
                (sample_id, backend, _dumps(list(votes)), score, hint,
                 _dumps(list(hint_candidates)), hint_rule, teacher, t),
            )  # fmt: skip
            return self._mark_judged(cur, sample_id, t, eligible_at)

    @staticmethod
    def _mark_judged(
        cur: sqlite3.Cursor, sample_id: int, t: float, eligible_at: float | None
    ) -> JudgmentRow:
        # A sample already trained or excluded keeps its state.
        cur.execute(
            "UPDATE samples SET judged_at = ?, eligible_at = coalesce(?, eligible_at), "
            "claimed_at = NULL, skip_reason = NULL, state = 'judged' "
            "WHERE id = ? AND state IN ('pending', 'skipped', 'judged')",
            (t, eligible_at, sample_id),
        )
        row = cur.execute("SELECT * FROM judgments WHERE sample_id = ?", (sample_id,))
        return _build(JudgmentRow, row.fetchone())

    def set_teacher_logprobs(self, sample_id: int, logprobs: Sequence[float]) -> bool:
        """Store teacher log-probs (e.g. for a user's hint) on an existing judgment."""
        return self._update(
            "UPDATE judgments SET teacher_logprobs = ? WHERE sample_id = ?",
            (_pack("d", logprobs), sample_id),
        )

    def set_user_rating(
        self,
        turn_id: int,
        rating: int,
        hint: str | None,
        eligible_at: float | None = None,
        now: float | None = None,
    ) -> JudgmentRow:
        """Record the user's explicit rating (-1, 0, 1) and hint for a turn; it overrides the
        judge's score. The sample is created (with no next state) if missing."""
        if rating not in (-1, 0, 1):
            raise ValueError(f"rating must be -1, 0 or 1, not {rating!r}")
        t = _now(now)
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO samples (turn_id, session_id, created) "
                "SELECT id, session_id, ? FROM turns WHERE id = ? "
                "ON CONFLICT(turn_id) DO NOTHING",
                (t, turn_id),
            )
            found = cur.execute("SELECT id FROM samples WHERE turn_id = ?", (turn_id,)).fetchone()
            if found is None:
                raise StoreError(f"cannot rate unknown turn {turn_id}")
            cur.execute(
                "INSERT INTO judgments (sample_id, backend, votes_json, score, "
                "hint_candidates_json, user_rating, user_hint, created) "
                "VALUES (?1, 'user', '[]', ?2, '[]', ?2, ?3, ?4) ON CONFLICT(sample_id) "
                "DO UPDATE SET score = ?2, user_rating = ?2, user_hint = ?3",
                (found[0], rating, hint, t),
            )
            return self._mark_judged(cur, found[0], t, eligible_at)

    def get_judgment(self, sample_id: int) -> JudgmentRow | None:
        """The judgment of a sample, or None."""
        return self._one(JudgmentRow, "SELECT * FROM judgments WHERE sample_id = ?", (sample_id,))

    def set_sample_state(self, sample_id: int, state: str, reason: str | None = None) -> bool:
        """Force a sample's state (e.g. skipped, with a reason); False if unknown sample."""
        _check(state, SAMPLE_STATES, "sample state")
        return self._update(
            "UPDATE samples SET state = ?, skip_reason = ?, claimed_at = NULL WHERE id = ?",
            (state, reason, sample_id),
        )

    def trainable_samples(
        self, limit: int, now: float | None = None, approved_only: bool = False
    ) -> list[SampleRow]:
        """Judged samples past their review grace (`eligible_at <= now`), oldest first, never
        from excluded sessions; `approved_only` for manual review mode."""
        return self._all(
            SampleRow,
            "SELECT s.* FROM samples s JOIN sessions ss ON ss.id = s.session_id "
            "WHERE s.state = 'judged' AND s.eligible_at <= ? AND ss.review_state != 'excluded' "
            "AND (NOT ? OR ss.review_state = 'approved') ORDER BY s.id LIMIT ?",
            (_now(now), approved_only, limit),
        )

    def mark_trained(
        self, sample_ids: Sequence[int], version: str, now: float | None = None
    ) -> None:
        """Mark samples as used to train checkpoint `version`."""
        t = _now(now)
        with self._tx() as cur:
            cur.executemany(
                "UPDATE samples SET state = 'trained', trained_at = ?, trained_in = ? WHERE id = ?",
                [(t, version, i) for i in sample_ids],
            )

    # -- checkpoints ----------------------------------------------------------------------

    def register_checkpoint(
        self,
        version: str,
        path: str | os.PathLike[str],
        parent: str | None,
        step: int,
        metrics: Mapping[str, Any],
        sessions: Sequence[str],
        samples: Sequence[int],
        now: float | None = None,
    ) -> CheckpointRow:
        """Register a new checkpoint (status ready); StoreError if the version exists."""
        with self._tx() as cur:
            if cur.execute("SELECT 1 FROM checkpoints WHERE version = ?", (version,)).fetchone():
                raise StoreError(f"checkpoint {version!r} is already registered")
            cur.execute(
                "INSERT INTO checkpoints (version, path, parent, step, created, metrics_json, "
                "sessions_json, samples_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (version, os.fspath(path), parent, step, _now(now), _dumps(dict(metrics)),
                 _dumps(list(sessions)), _dumps(list(samples))),
            )  # fmt: skip
            row = cur.execute("SELECT * FROM checkpoints WHERE version = ?", (version,))
            return _build(CheckpointRow, row.fetchone())

    def list_checkpoints(self) -> list[CheckpointRow]:
        """All checkpoints by step (then creation)."""
        return self._all(CheckpointRow, "SELECT * FROM checkpoints ORDER BY step, created, rowid")

    def get_checkpoint(self, version: str) -> CheckpointRow | None:
        """The checkpoint with this version, or None."""
        return self._one(CheckpointRow, "SELECT * FROM checkpoints WHERE version = ?", (version,))

    def set_checkpoint_status(self, version: str, status: str) -> bool:
        """Set ready/published/refused/pruned (ValueError otherwise); False if unknown."""
        _check(status, CHECKPOINT_STATUSES, "checkpoint status")
        sql = "UPDATE checkpoints SET status = ? WHERE version = ?"
        return self._update(sql, (status, version))

    def mark_published(self, version: str, now: float | None = None) -> bool:
        """Record that serving now uses `version`; False if unknown."""
        return self._update(
            "UPDATE checkpoints SET status = 'published', published_at = ? WHERE version = ?",
            (_now(now), version),
        )

    def served_checkpoint(self) -> CheckpointRow | None:
        """The checkpoint published most recently (what serving uses), or None."""
        return self._one(
            CheckpointRow,
            "SELECT * FROM checkpoints WHERE published_at IS NOT NULL "
            "ORDER BY published_at DESC, rowid DESC LIMIT 1",
        )

    def set_checkpoint_pinned(self, version: str, pinned: bool) -> bool:
        """Pin (keep from pruning) or unpin a checkpoint; False if unknown."""
        sql = "UPDATE checkpoints SET pinned = ? WHERE version = ?"
        return self._update(sql, (pinned, version))

    # -- metrics and events ---------------------------------------------------------------

    def add_metric(
        self,
        step: int,
        name: str,
        value: float,
        version: str | None = None,
        now: float | None = None,
    ) -> int:
        """Append one metric value; returns its id."""
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO metrics (step, name, value, version, ts) VALUES (?, ?, ?, ?, ?)",
                (step, name, float(value), version, _now(now)),
            )
            return int(cur.lastrowid or 0)

    def add_metrics(
        self,
        step: int,
        values: Mapping[str, float],
        version: str | None = None,
        now: float | None = None,
    ) -> None:
        """Append several metric values of one step in one transaction."""
        t = _now(now)
        with self._tx() as cur:
            cur.executemany(
                "INSERT INTO metrics (step, name, value, version, ts) VALUES (?, ?, ?, ?, ?)",
                [(step, name, float(v), version, t) for name, v in values.items()],
            )

    def metrics(self, name: str | None = None, since_id: int = 0) -> list[MetricRow]:
        """Metric values with id > `since_id`, optionally of one name, in append order."""
        return self._all(
            MetricRow,
            "SELECT * FROM metrics WHERE id > ?1 AND (?2 IS NULL OR name = ?2) ORDER BY id",
            (since_id, name),
        )

    def add_event(self, kind: str, payload: Mapping[str, Any], now: float | None = None) -> int:
        """Append an event for the UI feed; returns its id."""
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO events (ts, kind, payload_json) VALUES (?, ?, ?)",
                (_now(now), kind, _dumps(dict(payload))),
            )
            return int(cur.lastrowid or 0)

    def events_since(self, event_id: int = 0, limit: int = 500) -> list[EventRow]:
        """Up to `limit` events with id > `event_id`, oldest first."""
        sql = "SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?"
        return self._all(EventRow, sql, (event_id, limit))
