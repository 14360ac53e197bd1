"""The regression guard's pure parts (held-out choice, preference agreement, the decision)
and its store reads, on a real SQLite file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.config import GuardSettings
from clawrl_app.engine.core.held_out import is_held_out
from clawrl_app.engine.publishing.guard import (
    GuardVerdict,
    VersionScores,
    decide,
    new_loops,
    preference_agreement,
    score_general,
)
from clawrl_app.engine.store import NewTurn, Store
from clawrl_app.engine.store.samples import HOLDOUT_REASON
from clawrl_app.general_eval import GeneralItem


def test_held_out_share_is_respected_and_fixed_per_turn() -> None:
    keys = [f"session-{i}:{i % 7}" for i in range(4000)]
    assert not any(is_held_out(k, 0.0) for k in keys)
    share = sum(is_held_out(k, 0.1) for k in keys) / len(keys)
    assert 0.08 < share < 0.12
    assert [is_held_out(k, 0.1) for k in keys[:50]] == [is_held_out(k, 0.1) for k in keys[:50]]
    assert all(is_held_out(k, 0.1) <= is_held_out(k, 0.3) for k in keys)  # a larger share adds


def test_preference_agreement() -> None:
    assert preference_agreement([0.2, -0.3], [1, -1]) == 1.0  # liked up, disliked down
    assert preference_agreement([-0.2, 0.3], [1, -1]) == 0.0
    assert preference_agreement([0.0, 0.00001], [1, -1]) == 0.5  # no change: no preference
    assert preference_agreement([0.5, 0.5, -0.5, 0.0], [1, -1, -1, 1]) == 0.625
    with pytest.raises(ValueError):
        preference_agreement([], [])
    with pytest.raises(ValueError):
        preference_agreement([0.1], [1, 1])


S = GuardSettings(min_personal_items=4, max_personal_drop=0.15, max_general_drop=0.05)


def verdict(cand: VersionScores, served: VersionScores) -> GuardVerdict:
    return decide(cand, served, S)


def test_decide_refuses_a_drop_beyond_each_threshold() -> None:
    served = VersionScores("v1", personal=0.7, personal_n=10, general=0.6, general_n=40)
    ok = verdict(VersionScores("v2", 0.56, 10, 0.551, 40), served)
    assert ok.passed and ok.reasons == []
    general = verdict(VersionScores("v2", 0.9, 10, 0.54, 40), served)
    assert not general.passed and general.reasons == [
        "general score 0.54 < 0.60 (v1's) - 0.05 on 40 questions"
    ]
    both = verdict(VersionScores("v2", 0.5, 10, 0.3, 40), served)
    assert not both.passed and len(both.reasons) == 2 and "personal" in both.reasons[0]
    assert "v2 vs v1: personal 0.50 vs 0.70 (10 held-out turns)" in both.summary()


def test_the_general_score_is_held_to_the_base_models() -> None:
    served = VersionScores("v3", personal=0.6, personal_n=10, general=0.75, general_n=40)
    noisy = VersionScores("v4", 0.6, 10, 0.68, 40)  # below a lucky v3, above base: fine
    assert decide(noisy, served, S, base_general=0.6).passed
    drifted = VersionScores("v4", 0.6, 10, 0.54, 40)
    v = decide(drifted, served, S, base_general=0.6)
    assert not v.passed and v.reasons == [
        "general score 0.54 < 0.60 (base's) - 0.05 on 40 questions"
    ]
    assert not decide(noisy, served, S).passed  # base unknown: the served version's


def test_too_few_held_out_turns_or_no_sets_never_refuse() -> None:
    served = VersionScores("base", personal=0.5, personal_n=3, general=0.6, general_n=40)
    assert verdict(VersionScores("v1", 0.0, 3, 0.6, 40), served).passed  # 3 < 4 turns
    assert verdict(VersionScores("v1"), VersionScores("base")).passed  # nothing to score
    assert not verdict(VersionScores("v1", 0.0, 4, 0.6, 40), served).passed


def test_degeneration_above_the_base_refuses_whatever_the_fact_score() -> None:
    """A version that loops more than the base model by more than the margin is refused even
    with a higher general score; at the margin it passes; fewer loops never refuse."""
    s = GuardSettings(min_personal_items=4, max_degeneration_rise=0.05)
    served = VersionScores("v2", 0.5, 10, 0.6, 40, degeneration=0.12, degeneration_n=52)
    looping = VersionScores("v3", 0.6, 10, 0.8, 40, degeneration=0.42, degeneration_n=52)
    v = decide(looping, served, s, base_general=0.6, base_degeneration=0.06)
    assert not v.passed and v.reasons == [
        "degeneration 0.42 vs base 0.06 (max rise 0.05) on 52 answers"
    ]
    assert v.base_degeneration == 0.06
    assert "degeneration 0.42 vs 0.12 (base 0.06; 52 answers)" in v.summary()
    at_margin = VersionScores("v3", 0.6, 10, 0.8, 40, degeneration=0.11, degeneration_n=52)
    assert decide(at_margin, served, s, 0.6, 0.06).passed  # 0.11 - 0.06 = 0.05: allowed
    fewer = VersionScores("v3", 0.6, 10, 0.6, 40, degeneration=0.0, degeneration_n=52)
    assert decide(fewer, served, s, 0.6, 0.06).passed
    # base unknown: held to the served version's rate
    v = decide(looping, served, s)
    assert not v.passed and "degeneration 0.42 vs v2 0.12" in v.reasons[0]


def test_loops_on_the_users_own_prompts_refuse_what_the_open_prompts_pass() -> None:
    """calm/plain's v3 (bench/results/learn-20261126-233610.json): no more loops than the
    base on the shipped prompts, but 2 of 10 of the user's kind of prompt degenerate where
    the base's did not: refused. Fewer than USER_FORM_MIN prompts never decide."""
    from clawrl_app.engine.publishing.guard import USER_FORM_MIN

    s = GuardSettings(min_personal_items=4, max_degeneration_rise=0.05)
    served = VersionScores("v2", 0.5, 10, 0.6, 40, degeneration=0.12, degeneration_n=52)
    fine = VersionScores("v3", 1.0, 10, 0.65, 40, degeneration=0.13, degeneration_n=52)
    mine = dict(user_degeneration=0.2, base_user_degeneration=0.0, user_n=10)
    v = decide(replace(fine, **mine), served, s, 0.6, 0.12)  # type: ignore[arg-type]
    assert not v.passed and v.reasons == [
        "degeneration on your own prompts 0.20 vs base 0.00 (max rise 0.05) on 10 prompts"
    ]
    assert "on your prompts 0.20 vs base 0.00, repeats - vs - (10 prompts)" in v.summary()
    assert v.as_dict()["user_degeneration"] == 0.2 and v.as_dict()["user_prompts"] == 10
    assert decide(fine, served, s, 0.6, 0.12).passed  # the shipped prompts alone: passed
    few = replace(fine, user_degeneration=1.0, base_user_degeneration=0.0, user_n=USER_FORM_MIN - 1)
    assert decide(few, served, s, 0.6, 0.12).passed
    same = replace(fine, user_degeneration=0.25, base_user_degeneration=0.2, user_n=20)
    assert decide(same, served, s, 0.6, 0.12).passed  # a rise of 0.05: allowed


def test_a_drift_toward_repeats_on_the_users_prompts_is_refused_before_answers_loop() -> None:
    """calm/plain's versions (bench/results/learn-20261127-054905.json, held-out answers):
    the base repeats 0.03 of its 3-word phrases, a version after 24 turns 0.13 with 1 of 10
    answers degenerate; the degeneration rate of 12 prompts may miss that one loop, the
    mean repeated share does not. A fall (brevity: 0.07 -> 0.00) is never refused."""
    from clawrl_app.engine.publishing.guard import USER_FORM_MIN

    s = GuardSettings(min_personal_items=4)
    served = VersionScores("v2", None, 0, 0.6, 40, degeneration=0.12, degeneration_n=52)
    cand = VersionScores("v3", None, 0, 0.65, 40, degeneration=0.10, degeneration_n=52)
    drift = dict(user_degeneration=0.0, base_user_degeneration=0.0, user_n=12,
                 user_repetition=0.13, base_user_repetition=0.03)  # fmt: skip
    v = decide(replace(cand, **drift), served, s, 0.6, 0.12)  # type: ignore[arg-type]
    assert not v.passed and v.reasons == [
        "repeated phrases on your own prompts 0.13 vs base 0.03 (max rise 0.05) on 12 prompts"
    ]
    assert "repeats 0.13 vs 0.03 (12 prompts)" in v.summary()
    assert v.as_dict()["user_repetition"] == 0.13
    rise = dict(drift, user_repetition=0.08)  # a rise of exactly 0.05: allowed
    assert decide(replace(cand, **rise), served, s, 0.6, 0.12).passed  # type: ignore[arg-type]
    fall = dict(drift, user_repetition=0.0, base_user_repetition=0.07)
    assert decide(replace(cand, **fall), served, s, 0.6, 0.12).passed  # type: ignore[arg-type]
    few = dict(drift, user_n=USER_FORM_MIN - 1)
    assert decide(replace(cand, **few), served, s, 0.6, 0.12).passed  # type: ignore[arg-type]


def test_new_loops_count_only_answers_that_loop_where_the_bases_did_not() -> None:
    """Paired by prompt: a loop the base model had too is no new loop; a loop the version
    lost makes up for nothing."""
    assert new_loops([True, True, False, False], [True, False, True, False]) == 0.25
    assert new_loops([False] * 4, [True] * 4) == 0.0
    assert new_loops([], []) is None
    with pytest.raises(ValueError, match="3 answers but 2"):
        new_loops([True] * 3, [True] * 2)


def test_new_loops_refuse_a_version_whose_rate_fell() -> None:
    """brevity/tips25's v6 (bench/results/learn-20261127-231742.json): degeneration 0.06 vs
    the base's 0.12 and 0.08 vs 0.25 on the user's prompts, passed; its short answers loop
    where the base's ran long without a loop ("1. 1. 1. ..."). Refused for the loops that
    are new (4 of 64: 0.05 of them is 3.2, 3 to the nearest answer); at 3 it passes."""
    s = GuardSettings(min_personal_items=4, max_new_loops=0.05)
    served = VersionScores("v2", None, 0, 0.7, 40, degeneration=0.08, degeneration_n=52)
    v6 = VersionScores("v6", None, 0, 0.75, 40, degeneration=0.06, degeneration_n=52,
                       user_degeneration=0.08, base_user_degeneration=0.25, user_n=12,
                       new_loops=4 / 64, new_loops_n=64)  # fmt: skip
    v = decide(v6, served, s, base_general=0.6, base_degeneration=0.12)
    assert not v.passed and v.reasons == [
        "new loops: 4 of 64 of its answers degenerate where the base's are not "
        "(at most 3: 0.05 of them)"
    ]
    assert v.summary().endswith("new loops 4 of 64") and v.as_dict()["new_loops_n"] == 64
    assert decide(replace(v6, new_loops=3 / 64), served, s, 0.6, 0.12).passed
    # 4 of 76: 0.05 of them is 3.8, 4 to the nearest answer
    assert decide(replace(v6, new_loops=4 / 76, new_loops_n=76), served, s, 0.6, 0.12).passed
    assert decide(replace(v6, new_loops=None), served, s, 0.6, 0.12).passed


def test_open_prompts_at_the_users_length_refuse_more_new_loops_than_allowed() -> None:
    """48 open prompts answered at the user's length: 0.05 of them is 2.4, so 2 answers
    that loop where the base's do not pass and 3 refuse, whatever the other scores, unless
    the version loops no more than the base on them in all; the summary and the status say
    so; not measured (0 prompts): no rule."""
    s = GuardSettings(min_personal_items=4)
    served = VersionScores("v2", None, 0, 0.7, 40, degeneration=0.08, degeneration_n=52)
    v4 = VersionScores("v4", None, 0, 0.7, 40, degeneration=0.08, degeneration_n=52,
                       budget_tokens=64, budget_n=48, budget_degeneration=5 / 48,
                       base_budget_degeneration=2 / 48, budget_new_loops=3 / 48)  # fmt: skip
    v = decide(v4, served, s, base_general=0.6, base_degeneration=0.12)
    assert not v.passed and v.reasons == [
        "at your answer length (64 tokens): 3 of 48 open prompts answered in a loop where the "
        "base's answers are not (at most 2: 0.05 of them)"
    ]
    assert "at your length (64 tokens) degeneration 0.10 vs base 0.04, new loops 3 of 48" in (
        v.summary()
    )
    assert v.as_dict()["budget_tokens"] == 64 and v.as_dict()["budget_n"] == 48
    assert decide(replace(v4, budget_new_loops=2 / 48), served, s, 0.6, 0.12).passed
    # where the base loops on many of them (gist's 128 tokens: 8 of 24), a version that
    # loops less in all passes, new loops or not; as often as the base (w20's v1 at 100
    # tokens: 3 new, 3 gone) too; one loop more than the base: refused
    fewer = replace(v4, budget_degeneration=4 / 24, base_budget_degeneration=8 / 24,
                    budget_new_loops=2 / 24, budget_n=24)  # fmt: skip
    assert decide(fewer, served, s, 0.6, 0.12).passed
    assert decide(replace(fewer, budget_degeneration=8 / 24), served, s, 0.6, 0.12).passed
    assert not decide(replace(fewer, budget_degeneration=9 / 24), served, s, 0.6, 0.12).passed
    unmeasured = replace(v4, budget_n=0, budget_new_loops=None)
    assert decide(unmeasured, served, s, 0.6, 0.12).passed
    assert "at your length" not in decide(unmeasured, served, s, 0.6, 0.12).summary()


def test_user_prompts_are_the_newest_plain_distinct_conversations(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        store.ensure_session("chat", "test")
        store.ensure_session("env-1", "env:terminal")

        def turn(sid: str, messages: list[dict[str, Any]], tokens: int = 10, **body: Any) -> int:
            return store.record_turn(
                NewTurn(sid, "main", {"messages": messages, **body}, "a", [1] * tokens, [2],
                        [0.0], "base", prompt_tokens=tokens)
            ).id  # fmt: skip

        hi = [{"role": "user", "content": "hi"}]
        a = turn("chat", hi)
        turn("chat", hi)  # the same conversation again: once
        turn("chat", [{"role": "tool", "content": "x", "tool_call_id": "1"}])  # tool: skipped
        turn("chat", [{"role": "user", "content": "long"}], tokens=5000)  # too long: skipped
        turn("env-1", [{"role": "user", "content": "env"}])  # an env session: skipped
        c = turn("chat", [{"role": "user", "content": "so"}], max_completion_tokens=48)
        b = turn("chat", [{"role": "user", "content": "bye"}], max_tokens=64)
        got = store.user_prompts(8, 4096)
        assert [p.turn_id for p in got] == [b, c, a + 1]
        assert got[0].messages == [{"role": "user", "content": "bye"}]
        # each with the budget its request set, or None
        assert [p.max_tokens for p in got] == [64, 48, None]
        assert len(store.user_prompts(1, 4096)) == 1
        # the guard asks the held-out turns (never trained on) first, newest first in each
        d = store.record_turn(
            NewTurn("chat", "main", {"messages": [{"role": "user", "content": "new"}]}, "a",
                    [1] * 10, [2], [0.0], "base", prompt_tokens=10, holdout=True)
        ).id  # fmt: skip
        turn("chat", [{"role": "user", "content": "newest"}])
        first = store.user_prompts(3, 4096, held_out_first=True)
        assert [p.turn_id for p in first] == [d, d + 1, b]
        assert store.user_prompts(1, 4096)[0].turn_id == d + 1  # the teacher check: newest
        # the guard's form check leaves out requests too short to show a loop (a closing
        # "thanks" turn at 8 tokens); one that set no budget stays
        turn("chat", [{"role": "user", "content": "thanks"}], max_tokens=8)
        short_too = store.user_prompts(8, 4096)
        assert short_too[0].max_tokens == 8
        got = store.user_prompts(8, 4096, held_out_first=True, min_budget=32)
        assert [p.turn_id for p in got] == [d, d + 1, b, c, a + 1]
        # after the held-out ones, the prompts never trained on come before trained ones
        for tid, state in ((d + 1, "trained"), (b, "judged"), (c, "trained")):
            sample = store.create_sample(tid, "chat", "user", "ok")
            assert sample is not None and store.set_sample_state(sample, state)
        got = store.user_prompts(8, 4096, held_out_first=True, min_budget=32)
        assert [p.turn_id for p in got] == [d, b, a + 1, d + 1, c]
        assert [p.turn_id for p in store.user_prompts(3, 4096)] == [d + 2, d + 1, d]  # newest


def test_facts_on_degenerate_answers_count_as_wrong() -> None:
    """A looping answer that names the fact passes a fact checker, not the guard."""
    items = [GeneralItem("g1", "What is the capital of France?", ("paris",)),
             GeneralItem("g2", "What is 2 + 3?", ("5",))]  # fmt: skip
    loop = "Paris is Paris is Paris is Paris is Paris is Paris is Paris is Paris is"
    fine = "The capital of France is Paris."
    r = score_general(items, [loop, "2 + 3 = 5"], ["A bicycle has two wheels and pedals."])
    assert r.facts_any_form == 1.0 and r.general == 0.5  # the loop's fact does not count
    assert r.degeneration == pytest.approx(1 / 3) and (r.questions, r.answers) == (2, 3)
    r = score_general(items, [fine, "2 + 3 = 5"], ["You can do it. " * 12])
    assert r.general == r.facts_any_form == 1.0 and r.degeneration == pytest.approx(1 / 3)
    none = score_general([], [], ["A bicycle has two wheels and pedals."])
    assert none.general is None and none.degeneration == 0.0


def test_too_few_personal_items_never_decide_and_say_so() -> None:
    """Below `min_personal_items` (default 8) held-out turns, even a personal score of 0
    refuses nothing; the summary says "n/8, not deciding"; from 8 on it decides."""
    s = GuardSettings()
    assert s.min_personal_items == 8
    served = VersionScores("v1", 0.9, 7, 0.6, 40, 0.1, 52)
    few = decide(VersionScores("v2", 0.0, 7, 0.6, 40, 0.1, 52), served, s)
    assert few.passed and not few.personal_decides
    assert "personal 0.00 vs 0.90 (7/8 held-out turns, not deciding)" in few.summary()
    assert few.as_dict()["personal_decides"] is False
    enough = decide(VersionScores("v2", 0.0, 8, 0.6, 40, 0.1, 52), served, s)
    assert not enough.passed and enough.personal_decides
    assert "(8 held-out turns)" in enough.summary()


def held_out_turn(store: Store, sid: str, holdout: bool) -> int:
    store.ensure_session(sid, "test")
    row = store.record_turn(
        NewTurn(sid, "main", {"messages": []}, "answer", [1, 2, 3], [4, 5], [-0.1, -0.2], "base",
                holdout=holdout)
    )  # fmt: skip
    return row.id


def test_held_out_turns_are_judged_but_never_trained(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    kept, trained, unrated = (held_out_turn(store, s, h) for s, h in
                              (("a", True), ("b", False), ("c", True)))  # fmt: skip
    for tid in (kept, trained):
        store.set_user_rating(tid, -1, None, eligible_at=0.0)
    states = {s.turn_id: (s.state, s.skip_reason) for s in store.samples_for_session("a")}
    assert states == {kept: ("skipped", HOLDOUT_REASON)}
    assert [s.turn_id for s in store.trainable_samples(10, now=1e12)] == [trained]
    items = store.held_out_items(10)
    assert [(i.turn_id, i.prompt_ids, i.response_ids, i.reward) for i in items] == [
        (kept, [1, 2, 3], [4, 5], -1.0)
    ]  # the unrated one has no judgment yet
    assert store.held_out_count() == 2 and unrated
    assert store.get_turn(kept).holdout == 1  # type: ignore[union-attr]
    store.add_metrics(3, {"guard/general": 0.4}, "v1")
    store.add_metrics(5, {"guard/general": 0.55}, "v1")
    assert store.version_score("guard/general", "v1") == 0.55
    assert store.version_score("guard/general", "v2") is None
    store.close()


def test_doctor_prints_the_guards_settings_count_and_latest_verdicts(tmp_path: Path) -> None:
    from clawrl_app.config import Settings
    from clawrl_app.doctor import guard_lines

    store = Store(tmp_path / "s.db")
    held_out_turn(store, "a", True)
    store.add_event("GuardChecked", {"version": "v3", "served": "v2", "passed": False,
                                     "summary": "v3 vs v2: general 0.45 vs 0.60",
                                     "reasons": ["general score 0.45 < 0.60 - 0.05"]})  # fmt: skip
    store.add_event("GuardChecked", {"version": "v4", "served": "v2", "passed": False,
                                     "summary": "v4 vs v2", "deferred_until": 24,
                                     "reasons": ["new loops: 4 of 64"]})  # fmt: skip
    store.close()
    lines = guard_lines(Settings(), tmp_path / "s.db")
    assert lines[0].startswith("on: every 1 checkpoint(s)")
    assert "or a degeneration rate > base + 0.05 (answers to the questions and 12 open" in lines[0]
    assert "and 24 more open prompts at your answer length)" in lines[0]
    assert "with >= 8 held-out turns; fewer: not deciding" in lines[0]
    assert (
        "new loops > 0.05 (to the nearest answer); one answer alone: confirmed on the next "
        "prompts (deferred until they exist); the trainer goes back" in lines[0]
    )
    single = Settings.model_validate({"guard": {"user_form_confirm": False}})
    assert "confirmed" not in guard_lines(single, tmp_path / "s.db")[0]
    assert "held-out turns (never trained on): 1 (10% of new main turns)" in lines
    assert lines[-1].endswith(
        "v3 vs v2: general 0.45 vs 0.60: REFUSED: general score 0.45 < 0.60 - 0.05"
    )
    assert lines[-2].endswith("v4 vs v2: deferred to 24 of your prompts: new loops: 4 of 64")
    off = Settings.model_validate({"guard": {"enabled": False}})
    assert guard_lines(off, tmp_path / "s.db")[0].startswith("OFF")


def test_the_dashboard_banner_shows_only_a_refusal() -> None:
    from clawrl_app.tui.views import curve_title, guard_banner

    def status(last: dict[str, object] | None) -> dict[str, object]:
        return {"publishing": {"guard": {"enabled": True, "last": last}}}

    assert guard_banner({}) == "" and guard_banner(status(None)) == ""
    assert guard_banner(status({"candidate": "v3", "served": "v2", "passed": True})) == ""
    text = guard_banner(status({"candidate": "v3", "served": "v2", "passed": False,
                                "reasons": ["general score 0.45 < 0.60 - 0.05"]}))  # fmt: skip
    assert "v3 refused by the regression guard, v2 still served" in text
    assert "general score 0.45" in text and "Training went back to v2." in text
    going_on = status({"candidate": "v3", "served": "v2", "passed": False, "reasons": ["x"]})
    going_on["publishing"].update(refused_in_row=1, retreat_after=3)  # type: ignore[attr-defined]
    assert guard_banner(going_on).endswith(
        "x. Training goes on from it (refusal 1 of 3 in a row before it goes back to v2)."
    )
    deferred = status({"candidate": "v3", "served": "v2", "passed": False, "deferred_until": 24,
                       "reasons": ["degeneration on your own prompts 0.06 vs base 0.00"]})  # fmt: skip
    assert guard_banner(deferred) == (
        "v3 not served yet, v2 still served: degeneration on your own prompts 0.06 vs base "
        "0.00. That rests on one answer; checked again at 24 of your prompts. Training goes "
        "on from it."
    )
    assert curve_title("guard/general").startswith("general score") and curve_title("kl") == "kl"
    assert curve_title("guard/degeneration").startswith("degeneration rate")


def test_the_dashboard_shows_each_checked_versions_scores_and_degeneration() -> None:
    from clawrl_app.tui.views import guard_score_lines

    def verdict(version: str, passed: bool, n: int, decides: bool, d: float) -> dict[str, object]:
        return {"candidate": version, "served": "v1", "passed": passed, "personal": 0.55,
                "personal_n": n, "personal_decides": decides, "general": 0.62,
                "degeneration": d, "base_degeneration": 0.12}  # fmt: skip

    guard = {"enabled": True, "min_personal_items": 8, "max_degeneration_rise": 0.05,
             "recent": [verdict("v2", True, 3, False, 0.1), verdict("v3", False, 9, True, 0.42)]}  # fmt: skip
    lines = guard_score_lines({"publishing": {"guard": guard}})
    assert lines[0].startswith("guard     refuses degeneration > base 0.12 + 0.05")
    assert lines[1] == (
        "v3        personal 0.55 (9) · general 0.62 · degeneration 0.42 · REFUSED"
    )  # newest first
    assert lines[2] == (
        "v2        personal 0.55 (3/8, not deciding) · general 0.62 · degeneration 0.10 · passed"
    )
    mine = {**verdict("v4", False, 9, True, 0.1), "user_degeneration": 0.25,
            "base_user_degeneration": 0.0, "user_prompts": 8}  # fmt: skip
    rep = {**mine, "user_repetition": 0.13, "base_user_repetition": 0.03}
    rep_lines = guard_score_lines({"publishing": {"guard": {**guard, "recent": [rep]}}})
    assert rep_lines[1].endswith("(your prompts 0.25 vs base 0.00, repeats 0.13 vs 0.03) · REFUSED")
    lines = guard_score_lines({"publishing": {"guard": {**guard, "recent": [mine]}}})
    assert lines[1].endswith("degeneration 0.10 (your prompts 0.25 vs base 0.00) · REFUSED")
    sure = {**mine, "user_prompts": 24, "user_confirmed": True, "passed": True}
    sure_lines = guard_score_lines({"publishing": {"guard": {**guard, "recent": [sure]}}})
    assert sure_lines[1].endswith(
        "(your prompts 0.25 vs base 0.00, 24 prompts, confirmed) · passed"
    )
    at = {**verdict("v5", True, 9, True, 0.06), "budget_tokens": 64, "budget_n": 24,
          "budget_degeneration": 0.08, "base_budget_degeneration": 0.04, "budget_new_loops": 2 / 24}  # fmt: skip
    at_lines = guard_score_lines({"publishing": {"guard": {**guard, "recent": [at]}}})
    assert at_lines[1].endswith(
        "degeneration 0.06 · at your length (64 tok) 0.08 vs base 0.04, new loops 2/24 · passed"
    )
    assert guard_score_lines({}) == [] and guard_score_lines({"publishing": {"guard": {}}}) == []
