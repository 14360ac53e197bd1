"""The built-in judges' rules on the answer's form (clawrl_app.engine.judging.judge): an
answer cut off at its limit is never rewarded, a degenerate one is always punished."""

from __future__ import annotations

from clawrl_app.engine.judging.judge import Verdict, cap_cut_off, penalize_degenerate

LOOP = "A volcano is a volcano is a volcano is a volcano is a volcano is a volcano is a"
FINE = "A volcano is an opening in the crust where molten rock, ash and gases escape."


def test_a_looping_answer_is_judged_minus_one_whatever_the_reply_said() -> None:
    for score in (1.0, 0.0):
        v = penalize_degenerate(Verdict(score, [{"score": int(score)}], hint="be brief"), LOOP)
        assert v.score == -1.0
        assert v.hint == "be brief"  # the teacher's side of the lesson stays
        assert v.votes[-1]["rule"] == "degenerate" and "tail loop" in v.votes[-1]["reasons"]


def test_a_fine_answer_or_a_negative_verdict_is_left_alone() -> None:
    good = Verdict(1.0, [{"score": 1}])
    assert penalize_degenerate(good, FINE) is good
    bad = Verdict(-1.0, [{"score": -1}])
    assert penalize_degenerate(bad, LOOP) is bad  # already negative: no extra vote
    assert penalize_degenerate(good, "") is good
    assert penalize_degenerate(good, None) is good


def test_a_cut_off_answer_is_never_rewarded() -> None:
    assert cap_cut_off(Verdict(1.0, []), "length").score == 0.0
    assert cap_cut_off(Verdict(-1.0, []), "length").score == -1.0
    assert cap_cut_off(Verdict(1.0, []), "stop").score == 1.0
