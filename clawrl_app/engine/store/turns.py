"""Turns: the recorded request/response pairs of a session, with tokens and log-probs."""

from __future__ import annotations

import sqlite3

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.faults import StoreError
from clawrl_app.engine.store.privacy import count_redactions
from clawrl_app.engine.store.rows import (
    _INT32,
    NewTurn,
    TurnRow,
    _build,
    _check,
    _dumps,
    _now,
    _pack,
)
from clawrl_app.engine.store.schema import ENV_SOURCE_PREFIX, TURN_TYPES
from clawrl_app.engine.store.sessions import CLOSE_SESSION, UPSERT_SESSION


class TurnsMixin(StoreBase):
    """Recording turns and finding them again."""

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
            turn_id = self._insert_turn(cur, turn, t)
            row = cur.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
            count_redactions(cur, turn.redactions, t)
        return _build(TurnRow, row)

    def append_turn(
        self, turn: NewTurn, source: str, done: bool = False, now: float | None = None
    ) -> int:
        """The chat path's write, in one transaction and as few statements as it takes (it
        runs before the client gets its answer): create or touch the session, append the
        turn, count its redactions, close the session when `done`. Returns the turn's id."""
        _check(turn.type, TURN_TYPES, "turn type")
        t = _now(now)
        with self._tx() as cur:
            cur.execute(UPSERT_SESSION, (turn.session_id, source, t, t))
            turn_id = self._insert_turn(cur, turn, t)
            count_redactions(cur, turn.redactions, t)
            if done:
                cur.execute(CLOSE_SESSION, (t, "done", turn.session_id))
        return turn_id

    @staticmethod
    def _insert_turn(cur: sqlite3.Cursor, turn: NewTurn, t: float) -> int:
        cur.execute(
            "INSERT INTO turns (session_id, idx, type, request_json, response_text, "
            "response_json, prompt_ids, response_ids, logprobs, policy_version, latency_ms, "
            "prompt_tokens, completion_tokens, finish_reason, created, redacted, holdout) "
            "VALUES (?, (SELECT coalesce(max(idx), -1) + 1 FROM turns WHERE session_id = ?), "
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (turn.session_id, turn.session_id, turn.type, _dumps(turn.request),
             turn.response_text,
             _dumps(turn.response), _pack(_INT32, turn.prompt_ids),
             _pack(_INT32, turn.response_ids), _pack("d", turn.logprobs),
             turn.policy_version, turn.latency_ms, turn.prompt_tokens,
             turn.completion_tokens, turn.finish_reason, t,
             sum(turn.redactions.values()), int(turn.holdout)),
        )  # fmt: skip
        return int(cur.lastrowid or 0)

    def get_turn(self, turn_id: int) -> TurnRow | None:
        """The turn with this id, or None."""
        return self._one(TurnRow, "SELECT * FROM turns WHERE id = ?", (turn_id,))

    def turns_for_session(self, session_id: str, type: str | None = None) -> list[TurnRow]:
        """A session's turns in order, optionally only main or only side turns."""
        return self._all(
            TurnRow,
            "SELECT * FROM turns WHERE session_id = :sid AND (:type IS NULL OR type = :type) "
            "ORDER BY idx",
            {"sid": session_id, "type": type},
        )

    def last_main_turn(self, session_id: str) -> TurnRow | None:
        """The session's latest main turn, or None."""
        return self._one(
            TurnRow,
            "SELECT * FROM turns WHERE session_id = ? AND type = 'main' ORDER BY idx DESC LIMIT 1",
            (session_id,),
        )

    def main_turns_without_sample(self, limit: int = 500) -> list[TurnRow]:
        """Main turns the collector has not handled yet, oldest first: those with no sample
        row, and those rated (no hint) before their reply, once a later main turn exists
        (their reply may hold the hint the judge reads). Never those of env sessions (their
        episode makes their samples)."""
        return self._all(
            TurnRow,
            "SELECT t.* FROM turns t JOIN sessions ss ON ss.id = t.session_id "
            "LEFT JOIN samples s ON s.turn_id = t.id "
            "WHERE t.type = 'main' AND ss.source NOT LIKE ? AND (s.id IS NULL OR ("
            "s.state = 'judged' AND s.next_state_role IS NULL AND s.next_state_text IS NULL "
            "AND EXISTS (SELECT 1 FROM judgments j WHERE j.sample_id = s.id "
            "AND j.user_rating IS NOT NULL AND j.user_hint IS NULL AND j.judge_score IS NULL) "
            "AND EXISTS (SELECT 1 FROM turns n WHERE n.session_id = t.session_id "
            "AND n.type = 'main' AND n.idx > t.idx))) "
            "ORDER BY t.id LIMIT ?",
            (ENV_SOURCE_PREFIX + "%", limit),
        )

    def next_main_turn(self, session_id: str, after_idx: int) -> TurnRow | None:
        """The session's first main turn after index `after_idx`, or None."""
        return self._one(
            TurnRow,
            "SELECT * FROM turns WHERE session_id = ? AND type = 'main' AND idx > ? "
            "ORDER BY idx LIMIT 1",
            (session_id, after_idx),
        )
