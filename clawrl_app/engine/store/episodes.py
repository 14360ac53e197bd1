"""Agentic-environment episodes: each is a session whose main turns were recorded by the
endpoint as the rollout ran; when it ends, the episode's outcome turns those turns into
samples (the env's observations as next states, the rollout group's advantages as
rewards) in one transaction. The collector and the judge leave env sessions alone."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.faults import StoreError
from clawrl_app.engine.store.rows import EpisodeRow, TurnSignal, _check, _dumps, _now
from clawrl_app.engine.store.schema import ENV_SOURCE_PREFIX, EPISODE_STATUSES


class EpisodeRefused(StoreError):
    """The episode does not fit its session; `waiting` when the session has fewer turns
    than the episode (its last turn may still be on its way into the store)."""

    def __init__(self, message: str, waiting: bool = False) -> None:
        super().__init__(message)
        self.waiting = waiting


class EpisodesMixin(StoreBase):
    """Recording episodes and reading them back."""

    def record_episode(
        self,
        episode: EpisodeRow,
        signals: Sequence[TurnSignal],
        backend: str,
        eligible_at: float,
        skip_reason: str,
        now: float | None = None,
    ) -> list[int]:
        """Close the episode's session, store the episode and give its main turns, in
        order, one sample each: judged with the signal's reward (trainable from
        `eligible_at`) or skipped with `skip_reason` when the reward is None. All or
        nothing; returns the sample ids. StoreError when the session is not an env session,
        already has an episode, or has not exactly one main turn per signal."""
        _check(episode.status, EPISODE_STATUSES, "episode status")
        t = _now(now)
        with self._tx() as cur:
            sess = cur.execute(
                "SELECT source FROM sessions WHERE id = ?", (episode.session_id,)
            ).fetchone()
            if sess is None or not str(sess["source"]).startswith(ENV_SOURCE_PREFIX):
                raise EpisodeRefused(f"session {episode.session_id!r} is not an env session")
            if cur.execute(
                "SELECT 1 FROM episodes WHERE session_id = ?", (episode.session_id,)
            ).fetchone():
                raise EpisodeRefused(f"session {episode.session_id!r} already has its episode")
            turns = cur.execute(
                "SELECT id FROM turns WHERE session_id = ? AND type = 'main' ORDER BY idx",
                (episode.session_id,),
            ).fetchall()
            trainable = any(sig.reward is not None for sig in signals)
            if len(turns) != len(signals) and not trainable:
                # nothing of it is trained (an aborted rollout may have lost its last
                # answer on the way back): record what the endpoint recorded
                blank = TurnSignal("", None, None)
                signals = [*signals[: len(turns)], *[blank] * (len(turns) - len(signals))]
            if len(turns) != len(signals):
                raise EpisodeRefused(
                    f"session {episode.session_id!r} has {len(turns)} recorded turns, "
                    f"the episode {len(signals)}",
                    waiting=len(turns) < len(signals),
                )
            cur.execute(
                "INSERT INTO episodes (session_id, env, task_id, group_id, split, status, "
                "reason, outcome_reward, verdict_json, trained, turns, duration_s, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (episode.session_id, episode.env, episode.task_id, episode.group_id,
                 episode.split, episode.status, episode.reason, episode.outcome_reward,
                 _dumps(episode.verdict), int(episode.trained), len(signals),
                 episode.duration_s, t),
            )  # fmt: skip
            ids = [
                self._episode_sample(cur, episode.session_id, row["id"], sig, backend,
                                     eligible_at, skip_reason, t)
                for row, sig in zip(turns, signals, strict=True)
            ]  # fmt: skip
            cur.execute(
                "UPDATE sessions SET closed_at = coalesce(closed_at, ?), "
                "close_reason = coalesce(close_reason, 'episode ended') WHERE id = ?",
                (t, episode.session_id),
            )
            return ids

    @staticmethod
    def _episode_sample(
        cur: sqlite3.Cursor,
        session_id: str,
        turn_id: int,
        sig: TurnSignal,
        backend: str,
        eligible_at: float,
        skip_reason: str,
        t: float,
    ) -> int:
        state = ("tool", sig.next_state_text, _dumps(sig.next_state_json))
        old = cur.execute("SELECT id FROM samples WHERE turn_id = ?", (turn_id,)).fetchone()
        if old is None:  # (a user may have rated a turn while the episode ran)
            cur.execute(
                "INSERT INTO samples (turn_id, session_id, next_state_role, next_state_text, "
                "next_state_json, created) VALUES (?, ?, ?, ?, ?, ?)",
                (turn_id, session_id, *state, t),
            )
            sample_id = int(cur.lastrowid or 0)
        else:
            sample_id = int(old["id"])
            cur.execute(
                "UPDATE samples SET next_state_role = ?, next_state_text = ?, "
                "next_state_json = ? WHERE id = ?",
                (*state, sample_id),
            )
        if sig.reward is None:
            cur.execute(
                "UPDATE samples SET state = 'skipped', skip_reason = ? "
                "WHERE id = ? AND state IN ('pending', 'skipped')",
                (skip_reason, sample_id),
            )
            return sample_id
        votes = _dumps([{"step_score": sig.step_score}] if sig.step_score is not None else [])
        cur.execute(
            "INSERT INTO judgments (sample_id, backend, votes_json, score, judge_score, "
            "hint_candidates_json, created) VALUES (:sid, :backend, :votes, :score, :score, "
            "'[]', :t) ON CONFLICT(sample_id) DO UPDATE SET backend = :backend, "
            "votes_json = :votes, score = coalesce(user_rating, :score), judge_score = :score",
            {"sid": sample_id, "backend": backend, "votes": votes, "score": sig.reward, "t": t},
        )
        cur.execute(
            "UPDATE samples SET judged_at = ?, eligible_at = ?, claimed_at = NULL, "
            "skip_reason = NULL, state = 'judged' WHERE id = ? AND state IN ('pending', "
            "'skipped', 'judged')",
            (t, eligible_at, sample_id),
        )
        return sample_id

    def get_episode(self, session_id: str) -> EpisodeRow | None:
        """The episode recorded by this session, or None."""
        return self._one(EpisodeRow, "SELECT * FROM episodes WHERE session_id = ?", (session_id,))

    def list_episodes(
        self, env: str | None = None, split: str | None = None, limit: int = 200
    ) -> list[EpisodeRow]:
        """Newest first, optionally of one env and one split."""
        return self._all(
            EpisodeRow,
            "SELECT * FROM episodes WHERE (? IS NULL OR env = ?) AND (? IS NULL OR split = ?) "
            "ORDER BY created DESC, rowid DESC LIMIT ?",
            (env, env, split, split, limit),
        )
