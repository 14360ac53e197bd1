"""Collection + judging end to end on the real embedded model through the real endpoint."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
import torch

from clawrl_app.engine.backends.sampling import continuation_logprobs
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.judging.prompts import teacher_messages
from tests.conftest import wait_for

pytestmark = pytest.mark.slow
SID = "judge-e2e"


@pytest.fixture(scope="module")
def judged(engine: Any) -> dict[str, Any]:
    """A scripted three-turn conversation, its samples judged by the engine's loops."""
    c = openai.OpenAI(base_url=engine.url, api_key="x", max_retries=0)
    replies = ["No, that's wrong. Make it shorter: one line only.", "Thanks, that's perfect!"]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Write a haiku about rain."}]
    for i in range(3):
        done = {"X-Session-Done": "true"} if i == 2 else {}
        r = c.chat.completions.create(
            model="clawrl",
            messages=msgs,
            max_tokens=12,
            temperature=0,
            extra_headers={"X-Session-Id": SID, **done},
        )
        if i < 2:
            msgs = [
                *msgs,
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": replies[i]},
            ]
    store = engine.engine.store

    def all_done() -> Any:
        samples = store.samples_for_session(SID)
        return samples if len(samples) == 3 and all(s.state != "pending" for s in samples) else None

    samples = wait_for(all_done)
    return {"store": store, "samples": samples, "turns": store.turns_for_session(SID)}


def test_three_turns_end_with_judged_samples(judged: dict[str, Any]) -> None:
    store, (s0, s1, s2) = judged["store"], judged["samples"]
    j0, j1 = store.get_judgment(s0.id), store.get_judgment(s1.id)
    assert j0.score == -1 and j1.score == 1  # correction -> -1, thanks -> +1
    for j in (j0, j1):
        assert j.score in (-1, 0, 1) and j.votes and j.backend == "heuristic"
    assert s0.next_state_role == "user" and "one line" in s0.next_state_text
    # the closed session's last turn has no next state: kept, but not trainable
    assert (
        s2.state == "skipped" and s2.next_state_role is None and store.get_judgment(s2.id) is None
    )
    assert j0.hint and "one line" in j0.hint and j0.hint_rule


def test_teacher_logprobs_equal_a_direct_forward_pass(
    judged: dict[str, Any], loaded_model: tuple[Any, Any]
) -> None:
    store, s0, turn = judged["store"], judged["samples"][0], judged["turns"][0]
    j0 = store.get_judgment(s0.id)
    assert j0.teacher_logprobs is not None
    assert len(j0.teacher_logprobs) == len(turn.response_ids)
    model, tok = loaded_model
    prompt = ChatFormatter(tok).render(teacher_messages(turn.request["messages"], j0.hint))
    assert prompt != turn.prompt_ids  # the hint changed the prompt, not the response ids
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + turn.response_ids])).logits[0]
    start = len(prompt) - 1
    direct = continuation_logprobs(
        logits[start : start + len(turn.response_ids)], turn.response_ids
    )
    assert j0.teacher_logprobs == pytest.approx(direct, abs=1e-4)


def test_feedback_overrides_the_judge(judged: dict[str, Any], engine: Any) -> None:
    store, s1 = judged["store"], judged["samples"][1]
    r = httpx.post(
        f"{engine.url}/feedback",
        timeout=60,
        json={"session_id": SID, "turn": 1, "rating": -1, "hint": "Use exactly one line."},
    )
    assert r.status_code == 200, r.text
    assert r.json()["reward"] == -1 and r.json()["teacher_logprobs"] is True
    j1 = store.get_judgment(s1.id)
    assert j1.score == -1 and j1.user_rating == -1 and j1.judge_score == 1
    assert j1.user_hint == "Use exactly one line." and j1.teacher_logprobs
    agreement = [m for m in store.metrics("judge/agreement") if m.step == s1.id]
    assert agreement and agreement[-1].value == 0.0


def test_a_rating_without_hint_still_learns_the_replys_correction(engine: Any) -> None:
    """The rated user (bench brevity/rated): +1 posted before the reply, then a correction
    in words. The rating stays the reward; the judge still reads the reply for its hint."""
    sid = "judge-e2e-rated"
    c = openai.OpenAI(base_url=engine.url, api_key="x", max_retries=0)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Describe the sea."}]
    r = c.chat.completions.create(
        model="clawrl", messages=msgs, max_tokens=12, temperature=0,
        extra_headers={"X-Session-Id": sid},
    )  # fmt: skip
    rated = httpx.post(
        f"{engine.url}/feedback", json={"session_id": sid, "turn": -1, "rating": 1}, timeout=60
    )
    assert rated.status_code == 200, rated.text
    msgs += [
        {"role": "assistant", "content": r.choices[0].message.content},
        {"role": "user", "content": "No, that's wrong. Make it shorter: one line only."},
    ]
    c.chat.completions.create(
        model="clawrl", messages=msgs, max_tokens=4, temperature=0,
        extra_headers={"X-Session-Id": sid, "X-Session-Done": "true"},
    )  # fmt: skip
    store = engine.engine.store

    def judged_by_judge() -> Any:
        first = store.samples_for_session(sid)[0]
        j = store.get_judgment(first.id)
        return j if j is not None and j.judge_score is not None else None

    j = wait_for(judged_by_judge)
    assert (j.score, j.user_rating, j.judge_score) == (1, 1, -1)
    assert j.hint and "one line" in j.hint and j.teacher_logprobs
    assert store.get_sample(j.sample_id).state == "judged"
    # the metric is written just after the judgment (its own commit): wait for it too
    agreement = wait_for(
        lambda: [m for m in store.metrics("judge/agreement") if m.step == j.sample_id]
    )
    assert agreement[-1].value == 0.0


@pytest.mark.parametrize(
    "body,status",
    [
        ({"session_id": "nope", "turn": 0, "rating": 1}, 404),
        ({"session_id": SID, "turn": 0, "rating": 2}, 400),
        ({"session_id": SID, "turn": 0, "rating": True}, 400),
        ({"session_id": SID, "turn": 99, "rating": 1}, 404),
        ({"session_id": SID, "turn": "first", "rating": 1}, 400),
        ({"rating": 1}, 400),
        ({"session_id": SID, "rating": 1, "hint": ""}, 400),
    ],
)
def test_feedback_errors(
    judged: dict[str, Any], engine: Any, body: dict[str, Any], status: int
) -> None:
    r = httpx.post(f"{engine.url}/feedback", json=body, timeout=30)
    assert r.status_code == status and r.json()["error"]["message"]


def test_engine_rate_turn_command(judged: dict[str, Any], engine: Any) -> None:
    """The store API the TUI calls: rating the last main turn (-1 = last)."""
    row = engine.call(engine.engine.rate_turn(SID, -1, 1))
    assert row.user_rating == 1 and row.score == 1
    assert judged["store"].get_sample(row.sample_id).state == "judged"


def test_loops_report_status_through_the_event_stream(
    judged: dict[str, Any], engine: Any, engine_events: list[Any]
) -> None:
    from clawrl_app.engine.core.events import StatusReported

    def caught_up(status: dict[str, Any]) -> bool:
        # a snapshot is taken every 2 s: the newest may predate the fixture's last sample
        return bool(status["judging"]["judged"] >= 2 and status["counts"]["samples"] >= 3)

    snap = wait_for(
        lambda: next(
            (
                e.status
                for e in reversed(engine_events)
                if isinstance(e, StatusReported) and caught_up(e.status)
            ),
            None,
        ),
        timeout=15,
    )
    assert "queue_depth" in snap["judging"] and "last_error" in snap["judging"]
    assert "queue_depth" in snap["collection"]
    stored = {e.kind for e in engine.engine.store.events_since(0, limit=5000)}
    assert "SampleJudged" in stored and "StatusReported" not in stored  # snapshots are not kept
