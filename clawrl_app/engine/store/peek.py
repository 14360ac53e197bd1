"""Read-only looks into a store file (for `clawrl-app doctor`): never creates, migrates or
writes it, and works while the engine runs (WAL readers do not block the writer)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from clawrl_app.engine.store.health import (
    AGREEMENT_SQL,
    LENGTHS_SQL,
    SCORE_SIGNS_SQL,
    VersionLength,
    agreement_values,
    sign_counts,
    version_lengths,
)
from clawrl_app.engine.store.rows import EventRow


def latest_events_readonly(path: Path, kind: str, limit: int = 5) -> list[EventRow]:
    """The newest `limit` events of one kind, newest first; [] when the file has none."""
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = conn.execute(
            "SELECT id, ts, kind, payload_json FROM events WHERE kind = ? ORDER BY id DESC LIMIT ?",
            (kind, limit),
        ).fetchall()
    except sqlite3.OperationalError:  # no events table yet (a store from an older version)
        return []
    finally:
        conn.close()
    return [EventRow(int(i), float(ts), str(k), json.loads(p)) for i, ts, k, p in rows]


def redaction_counts_readonly(path: Path) -> dict[str, int]:
    """Findings redacted so far per kind; {} when the file has no counters yet."""
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = conn.execute("SELECT kind, count FROM redaction_counts ORDER BY kind").fetchall()
    except sqlite3.OperationalError:  # a store from before schema v4
        return {}
    finally:
        conn.close()
    return {str(kind): int(n) for kind, n in rows}


def held_out_count_readonly(path: Path) -> int:
    """Turns held out for the regression guard; 0 for a store from before schema v5."""
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        return int(conn.execute("SELECT count(*) FROM turns WHERE holdout = 1").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def judge_health_inputs_readonly(
    path: Path, ratings: int, judgments: int, window: int
) -> tuple[list[float], dict[int, int], list[VersionLength]]:
    """What the judge-health summary reads (see `HealthMixin`), from a read-only connection."""
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        return (
            agreement_values(conn.execute(AGREEMENT_SQL, (ratings,)).fetchall()),
            sign_counts(conn.execute(SCORE_SIGNS_SQL, (judgments,)).fetchall()),
            version_lengths(conn.execute(LENGTHS_SQL, (window,)).fetchall()),
        )
    except sqlite3.OperationalError:  # an empty file (tables not created yet)
        return [], {1: 0, 0: 0, -1: 0}, []
    finally:
        conn.close()
