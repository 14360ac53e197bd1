"""Endpoint edges: auth, overload (429), tool calls, and a fuzz of malformed bodies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawrl_app.engine.admin.routes import engine_routers
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.serving.api import create_app
from clawrl_app.engine.serving.chat_service import ChatService
from clawrl_app.engine.serving.http_server import HttpServer, bind_socket
from clawrl_app.engine.store import Store
from tests.scripted_backend import ScriptedBackend

pytestmark = pytest.mark.slow


def serve_extra(engine: Any, app: Any) -> HttpServer:
    """Serve another app on the engine's event loop, on a free loopback port."""
    server = HttpServer(app, bind_socket("127.0.0.1", 0))
    engine.call(server.start())
    return server


def extra_service(engine: Any, backend: Any, tmp_path: Path) -> ChatService:
    tok = engine.engine.service.formatter.tokenizer
    return ChatService(backend, ChatFormatter(tok), Store(tmp_path / "extra.sqlite3"))


def test_api_key_required_when_configured(engine: Any, tmp_path: Path) -> None:
    app = create_app(
        engine.engine.service,
        api_key="sk-test-123",
        routers=engine_routers(engine.engine, 8 * 1024 * 1024),
    )
    server = serve_extra(engine, app)
    url = f"http://127.0.0.1:{server.port}"
    try:
        bad = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        assert httpx.post(f"{url}/v1/chat/completions", json={}).status_code == 401
        assert httpx.get(f"{url}/healthz").status_code == 200  # liveness needs no key
        good = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test-123", max_retries=0)
        assert good.models.list().data[0].id == "clawrl"
        # the admin routes behind `clawrl-app tui --attach` need the same key
        key = {"Authorization": "Bearer sk-test-123"}
        for path in ("/admin/status", "/admin/sessions", "/admin/checkpoints"):
            assert httpx.get(f"{url}{path}").status_code == 401
            assert (
                httpx.get(f"{url}{path}", headers={"Authorization": "Bearer no"}).status_code == 401
            )
            assert httpx.get(f"{url}{path}", headers=key).status_code == 200
        denied = httpx.post(f"{url}/admin/rollback", json={"version": "base"})
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
    finally:
        engine.call(server.stop())


def test_full_queue_answers_429_with_retry_after(engine: Any, tmp_path: Path) -> None:
    tok = engine.engine.service.formatter.tokenizer
    model = engine.engine.backend._model
    backend = TorchBackend(
        model, tok, model_name="busy", context_length=8192, max_batch=1, max_queue=1
    )
    engine.call(backend.start())
    server = serve_extra(engine, create_app(extra_service(engine, backend, tmp_path)))
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    body = {
        "model": "clawrl",
        "max_tokens": 60,
        "messages": [{"role": "user", "content": "Tell a story."}],
    }

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as c:
            return await asyncio.gather(*[c.post(url, json=body) for _ in range(4)])

    try:
        responses = asyncio.run(burst())
        codes = sorted(r.status_code for r in responses)
        assert 200 in codes and 429 in codes, codes
        busy = next(r for r in responses if r.status_code == 429)
        assert busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["code"] == "overloaded"
    finally:
        engine.call(server.stop())
        engine.call(backend.stop())


def test_tool_calls_are_parsed_streamed_and_continue_the_session(
    engine: Any, tmp_path: Path
) -> None:
    """Contract test with a scripted backend: the 135M model never emits <tool_call> blocks,
    so its answers are scripted (tokenized by the real tokenizer); server, client and store are real."""
    tok = engine.engine.service.formatter.tokenizer
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    backend = ScriptedBackend(
        tok,
        [f"Let me check. {call}", call, "It is 18C in Paris."],
        eos_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )
    service = extra_service(engine, backend, tmp_path)
    server = serve_extra(engine, create_app(service))
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x", max_retries=0)
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    try:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
        r = c.chat.completions.create(model="clawrl", messages=msgs, tools=tools)
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls"
        assert m.content == "Let me check."
        assert m.tool_calls[0].function.name == "get_weather"
        assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris"}
        # streaming: content never leaks the <tool_call> markup; the call arrives as a delta
        chunks = list(
            c.chat.completions.create(model="clawrl", messages=msgs, tools=tools, stream=True)
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert "<tool_call" not in text
        deltas = [
            tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])
        ]
        assert deltas[0].function.name == "get_weather"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        # the client sends our tool call back with the tool's result: same session
        msgs = [
            *msgs,
            m.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "18C"},
        ]
        c.chat.completions.create(model="clawrl", messages=msgs, tools=tools)
        sessions = service.store.list_sessions()
        first = next(s for s in sessions if len(service.store.turns_for_session(s.id)) == 2)
        turns = service.store.turns_for_session(first.id)
        assert turns[1].request["messages"][-1]["role"] == "tool"
        assert turns[0].response["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    finally:
        engine.call(server.stop())
        service.store.close()


def test_a_seed_the_backend_cannot_honour_is_said_so_in_a_header(
    engine: Any, tmp_path: Path
) -> None:
    """Contract test with a scripted backend standing in for SGLang without deterministic
    inference (it needs a GPU): a request's seed is then ignored, and the answer says so in
    X-Clawrl-Seed, streamed or not; no header without a seed, and none from the embedded
    backend, whose seeds repeat. Server, client and store are real."""
    tok = engine.engine.service.formatter.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    backend = ScriptedBackend(tok, ["One.", "Two.", "Three."], eos_id=eos, seeded=False)
    service = extra_service(engine, backend, tmp_path)
    server = serve_extra(engine, create_app(service))
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    msgs = [{"role": "user", "content": "Count."}]
    try:
        seeded = httpx.post(url, json={"model": "clawrl", "messages": msgs, "seed": 7}, timeout=60)
        assert seeded.status_code == 200
        assert seeded.headers["x-clawrl-seed"].startswith("ignored")
        assert "hardware.sglang_deterministic" in seeded.headers["x-clawrl-seed"]
        body = {"model": "clawrl", "messages": msgs, "seed": 7, "stream": True}
        with httpx.stream("POST", url, json=body, timeout=60) as streamed:
            assert streamed.headers["x-clawrl-seed"].startswith("ignored")
            streamed.read()
        plain = httpx.post(url, json={"model": "clawrl", "messages": msgs}, timeout=60)
        assert plain.status_code == 200 and "x-clawrl-seed" not in plain.headers
    finally:
        engine.call(server.stop())
        service.store.close()
    own = httpx.post(
        f"{engine.url}/chat/completions",
        json={"model": "clawrl", "messages": msgs, "seed": 7, "max_tokens": 2},
        timeout=120,
    )
    assert own.status_code == 200 and "x-clawrl-seed" not in own.headers


VALID = {"model": "clawrl", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
BAD_VALUES: dict[str, list[Any]] = {
    "model": [None, 3, ["clawrl"], {"id": "clawrl"}, "no-such-model"],
    "messages": [
        None,
        "hi",
        [],
        [3],
        [{"role": "wizard", "content": "x"}],
        [{"content": "x"}],
        [{"role": "user", "content": 5}],
        [{"role": "user", "content": {"text": "x"}}],
    ],
    "max_tokens": [0, -3, "many", 1.5, [1]],
    "max_completion_tokens": [0, "x"],
    "temperature": [-1, 2.5, "hot", [0.1]],
    "top_p": [0, 1.5, "x"],
    "n": [0, 2, 10],
    "stop": [3, ["a", "b", "c", "d", "e"], [None]],
    "tools": ["x", [1], [{"type": "function"}], [{"function": {}}], [{"function": {"name": ""}}]],
    "stream": ["maybe", [True], {"a": 1}],
    "top_logprobs": [-1, 21],
    "stream_options": ["x", 3],
}


@st.composite
def malformed_body(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["field", "raw", "json"]))
    if kind == "raw":
        raw = draw(st.binary(max_size=200))
        try:
            value = json.loads(raw)
        except ValueError:
            return bytes(raw)
        return json.dumps([value]).encode()  # valid JSON but not an object
    if kind == "json":
        return json.dumps(
            draw(
                st.one_of(
                    st.none(),
                    st.integers(),
                    st.text(max_size=20),
                    st.lists(st.integers(), max_size=3),
                )
            )
        ).encode()
    body = dict(VALID)
    for key in draw(
        st.lists(st.sampled_from(sorted(BAD_VALUES)), min_size=1, max_size=3, unique=True)
    ):
        body[key] = draw(st.sampled_from(BAD_VALUES[key]))
    if draw(st.booleans()):
        body[draw(st.text(min_size=1, max_size=8))] = draw(
            st.text(max_size=8)
        )  # unknown extras are ignored
    return json.dumps(body).encode()


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=malformed_body())
def test_fuzzed_malformed_bodies_get_only_4xx(engine: Any, body: bytes) -> None:
    r = httpx.post(
        f"{engine.url}/chat/completions",
        content=body,
        timeout=60,
        headers={"content-type": "application/json"},
    )
    assert 400 <= r.status_code < 500, (r.status_code, body, r.text)
    assert r.json()["error"]["message"]


def test_server_healthy_after_fuzz(engine: Any) -> None:
    assert httpx.get(f"{engine.base}/healthz").status_code == 200
    r = openai.OpenAI(base_url=engine.url, api_key="x", max_retries=0).chat.completions.create(
        model="clawrl", max_tokens=3, messages=[{"role": "user", "content": "still there?"}]
    )
    assert r.choices[0].message.content is not None
