"""Forced tool calls through the real endpoint, the real embedded model and the openai client.

`tool_choice` naming a function or `"required"` must answer with exactly one call to an
allowed tool whose arguments validate against the tool's schema (constrained decoding);
`"auto"` stays free. Several schemas (string, integer with bounds, enum, nested object,
array, required fields, no arguments) and prompts, streaming and not, a call cut off by
`max_tokens`, and an unknown function name.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest

from tests.schema_check import errors

pytestmark = pytest.mark.slow

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Weather forecast for a city",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit"],
    },
}
EVENT: dict[str, Any] = {
    "name": "create_event",
    "description": "Put a meeting in the calendar",
    "parameters": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 30},
            "when": {
                "type": "object",
                "properties": {
                    "date": {"type": "string", "maxLength": 12},
                    "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                },
                "required": ["date", "hour"],
            },
            "attendees": {
                "type": "array",
                "items": {"type": "string", "maxLength": 16},
                "maxItems": 3,
            },
        },
        "required": ["title", "when"],
    },
}
VOLUME: dict[str, Any] = {
    "name": "set_volume",
    "description": "Set the speaker volume",
    "parameters": {
        "type": "object",
        "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 10}},
        "required": ["level"],
    },
}
CLOCK: dict[str, Any] = {"name": "get_time", "description": "The current time"}
TOOLS = [{"type": "function", "function": f} for f in (WEATHER, EVENT, VOLUME, CLOCK)]
SCHEMAS: dict[str, dict[str, Any]] = {
    f["name"]: f.get("parameters", {"type": "object"}) for f in (WEATHER, EVENT, VOLUME)
}
SCHEMAS["get_time"] = {"type": "object", "properties": {}, "additionalProperties": False}
MAX_TOKENS = 96


def client(engine: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0)


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def ask(engine: Any, prompt: str, tool_choice: Any, session: str | None = None, **kw: Any) -> Any:
    return client(engine).chat.completions.create(
        model="clawrl",
        messages=[{"role": "user", "content": prompt}],
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice=tool_choice,
        max_tokens=kw.pop("max_tokens", MAX_TOKENS),
        temperature=kw.pop("temperature", 0),
        extra_headers={"X-Session-Id": session} if session else None,
        **kw,
    )


def assert_valid_call(name: str, arguments: str, allowed: list[str]) -> dict[str, Any]:
    """One call to an allowed tool whose arguments validate against its schema."""
    assert name in allowed
    args = json.loads(arguments)
    assert errors(args, SCHEMAS[name]) == [], (name, args)
    return dict(args)


def new_session() -> str:
    """A session of this test's own: the engine is shared, so "the newest session" may be
    another test's (the endpoint does not send the inferred session id back)."""
    return f"tool-choice-{uuid.uuid4().hex[:12]}"


def turn_of(engine: Any, session: str) -> Any:
    """The turn the request of `session` recorded."""
    (turn,) = engine.engine.store.turns_for_session(session)
    return turn


@pytest.mark.parametrize(
    ("prompt", "name"),
    [
        ("Will it rain in Lisbon this weekend?", "get_weather"),
        ("Book a team lunch with Ana and Bo on 2025-06-03 at noon.", "create_event"),
        ("Turn the music down a bit, please.", "set_volume"),
        ("What time is it?", "get_time"),
    ],
)
def test_a_named_function_is_always_called_with_valid_arguments(
    engine: Any, prompt: str, name: str
) -> None:
    sid = new_session()
    r = ask(engine, prompt, named(name), session=sid)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert_valid_call(call.function.name, call.function.arguments, [name])
    turn = turn_of(engine, sid)
    assert turn.redacted == 0  # nothing in it is personal: its token ids are kept
    prompt_text = engine.engine.service.formatter.tokenizer.decode(turn.prompt_ids)
    assert prompt_text.endswith("assistant\n<tool_call>")  # the opening is prompt, not sampled
    assert turn.finish_reason == "tool_calls" and turn.response_text.endswith("</tool_call>")
    assert len(turn.response_ids) == len(turn.logprobs) > 0
    assert all(lp <= 0 for lp in turn.logprobs)


@pytest.mark.parametrize(
    ("prompt", "temperature"),
    [("Is it cold in Oslo today?", 0.0), ("Schedule a review with Kim tomorrow at 9.", 0.7)],
)
def test_required_calls_one_of_the_tools(engine: Any, prompt: str, temperature: float) -> None:
    r = ask(engine, prompt, "required", temperature=temperature, seed=3)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert_valid_call(call.function.name, call.function.arguments, list(SCHEMAS))


@pytest.mark.parametrize("tool_choice", [named("get_weather"), "required"], ids=["named", "req"])
def test_streamed_forced_call_arrives_as_a_tool_call_delta(engine: Any, tool_choice: Any) -> None:
    stream: Any = client(engine).chat.completions.create(
        model="clawrl",
        messages=[{"role": "user", "content": "Forecast for Rome for the next 3 days?"}],
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice=tool_choice,
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
    )
    content, calls, finish = "", list[Any](), None
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        calls += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == ""
    (call,) = calls
    assert call.index == 0 and call.function is not None
    assert_valid_call(call.function.name or "", call.function.arguments or "", list(SCHEMAS))


def test_a_call_cut_off_by_max_tokens_is_length_without_a_call(engine: Any) -> None:
    sid = new_session()
    r = ask(
        engine, "Book a meeting with Ana on Friday at 10.", named("create_event"), sid, max_tokens=6
    )
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert not choice.message.tool_calls and not choice.message.content
    turn = turn_of(engine, sid)
    assert turn.finish_reason == "length" and len(turn.response_ids) == 6
    assert turn.response_text.startswith('<tool_call>{"name": "')


def test_an_unknown_function_name_is_an_openai_400(engine: Any) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        ask(engine, "Hi", named("launch_rockets"))
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == "tool_choice"
    assert "launch_rockets" in body["message"] and "get_weather" in body["message"]


def test_auto_stays_unconstrained(engine: Any) -> None:
    """Same tools, `auto`: no opening in the prompt, no grammar; here the model answers in
    text (a plain greeting), which a forced choice could never do."""
    sid = new_session()
    r = ask(engine, "Say hello to me in one short sentence.", "auto", sid, max_tokens=16)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    turn = turn_of(engine, sid)
    prompt_text = engine.engine.service.formatter.tokenizer.decode(turn.prompt_ids)
    assert prompt_text.endswith("<|im_start|>assistant\n")
    assert r.choices[0].message.content
