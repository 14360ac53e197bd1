"""The OpenAI-compatible endpoint against the real embedded model, with the official client."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow


def client(engine: Any, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0, **kw)


def turns_of(engine: Any, session_id: str) -> list[Any]:
    return list(engine.engine.store.turns_for_session(session_id))


def latest_session(engine: Any) -> Any:
    return engine.engine.store.list_sessions(limit=1)[0]


def test_sync_completion_is_recorded_with_sampled_ids(engine: Any) -> None:
    c = client(engine)
    r = c.chat.completions.create(
        model="clawrl",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12,
        temperature=0,
    )
    assert r.model == "clawrl-base"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage is not None and 0 < r.usage.completion_tokens <= 12
    sess = latest_session(engine)
    (turn,) = turns_of(engine, sess.id)
    assert turn.type == "main" and turn.policy_version == "base"
    assert len(turn.response_ids) == len(turn.logprobs) == r.usage.completion_tokens
    assert len(turn.prompt_ids) == r.usage.prompt_tokens
    assert all(lp <= 0 for lp in turn.logprobs)
    assert turn.request["messages"][0]["content"] == "What is the capital of France?"


def test_async_client_and_max_completion_tokens(engine: Any) -> None:
    async def go() -> Any:
        ac = openai.AsyncOpenAI(base_url=engine.url, api_key="unused", max_retries=0)
        return await asyncio.gather(
            *[
                ac.chat.completions.create(
                    model="clawrl",
                    messages=[{"role": "user", "content": q}],
                    max_completion_tokens=6,
                    temperature=0,
                )
                for q in ("Name a fruit.", "Name a color.")
            ]
        )

    results = asyncio.run(go())
    for r in results:
        assert r.usage.completion_tokens <= 6
        assert r.choices[0].message.content


def test_streaming_is_token_by_token_with_usage(engine: Any) -> None:
    c = client(engine)
    stream = c.chat.completions.create(
        model="clawrl",
        messages=[{"role": "user", "content": "Count from one to ten."}],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = [
        ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content
    ]
    assert len(content) >= 5, "one chunk per token, not one chunk after the whole answer"
    finals = [
        ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason
    ]
    assert finals in (["stop"], ["length"])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(ch.model == "clawrl-base" for ch in chunks)
    turn = turns_of(engine, latest_session(engine).id)[-1]
    assert turn.response_text.startswith("".join(content))
    assert len(turn.response_ids) == chunks[-1].usage.completion_tokens


def test_stream_chunks_arrive_before_the_answer_ends(engine: Any) -> None:
    """Real streaming: the first content chunk arrives well before the last one."""
    stamps = []
    with httpx.stream(
        "POST",
        f"{engine.url}/chat/completions",
        timeout=60,
        json={
            "model": "clawrl",
            "stream": True,
            "max_tokens": 20,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Write a sentence about the sea."}],
        },
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content": "' in line:
                stamps.append(time.monotonic())
    assert len(stamps) >= 5
    assert stamps[-1] - stamps[0] > 0.05


def test_logprobs_match_recorded_behaviour_logprobs(engine: Any) -> None:
    c = client(engine)
    r = c.chat.completions.create(
        model="clawrl",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    lps = r.choices[0].logprobs.content
    assert len(lps) == r.usage.completion_tokens
    assert all(len(t.top_logprobs) == 3 for t in lps)
    # greedy: the chosen token is the most likely one
    assert all(t.top_logprobs[0].logprob == pytest.approx(t.logprob) for t in lps)
    turn = turns_of(engine, latest_session(engine).id)[-1]
    assert [t.logprob for t in lps] == pytest.approx(turn.logprobs)


def test_tools_are_rendered_and_tool_messages_accepted(engine: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
    ]
    r = client(engine).chat.completions.create(
        model="clawrl",
        messages=messages,
        tools=tools,
        tool_choice="auto",
        max_tokens=10,
        temperature=0,
    )
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    turn = turns_of(engine, latest_session(engine).id)[-1]
    prompt = engine.engine.service.formatter.tokenizer.decode(turn.prompt_ids)
    assert "get_weather" in prompt and "18C and sunny" in prompt and "<tool_call>" in prompt


def test_multimodal_parts_and_developer_role(engine: Any) -> None:
    r = client(engine).chat.completions.create(
        model="clawrl",
        max_tokens=4,
        temperature=0,
        messages=[
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Describe"},
                    {"type": "image_url", "image_url": {"url": "data:,"}},
                ],
            },
        ],
    )
    assert r.choices[0].message.content is not None
    turn = turns_of(engine, latest_session(engine).id)[-1]
    prompt = engine.engine.service.formatter.tokenizer.decode(turn.prompt_ids)
    assert "system\nBe brief." in prompt and "Describe\n[image]" in prompt


def test_stop_sequence_truncates(engine: Any) -> None:
    c = client(engine)
    base = c.chat.completions.create(
        model="clawrl",
        max_tokens=20,
        temperature=0,
        messages=[{"role": "user", "content": "Count from one to ten."}],
    )
    text = base.choices[0].message.content
    assert text and len(text) > 4
    stop = text[2:4]
    r = c.chat.completions.create(
        model="clawrl",
        max_tokens=20,
        temperature=0,
        stop=[stop],
        messages=[{"role": "user", "content": "Count from one to ten."}],
    )
    assert r.choices[0].message.content == text[: text.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seed_makes_sampling_reproducible(engine: Any) -> None:
    c = client(engine)
    kw: dict[str, Any] = dict(
        model="clawrl",
        max_tokens=10,
        temperature=1.0,
        seed=7,
        messages=[{"role": "user", "content": "Tell me a story."}],
    )
    assert (
        c.chat.completions.create(**kw).choices[0].message.content
        == c.chat.completions.create(**kw).choices[0].message.content
    )


def test_models_lists_alias_first_and_unknown_model_is_404(engine: Any) -> None:
    c = client(engine)
    ids = [m.id for m in c.models.list().data]
    assert ids[0] == "clawrl" and "clawrl-base" in ids
    with pytest.raises(openai.NotFoundError) as exc:
        c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert exc.value.body["code"] == "model_not_found"  # type: ignore[index]
    r = c.chat.completions.create(
        model="clawrl-base", max_tokens=2, messages=[{"role": "user", "content": "hi"}]
    )
    assert r.model == "clawrl-base"


def test_health_and_ready(engine: Any) -> None:
    assert httpx.get(f"{engine.base}/healthz").json() == {"status": "ok"}
    r = httpx.get(f"{engine.base}/readyz")
    assert r.status_code == 200 and r.json()["ready"] is True


def test_context_length_exceeded(engine: Any) -> None:
    long = "word " * 9000
    with pytest.raises(openai.BadRequestError) as exc:
        client(engine).chat.completions.create(
            model="clawrl", messages=[{"role": "user", "content": long}]
        )
    body: Any = exc.value.body
    assert body["code"] == "context_length_exceeded"
    assert "8192" in body["message"]


@pytest.mark.parametrize(
    "body,status",
    [
        (b"{not json", 400),
        (b"[]", 400),
        (json.dumps({"model": "clawrl"}).encode(), 400),
        (json.dumps({"model": "clawrl", "messages": []}).encode(), 400),
        (
            json.dumps(
                {"model": "clawrl", "messages": [{"role": "wizard", "content": "x"}]}
            ).encode(),
            400,
        ),
        (
            json.dumps(
                {"model": "clawrl", "messages": [{"role": "user", "content": "x"}], "n": 3}
            ).encode(),
            400,
        ),
        (
            json.dumps(
                {
                    "model": "clawrl",
                    "messages": [{"role": "user", "content": "x"}],
                    "temperature": 9,
                }
            ).encode(),
            400,
        ),
        (
            json.dumps(
                {"model": "clawrl", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}
            ).encode(),
            400,
        ),
    ],
)
def test_malformed_requests_get_openai_shaped_400(engine: Any, body: bytes, status: int) -> None:
    r = httpx.post(
        f"{engine.url}/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == status
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]


def test_body_too_large_is_413(engine: Any) -> None:
    big = json.dumps(
        {"model": "clawrl", "messages": [{"role": "user", "content": "x" * (9 * 1024 * 1024)}]}
    )
    r = httpx.post(
        f"{engine.url}/chat/completions",
        content=big,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"


def test_client_disconnect_cancels_generation(engine: Any) -> None:
    backend = engine.engine.backend
    with httpx.stream(
        "POST",
        f"{engine.url}/chat/completions",
        timeout=60,
        json={
            "model": "clawrl",
            "stream": True,
            "max_tokens": 400,
            "temperature": 1.0,
            "messages": [{"role": "user", "content": "Write a very long essay about rivers."}],
        },
    ) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 6:
                break
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum(backend._inflight.values()) > 0:
        time.sleep(0.05)
    assert sum(backend._inflight.values()) == 0, "generation kept running after the client left"
