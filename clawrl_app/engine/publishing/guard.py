"""The personal regression guard (issue #16): is a new checkpoint better for this user, and
did it forget anything?

Before a checkpoint is served, the candidate and the served version are scored on
- the **personal set**: a share of the user's own main turns held out when they were recorded
  (`core.held_out.is_held_out`), judged like every turn but never trained on. A version's
  personal score is its *held-out preference agreement*: on each held-out turn whose answer
  the judge (or the user) rewarded +1 or -1, did the version make that answer more likely
  than the base model did (for +1), or less likely (for -1)? Mean per-token log-probs from
  one scoring pass, no sampling and no judge call, so the score is cheap, deterministic and
  works with every judge. The base model scores 0.5 (no preference either way); 1.0 predicts
  every held-out judgment;
- the **general set**: the shipped questions scored by code (`general_eval`), answered
  greedily.
A candidate whose score falls below the served version's by more than the settings allow is
refused. All of it runs on the backend's background lane: never recorded, never trained on,
never ahead of a user's request. The decision (`decide`) and the scores are pure functions.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clawrl_app.engine.publishing.compare import answer
from clawrl_app.engine.store.guard import GENERAL, PERSONAL
from clawrl_app.general_eval import GeneralItem, load_general_set, score_answers

if TYPE_CHECKING:
    from clawrl_app.config import GuardSettings
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.store import HeldOutItem, Store

log = logging.getLogger("clawrl.guard")
TIE = 1e-4  # nats per token: a smaller change is no preference either way


def preference_agreement(deltas: Sequence[float], rewards: Sequence[float]) -> float:
    """Share of held-out turns where the version moved its answer's log-prob (vs the base
    model) the way the reward says: up for +1, down for -1; a tie counts half."""
    if len(deltas) != len(rewards):
        raise ValueError(f"{len(deltas)} deltas but {len(rewards)} rewards")
    if not deltas:
        raise ValueError("no held-out turns to score")
    total = 0.0
    for d, r in zip(deltas, rewards, strict=True):
        total += 0.5 if abs(d) < TIE or r == 0 else float((d > 0) == (r > 0))
    return total / len(deltas)


@dataclass(frozen=True)
class VersionScores:
    """One version's scores; None where the set was empty (nothing to score)."""

    version: str
    personal: float | None = None
    personal_n: int = 0
    general: float | None = None
    general_n: int = 0


@dataclass(frozen=True)
class GuardVerdict:
    """The decision on one candidate against the served version."""

    candidate: VersionScores
    served: VersionScores
    passed: bool
    reasons: list[str] = field(default_factory=list)

    def summary(self) -> str:
        c, s = self.candidate, self.served

        def fig(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        return (
            f"{c.version} vs {s.version}: personal {fig(c.personal)} vs {fig(s.personal)} "
            f"({c.personal_n} held-out turns), general {fig(c.general)} vs {fig(s.general)} "
            f"({c.general_n} questions)"
        )


def decide(
    candidate: VersionScores,
    served: VersionScores,
    settings: GuardSettings,
    base_general: float | None = None,
) -> GuardVerdict:
    """Refuse when either score drops by more than its setting allows. The personal score
    is compared with the served version's and decides only with at least
    `min_personal_items` held-out turns (fewer say too little). The general score asks "did
    it forget what the model knew?", so it is compared with the base model's (`base_general`;
    the served version's when that is unknown): a chain of versions, each a little worse than
    the last, cannot drift away, and a lucky high score of the served version (40 questions
    move in steps of 0.025) does not make every later version look like a regression."""
    reasons = []
    general_ref = base_general if base_general is not None else served.general
    if (
        candidate.personal is not None
        and served.personal is not None
        and candidate.personal_n >= settings.min_personal_items
        and candidate.personal < served.personal - settings.max_personal_drop
    ):
        reasons.append(
            f"personal score {candidate.personal:.2f} < {served.personal:.2f} - "
            f"{settings.max_personal_drop:g} on {candidate.personal_n} held-out turns"
        )
    if (
        candidate.general is not None
        and general_ref is not None
        and candidate.general < general_ref - settings.max_general_drop
    ):
        whose = "base's" if base_general is not None else f"{served.version}'s"
        reasons.append(
            f"general score {candidate.general:.2f} < {general_ref:.2f} ({whose}) - "
            f"{settings.max_general_drop:g} on {candidate.general_n} questions"
        )
    return GuardVerdict(candidate, served, not reasons, reasons)


class RegressionGuard:
    """Scores versions on the personal and general sets and decides on candidates."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        formatter: ChatFormatter,
        settings: GuardSettings,
        general: list[GeneralItem] | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.formatter = formatter
        self.settings = settings
        items = general if general is not None else load_general_set()
        self.general = items[: settings.general_items]
        self._base_lps: dict[int, float] = {}  # turn id -> the base model's mean log-prob
        self._offered = 0
        self.checked = 0
        self.refused = 0
        self.last: GuardVerdict | None = None
        self.last_error: str | None = None

    def due(self) -> bool:
        """Count one candidate; True for every `every`-th one."""
        self._offered += 1
        return (self._offered - 1) % self.settings.every == 0

    async def _mean_lp(self, item: HeldOutItem, version: str | None) -> float:
        lps = await self.backend.score(item.prompt_ids, item.response_ids, version)
        return statistics.fmean(lps) if lps else 0.0

    async def personal(self, version: str) -> tuple[float | None, int]:
        """The held-out preference agreement of `version` (None without held-out turns)."""
        room = self.backend.info().context_length
        items = [
            i
            for i in await asyncio.to_thread(
                self.store.held_out_items, self.settings.personal_items
            )
            if len(i.prompt_ids) + len(i.response_ids) <= room
        ]
        if not items:
            return None, 0
        deltas = []
        for it in items:
            if it.turn_id not in self._base_lps:
                self._base_lps[it.turn_id] = await self._mean_lp(it, None)
            mine = (
                self._base_lps[it.turn_id]
                if version == "base"
                else await self._mean_lp(it, version)
            )
            deltas.append(mine - self._base_lps[it.turn_id])
        return preference_agreement(deltas, [i.reward for i in items]), len(items)

    async def general_score(self, version: str) -> tuple[float | None, int]:
        """The general set's score of `version` (greedy answers scored by code)."""
        if not self.general:
            return None, 0
        texts = await asyncio.gather(
            *[
                answer(
                    self.backend,
                    self.formatter,
                    version,
                    [{"role": "user", "content": i.question}],
                    self.settings.max_tokens,
                )
                for i in self.general
            ]
        )
        return score_answers(self.general, texts).score, len(self.general)

    async def scores(self, version: str, step: int, reuse: bool = False) -> VersionScores:
        """Score `version`; with `reuse`, a general score stored for it before is taken as is
        (a version's answers do not change; the personal set grows, so it is always redone).
        Both are stored as metrics of the version."""
        personal, pn = await self.personal(version)
        stored = self.store.version_score(GENERAL, version) if reuse else None
        general: float | None
        if stored is not None:
            general, gn = stored, len(self.general)
        else:
            general, gn = await self.general_score(version)
        values = {k: v for k, v in ((PERSONAL, personal), (GENERAL, general)) if v is not None}
        if values:
            await asyncio.to_thread(self.store.add_metrics, step, values, version)
        return VersionScores(version, personal, pn, general, gn)

    async def check(self, candidate: str, served: str, step: int) -> GuardVerdict:
        """Score both versions and decide."""
        before = await self.scores(served, self._step_of(served), reuse=True)
        base = before.general
        if served != "base" and self.general:
            base = self.store.version_score(GENERAL, "base")
            if base is None:
                base = (await self.scores("base", 0)).general
        after = await self.scores(candidate, step)
        verdict = decide(after, before, self.settings, base)
        self.checked += 1
        self.refused += not verdict.passed
        self.last = verdict
        return verdict

    def _step_of(self, version: str) -> int:
        row = self.store.get_checkpoint(version) if version != "base" else None
        return row.step if row is not None else 0

    def status(self) -> dict[str, Any]:
        last = self.last
        return {
            "enabled": True,
            "every": self.settings.every,
            "checked": self.checked,
            "refused": self.refused,
            "held_out": self.store.held_out_count(),
            "last": None
            if last is None
            else {
                "candidate": last.candidate.version,
                "served": last.served.version,
                "passed": last.passed,
                "reasons": last.reasons,
                "summary": last.summary(),
            },
            "last_error": self.last_error,
        }
