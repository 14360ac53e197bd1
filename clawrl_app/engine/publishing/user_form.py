"""The guard's form check on the user's own prompts: pure data and rules (no engine).

A version answers the user's prompts (held-out ones first) greedily at the budget each
request set, and so does the base model; `UserForm` pairs the two per prompt. The guard
holds the version's degeneration rate and its mean share of repeated phrases on these
prompts to the base's (`guard.decide`).

On 12 prompts one answer is 0.08 of the rate, more than the 0.05 margin: a version that
loops on a single prompt the base did not is refused by one answer. That happens to
harmless versions as often as to looping ones (bench/results, 2026-11-27/28: brevity/dozen's
v2, v3 and v4, no degenerate held-out answer, and brevity/tips25's v1 and v2, 2-3 of 10
held-out answers degenerate, were each refused by one loop on 12 prompts), and each false
refusal of a version that was learning held the user's training back. So a refusal that
rests on one answer alone (`rests_on_one_answer`: with that prompt left out the rule
passes) is confirmed on the next prompts before it stands (`guard.user_form_confirm`): the
verdict is taken again on both sets of answers together (`UserForm.pooled`); a second loop
in the next 12 keeps the refusal, none lets the version through. The same holds for the
guard's new-loops rule (answers that loop where the base's did not, over the general check
and these prompts): a refusal by one new loop too many is confirmed the same way
(`refusal_rests_on_one_answer`). When the user has not written enough prompts to confirm
it (fewer than `user_form_items` more) and the refusal still rests on one answer, the
verdict is deferred (`GuardVerdict.deferred_until`): the version is neither served nor
refused and is checked again once the prompts exist (brevity/dozen's v3 of 2026-11-28,
0.30 compliant and no degenerate answer, was refused on 1 loop in 16 because the user had
written only 16 prompts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clawrl_app.degeneration import Degeneration

if TYPE_CHECKING:
    from clawrl_app.config import GuardSettings

EPS = 1e-9  # rates are k/n: a rise of exactly the allowed margin is allowed
USER_FORM_MIN = 4  # fewest of the user's own prompts for their degeneration rate to decide


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


@dataclass(frozen=True)
class UserForm:
    """A version's and the base model's form on the user's prompts, paired per prompt (no
    answers: not measured, too few prompts)."""

    n: int = 0
    """How many prompts were asked (answered, or too few to answer)."""
    flags: tuple[bool, ...] = ()
    base_flags: tuple[bool, ...] = ()
    """Per prompt: the version's answer / the base's is degenerate."""
    shares: tuple[float, ...] = ()
    base_shares: tuple[float, ...] = ()
    """Per prompt: the share of repeated 3-word phrases in the version's / the base's answer."""
    confirmed: bool = False
    """The next prompts were asked too (a refusal resting on one answer was confirmed)."""

    @property
    def rate(self) -> float | None:
        """Share of the version's answers that are degenerate (None: no answers)."""
        return _mean([float(f) for f in self.flags]) if self.flags else None

    @property
    def base_rate(self) -> float | None:
        return _mean([float(f) for f in self.base_flags]) if self.base_flags else None

    @property
    def repetition(self) -> float | None:
        """Mean repeated-phrase share of the version's answers (None: no answers)."""
        return _mean(self.shares) if self.shares else None

    @property
    def base_repetition(self) -> float | None:
        return _mean(self.base_shares) if self.base_shares else None

    @staticmethod
    def of(mine: Sequence[Degeneration], base: Sequence[Degeneration]) -> UserForm:
        """The paired answers' flags and repeated shares (same prompts, same order)."""
        if len(mine) != len(base):
            raise ValueError(f"{len(mine)} answers but {len(base)} of the base's")
        return UserForm.from_pairs(
            tuple(f.degenerate for f in mine), tuple(f.degenerate for f in base),
            tuple(f.repeated_share for f in mine), tuple(f.repeated_share for f in base),
        )  # fmt: skip

    @staticmethod
    def from_pairs(
        flags: tuple[bool, ...],
        base_flags: tuple[bool, ...],
        shares: tuple[float, ...],
        base_shares: tuple[float, ...],
        confirmed: bool = False,
    ) -> UserForm:
        """Per-prompt flags and repeated shares (paired, same order)."""
        return UserForm(len(flags), flags, base_flags, shares, base_shares, confirmed)

    def pooled(self, more: UserForm) -> UserForm:
        """This form and `more` (other prompts) as one set of answers."""
        return UserForm.from_pairs(
            self.flags + more.flags, self.base_flags + more.base_flags,
            self.shares + more.shares, self.base_shares + more.base_shares, confirmed=True,
        )  # fmt: skip

    def rules(self, settings: GuardSettings) -> list[tuple[str, float, float, float]]:
        """`refusing_rules` on these answers."""
        return refusing_rules(
            self.rate, self.base_rate, self.repetition, self.base_repetition, self.n, settings
        )


def answer_budget(budgets: Sequence[int | None], cap: int, floor: int) -> int:
    """The answer length the user asks for: the median of their requests' budgets (one that
    set none counts as `cap`), within [`floor`, `cap`]; `cap` without requests."""
    if not budgets:
        return cap
    sized = sorted(min(b if b is not None else cap, cap) for b in budgets)
    return max(min(sized[(len(sized) - 1) // 2], cap), min(floor, cap))


def refusing_rules(
    rate: float | None,
    base_rate: float | None,
    repetition: float | None,
    base_repetition: float | None,
    n: int,
    settings: GuardSettings,
) -> list[tuple[str, float, float, float]]:
    """(what, the version's figure, the base's, the allowed rise) of each rule on the user's
    prompts that refuses: the degeneration rate or the mean repeated-phrase share above the
    base's on the same prompts by more than its margin (none with fewer than USER_FORM_MIN
    prompts, or where a figure is unknown)."""
    if n < USER_FORM_MIN:
        return []
    checks = (
        ("degeneration", rate, base_rate, settings.max_degeneration_rise),
        ("repeated phrases", repetition, base_repetition, settings.max_repetition_rise),
    )
    return [
        (what, mine, base, rise)
        for what, mine, base, rise in checks
        if mine is not None and base is not None and mine - base > rise + EPS
    ]


def without_worst(mine: Sequence[float], base: Sequence[float]) -> tuple[float, float] | None:
    """The means of paired values with the pair whose rise (mine - base) is largest left
    out; None with fewer than two pairs."""
    if len(mine) != len(base):
        raise ValueError(f"{len(mine)} values but {len(base)} of the base's")
    if len(mine) < 2:
        return None
    worst = max(range(len(mine)), key=lambda i: mine[i] - base[i])
    kept = [i for i in range(len(mine)) if i != worst]
    return _mean([mine[i] for i in kept]), _mean([base[i] for i in kept])


def new_loop_count(share: float | None, n: int) -> int | None:
    """How many of `n` answers are new loops when `share` of them are (None: not measured)."""
    return None if share is None or n <= 0 else round(share * n)


def allowed_new_loops(n: int, share: float) -> int:
    """How many of `n` answers may be new loops: `share` of them, to the nearest whole
    answer (at 0.05: 3 of 52 or 64, 4 of 76). A harmless version answers differently from
    the base and so loops on a few prompts the base did not (and not on others it did): 3-4
    of 52-64 in the recorded brevity/dozen runs (2026-11-28)."""
    return math.floor(share * n + 0.5)


def too_many_new_loops(share: float | None, n: int, max_share: float) -> bool:
    """More new loops among `n` answers (`share` of them) than `allowed_new_loops`."""
    count = new_loop_count(share, n)
    return count is not None and count > allowed_new_loops(n, max_share)


def new_loops_rest_on_one(share: float | None, n: int, max_share: float) -> bool:
    """The new loops refuse, and one fewer among one answer fewer would pass."""
    count = new_loop_count(share, n)
    return (
        count is not None
        and count > allowed_new_loops(n, max_share)
        and n > 1
        and count - 1 <= allowed_new_loops(n - 1, max_share)
    )


def rests_on_one_answer(form: UserForm, settings: GuardSettings) -> bool:
    """True when a rule on the user's prompts refuses and every one that does would pass
    with its single worst prompt left out: one answer alone decides the refusal."""
    refusing = form.rules(settings)
    if not refusing:
        return False
    pairs = {
        "degeneration": ([float(f) for f in form.flags], [float(f) for f in form.base_flags]),
        "repeated phrases": (list(form.shares), list(form.base_shares)),
    }
    for what, _, _, rise in refusing:
        left = without_worst(*pairs[what])
        if left is None or left[0] - left[1] > rise + EPS:
            return False
    return True


def refusal_rests_on_one_answer(
    form: UserForm, new_loops: float | None, new_loops_n: int, settings: GuardSettings
) -> bool:
    """The rules on the user's prompts (`form`) or the new-loops rule (`new_loops` of
    `new_loops_n` answers) refuse, and each one that does would pass on one answer fewer
    (`rests_on_one_answer`, `new_loops_rest_on_one`): one answer alone decides the refusal."""
    user = bool(form.rules(settings))
    loops = too_many_new_loops(new_loops, new_loops_n, settings.max_new_loops)
    return (
        (user or loops)
        and (not user or rests_on_one_answer(form, settings))
        and (not loops or new_loops_rest_on_one(new_loops, new_loops_n, settings.max_new_loops))
    )
