"""Reads for the regression guard: the held-out personal evaluation set and the scores each
version got before (stored as metrics `guard/personal`, `guard/general` and
`guard/degeneration`)."""

from __future__ import annotations

from dataclasses import dataclass

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.rows import _INT32, _unpack

PERSONAL = "guard/personal"
"""Metric name of a version's personal score (held-out preference agreement)."""
GENERAL = "guard/general"
"""Metric name of a version's general score (the shipped code-scored set)."""
DEGENERATION = "guard/degeneration"
"""Metric name of a version's degeneration rate (share of its guard answers that loop or
repeat themselves, scored by `clawrl_app.degeneration`)."""

HELD_OUT_SQL = (
    "SELECT t.id, t.prompt_ids, t.response_ids, j.score FROM turns t "
    "JOIN samples s ON s.turn_id = t.id JOIN judgments j ON j.sample_id = s.id "
    "JOIN sessions ss ON ss.id = t.session_id "
    "WHERE t.holdout = 1 AND t.redacted = 0 AND j.score != 0 "
    "AND ss.review_state != 'excluded' AND length(t.response_ids) > 0 "
    "ORDER BY t.id DESC LIMIT ?"
)


@dataclass(frozen=True)
class HeldOutItem:
    """One held-out turn: its prompt and sampled answer (token ids) and the reward it got."""

    turn_id: int
    prompt_ids: list[int]
    response_ids: list[int]
    reward: float


class GuardMixin(StoreBase):
    """What the regression guard reads."""

    def held_out_items(self, limit: int) -> list[HeldOutItem]:
        """The newest `limit` judged held-out turns with a non-zero reward, newest first."""
        return [
            HeldOutItem(int(tid), _unpack(_INT32, p), _unpack(_INT32, r), float(score))
            for tid, p, r, score in self._rows(HELD_OUT_SQL, (limit,))
        ]

    def held_out_count(self) -> int:
        """How many turns are held out (judged or not)."""
        return int(self._rows("SELECT count(*) FROM turns WHERE holdout = 1", ())[0][0])

    def version_score(self, name: str, version: str) -> float | None:
        """The newest value of metric `name` stored for `version`, or None."""
        rows = self._rows(
            "SELECT value FROM metrics WHERE name = ? AND version = ? ORDER BY id DESC LIMIT 1",
            (name, version),
        )
        return float(rows[0][0]) if rows else None
