"""Collector and judge loop on a real SQLite store, without the model (heuristic/plugin judges)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.config import JudgeSettings
from clawrl_app.engine.collecting.collector import Collector, next_state_of
from clawrl_app.engine.core.events import Event, LoopFailed, SampleJudged
from clawrl_app.engine.core.plugins import PluginError, coerce_reward, load_reward
from clawrl_app.engine.judging.judge import HeuristicJudge, JudgeLoop, LLMJudge, PluginJudge
from clawrl_app.engine.store import NewTurn, Store


@pytest.fixture()
def store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "s.sqlite3")
    yield s
    s.close()


def record(
    store: Store,
    sid: str,
    messages: list[dict[str, Any]],
    answer: str,
    type: str = "main",
    finish_reason: str = "stop",
) -> Any:
    store.ensure_session(sid, "api")
    return store.record_turn(
        NewTurn(
            session_id=sid,
            type=type,
            request={"messages": messages},
            response_text=answer,
            prompt_ids=[1, 2, 3],
            response_ids=[4, 5],
            logprobs=[-0.1, -0.2],
            policy_version="base",
            response={"message": {"role": "assistant", "content": answer}},
            finish_reason=finish_reason,
        )
    )


def conversation(store: Store, sid: str, replies: list[str]) -> list[Any]:
    """A header-less style session: each request resends history plus the next user reply."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Write a haiku about rain."}]
    turns = []
    for i, reply in enumerate([*replies, None]):
        answer = f"answer {i}"
        turns.append(record(store, sid, list(msgs), answer))
        if reply is not None:
            msgs = [
                *msgs,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": reply},
            ]
    return turns


def test_next_state_is_the_trailing_user_or_all_tool_messages() -> None:
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "no, shorter"},
    ]
    assert next_state_of(msgs).role == "user" and next_state_of(msgs).text == "no, shorter"  # type: ignore[union-attr]
    tools = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}, {"id": "2"}]},
        {"role": "tool", "tool_call_id": "1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "2", "content": "Error: city not found"},
    ]
    ns = next_state_of(tools)
    assert ns is not None and ns.role == "tool" and len(ns.messages) == 2
    assert "sunny" in ns.text and "city not found" in ns.text  # every parallel result, not the last
    assert next_state_of([{"role": "user", "content": "first"}]) is None


def test_collector_links_turns_once_and_skips_side_and_closed(store: Store) -> None:
    turns = conversation(store, "s1", ["No, that's wrong, make it shorter.", "Thanks, perfect!"])
    record(store, "s1", [{"role": "user", "content": "title please"}], "Rain", type="side")
    c = Collector(store)
    assert c.collect_once() == 2  # turns 0 and 1 have next states; turn 2 waits
    assert c.collect_once() == 0  # idempotent: a second pass creates nothing
    samples = store.samples_for_session("s1")
    assert [s.turn_id for s in samples] == [turns[0].id, turns[1].id]
    assert samples[0].next_state_text == "No, that's wrong, make it shorter."
    assert c.waiting == 1
    store.close_session("s1", "idle")
    assert c.collect_once() == 1
    last = store.samples_for_session("s1")[-1]
    assert last.turn_id == turns[2].id and last.state == "skipped" and last.next_state_role is None
    assert len(store.samples_for_session("s1")) == 3  # the side turn never became a sample


def judge_loop(store: Store, judge: Any, events: list[Event]) -> JudgeLoop:
    return JudgeLoop(
        store,
        None,
        None,
        judge,
        settings=JudgeSettings(),
        grace_s=0.0,  # type: ignore[arg-type]
        events=events.append,
    )


def test_heuristic_judge_loop_scores_and_skips_no_signal(store: Store) -> None:
    conversation(store, "s1", ["Great, thanks!", "Let's talk about something else."])
    Collector(store).collect_once()
    events: list[Event] = []
    loop = judge_loop(store, HeuristicJudge(), events)
    assert asyncio.run(loop.run_once()) == 2
    s0, s1 = store.samples_for_session("s1")
    j0, j1 = store.get_judgment(s0.id), store.get_judgment(s1.id)
    assert j0 is not None and j0.score == 1 and j0.backend == "heuristic" and j0.votes
    assert j1 is not None and j1.score == 0
    assert store.get_sample(s1.id).state == "skipped"  # type: ignore[union-attr]
    assert store.get_sample(s0.id).state == "judged"  # type: ignore[union-attr]
    assert [type(e) for e in events] == [SampleJudged, SampleJudged]
    assert asyncio.run(loop.run_once()) == 0  # nothing judged twice


def test_llm_judge_majority_and_hint_selection_from_votes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLM judge over scripted vote texts (the model-backed path is in test_judge_e2e):
    votes, majority and the hint rule are stored; teacher scoring is stubbed here."""
    conversation(store, "s1", ["No, make it one line."])
    Collector(store).collect_once()
    outputs = iter(
        [
            "The user asks for a change. \\boxed{-1}",
            "Negative. \\boxed{-1}",
            "\\boxed{1}",
            "\\boxed{1} [HINT_START]Answer with a single line haiku.[HINT_END]",
            "\\boxed{1} [HINT_START]Write the haiku on one line only.[HINT_END]",
            "\\boxed{-1}",
        ]
    )

    async def scripted(messages: list[dict[str, Any]], temperature: float, max_tokens: int) -> str:
        return next(outputs)

    loop = judge_loop(store, LLMJudge("policy", scripted, JudgeSettings()), [])

    async def teacher(*a: Any, **k: Any) -> list[float]:
        return [-0.3, -0.4]

    monkeypatch.setattr("clawrl_app.engine.judging.judge.teacher_logprobs", teacher)
    assert asyncio.run(loop.run_once()) == 1
    (sample,) = store.samples_for_session("s1")
    j = store.get_judgment(sample.id)
    assert j is not None and j.score == -1
    assert len([v for v in j.votes if v["kind"] == "prm"]) == 3
    assert j.hint is not None and "line" in j.hint and len(j.hint_candidates) == 2
    assert j.hint_rule and j.teacher_logprobs == [-0.3, -0.4]


def test_plugin_errors_leave_the_sample_unjudged(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation(store, "s1", ["ok"])
    Collector(store).collect_once()
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def reward(turn, next_state, context):\n    raise RuntimeError('boom')\n")
    events: list[Event] = []
    loop = judge_loop(store, PluginJudge(load_reward(bad)), events)
    assert asyncio.run(loop.run_once()) == 0
    (sample,) = store.samples_for_session("s1")
    assert store.get_judgment(sample.id) is None and store.get_sample(sample.id).state == "pending"  # type: ignore[union-attr]
    assert isinstance(events[-1], LoopFailed) and "boom" in events[-1].error
    assert loop.failed == 1 and "boom" in (loop.last_error or "")
    good = tmp_path / "good_reward.py"
    good.write_text(
        "def reward(turn, next_state, context):\n"
        "    return (0.5, 'Be brief.') if next_state['text'] == 'ok' else -1\n"
    )
    store.release_claims()
    ok = judge_loop(store, PluginJudge(load_reward(good)), [])

    async def teacher(*a: Any, **k: Any) -> list[float]:
        return [-1.0, -1.0]

    monkeypatch.setattr("clawrl_app.engine.judging.judge.teacher_logprobs", teacher)
    assert asyncio.run(ok.run_once()) == 1
    j = store.get_judgment(sample.id)
    assert j is not None and j.score == 0.5 and j.hint == "Be brief." and j.backend == "custom"


def test_plugin_loading_and_coercion_errors(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="does not exist"):
        load_reward(tmp_path / "missing.py")
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def reward(x):\n    return 1\n")
    with pytest.raises(PluginError, match="turn, next_state, context"):
        load_reward(wrong)
    assert coerce_reward({"reward": -1, "hint": "x"}).hint == "x"
    for bad in (2, "1", True, (1, 3)):
        with pytest.raises(ValueError):
            coerce_reward(bad)


def test_a_thanks_after_a_cut_off_answer_is_not_a_reward(store: Store) -> None:
    """A turn that ended by `length` (token limit or a loop) is not rewarded +1 by the
    thanks that follows it; the same thanks after a finished answer is +1, a correction
    after a cut-off answer stays -1, and an explicit rating still decides."""
    from dataclasses import replace as dc_replace

    from clawrl_app.engine.judging.judge import Verdict, cap_cut_off

    for sid, finish in (("cut", "length"), ("done", "stop")):
        store.ensure_session(sid, "api")
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Explain tides."}]
        for i, reply in enumerate(["Thanks!", "No, that's wrong.", None]):
            record(store, sid, list(msgs), f"Tides are caused by {i}", finish_reason=finish)
            if reply is not None:
                msgs += [{"role": "assistant", "content": f"Tides are caused by {i}"},
                         {"role": "user", "content": reply}]  # fmt: skip
    Collector(store).collect_once()
    asyncio.run(judge_loop(store, HeuristicJudge(), []).run_once(limit=10))
    scores = {
        sid: [store.get_judgment(s.id).score for s in store.samples_for_session(sid)]  # type: ignore[union-attr]
        for sid in ("cut", "done")
    }
    assert scores == {"cut": [0.0, -1.0], "done": [1.0, -1.0]}
    v = Verdict(1.0, [{"score": 1}])
    assert cap_cut_off(v, "length").score == 0 and cap_cut_off(v, "stop") == v
    assert cap_cut_off(dc_replace(v, score=-1.0), "length").score == -1
