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
  greedily, and the shipped open prompts ("Explain how a bicycle works."), answered greedily
  at a length that shows loops. Every answer's form is scored by code (`degeneration`): the
  version's *degeneration rate* is the share of its answers that loop or repeat themselves,
  and a degenerate answer counts as wrong in the fact score (a loop that names the fact,
  "Paris is Paris is Paris is ...", does not pass).
A candidate whose personal score falls below the served version's, whose general score falls
below the base model's, or whose degeneration rate rises above the base model's by more than
the settings allow is refused. All of it runs on the backend's background lane: never
recorded, never trained on, never ahead of a user's request. The decision (`decide`) and the
scores are pure functions.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from clawrl_app.degeneration import Degeneration
from clawrl_app.degeneration import score as form_of
from clawrl_app.engine.publishing.compare import answer
from clawrl_app.engine.publishing.user_form import (
    USER_FORM_MIN,
    UserForm,
    answer_budget,
    refusal_rests_on_one_answer,
)
from clawrl_app.engine.publishing.verdict import (
    AT_LENGTH,
    GuardVerdict,
    VersionScores,
    decide,
    passes_without,
    to_confirm,
)
from clawrl_app.engine.store.guard import DEGENERATION, GENERAL, PERSONAL, UserPrompt
from clawrl_app.general_eval import (
    GeneralItem,
    OpenPrompt,
    load_general_set,
    load_open_prompts,
    score_answers,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from clawrl_app.config import GuardSettings
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.store import HeldOutItem, Store

log = logging.getLogger("clawrl.guard")
TIE = 1e-4  # nats per token: a smaller change is no preference either way
WAIT_POLL_S = 5.0  # how often `waiting` counts the user's prompts
RECENT = 5  # verdicts kept for the status (the Dashboard's and the admin API's table)
BUDGET_FROM = 12  # the user's newest requests whose answer budgets set their answer length


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


def new_loops(mine: Sequence[bool], base: Sequence[bool]) -> float | None:
    """Share of a version's answers that are degenerate where the base model's answer to the
    same prompt is not (paired flags, same prompts in the same order; None: no answers)."""
    if len(mine) != len(base):
        raise ValueError(f"{len(mine)} answers but {len(base)} of the base's")
    return sum(m and not b for m, b in zip(mine, base, strict=True)) / len(mine) if mine else None


@dataclass(frozen=True)
class GeneralResult:
    """A version's general check: facts on the questions, form on every answer."""

    general: float | None
    """Share of the questions answered right by an answer that is not degenerate."""
    facts_any_form: float | None
    """Share answered right whatever the form (what a fact checker alone sees); never decides."""
    degeneration: float | None
    """Share of all answers (questions and open prompts) that are degenerate."""
    questions: int
    answers: int
    flags: tuple[bool, ...] = ()
    """Per answer (questions, then open prompts): degenerate; empty when reused."""


def score_general(
    items: Sequence[GeneralItem], fact_answers: Sequence[str], open_answers: Sequence[str]
) -> GeneralResult:
    """Score one version's answers to the questions (same order as `items`) and to the open
    prompts: a degenerate answer is wrong, whatever fact it names."""
    degenerate = [form_of(a).degenerate for a in [*fact_answers, *open_answers]]
    n = len(degenerate)
    if not items:
        general = facts = None
    else:
        facts = score_answers(items, fact_answers).score
        kept = [
            "" if bad else a
            for a, bad in zip(fact_answers, degenerate[: len(fact_answers)], strict=True)
        ]
        general = score_answers(items, kept).score
    rate = sum(degenerate) / n if n else None
    return GeneralResult(general, facts, rate, len(items), n, tuple(degenerate))


class RegressionGuard:
    """Scores versions on the personal and general sets and decides on candidates."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        formatter: ChatFormatter,
        settings: GuardSettings,
        general: list[GeneralItem] | None = None,
        open_prompts: list[OpenPrompt] | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.formatter = formatter
        self.settings = settings
        items = general if general is not None else load_general_set()
        self.general = items[: settings.general_items]
        prompts = open_prompts if open_prompts is not None else load_open_prompts()
        self.open = prompts[: settings.open_prompts]
        self.budget_open = prompts[: settings.budget_prompts]
        self.budget_more = (
            prompts[settings.budget_prompts : 2 * settings.budget_prompts]
            if settings.budget_confirm
            else []
        )  # the next ones, asked to confirm a refusal at the user's length
        self._base_budget: dict[tuple[int, bool], tuple[Degeneration, ...]] = {}
        """(length, the confirming prompts) -> the base's form on those prompts."""
        self._base_lps: dict[int, float] = {}  # turn id -> the base model's mean log-prob
        self._base_form: dict[int, Degeneration] = {}  # turn id -> the base's answer's form
        self._base_flags: tuple[bool, ...] | None = None  # the base's general answers' form
        self._offered = 0
        self.checked = 0
        self.refused = 0
        self.deferred = 0
        self._deferred: dict[str, tuple[int, VersionScores]] = {}
        """Versions whose check is deferred: the prompts they wait for, their scores."""
        self._prompts_seen = (-1, 0.0)  # how many of the user's prompts `waiting` saw, when
        self.last: GuardVerdict | None = None
        self.recent: list[GuardVerdict] = []
        """The newest verdicts (at most `RECENT`), oldest first."""
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

    async def general_answers(self, version: str) -> tuple[list[str], list[str]]:
        """`version`'s greedy answers to the questions (`max_tokens`) and to the open prompts
        (`open_max_tokens`). All are asked at once, the long ones first, so that a batching
        backend keeps its rows full."""

        def ask(text: str, max_tokens: int) -> Any:
            messages = [{"role": "user", "content": text}]
            return answer(self.backend, self.formatter, version, messages, max_tokens)

        texts = await asyncio.gather(
            *[ask(p.prompt, self.settings.open_max_tokens) for p in self.open],
            *[ask(i.question, self.settings.max_tokens) for i in self.general],
        )
        return list(texts[len(self.open) :]), list(texts[: len(self.open)])

    async def general_score(self, version: str) -> GeneralResult:
        """The general check of `version`: greedy answers, facts and form scored by code."""
        if not self.general and not self.open:
            return GeneralResult(None, None, None, 0, 0)
        facts, opens = await self.general_answers(version)
        return score_general(self.general, facts, opens)

    async def user_form(self, version: str, skip: int = 0) -> UserForm:
        """`version`'s and the base model's form on the user's prompts (held-out turns first,
        then the newest the trainer has not trained on, then the newest trained; `skip`: the
        next ones after that many) answered greedily, each at the answer budget the user's
        request set (at most `open_max_tokens`: a loop shows by then; `open_max_tokens` when
        it set none): their degeneration rates and mean repeated-phrase shares; empty when
        off or too few prompts. A loop the user would see within their budget counts; one
        only a longer answer reaches does not (the base model itself loops on many prompts
        at 160 tokens, which would hide every change). The base's answers are kept per turn
        (they never change)."""
        n = self.settings.user_form_items
        cap = self.settings.open_max_tokens
        room = self.backend.info().context_length - cap
        # held-out turns first: a version is fitted to the prompts it trained on, and its
        # loops show on new ones (calm/plain's v3 looped on 1 of 10 new prompts and was no
        # worse than the base on the 12 newest trained ones)
        prompts = (
            await asyncio.to_thread(
                self.store.user_prompts,
                n + skip,
                room,
                held_out_first=True,
                min_budget=self.settings.user_form_min_tokens,
            )
            if n
            else []
        )[skip:]
        if len(prompts) < (USER_FORM_MIN if not skip else 1):
            return UserForm(n=len(prompts))

        def budget(p: UserPrompt) -> int:
            return min(p.max_tokens or cap, cap)

        async def base_form(p: UserPrompt) -> Degeneration:
            if p.turn_id not in self._base_form:
                text = await answer(self.backend, self.formatter, "base", p.messages, budget(p))
                self._base_form[p.turn_id] = form_of(text)
            return self._base_form[p.turn_id]

        mine = await asyncio.gather(
            *[answer(self.backend, self.formatter, version, p.messages, budget(p)) for p in prompts]
        )
        return UserForm.of([form_of(text) for text in mine], [await base_form(p) for p in prompts])

    async def user_budget(self) -> int:
        """The answer length the user asks for (`answer_budget` of their newest requests)."""
        cap = self.settings.open_max_tokens
        room = self.backend.info().context_length - cap
        prompts = await asyncio.to_thread(
            self.store.user_prompts, BUDGET_FROM, room,
            min_budget=self.settings.user_form_min_tokens,
        )  # fmt: skip
        floor = self.settings.user_form_min_tokens
        return answer_budget([p.max_tokens for p in prompts], cap, floor)

    async def budget_form(self, version: str, more: bool = False) -> tuple[int, UserForm]:
        """`version`'s and the base model's form on the shipped open prompts answered
        greedily at the user's answer length (`user_budget`), paired per prompt; with
        `more`, on the next ones (`budget_more`); the base's answers are kept per length.
        (0, empty) when off."""
        prompts = self.budget_more if more else self.budget_open
        if not prompts:
            return 0, UserForm()
        tokens = await self.user_budget()

        async def forms(v: str) -> tuple[Degeneration, ...]:
            texts = await asyncio.gather(*[
                answer(self.backend, self.formatter, v,
                       [{"role": "user", "content": p.prompt}], tokens)
                for p in prompts
            ])  # fmt: skip
            return tuple(form_of(t) for t in texts)

        if (tokens, more) not in self._base_budget:
            self._base_budget[tokens, more] = await forms("base")
        mine = await forms(version)
        return tokens, UserForm.of(mine, self._base_budget[tokens, more])

    def _confirmable(self, form: UserForm, scores: VersionScores) -> bool:
        """The refusal of `scores` (its answers to `form`'s prompts included) rests on one
        answer alone (`refusal_rests_on_one_answer`) and `user_form_confirm` is on."""
        return self.settings.user_form_confirm and refusal_rests_on_one_answer(
            form, scores.new_loops, scores.new_loops_n, self.settings
        )

    def waiting(self, version: str) -> bool:
        """True while `version`'s check is deferred (`GuardVerdict.deferred_until`) and the
        user has not yet written the prompts it waits for. Counted at most every
        `WAIT_POLL_S` (the publisher asks on each pass)."""
        wanted = self._deferred.get(version)
        if wanted is None:
            return False
        now = time.monotonic()
        if now - self._prompts_seen[1] >= WAIT_POLL_S or self._prompts_seen[0] < 0:
            room = self.backend.info().context_length - self.settings.open_max_tokens
            most = max(w for w, _ in self._deferred.values())
            prompts = self.store.user_prompts(
                most, room, min_budget=self.settings.user_form_min_tokens
            )
            self._prompts_seen = (len(prompts), now)
        return self._prompts_seen[0] < wanted[0]

    def was_deferred(self, version: str) -> bool:
        """`version`'s check was deferred: it is checked again whatever `every` says."""
        return version in self._deferred

    def forget_deferred(self, keep: Callable[[str], bool] = lambda v: False) -> list[str]:
        """Drop the deferred checks of the versions `keep` does not keep (all by default:
        the trainer went back to the served version, they are left behind); returns them."""
        gone = sorted(v for v in self._deferred if not keep(v))
        for v in gone:
            del self._deferred[v]
        return gone

    def _stored_general(self, version: str) -> tuple[float | None, float | None] | None:
        """The general score and degeneration rate stored for `version` before; None unless
        every one this guard computes is there."""
        general = self.store.version_score(GENERAL, version)
        degeneration = self.store.version_score(DEGENERATION, version)
        if (self.general and general is None) or degeneration is None:
            return None
        return general, degeneration

    async def scores(self, version: str, step: int, reuse: bool = False) -> VersionScores:
        """Score `version`; with `reuse`, the general score and degeneration rate stored for
        it before are taken as they are (a version's answers do not change; the personal set
        grows, so it is always redone). All are stored as metrics of the version."""
        personal, pn = await self.personal(version)
        values = {PERSONAL: personal}
        stored = self._stored_general(version) if reuse else None
        if stored is not None:
            general, degeneration = stored
            n = len(self.general)
            result = GeneralResult(general, None, degeneration, n, n + len(self.open))
        else:
            result = await self.general_score(version)
            values |= {GENERAL: result.general, DEGENERATION: result.degeneration}
        kept = {k: v for k, v in values.items() if v is not None}
        if kept:
            await asyncio.to_thread(self.store.add_metrics, step, kept, version)
        return VersionScores(
            version, personal, pn, result.general, result.questions, result.degeneration,
            result.answers, result.facts_any_form, flags=result.flags,
        )  # fmt: skip

    async def _base_general(self) -> tuple[float | None, float | None]:
        """The base model's general score and degeneration rate: stored once per store
        (the base model's answers never change), computed when first needed."""
        stored = self._stored_general("base")
        if stored is not None:
            return stored
        base = await self.scores("base", 0)
        self._base_flags = base.flags or self._base_flags
        return base.general, base.degeneration

    async def _new_loops(self, mine: tuple[bool, ...], form: UserForm) -> tuple[float | None, int]:
        """`new_loops` over the candidate's general-check answers (`mine`) and its answers to
        the user's prompts, each paired with the base model's answer to the same prompt (the
        base's general answers are answered once per guard)."""
        if mine and self._base_flags is None:
            self._base_flags = (await self.general_score("base")).flags
        base = self._base_flags or ()
        if len(mine) != len(base):
            mine, base = (), ()
        flags = [*mine, *form.flags]
        return new_loops(flags, [*base, *form.base_flags]), len(flags)

    async def check(self, candidate: str, served: str, step: int) -> GuardVerdict:
        """Score both versions and decide."""
        before = await self.scores(served, self._step_of(served), reuse=True)
        if served == "base" and before.flags:  # answered just now: no need to ask again
            self._base_flags = before.flags
        base_general, base_degeneration = before.general, before.degeneration
        if served != "base" and (self.general or self.open):
            base_general, base_degeneration = await self._base_general()
        again = self._deferred.pop(candidate, None)  # checked before: its answers stand
        after = again[1] if again is not None else await self.scores(candidate, step)
        form, (tokens, at_length) = await asyncio.gather(
            self.user_form(candidate), self.budget_form(candidate)
        )
        after = replace(
            after, budget_tokens=tokens, budget_n=at_length.n,
            budget_degeneration=at_length.rate, base_budget_degeneration=at_length.base_rate,
            budget_new_loops=new_loops(at_length.flags, at_length.base_flags),
        )  # fmt: skip
        general_flags = after.flags

        async def verdict_on(form: UserForm) -> GuardVerdict:
            loops, loops_n = await self._new_loops(general_flags, form)
            scores = replace(
                after, user_degeneration=form.rate, base_user_degeneration=form.base_rate,
                user_n=form.n, user_repetition=form.repetition,
                base_user_repetition=form.base_repetition, user_confirmed=form.confirmed,
                new_loops=loops, new_loops_n=loops_n,
            )  # fmt: skip
            return decide(scores, before, self.settings, base_general, base_degeneration)

        verdict = await verdict_on(form)
        # refused by rules that each rest on one answer, and by those alone?
        user_side, at_length_side = to_confirm(
            verdict, form, self.settings, base_general, base_degeneration,
            user_more=self.settings.user_form_confirm, length_more=bool(self.budget_more),
        )  # fmt: skip
        if user_side:
            items = self.settings.user_form_items
            more = await self.user_form(candidate, skip=form.n)
            log.info("guard: %s's refusal rests on one answer; %d more of your prompts asked",
                     candidate, more.n)  # fmt: skip
            pooled = form.pooled(more) if more.n else form
            if more.n:
                verdict = await verdict_on(pooled)
            if (
                more.n < items
                and not verdict.passed
                and self._confirmable(pooled, verdict.candidate)
            ):
                # too few prompts to confirm: one answer decides nothing either way
                verdict = replace(verdict, deferred_until=form.n + items)
                self._deferred[candidate] = (verdict.deferred_until, after)
                self._prompts_seen = (-1, 0.0)  # count again, up to the new number
        if (
            at_length_side
            and not verdict.deferred
            and passes_without(verdict, AT_LENGTH, self.settings, base_general, base_degeneration)
        ):
            _, extra = await self.budget_form(candidate, more=True)
            both = at_length.pooled(extra)
            log.info("guard: %s's refusal at your length rests on one answer; %d more open "
                     "prompts asked", candidate, extra.n)  # fmt: skip
            verdict = decide(
                replace(
                    verdict.candidate, budget_n=both.n, budget_degeneration=both.rate,
                    base_budget_degeneration=both.base_rate,
                    budget_new_loops=new_loops(both.flags, both.base_flags),
                    budget_confirmed=True,
                ),
                before, self.settings, base_general, base_degeneration,
            )  # fmt: skip
        self.checked += 1
        self.deferred += verdict.deferred
        self.refused += not verdict.passed and not verdict.deferred
        self.last = verdict
        self.recent = [*self.recent, verdict][-RECENT:]
        return verdict

    def _step_of(self, version: str) -> int:
        row = self.store.get_checkpoint(version) if version != "base" else None
        return row.step if row is not None else 0

    def status(self) -> dict[str, Any]:
        """The guard's settings, counters and newest verdicts (JSON for the admin API)."""
        g = self.settings
        return {
            "enabled": True,
            "every": g.every,
            "checked": self.checked,
            "refused": self.refused,
            "deferred": self.deferred,
            "waiting": sorted(self._deferred),
            "held_out": self.store.held_out_count(),
            "min_personal_items": g.min_personal_items,
            "max_degeneration_rise": g.max_degeneration_rise,
            "questions": len(self.general),
            "open_prompts": len(self.open),
            "budget_prompts": len(self.budget_open),
            "last": None if self.last is None else self.last.as_dict(),
            "recent": [v.as_dict() for v in self.recent],
            "last_error": self.last_error,
        }
