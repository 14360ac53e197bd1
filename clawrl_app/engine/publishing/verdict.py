"""The regression guard's decision (pure): one version's scores, the verdict on a candidate
against the served version, and the rules that make it (`decide`). The engine that answers
and scores is `guard.RegressionGuard`; the rules on the user's own prompts are in
`user_form`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from clawrl_app.engine.publishing.user_form import (
    EPS,
    UserForm,
    allowed_new_loops,
    new_loop_count,
    new_loops_rest_on_one,
    refusal_rests_on_one_answer,
    refusing_rules,
    too_many_new_loops,
)

if TYPE_CHECKING:
    from clawrl_app.config import GuardSettings

USER_SIDE: dict[str, Any] = {"user_n": 0, "new_loops": None}
"""The inputs of the rules on the user's prompts and of the new-loops rule, blanked."""
AT_LENGTH: dict[str, Any] = {"budget_n": 0, "budget_new_loops": None}
"""The inputs of the rule on the open prompts at the user's length, blanked."""


def _fig(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _count(share: float | None, n: int) -> str:
    count = new_loop_count(share, n)
    return "-" if count is None else f"{count} of {n}"


@dataclass(frozen=True)
class VersionScores:
    """One version's scores; None where the set was empty (nothing to score)."""

    version: str
    personal: float | None = None
    personal_n: int = 0
    general: float | None = None
    general_n: int = 0
    degeneration: float | None = None
    """Share of its general-check answers that are degenerate (loops, repeats)."""
    degeneration_n: int = 0
    """How many answers that share is of (questions + open prompts)."""
    facts_any_form: float | None = None
    """The general score with degenerate answers counted as a fact checker alone sees them
    (None when the scores were reused from the store); shown for comparison, never decides."""
    user_degeneration: float | None = None
    """Share of its answers to the user's own newest prompts that are degenerate."""
    base_user_degeneration: float | None = None
    """The base model's share on the same prompts (what the former is held to)."""
    user_n: int = 0
    """How many of the user's prompts those shares are of."""
    user_repetition: float | None = None
    """Mean share of repeated 3-word phrases in its answers to the user's prompts (0: none):
    a drift toward loops shows here before single answers turn degenerate."""
    base_user_repetition: float | None = None
    """The base model's mean on the same prompts."""
    user_confirmed: bool = False
    """A refusal resting on one of those answers was confirmed on the next prompts (the
    figures are of both sets together)."""
    new_loops: float | None = None
    """Share of its answers (general check and the user's prompts) that are degenerate where
    the base model's answer to the same prompt is not (`new_loops`)."""
    new_loops_n: int = 0
    """How many answers that share is of."""
    flags: tuple[bool, ...] = ()
    """Per general-check answer: degenerate (empty when the scores were reused)."""
    budget_tokens: int = 0
    """The answer length the open prompts were also asked at: the user's (0: not asked)."""
    budget_n: int = 0
    """How many open prompts were answered at that length."""
    budget_degeneration: float | None = None
    base_budget_degeneration: float | None = None
    """Share of those answers that are degenerate: the version's, the base model's."""
    budget_new_loops: float | None = None
    """Share of those answers degenerate where the base's answer to the same prompt is not."""
    budget_confirmed: bool = False
    """A refusal at that length by one new loop too many was confirmed on the next open
    prompts (the figures are of both sets together)."""


@dataclass(frozen=True)
class GuardVerdict:
    """The decision on one candidate against the served version."""

    candidate: VersionScores
    served: VersionScores
    passed: bool
    reasons: list[str] = field(default_factory=list)
    base_degeneration: float | None = None
    """The base model's degeneration rate the candidate's was held to (None: unknown)."""
    min_personal_items: int = 1
    """Fewest held-out turns for the personal score to decide."""
    deferred_until: int = 0
    """> 0: not decided. The refusal rests on one answer and the user had too few prompts
    to confirm it; the version is neither served nor refused and is checked again once
    this many of the user's prompts exist (`RegressionGuard.waiting`)."""

    @property
    def deferred(self) -> bool:
        return self.deferred_until > 0

    @property
    def personal_decides(self) -> bool:
        return self.candidate.personal_n >= self.min_personal_items

    def summary(self) -> str:
        c, s = self.candidate, self.served
        turns = (
            f"{c.personal_n} held-out turns"
            if self.personal_decides
            else f"{c.personal_n}/{self.min_personal_items} held-out turns, not deciding"
        )
        base = "" if self.base_degeneration is None else f"base {self.base_degeneration:.2f}; "
        mine = (
            f"; on your prompts {_fig(c.user_degeneration)} vs base "
            f"{_fig(c.base_user_degeneration)}, repeats {_fig(c.user_repetition)} vs "
            f"{_fig(c.base_user_repetition)} ({c.user_n} prompts"
            f"{', confirmed' if c.user_confirmed else ''})"
            if c.user_n
            else ""
        )
        return (
            f"{c.version} vs {s.version}: personal {_fig(c.personal)} vs {_fig(s.personal)} "
            f"({turns}), general {_fig(c.general)} vs {_fig(s.general)} "
            f"({c.general_n} questions), degeneration {_fig(c.degeneration)} vs "
            f"{_fig(s.degeneration)} ({base}{c.degeneration_n} answers{mine}), new loops "
            f"{_count(c.new_loops, c.new_loops_n)}"
            + (
                f"; at your length ({c.budget_tokens} tokens) degeneration "
                f"{_fig(c.budget_degeneration)} vs base {_fig(c.base_budget_degeneration)}, "
                f"new loops {_count(c.budget_new_loops, c.budget_n)}"
                + (", confirmed" if c.budget_confirmed else "")
                if c.budget_n
                else ""
            )
            + (
                f"; deferred: rests on one answer, checked again at {self.deferred_until} "
                "of your prompts"
                if self.deferred
                else ""
            )
        )

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON for the status (admin API, Dashboard)."""
        c, s = self.candidate, self.served
        return {
            "candidate": c.version,
            "served": s.version,
            "passed": self.passed,
            "deferred_until": self.deferred_until,
            "reasons": self.reasons,
            "summary": self.summary(),
            "personal": c.personal,
            "personal_n": c.personal_n,
            "personal_decides": self.personal_decides,
            "general": c.general,
            "degeneration": c.degeneration,
            "served_personal": s.personal,
            "served_general": s.general,
            "served_degeneration": s.degeneration,
            "base_degeneration": self.base_degeneration,
            "user_degeneration": c.user_degeneration,
            "base_user_degeneration": c.base_user_degeneration,
            "user_prompts": c.user_n,
            "user_confirmed": c.user_confirmed,
            "user_repetition": c.user_repetition,
            "base_user_repetition": c.base_user_repetition,
            "new_loops": c.new_loops,
            "new_loops_n": c.new_loops_n,
            "budget_tokens": c.budget_tokens,
            "budget_n": c.budget_n,
            "budget_degeneration": c.budget_degeneration,
            "base_budget_degeneration": c.base_budget_degeneration,
            "budget_new_loops": c.budget_new_loops,
            "budget_confirmed": c.budget_confirmed,
        }


def decide(
    candidate: VersionScores,
    served: VersionScores,
    settings: GuardSettings,
    base_general: float | None = None,
    base_degeneration: float | None = None,
) -> GuardVerdict:
    """Refuse when a score drops, or the degeneration rate rises, by more than its setting
    allows. The personal score is compared with the served version's and decides only with
    at least `min_personal_items` held-out turns (fewer say too little: until then the
    general check alone decides). The general score asks "did it forget what the model
    knew?", so it is compared with the base model's (`base_general`; the served version's
    when that is unknown): a chain of versions, each a little worse than the last, cannot
    drift away, and a lucky high score of the served version (40 questions move in steps of
    0.025) does not make every later version look like a regression. The degeneration rate
    is held to the base model's (`base_degeneration`; else the served version's) for the
    same reason, whatever the fact score says: a looping answer still names its fact. On
    the user's own newest prompts (at least USER_FORM_MIN) the candidate's degeneration
    rate is held to the base model's on the same prompts, with the same margin: the shipped
    open prompts do not ask what this user asks; and so is the mean share of repeated
    phrases in those answers (`max_repetition_rise`): a version drifting toward loops
    repeats itself more on every answer before a few of them loop outright, which a rate of
    8-12 answers sees only by luck. And the share of its answers that loop where the base's
    answer to the same prompt does not (`max_new_loops`): a version trained to answer short
    stops looping where the base ran long, which hides its new short loops in a rate (at most
    that share of the answers, to the nearest whole answer: `allowed_new_loops`). The same
    share holds on the shipped open prompts answered at the user's answer length
    (`budget_new_loops`): a version trained on one kind of request drifts into loops on
    other kinds within the length the user asks for (brevity/dozen, 2026-11-29: "1. 1. 1."
    on list-shaped questions it never saw), where at `open_max_tokens` the base model loops
    on half of those prompts itself. There a version that loops no more than the base in all
    passes, new loops or not: at 100-128 tokens the base loops on 4-8 of 24 and a version
    that answers differently trades some of its loops for others (brevity/gist's v3: 0.17
    vs 0.33, 2 new; brevity/w20's v1: 0.17 vs 0.17, 3 new and 3 gone)."""
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
    form_ref = base_degeneration if base_degeneration is not None else served.degeneration
    if (
        candidate.degeneration is not None
        and form_ref is not None
        and candidate.degeneration - form_ref > settings.max_degeneration_rise + EPS
    ):
        whose = "base" if base_degeneration is not None else served.version
        reasons.append(
            f"degeneration {candidate.degeneration:.2f} vs {whose} {form_ref:.2f} "
            f"(max rise {settings.max_degeneration_rise:g}) on {candidate.degeneration_n} answers"
        )
    c = candidate
    for what, mine, base_mine, rise in refusing_rules(
        c.user_degeneration, c.base_user_degeneration, c.user_repetition,
        c.base_user_repetition, c.user_n, settings,
    ):  # fmt: skip
        reasons.append(
            f"{what} on your own prompts {mine:.2f} vs base {base_mine:.2f} "
            f"(max rise {rise:g}) on {c.user_n} prompts"
        )
    if too_many_new_loops(c.new_loops, c.new_loops_n, settings.max_new_loops):
        most = allowed_new_loops(c.new_loops_n, settings.max_new_loops)
        reasons.append(
            f"new loops: {_count(c.new_loops, c.new_loops_n)} of its answers degenerate where "
            f"the base's are not (at most {most}: {settings.max_new_loops:g} of them)"
        )
    if at_length_refuses(c, settings):
        most = allowed_new_loops(c.budget_n, settings.max_new_loops)
        reasons.append(
            f"at your answer length ({c.budget_tokens} tokens): "
            f"{_count(c.budget_new_loops, c.budget_n)} open prompts answered in a loop where "
            f"the base's answers are not (at most {most}: {settings.max_new_loops:g} of them)"
        )
    return GuardVerdict(
        candidate, served, not reasons, reasons, form_ref, settings.min_personal_items
    )


def at_length_refuses(c: VersionScores, settings: GuardSettings) -> bool:
    """The rule on the open prompts at the user's length refuses `c` (`decide`)."""
    return too_many_new_loops(c.budget_new_loops, c.budget_n, settings.max_new_loops) and (
        c.budget_degeneration is None
        or c.base_budget_degeneration is None
        or c.budget_degeneration > c.base_budget_degeneration + EPS
    )


def to_confirm(
    verdict: GuardVerdict,
    form: UserForm,
    settings: GuardSettings,
    base_general: float | None,
    base_degeneration: float | None,
    *,
    user_more: bool,
    length_more: bool,
) -> tuple[bool, bool]:
    """Which refusing rules of `verdict` to ask again on further prompts before the refusal
    stands: (the user's prompts with the new loops, the open prompts at the user's length).
    Each one whose refusal rests on one answer (`refusal_rests_on_one_answer`,
    `new_loops_rest_on_one`) and has more prompts to ask (`user_more`, `length_more`), and
    only when those rules alone refuse: with their inputs left out the verdict would pass,
    so a refusal by any other rule stands unasked. Both at once where each rule rests on
    one answer (calm/plain's v4 of 2026-12-02: 4 of 64 new loops, 3 allowed, and 2 of 24 at
    the user's length, 1 allowed; pool 0.04 against the base's 0.04, 0.80 compliant)."""
    c = verdict.candidate
    if verdict.passed or verdict.deferred:
        return False, False
    user = user_more and refusal_rests_on_one_answer(form, c.new_loops, c.new_loops_n, settings)
    length = (
        length_more
        and not c.budget_confirmed
        and at_length_refuses(c, settings)
        and new_loops_rest_on_one(c.budget_new_loops, c.budget_n, settings.max_new_loops)
    )
    blank = {**(USER_SIDE if user else {}), **(AT_LENGTH if length else {})}
    if not blank or not passes_without(verdict, blank, settings, base_general, base_degeneration):
        return False, False
    return user, length


def passes_without(
    verdict: GuardVerdict,
    blank: dict[str, Any],
    settings: GuardSettings,
    base_general: float | None,
    base_degeneration: float | None,
) -> bool:
    """Whether `verdict`'s candidate would pass with the named rules' inputs blanked
    (`USER_SIDE`, `AT_LENGTH`): those rules alone refuse it."""
    scores = replace(verdict.candidate, **blank)
    return decide(scores, verdict.served, settings, base_general, base_degeneration).passed
