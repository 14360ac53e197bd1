"""The user's data under the user's control: redaction counters, deleting a session for
good, and reading everything back for an export.

Deleting runs with SQLite's `secure_delete` on (set when the store opens), so the freed
pages are overwritten with zeros, and ends with a WAL checkpoint that truncates the WAL
file: the deleted text is then neither in the database file nor in its `-wal` sidecar.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.rows import EventRow, SessionRow, _now

SESSION_EVENT_KEY = "$.session_id"
"""Events that belong to a session carry its id in their payload (TurnRecorded,
SessionClosed, SampleCreated, SampleJudged, TurnRated)."""


def count_redactions(cur: sqlite3.Cursor, counts: Mapping[str, int], now: float) -> None:
    """Add `counts` (kind -> findings) to the stored counters, inside the caller's write."""
    cur.executemany(
        "INSERT INTO redaction_counts (kind, count, updated) VALUES (?, ?, ?) "
        "ON CONFLICT(kind) DO UPDATE SET count = count + excluded.count, updated = excluded.updated",
        [(kind, n, now) for kind, n in counts.items() if n > 0],
    )


@dataclass(frozen=True)
class DeletedSession:
    """What `delete_session` removed (rows per table) and which checkpoints had already
    trained on the session (they keep their weights; the data is gone either way)."""

    session_id: str
    turns: int
    samples: int
    judgments: int
    episodes: int
    events: int
    trained_in: list[str]


class PrivacyMixin(StoreBase):
    """Redaction counters, deleting a session and everything derived, export reads."""

    def add_redactions(self, counts: Mapping[str, int], now: float | None = None) -> None:
        """Add findings redacted outside a turn (e.g. a user's hint) to the counters."""
        if any(n > 0 for n in counts.values()):
            with self._tx() as cur:
                count_redactions(cur, counts, _now(now))

    def redaction_counts(self) -> dict[str, int]:
        """Findings redacted so far, per kind (kinds never seen are absent)."""
        rows = self._rows("SELECT kind, count FROM redaction_counts ORDER BY kind")
        return {str(kind): int(n) for kind, n in rows}

    def delete_session(self, session_id: str) -> DeletedSession | None:
        """Delete a session with its turns, samples, judgments, episode and the events that
        name it, in one transaction; None if unknown. Checkpoints keep naming the session
        in their manifest (an id, no content) so "roll back to before it" still works."""
        with self._tx() as cur:
            if cur.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
                return None

            def count(sql: str) -> int:
                return int(cur.execute(sql, (session_id,)).fetchone()[0])

            trained = cur.execute(
                "SELECT DISTINCT trained_in FROM samples WHERE session_id = ? "
                "AND trained_in IS NOT NULL ORDER BY trained_in",
                (session_id,),
            )
            trained_in = [str(r[0]) for r in trained]
            turns = count("SELECT count(*) FROM turns WHERE session_id = ?")
            samples = count("SELECT count(*) FROM samples WHERE session_id = ?")
            judgments = count(
                "SELECT count(*) FROM judgments j JOIN samples s ON s.id = j.sample_id "
                "WHERE s.session_id = ?"
            )
            episodes = count("SELECT count(*) FROM episodes WHERE session_id = ?")
            events = cur.execute(
                f"DELETE FROM events WHERE json_valid(payload_json) AND "
                f"json_extract(payload_json, '{SESSION_EVENT_KEY}') = ?",
                (session_id,),
            ).rowcount
            # turns, samples, judgments and the episode go with it (ON DELETE CASCADE)
            cur.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        self._truncate_wal()
        return DeletedSession(
            session_id, turns, samples, judgments, episodes, events, sorted(trained_in)
        )

    def _truncate_wal(self) -> None:
        """Copy the WAL into the database and empty it (skipped inside an outer write)."""
        with self._lock:
            if self._depth == 0:
                self._rows("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- export reads ------------------------------------------------------------------
    def all_sessions(self) -> list[SessionRow]:
        """Every session, oldest first."""
        return self._all(SessionRow, "SELECT * FROM sessions ORDER BY created, rowid")

    def all_events(self, page: int = 1000) -> Iterator[EventRow]:
        """Every stored event, oldest first (read in pages)."""
        last = 0
        while True:
            rows = self._all(
                EventRow, "SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?", (last, page)
            )
            yield from rows
            if len(rows) < page:
                return
            last = rows[-1].id
