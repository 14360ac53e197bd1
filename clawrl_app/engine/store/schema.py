"""The store's schema: allowed values, the migration scripts and the schema version.

The DDL text is the on-disk contract: existing stores are only ever brought forward by
appending to `MIGRATIONS`, never by editing a script already released.
"""

from __future__ import annotations

import sqlite3

REVIEW_STATES = ("pending", "approved", "excluded")
TURN_TYPES = ("main", "side")
SAMPLE_STATES = ("pending", "judged", "trained", "excluded", "skipped")
CHECKPOINT_STATUSES = ("ready", "published", "refused", "pruned")
EPISODE_STATUSES = ("completed", "truncated", "failed", "aborted")
ENV_SOURCE_PREFIX = "env:"  # sessions recorded by an agentic environment's rollouts

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
    # v2: the teacher's top-k distribution per response token (for top-k OPD)
    """
    ALTER TABLE judgments ADD COLUMN teacher_topk_json TEXT;
    """,
    # v3: agentic-environment episodes (one per env session): task, group, outcome
    """
    CREATE TABLE episodes (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        env TEXT NOT NULL, task_id TEXT NOT NULL, group_id TEXT NOT NULL,
        split TEXT NOT NULL, status TEXT NOT NULL
            CHECK (status IN ('completed', 'truncated', 'failed', 'aborted')),
        reason TEXT NOT NULL, outcome_reward REAL, verdict_json TEXT NOT NULL,
        trained INTEGER NOT NULL, turns INTEGER NOT NULL, duration_s REAL NOT NULL,
        created REAL NOT NULL);
    CREATE INDEX episodes_by_env ON episodes(env, created);
    CREATE INDEX episodes_by_group ON episodes(group_id);
    """,
    # v4: privacy: how many findings each turn had redacted (0 = none; its token ids were
    # dropped, see `NewTurn.redactions`) and the running count per kind of redaction
    """
    ALTER TABLE turns ADD COLUMN redacted INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE redaction_counts (
        kind TEXT PRIMARY KEY, count INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL);
    """,
    # v5: the regression guard's personal evaluation set: a share of main turns chosen when
    # they are recorded, judged like every turn but never trained on
    """
    ALTER TABLE turns ADD COLUMN holdout INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX turns_held_out ON turns(id) WHERE holdout = 1;
    """,
    # v6: the teacher's own answer under the hint (token ids), trained toward as a +1 sample
    """
    ALTER TABLE judgments ADD COLUMN teacher_answer_ids BLOB;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)


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
