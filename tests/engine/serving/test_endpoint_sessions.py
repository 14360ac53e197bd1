"""Sessions through the real endpoint: OpenClaw-style replays, headers, side turns, done."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow

SYSTEM = "You are a helpful agent running inside OpenClaw. " * 20


def ask(engine: Any, messages: list[dict[str, Any]], **kw: Any) -> Any:
    c = openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0)
    args: dict[str, Any] = {"max_tokens": 8, "temperature": 0, **kw}
    return c.chat.completions.create(model="clawrl", messages=messages, **args)


def ask_streaming(engine: Any, messages: list[dict[str, Any]]) -> str:
    c = openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0)
    stream = c.chat.completions.create(
        model="clawrl",
        messages=messages,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)


def store(engine: Any) -> Any:
    return engine.engine.store


def session_of_last_turn(engine: Any, text: str) -> str:
    """The session whose last user message is `text`."""
    for sess in store(engine).list_sessions(limit=200):
        for t in store(engine).turns_for_session(sess.id):
            if t.request["messages"][-1].get("content") == text:
                return str(sess.id)
    raise AssertionError(f"no turn for {text!r}")


def test_headerless_growing_conversation_is_one_session(engine: Any) -> None:
    """The way OpenClaw sends: no headers, full history resent, our answer echoed back exactly."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "[Sun 2026-11-22 10:00] Plan my day."},
    ]
    other = [{"role": "user", "content": "Unrelated: what is a river?"}]
    for i in range(3):
        # OpenClaw streams; one plain request in the middle shows both paths link up
        text = (
            ask(engine, msgs).choices[0].message.content if i == 1 else ask_streaming(engine, msgs)
        )
        answer = {"role": "assistant", "content": text}
        ask(engine, other)  # unrelated traffic interleaved: must not join the session
        msgs = [
            *msgs,
            answer,
            {"role": "user", "content": f"[Sun 2026-11-22 10:0{i + 1}] Next step {i}."},
        ]
    ask(engine, msgs)
    sid = session_of_last_turn(engine, msgs[-1]["content"])
    turns = store(engine).turns_for_session(sid)
    assert [t.idx for t in turns] == [0, 1, 2, 3]
    assert all(t.type == "main" for t in turns)
    assert session_of_last_turn(engine, other[0]["content"]) != sid


def test_header_session_id_is_kept_and_done_closes(engine: Any) -> None:
    c = openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0)
    for i in range(2):
        c.chat.completions.create(
            model="clawrl",
            max_tokens=4,
            messages=[{"role": "user", "content": f"hello {i}"}],
            extra_headers={"X-Session-Id": "my-session-42", "X-Turn-Type": "main"},
        )
    c.chat.completions.create(
        model="clawrl",
        max_tokens=4,
        messages=[{"role": "user", "content": "heartbeat"}],
        extra_headers={"X-Session-Id": "my-session-42", "X-Turn-Type": "heartbeat"},
    )
    c.chat.completions.create(
        model="clawrl",
        max_tokens=4,
        messages=[{"role": "user", "content": "bye"}],
        extra_headers={"X-Session-Id": "my-session-42", "X-Session-Done": "true"},
    )
    sess = store(engine).get_session("my-session-42")
    assert sess is not None and sess.source == "header"
    types = [t.type for t in store(engine).turns_for_session("my-session-42")]
    assert types == ["main", "main", "side", "main"]
    assert sess.close_reason == "done"


def test_body_fallbacks_are_stripped(engine: Any) -> None:
    r = httpx.post(
        f"{engine.url}/chat/completions",
        timeout=60,
        json={
            "model": "clawrl",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "body meta"}],
            "session_id": "body-sess",
            "turn_type": "main",
            "session_done": "yes",
        },
    )
    assert r.status_code == 200
    (turn,) = store(engine).turns_for_session("body-sess")
    assert "session_id" not in turn.request and turn.type == "main"
    assert store(engine).get_session("body-sess").close_reason == "done"


def test_probe_and_title_requests_are_side_turns(engine: Any) -> None:
    ask(engine, [{"role": "user", "content": "ping"}], max_tokens=1)
    ask(engine, [{"role": "user", "content": "Generate a short title for this conversation: cats"}])
    assert store(engine).turns_for_session(session_of_last_turn(engine, "ping"))[0].type == "side"
    title = session_of_last_turn(engine, "Generate a short title for this conversation: cats")
    assert store(engine).turns_for_session(title)[0].type == "side"
