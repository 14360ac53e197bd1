"""Reads for judge health: the judge's recent agreement with the user, the signs of recent
rewards, and answer length per policy version.

Each read is an SQL text plus a function that turns its rows into plain values, so the
engine (`HealthMixin`, under the store's lock) and `clawrl-app doctor` (`peek`, a read-only
connection) share them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from clawrl_app.engine.store.connection import StoreBase

AGREEMENT_SQL = "SELECT value FROM metrics WHERE name = 'judge/agreement' ORDER BY id DESC LIMIT ?"
"""The newest `judge/agreement` values (1.0 when the judge's score equalled the rating)."""

SCORE_SIGNS_SQL = (
    "SELECT sign, count(*) FROM (SELECT CASE WHEN score > 0 THEN 1 WHEN score < 0 THEN -1 "
    "ELSE 0 END AS sign FROM judgments ORDER BY id DESC LIMIT ?) GROUP BY sign"
)
"""How many of the newest judgments have a positive, zero and negative reward."""

LENGTHS_SQL = (
    "SELECT policy_version, count(*), avg(completion_tokens), min(id) FROM (SELECT id, "
    "policy_version, completion_tokens FROM turns WHERE type = 'main' ORDER BY id DESC "
    "LIMIT ?) GROUP BY policy_version ORDER BY min(id)"
)
"""Main turns and their mean completion tokens per policy version, over the newest turns
(walking the rowid backwards keeps a status poll cheap on a large store)."""


@dataclass(frozen=True)
class VersionLength:
    """Answer length of one policy version: main turns seen and their mean completion tokens."""

    version: str
    turns: int
    mean_tokens: float


def agreement_values(rows: Sequence[sqlite3.Row | tuple[float]]) -> list[float]:
    """Rows of `AGREEMENT_SQL` → the values, newest first."""
    return [float(r[0]) for r in rows]


def sign_counts(rows: Sequence[sqlite3.Row | tuple[int, int]]) -> dict[int, int]:
    """Rows of `SCORE_SIGNS_SQL` → `{1: n, 0: n, -1: n}` (every sign present)."""
    out = {1: 0, 0: 0, -1: 0}
    for sign, n in rows:
        out[int(sign)] = int(n)
    return out


def version_lengths(
    rows: Sequence[sqlite3.Row | tuple[str, int, float, int]],
) -> list[VersionLength]:
    """Rows of `LENGTHS_SQL` → one `VersionLength` per version, oldest version first."""
    return [VersionLength(str(v), int(n), float(mean)) for v, n, mean, _ in rows]


class HealthMixin(StoreBase):
    """What the judge-health summary reads."""

    def recent_agreement(self, limit: int) -> list[float]:
        """The newest `limit` judge/user agreement values (1.0 agreed, 0.0 not), newest first."""
        return agreement_values(self._rows(AGREEMENT_SQL, (limit,)))

    def recent_reward_signs(self, limit: int) -> dict[int, int]:
        """How many of the newest `limit` judgments rewarded +, 0 and -: `{1:, 0:, -1:}`."""
        return sign_counts(self._rows(SCORE_SIGNS_SQL, (limit,)))

    def answer_lengths(self, window: int) -> list[VersionLength]:
        """Mean completion tokens of main turns per policy version, over the newest `window`
        main turns, oldest version first."""
        return version_lengths(self._rows(LENGTHS_SQL, (window,)))
