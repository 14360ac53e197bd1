"""Checkpoints (trained policy versions), plus the append-only metrics and events."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.faults import StoreError
from clawrl_app.engine.store.rows import (
    CheckpointRow,
    EventRow,
    MetricRow,
    _build,
    _check,
    _dumps,
    _now,
)
from clawrl_app.engine.store.schema import CHECKPOINT_STATUSES


class CheckpointsMixin(StoreBase):
    """Registering and publishing checkpoints; appending and reading metrics and events."""

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
            "SELECT * FROM metrics WHERE id > :since AND (:name IS NULL OR name = :name) "
            "ORDER BY id",
            {"since": since_id, "name": name},
        )

    def add_event(self, kind: str, payload: Mapping[str, Any], now: float | None = None) -> int:
        """Append an event for the UI feed; returns its id."""
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO events (ts, kind, payload_json) VALUES (?, ?, ?)",
                (_now(now), kind, _dumps(dict(payload))),
            )
            return int(cur.lastrowid or 0)

    def latest_events(self, kind: str, limit: int = 5) -> list[EventRow]:
        """The newest `limit` events of one kind, newest first."""
        sql = "SELECT * FROM events WHERE kind = ? ORDER BY id DESC LIMIT ?"
        return self._all(EventRow, sql, (kind, limit))

    def events_since(self, event_id: int = 0, limit: int = 500) -> list[EventRow]:
        """Up to `limit` events with id > `event_id`, oldest first."""
        sql = "SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?"
        return self._all(EventRow, sql, (event_id, limit))
