"""Samples and judgments: main turns on their way through judging and into training."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.faults import StoreError
from clawrl_app.engine.store.rows import (
    _INT32,
    JudgmentRow,
    SampleRow,
    _build,
    _check,
    _dumps,
    _now,
    _pack,
)
from clawrl_app.engine.store.schema import SAMPLE_STATES

HOLDOUT_REASON = "held out: the regression guard's personal evaluation set"


# A sample rated by the user without a hint and not yet read by the judge goes (back) to
# the judge once it has a next state: the rating stays its reward (`record_judgment` keeps
# `user_rating`), and the judge may still read a hint in the reply ("Too long. Fifteen
# words."). Without this, a user who rates every answer would never teach by correction.
_AWAIT_JUDGE_HINT = (
    "UPDATE samples SET state = 'pending', claimed_at = NULL WHERE id = ? "
    "AND state = 'judged' AND next_state_role IS NOT NULL AND EXISTS (SELECT 1 FROM judgments j "
    "WHERE j.sample_id = samples.id AND j.user_rating IS NOT NULL AND j.user_hint IS NULL "
    "AND j.judge_score IS NULL)"
)


class SamplesMixin(StoreBase):
    """Creating and claiming samples, recording verdicts and user ratings, marking training."""

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
        one (a sample made by a user rating without a next state gets this next state, or,
        when there is none to give, an empty next-state text: looked for, nothing followed)."""
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
                cur.execute(_AWAIT_JUDGE_HINT, (old["id"],))
            elif old["next_state_role"] is None:
                cur.execute(
                    "UPDATE samples SET next_state_text = '' WHERE id = ? "
                    "AND next_state_text IS NULL",
                    (old["id"],),
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
                "(:sid, :backend, :votes, :score, :score, :hint, :cands, :rule, :teacher, :t) "
                "ON CONFLICT(sample_id) DO UPDATE SET backend = :backend, votes_json = :votes, "
                "score = coalesce(user_rating, :score), judge_score = :score, hint = :hint, "
                "hint_candidates_json = :cands, hint_rule = :rule, teacher_logprobs = "
                "CASE WHEN user_hint IS NULL THEN :teacher ELSE teacher_logprobs END",
                {"sid": sample_id, "backend": backend, "votes": _dumps(list(votes)),
                 "score": score, "hint": hint, "cands": _dumps(list(hint_candidates)),
                 "rule": hint_rule, "teacher": teacher, "t": t},
            )  # fmt: skip
            return self._mark_judged(cur, sample_id, t, eligible_at)

    @staticmethod
    def _mark_judged(
        cur: sqlite3.Cursor, sample_id: int, t: float, eligible_at: float | None
    ) -> JudgmentRow:
        # A sample already trained or excluded keeps its state; a held-out turn's sample is
        # judged (the guard's personal set needs its score) but skipped for training.
        cur.execute(
            "UPDATE samples SET judged_at = ?, eligible_at = coalesce(?, eligible_at), "
            "claimed_at = NULL, skip_reason = CASE WHEN h.holdout = 1 THEN ? END, "
            "state = CASE WHEN h.holdout = 1 THEN 'skipped' ELSE 'judged' END "
            "FROM (SELECT holdout FROM turns WHERE id = (SELECT turn_id FROM samples "
            "WHERE id = ?)) AS h WHERE id = ? AND state IN ('pending', 'skipped', 'judged')",
            (t, eligible_at, HOLDOUT_REASON, sample_id, sample_id),
        )
        row = cur.execute("SELECT * FROM judgments WHERE sample_id = ?", (sample_id,))
        return _build(JudgmentRow, row.fetchone())

    def set_teacher_topk(
        self, sample_id: int, ids: Sequence[Sequence[int]], logprobs: Sequence[Sequence[float]]
    ) -> bool:
        """Store the teacher's top-k token ids and log-probs per response token."""
        blob = _dumps({"ids": [list(r) for r in ids], "logprobs": [list(r) for r in logprobs]})
        return self._update(
            "UPDATE judgments SET teacher_topk_json = ? WHERE sample_id = ?", (blob, sample_id)
        )

    def set_teacher_answer(self, sample_id: int, ids: Sequence[int] | None) -> bool:
        """Store (None: clear) the teacher's own answer under the hint, as token ids."""
        blob = None if ids is None else _pack(_INT32, ids)
        return self._update(
            "UPDATE judgments SET teacher_answer_ids = ? WHERE sample_id = ?", (blob, sample_id)
        )

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
                "VALUES (:sid, 'user', '[]', :rating, '[]', :rating, :hint, :t) "
                "ON CONFLICT(sample_id) "
                "DO UPDATE SET score = :rating, user_rating = :rating, user_hint = :hint",
                {"sid": found[0], "rating": rating, "hint": hint, "t": t},
            )
            row = self._mark_judged(cur, found[0], t, eligible_at)
            cur.execute(_AWAIT_JUDGE_HINT, (found[0],))
            return row

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
            "JOIN turns t ON t.id = s.turn_id "
            "WHERE s.state = 'judged' AND s.eligible_at <= ? AND ss.review_state != 'excluded' "
            "AND t.holdout = 0 "
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
