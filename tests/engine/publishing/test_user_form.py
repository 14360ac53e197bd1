"""The rules on the user's own prompts (`publishing.user_form`): pure functions."""

from __future__ import annotations

import pytest

from clawrl_app.config import GuardSettings
from clawrl_app.engine.publishing.user_form import (
    USER_FORM_MIN,
    UserForm,
    allowed_new_loops,
    answer_budget,
    new_loops_rest_on_one,
    refusal_rests_on_one_answer,
    rests_on_one_answer,
    too_many_new_loops,
    without_worst,
)

S = GuardSettings()  # margins 0.05 on the rate and on the repeated share


def form(loops: int, n: int = 12, base_loops: int = 0, share: float = 0.0) -> UserForm:
    """`n` paired answers; the version's first `loops` loop (repeated share 0.8), the base's
    last `base_loops`; every other answer repeats `share` of its phrases."""
    flags = tuple(i < loops for i in range(n))
    base = tuple(i >= n - base_loops for i in range(n))
    shares = tuple(0.8 if f else share for f in flags)
    base_shares = tuple(0.8 if f else 0.0 for f in base)
    return UserForm.from_pairs(flags, base, shares, base_shares)


def test_without_worst_leaves_out_the_pair_that_rose_most() -> None:
    assert without_worst([1.0, 0.0, 0.0, 0.0], [0.0] * 4) == (0.0, 0.0)
    # the pair that rose most, not the largest value: (1, 1) did not rise
    assert without_worst([1.0, 1.0, 0.0], [1.0, 0.0, 0.0]) == (0.5, 0.5)
    assert without_worst([1.0], [0.0]) is None
    with pytest.raises(ValueError, match="2 values but 1"):
        without_worst([1.0, 0.0], [0.0])


def test_one_loop_in_twelve_rests_on_one_answer_two_do_not() -> None:
    """brevity/dozen's v3 (bench/results/learn-20261128-071629-dozen-defaults.json): one
    loop on 12 of the user's prompts, the base none, no degenerate held-out answer; refused
    by that one answer (0.08 > 0.05). Two loops in 12 are a refusal on their own."""
    one, two = form(1), form(2)
    assert [r[0] for r in one.rules(S)] == ["degeneration", "repeated phrases"]
    assert rests_on_one_answer(one, S)
    assert two.rules(S) and not rests_on_one_answer(two, S)
    # a loop where the base loops too is no rise: nothing refuses
    assert form(1, base_loops=1).rules(S) == [] and not rests_on_one_answer(form(0), S)
    # a drift of every answer's repeats refuses without any one answer deciding it
    drift = form(1, share=0.1)
    assert [r[0] for r in drift.rules(S)] == ["degeneration", "repeated phrases"]
    assert not rests_on_one_answer(drift, S)
    # too few prompts never decide
    assert form(1, n=USER_FORM_MIN - 1).rules(S) == []


def test_pooled_answers_decide_together() -> None:
    """One loop in the first 12 and none in the next: 1 of 24, within the margin; a second
    loop in the next 12 keeps the refusal."""
    first = form(1)
    clean, again = first.pooled(form(0)), first.pooled(form(1))
    assert clean.n == 24 and clean.confirmed and clean.rate == pytest.approx(1 / 24)
    assert clean.rules(S) == []
    assert again.rate == pytest.approx(2 / 24) and [r[0] for r in again.rules(S)] == [
        "degeneration",
        "repeated phrases",
    ]
    assert UserForm.from_pairs((), (), (), ()) == UserForm()


def test_new_loops_are_allowed_to_the_nearest_whole_answer() -> None:
    """0.05 of 52 answers is 2.6, of 64 3.2, of 76 3.8: 3, 3 and 4 may loop anew. Three
    harmless brevity/dozen versions had 3 of 52 or 4 of 64 (2026-11-28's runs)."""
    assert [allowed_new_loops(n, 0.05) for n in (12, 52, 64, 76, 100)] == [1, 3, 3, 4, 5]
    assert allowed_new_loops(64, 0.0) == 0
    assert not too_many_new_loops(3 / 52, 52, 0.05) and not too_many_new_loops(3 / 64, 64, 0.05)
    assert too_many_new_loops(4 / 64, 64, 0.05) and not too_many_new_loops(4 / 76, 76, 0.05)
    assert too_many_new_loops(1 / 64, 64, 0.0)
    assert not too_many_new_loops(None, 64, 0.05) and not too_many_new_loops(0.5, 0, 0.05)


def test_a_refusal_resting_on_one_new_loop_is_one_to_confirm() -> None:
    """4 of 64 new loops refuse and 3 of 63 would not: one answer decides; 5 of 64 do not
    rest on one. With a rule on the user's prompts refusing too, both must rest on one."""
    assert new_loops_rest_on_one(4 / 64, 64, 0.05)
    assert not new_loops_rest_on_one(5 / 64, 64, 0.05)
    assert not new_loops_rest_on_one(3 / 64, 64, 0.05)  # passes: nothing to confirm
    assert not new_loops_rest_on_one(1.0, 1, 0.0)  # no answer to leave out
    clean = form(0)
    assert refusal_rests_on_one_answer(clean, 4 / 64, 64, S)
    assert not refusal_rests_on_one_answer(clean, 3 / 64, 64, S)  # nothing refuses
    assert not refusal_rests_on_one_answer(clean, 5 / 64, 64, S)
    # brevity/dozen's v4 and v7 (learn-20261128-091848-dozen-confirm.json): 1 of 12 of the
    # user's prompts looped (base 0) and 4 of 64 new loops: one answer each way
    assert refusal_rests_on_one_answer(form(1), 4 / 64, 64, S)
    assert refusal_rests_on_one_answer(form(1), 1 / 64, 64, S)
    assert not refusal_rests_on_one_answer(form(2), 4 / 64, 64, S)
    assert not refusal_rests_on_one_answer(form(1), 5 / 64, 64, S)


def test_the_users_answer_length_is_the_median_budget_within_floor_and_cap() -> None:
    """The median of the newest requests' budgets (none set: the cap), the lower middle of
    an even count; never above the cap nor below the floor; the cap without requests."""
    assert answer_budget([64, 64, 48], 160, 32) == 64
    assert answer_budget([48, 64, 96, 128], 160, 32) == 64
    assert answer_budget([None, None, 64], 160, 32) == 160
    assert answer_budget([400, 300], 160, 32) == 160
    assert answer_budget([8, 8, 16], 160, 32) == 32
    assert answer_budget([], 160, 32) == 160
    assert answer_budget([8], 24, 32) == 24  # a floor above the cap: the cap


def test_refusals_that_each_rest_on_one_answer_are_confirmed_together() -> None:
    """calm/plain's v4 (2026-12-02): 4 of 64 new loops (3 allowed) and 2 of 24 open prompts
    looping at the user's length (1 allowed), each one answer too many, nothing else wrong:
    both are asked again. calm's v3 had 3 of 24 at the user's length (two too many): that
    refusal stands and so nothing is asked. A rule that cannot be confirmed (the general
    score) keeps every refusal; each side alone, with nothing more to ask, is not asked."""
    from dataclasses import replace

    from clawrl_app.engine.publishing.verdict import VersionScores, decide, to_confirm

    served = VersionScores("base", None, 0, 0.6, 40, degeneration=0.1, degeneration_n=52)
    v4 = VersionScores("v4", None, 0, 0.68, 40, degeneration=0.1, degeneration_n=52,
                       user_degeneration=0.0, base_user_degeneration=0.0, user_n=12,
                       new_loops=4 / 64, new_loops_n=64, budget_tokens=64, budget_n=24,
                       budget_degeneration=3 / 24, base_budget_degeneration=1 / 24,
                       budget_new_loops=2 / 24)  # fmt: skip
    clean = form(0)

    def ask(scores: VersionScores, user: bool = True, length: bool = True) -> tuple[bool, bool]:
        verdict = decide(scores, served, S, 0.6, 0.1)
        return to_confirm(verdict, clean, S, 0.6, 0.1, user_more=user, length_more=length)

    assert len(decide(v4, served, S, 0.6, 0.1).reasons) == 2
    assert ask(v4) == (True, True)
    assert ask(replace(v4, budget_new_loops=3 / 24, budget_degeneration=4 / 24)) == (False, False)
    assert ask(replace(v4, general=0.5)) == (False, False)  # general 0.50 < 0.55 stands
    assert ask(v4, length=False) == (False, False) and ask(v4, user=False) == (False, False)
    assert ask(replace(v4, budget_new_loops=1 / 24)) == (True, False)  # new loops alone
    assert ask(replace(v4, new_loops=3 / 64)) == (False, True)  # at the user's length alone
    assert ask(replace(v4, budget_confirmed=True)) == (False, False)  # asked already
    assert ask(replace(v4, new_loops=3 / 64, budget_new_loops=1 / 24)) == (False, False)  # passed
