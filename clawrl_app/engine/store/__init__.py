"""The app's one durable store: SQLite in WAL mode, and all of the project's SQL.

The four loops (serving, collection, judging, training) never call each other; they meet
here. One connection per `Store`, guarded by a lock so the API thread and backend threads
can share it; every write is a short `BEGIN IMMEDIATE` transaction, so a crash loses only
the transaction in flight. Other processes see committed rows at once (WAL).

Token ids are stored as little-endian int32 blobs and log-probs as float64 blobs, so they
round-trip exactly. JSON columns come back parsed. Times are Unix seconds (`time.time()`).

The package splits the store by what each part does: `schema` (DDL and migrations), `rows`
(row objects and value encoding), `connection` (opening, transactions, health), `faults`
(what a failure of the file or disk means for the user), and one mixin per
area (`sessions`, `turns`, `samples`, `checkpoints`, `episodes`, `privacy`, `health`, `guard`), combined here
into `Store`.
"""

from __future__ import annotations

from clawrl_app.engine.store.checkpoints import CheckpointsMixin
from clawrl_app.engine.store.connection import StoreBase, StoreWatcher
from clawrl_app.engine.store.episodes import EpisodeRefused, EpisodesMixin
from clawrl_app.engine.store.faults import FAULT_KINDS, StoreError, check_store_file
from clawrl_app.engine.store.guard import GuardMixin, HeldOutItem
from clawrl_app.engine.store.health import HealthMixin, VersionLength
from clawrl_app.engine.store.privacy import DeletedSession, PrivacyMixin
from clawrl_app.engine.store.rows import (
    CheckpointRow,
    EpisodeRow,
    EventRow,
    JudgmentRow,
    MetricRow,
    NewTurn,
    R,
    SampleRow,
    SessionRow,
    TurnRow,
    TurnSignal,
)
from clawrl_app.engine.store.samples import SamplesMixin
from clawrl_app.engine.store.schema import (
    CHECKPOINT_STATUSES,
    ENV_SOURCE_PREFIX,
    EPISODE_STATUSES,
    MIGRATIONS,
    REVIEW_STATES,
    SAMPLE_STATES,
    SCHEMA_VERSION,
    TURN_TYPES,
)
from clawrl_app.engine.store.sessions import SessionsMixin
from clawrl_app.engine.store.turns import TurnsMixin

__all__ = [
    "CHECKPOINT_STATUSES",
    "ENV_SOURCE_PREFIX",
    "EPISODE_STATUSES",
    "FAULT_KINDS",
    "MIGRATIONS",
    "R",
    "REVIEW_STATES",
    "SAMPLE_STATES",
    "SCHEMA_VERSION",
    "TURN_TYPES",
    "CheckpointRow",
    "DeletedSession",
    "EpisodeRefused",
    "EpisodeRow",
    "EventRow",
    "HeldOutItem",
    "JudgmentRow",
    "MetricRow",
    "NewTurn",
    "SampleRow",
    "SessionRow",
    "Store",
    "StoreError",
    "StoreWatcher",
    "TurnRow",
    "TurnSignal",
    "VersionLength",
    "check_store_file",
]


class Store(
    SessionsMixin,
    TurnsMixin,
    SamplesMixin,
    CheckpointsMixin,
    EpisodesMixin,
    PrivacyMixin,
    HealthMixin,
    GuardMixin,
    StoreBase,
):
    """The SQLite store: open with `Store(path)`, close with `close()` or a `with` block."""

    def _migrations(self) -> list[str]:
        # Read at open time from this package's namespace, so replacing
        # `clawrl_app.engine.store.MIGRATIONS` (as the migration tests do) takes effect.
        return MIGRATIONS

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
