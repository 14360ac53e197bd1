"""Sessions: one row per conversation, with its review state and the dashboard counts."""

from __future__ import annotations

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.rows import SessionRow, _build, _check, _now
from clawrl_app.engine.store.schema import REVIEW_STATES, SAMPLE_STATES

UPSERT_SESSION = (
    "INSERT INTO sessions (id, source, created, last_seen) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET last_seen = max(last_seen, excluded.last_seen)"
)
"""Create a session, or bump the `last_seen` of an existing one: (id, source, now, now)."""

CLOSE_SESSION = (
    "UPDATE sessions SET closed_at = ?, close_reason = ? WHERE id = ? AND closed_at IS NULL"
)
"""Close an open session: (now, reason, id)."""


class SessionsMixin(StoreBase):
    """Creating, listing, reviewing and closing sessions (deleting: `PrivacyMixin`)."""

    def ensure_session(self, session_id: str, source: str, now: float | None = None) -> SessionRow:
        """Create the session if it is new, else bump its `last_seen`; return it."""
        t = _now(now)
        with self._tx() as cur:
            cur.execute(UPSERT_SESSION, (session_id, source, t, t))
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
            "SELECT * FROM sessions WHERE :state IS NULL OR review_state = :state "
            "ORDER BY created DESC, rowid DESC LIMIT :limit",
            {"state": review_state, "limit": limit},
        )

    def close_session(self, session_id: str, reason: str, now: float | None = None) -> bool:
        """Close an open session (idle, done, ...); False if unknown or already closed."""
        return self._update(CLOSE_SESSION, (_now(now), reason, session_id))

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
