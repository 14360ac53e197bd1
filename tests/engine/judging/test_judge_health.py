"""Judge health: the pure maths and warnings with hand-derived numbers, then the same summary
read from a real SQLite store (engine, admin overview and doctor's read-only peek)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from clawrl_app.config import HealthSettings, Settings
from clawrl_app.engine.admin.routes import overview
from clawrl_app.engine.judging.health import (
    agreement,
    agreement_warning,
    balance_warning,
    drift_warning,
    judge_health,
    length_drift,
    reward_balance,
    summarize,
)
from clawrl_app.engine.store import NewTurn, Store, VersionLength
from clawrl_app.engine.store.peek import judge_health_inputs_readonly
from clawrl_app.tui import views

S = HealthSettings()  # 0.7 agreement / 10 ratings; 80 % one sign / 20 judgments; 50 % / 10 turns


def lengths(*rows: tuple[str, int, float]) -> list[VersionLength]:
    return [VersionLength(v, n, m) for v, n, m in rows]


# -- pure functions ------------------------------------------------------------------------


def test_agreement_is_the_mean_of_the_recorded_values_with_its_count() -> None:
    # 3 agreed out of 4: 3 / 4 = 0.75
    assert agreement([1.0, 0.0, 1.0, 1.0]) == (0.75, 4)
    assert agreement([]) == (None, 0)


def test_reward_balance_shares() -> None:
    # 22 + 8 + 10 = 40: 22/40 = 0.55, 8/40 = 0.2, 10/40 = 0.25
    assert reward_balance({1: 22, 0: 8, -1: 10}) == {"+1": 0.55, "0": 0.2, "-1": 0.25}
    assert reward_balance({1: 0, 0: 0, -1: 0}) == {"+1": 0.0, "0": 0.0, "-1": 0.0}


def test_length_drift_vs_previous_and_vs_base() -> None:
    # v2 190 vs v1 160: 30/160 = 0.1875; vs base 100: 90/100 = 0.9
    d = length_drift(lengths(("base", 30, 100.0), ("v1", 20, 160.0), ("v2", 12, 190.0)))
    assert d["version"] == "v2"
    assert d["vs_previous"] == pytest.approx(0.1875)
    assert d["vs_base"] == pytest.approx(0.9)
    # only base: nothing to compare; no base in the window: no vs-base figure
    assert length_drift(lengths(("base", 5, 80.0)))["vs_base"] is None
    only_v = length_drift(lengths(("v3", 5, 80.0), ("v4", 5, 40.0)))
    assert only_v["vs_base"] is None and only_v["vs_previous"] == pytest.approx(-0.5)
    assert length_drift([])["version"] is None


def test_agreement_warning_threshold_and_enough_ratings() -> None:
    # 6 of 10 = 0.6 < 0.7 with 10 ratings: warns, says what it means and what to do
    warning = agreement_warning(0.6, 10, S)
    assert warning is not None and "60%" in warning and "last 10 ratings" in warning
    assert "judge.backend" in warning
    assert agreement_warning(0.7, 10, S) is None  # at the threshold: fine
    assert agreement_warning(0.0, 9, S) is None  # not enough ratings: no warning
    assert agreement_warning(None, 0, S) is None


def test_balance_warning_threshold_and_enough_judgments() -> None:
    # 17 of 20 = 0.85 > 0.8 positive: warns (lenient judge)
    warning = balance_warning({1: 17, 0: 2, -1: 1}, S)
    assert warning is not None and "85% of the last 20 rewards are +1" in warning
    assert "lenient" in warning
    # 16 of 20 = 0.8 exactly: not above the threshold
    assert balance_warning({1: 16, 0: 2, -1: 2}, S) is None
    # 19 judgments, all -1: not enough data
    assert balance_warning({1: 0, 0: 0, -1: 19}, S) is None
    harsh = balance_warning({1: 0, 0: 1, -1: 20}, S)  # 20/21 = 95 % negative
    assert harsh is not None and "95%" in harsh and "roll back" in harsh


def test_drift_warning_threshold_and_enough_turns() -> None:
    # v2 190 vs base 120: +58 % > 50 %, 12 and 30 turns: warns
    long = lengths(("base", 30, 120.0), ("v1", 20, 132.0), ("v2", 12, 190.0))
    warning = drift_warning(long, S)
    assert warning is not None and "v2 answers are 58% longer than base's" in warning
    assert "(190 vs 120 tokens)" in warning
    # 50 shorter than 120: -58 %
    short = drift_warning(lengths(("base", 10, 120.0), ("v3", 10, 50.0)), S)
    assert short is not None and "58% shorter" in short
    # +50 % exactly: not beyond the threshold
    assert drift_warning(lengths(("base", 10, 100.0), ("v1", 10, 150.0)), S) is None
    # 9 turns of the newest version: not enough data
    assert drift_warning(lengths(("base", 30, 100.0), ("v1", 9, 300.0)), S) is None
    assert drift_warning(lengths(("base", 9, 100.0), ("v1", 30, 300.0)), S) is None
    # no base in the window, or base is the newest: nothing to say
    assert drift_warning(lengths(("v1", 30, 100.0), ("v2", 30, 300.0)), S) is None
    assert drift_warning(lengths(("base", 30, 100.0)), S) is None


def test_summary_without_data_has_no_warnings() -> None:
    h = summarize([], {1: 0, 0: 0, -1: 0}, [], S)
    assert h["agreement"] == {"value": None, "n": 0}
    assert h["balance"]["n"] == 0 and h["lengths"] == [] and h["warnings"] == []
    assert views.judge_health_lines({"judge_health": h}) == [
        "agreement – of 0 ratings",
        "rewards   –",
        "length    –",
    ]
    assert views.judge_health_lines({}) == ["(no data yet)"]
    assert views.judge_health_warnings({"judge_health": h}) == []


def test_panel_text() -> None:
    h = summarize(
        [1.0] * 6 + [0.0] * 4,
        {1: 22, 0: 8, -1: 10},
        lengths(("base", 30, 120.0), ("v1", 20, 132.0), ("v2", 12, 190.0), ("v3", 3, 200.0)),
        S,
    )
    # v3 vs v2: 10/190 = +5 %; vs base 80/120 = +67 % (only 3 turns of v3: no warning)
    assert views.judge_health_lines({"judge_health": h}) == [
        "agreement 60% of 10 ratings",
        "rewards   +1 55% · 0 20% · -1 25% of 40",
        "length    base 120 · v2 190 · v3 200 tok",
        "drift     v3 +5% vs prev · +67% vs base",
    ]
    warnings = views.judge_health_warnings({"judge_health": h})
    assert len(warnings) == 1 and warnings[0].startswith("⚠ The judge agreed with only 60%")


# -- the store ----------------------------------------------------------------------------


@pytest.fixture()
def store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "s.sqlite3")
    yield s
    s.close()


def turn(store: Store, sid: str, version: str, tokens: int, type: str = "main") -> Any:
    store.ensure_session(sid, "api")
    return store.record_turn(
        NewTurn(
            session_id=sid,
            type=type,
            request={"messages": [{"role": "user", "content": "hi"}]},
            response_text="answer",
            prompt_ids=[1, 2],
            response_ids=[3],
            logprobs=[-0.1],
            policy_version=version,
            response={"message": {"role": "assistant", "content": "answer"}},
            completion_tokens=tokens,
        )
    )


def fill(store: Store) -> None:
    """10 base turns of 100 and 120 tokens (mean 110), 10 v1 turns of 200 (a side turn of 999
    does not count); the judge scored +1 on turns 0..15 and -1 on 16..19; the user rated
    every second turn: +1 on 0..10, -1 on 12..18."""
    turns = [turn(store, "s-base", "base", 100 + 20 * (i % 2)) for i in range(10)]
    turns += [turn(store, "s-v1", "v1", 200) for _ in range(10)]
    turn(store, "s-v1", "v1", 999, type="side")
    for i, t in enumerate(turns):
        sample_id = store.create_sample(t.id, t.session_id, "user", "next")
        assert sample_id is not None
        score = 1.0 if i < 16 else -1.0
        store.record_judgment(sample_id, "heuristic", [score], score, None, [], None, None, None)
        if i % 2 == 0:
            rating = 1 if i < 12 else -1  # 12, 14 disagree with the judge's +1
            store.set_user_rating(t.id, rating, None)
            store.add_metric(sample_id, "judge/agreement", float(score == rating))


def test_store_reads_and_summary(store: Store) -> None:
    fill(store)
    # rated turns 0,2,..,18: agree on 0..10 (6) and 16, 18 (2); disagree on 12, 14: 8 / 10
    assert sorted(store.recent_agreement(50)) == [0.0, 0.0] + [1.0] * 8
    assert len(store.recent_agreement(3)) == 3
    # scores after ratings: +1 on 0..11 and 13, 15 (14 turns); user -1 on 12, 14; -1 on 16..19
    assert store.recent_reward_signs(100) == {1: 14, 0: 0, -1: 6}
    assert store.recent_reward_signs(4) == {1: 0, 0: 0, -1: 4}  # the newest four
    assert store.answer_lengths(100) == lengths(("base", 10, 110.0), ("v1", 10, 200.0))
    assert store.answer_lengths(5) == lengths(("v1", 5, 200.0))  # the newest 5 main turns

    h = judge_health(store, S)
    assert h["agreement"] == {"value": 0.8, "n": 10}
    assert h["balance"] == {"n": 20, "+1": 0.7, "0": 0.0, "-1": 0.3}
    # v1 200 vs base 110: 90/110 = +82 % > 50 % with 10 turns each
    assert h["drift"]["vs_base"] == pytest.approx(90 / 110)
    assert len(h["warnings"]) == 1 and "v1 answers are 82% longer" in h["warnings"][0]

    # doctor reads the same numbers through a read-only connection
    ro = judge_health_inputs_readonly(store.path, S.ratings, S.judgments, S.length_window)
    assert summarize(*ro, S) == h


def test_admin_overview_carries_the_summary(store: Store) -> None:
    fill(store)
    engine = SimpleNamespace(
        status=lambda: {"serving": {"state": "running", "version": "v1"}},
        http=None,
        api_key=None,
        model=None,
        plan=None,
        ready=lambda: True,
        store=store,
        settings=Settings(),
    )
    out = overview(engine)  # type: ignore[arg-type]
    assert out["judge_health"] == judge_health(store, Settings().health)
    engine.store = None
    assert overview(engine)["judge_health"] is None  # type: ignore[arg-type]


def test_doctor_line(store: Store) -> None:
    from clawrl_app.doctor import judge_health_lines

    fill(store)
    lines = judge_health_lines(Settings(), store.path)
    assert lines[0] == (
        "agreement with you: 80% of 10 ratings; rewards: +1 70% / 0 0% / -1 30% of 20; "
        "answer length: v1 +82% vs base"
    )
    assert lines[1].startswith("WARNING: v1 answers are 82% longer than base's")
