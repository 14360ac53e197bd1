"""Session inference and main/side classification (pure: no server, no model)."""

from __future__ import annotations

from typing import Any

import pytest

from clawrl_app.engine.serving.sessions import (
    SessionMeta,
    SessionTracker,
    conversation_key,
    is_truthy,
    pop_session_fields,
)

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOLS_META = SessionMeta(has_tools=True)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: Any, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = calls
    return msg


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def first_turn(
    tracker: SessionTracker, messages: list[dict[str, Any]], answer: dict[str, Any]
) -> str:
    """Decide a fresh request, remember it with its answer, return its session id."""
    decision = tracker.decide(messages, SessionMeta())
    tracker.remember(decision.session_id, messages, answer)
    return decision.session_id


# --- body fallbacks and truthiness ------------------------------------------------------


def test_pop_session_fields_strips_body_keys() -> None:
    body = {
        "model": "clawrl",
        "messages": [],
        "session_id": "abc",
        "turn_type": "side",
        "session_done": "yes",
    }
    assert pop_session_fields(body) == ("abc", "side", True)
    assert body == {"model": "clawrl", "messages": []}


def test_pop_session_fields_absent_or_empty() -> None:
    body = {"model": "clawrl", "session_id": "", "turn_type": None}
    assert pop_session_fields(body) == (None, None, False)
    assert body == {"model": "clawrl"}
    assert pop_session_fields({}) == (None, None, False)


def test_pop_session_fields_stringifies_ids() -> None:
    assert pop_session_fields({"session_id": 42}) == ("42", None, False)


@pytest.mark.parametrize(
    "value", ["1", "true", "TRUE", "True", "yes", "YeS", "on", " on ", True, 1]
)
def test_is_truthy(value: Any) -> None:
    assert is_truthy(value)


@pytest.mark.parametrize("value", [None, "", "0", "false", "no", "off", "2", "y", "done", False, 0])
def test_is_falsy(value: Any) -> None:
    assert not is_truthy(value)


# --- explicit metadata --------------------------------------------------------------------


def test_explicit_session_id_wins() -> None:
    tracker = SessionTracker()
    messages = [user("hi")]
    sid = first_turn(tracker, messages, assistant("hello"))
    # Even a request that extends a remembered session goes where the header says.
    d = tracker.decide(
        [*messages, assistant("hello"), user("more")], SessionMeta(session_id="mine")
    )
    assert (d.session_id, d.source, d.inferred, d.turn_type) == ("mine", "header", False, "main")
    assert d.session_id != sid


def test_explicit_session_done_and_source_hint() -> None:
    d = SessionTracker().decide(
        [user("hi")], SessionMeta(session_id="x", done=True, source_hint="tui")
    )
    assert d.done is True
    assert d.source == "tui"


# --- inference: continuation --------------------------------------------------------------


def test_extension_with_answer_continues_session() -> None:
    tracker = SessionTracker()
    m1 = [SYSTEM, user("What is 2+2?")]
    sid = first_turn(tracker, m1, assistant("4"))
    d = tracker.decide([*m1, assistant("4"), user("And 3+3?")], SessionMeta())
    assert d.session_id == sid
    assert d.inferred is True
    assert d.source == "api"
    assert d.turn_type == "main"


def test_three_turn_chain_stays_in_one_session() -> None:
    tracker = SessionTracker()
    m1 = [user("a")]
    sid = first_turn(tracker, m1, assistant("A"))
    m2 = [*m1, assistant("A"), user("b")]
    d2 = tracker.decide(m2, SessionMeta())
    tracker.remember(d2.session_id, m2, assistant("B"))
    d3 = tracker.decide([*m2, assistant("B"), user("c")], SessionMeta())
    assert d2.session_id == d3.session_id == sid


def test_new_conversation_is_never_merged() -> None:
    tracker = SessionTracker()
    sid = first_turn(tracker, [user("What is 2+2?")], assistant("4"))
    d = tracker.decide([user("Tell me a joke")], SessionMeta())
    assert d.session_id != sid
    assert d.session_id.startswith("s-")


def test_different_first_messages_give_different_sessions() -> None:
    tracker = SessionTracker()
    a = tracker.decide([user("hello")], SessionMeta())
    b = tracker.decide([user("hello there")], SessionMeta())
    c = tracker.decide([user("hello")], SessionMeta())  # not remembered: no merge either
    assert len({a.session_id, b.session_id, c.session_id}) == 3


def test_answer_must_match_what_we_answered() -> None:
    tracker = SessionTracker()
    m1 = [user("q")]
    sid = first_turn(tracker, m1, assistant("the answer"))
    d = tracker.decide([*m1, assistant("an edited answer"), user("next")], SessionMeta())
    assert d.session_id != sid


def test_extension_must_be_user_or_tool_messages_only() -> None:
    tracker = SessionTracker()
    m1 = [user("q")]
    sid = first_turn(tracker, m1, assistant("A"))
    base = [*m1, assistant("A")]
    for extra in (
        [assistant("invented"), user("next")],
        [{"role": "system", "content": "new rules"}, user("next")],
    ):
        d = tracker.decide([*base, *extra], SessionMeta())
        assert d.session_id != sid, extra
    # the plain extension does continue (control)
    assert tracker.decide([*base, user("next")], SessionMeta()).session_id == sid


def test_parallel_tool_results_continue_session() -> None:
    tracker = SessionTracker()
    m1 = [SYSTEM, user("weather in Paris and Rome?")]
    answer = assistant(
        None,
        [
            call("call_1", "weather", '{"city": "Paris"}'),
            call("call_2", "weather", '{"city": "Rome"}'),
        ],
    )
    d1 = tracker.decide(m1, TOOLS_META)
    tracker.remember(d1.session_id, m1, answer)
    m2 = [*m1, answer, tool("call_1", "sunny"), tool("call_2", "rain")]
    d2 = tracker.decide(m2, TOOLS_META)
    assert d2.session_id == d1.session_id
    assert d2.turn_type == "main"


def test_closed_session_is_not_continued() -> None:
    tracker = SessionTracker()
    m1 = [user("q")]
    sid = first_turn(tracker, m1, assistant("A"))
    tracker.close(sid)
    d = tracker.decide([*m1, assistant("A"), user("next")], SessionMeta())
    assert d.session_id != sid


# --- canonicalization ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        # assistant content None (what we return with tool calls) vs "" (what SDKs send back)
        (
            assistant(None, [call("call_abc", "f", '{"x": 1}')]),
            assistant("", [call("call_abc", "f", '{"x": 1}')]),
        ),
        # tool call ids rewritten, argument JSON re-serialized without spaces
        (
            assistant(None, [call("call_abc", "f", '{"x": 1, "y": [1, 2]}')]),
            assistant(None, [call("toolu_01XYZ", "f", '{"y":[1,2],"x":1}')]),
        ),
        # content parts vs plain string
        (assistant("hello world"), assistant([{"type": "text", "text": "hello world"}])),
        # surrounding whitespace
        (assistant("hello"), assistant("hello\n")),
    ],
    ids=["none-vs-empty", "ids-and-json-spacing", "parts-vs-string", "whitespace"],
)
def test_canonicalization_still_matches(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    tracker = SessionTracker()
    m1 = [user("q")]
    d1 = tracker.decide(m1, SessionMeta())
    tracker.remember(d1.session_id, m1, ours)
    follow = tool("whatever", "result") if theirs.get("tool_calls") else user("next")
    d2 = tracker.decide([*m1, theirs, follow], SessionMeta())
    assert d2.session_id == d1.session_id


def test_user_content_parts_match_string() -> None:
    as_parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert conversation_key(as_parts) == conversation_key([user("hi")])


def test_developer_and_system_are_equivalent() -> None:
    dev = [{"role": "developer", "content": "rules"}, user("hi")]
    sys_ = [{"role": "system", "content": "rules"}, user("hi")]
    assert conversation_key(dev) == conversation_key(sys_)


def test_canonicalization_keeps_real_differences() -> None:
    base = [user("q"), assistant(None, [call("c", "f", '{"x": 1}')])]
    other_args = [user("q"), assistant(None, [call("c", "f", '{"x": 2}')])]
    other_name = [user("q"), assistant(None, [call("c", "g", '{"x": 1}')])]
    keys = {conversation_key(base), conversation_key(other_args), conversation_key(other_name)}
    assert len(keys) == 3


# --- side turns ---------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_probe_is_side(max_tokens: int) -> None:
    d = SessionTracker().decide([user("hi")], SessionMeta(max_tokens=max_tokens, has_tools=True))
    assert d.turn_type == "side"


def test_two_tokens_is_not_a_probe() -> None:
    assert SessionTracker().decide([user("hi")], SessionMeta(max_tokens=2)).turn_type == "main"


@pytest.mark.parametrize(
    "prompt",
    [
        "Generate a short title for this conversation: how do I bake bread?",
        "Write a concise title for the following chat.",
        "Summarize this conversation in one line.",
    ],
)
def test_title_generation_is_side(prompt: str) -> None:
    assert SessionTracker().decide([user(prompt)], SessionMeta()).turn_type == "side"


def test_title_prompt_with_tools_is_main() -> None:
    prompt = "Generate a short title for this conversation"
    assert SessionTracker().decide([user(prompt)], TOOLS_META).turn_type == "main"


def test_title_words_later_in_a_conversation_are_main() -> None:
    messages = [user("hi"), assistant("hello"), user("Generate a short title for my essay")]
    assert SessionTracker().decide(messages, SessionMeta()).turn_type == "main"


def test_normal_single_user_message_is_main() -> None:
    d = SessionTracker().decide([SYSTEM, user("How do I reverse a list in Python?")], SessionMeta())
    assert d.turn_type == "main"


@pytest.mark.parametrize(
    ("header", "expected"),
    [("side", "side"), ("judge", "side"), ("main", "main"), ("MAIN", "main")],
)
def test_turn_type_header(header: str, expected: str) -> None:
    d = SessionTracker().decide([user("How do I reverse a list?")], SessionMeta(turn_type=header))
    assert d.turn_type == expected


def test_turn_type_main_header_overrides_utility_heuristic() -> None:
    d = SessionTracker().decide([user("Generate a short title")], SessionMeta(turn_type="main"))
    assert d.turn_type == "main"


# --- OpenClaw runtime line ----------------------------------------------------------------


def openclaw_system(session: str) -> dict[str, Any]:
    return {
        "role": "system",
        "content": f"You are OpenClaw.\n## Runtime\nRuntime: agent=main | sessionId={session} | model=clawrl",
    }


def test_openclaw_session_id_from_runtime_line() -> None:
    tracker = SessionTracker()
    d = tracker.decide([openclaw_system("a1b2c3d4"), user("hi")], TOOLS_META)
    assert d.session_id == "openclaw-a1b2c3d4"
    assert d.source == "openclaw"
    assert d.inferred is True


def test_openclaw_continuation_keeps_source() -> None:
    tracker = SessionTracker()
    m1 = [openclaw_system("a1b2c3d4"), user("hi")]
    d1 = tracker.decide(m1, TOOLS_META)
    tracker.remember(d1.session_id, m1, assistant("hello"))
    d2 = tracker.decide([*m1, assistant("hello"), user("next")], TOOLS_META)
    assert (d2.session_id, d2.source) == ("openclaw-a1b2c3d4", "openclaw")


def test_closed_openclaw_session_gets_a_new_id() -> None:
    tracker = SessionTracker()
    tracker.close("openclaw-a1b2c3d4")
    d = tracker.decide([openclaw_system("a1b2c3d4"), user("hi")], TOOLS_META)
    assert d.session_id != "openclaw-a1b2c3d4"


# --- capacity -----------------------------------------------------------------------------


def test_capacity_evicts_oldest() -> None:
    tracker = SessionTracker(capacity=2)
    convs = [[user(f"question {i}")] for i in range(3)]
    sids = [first_turn(tracker, m, assistant(f"answer {i}")) for i, m in enumerate(convs)]

    def follow(i: int) -> str:
        m = [*convs[i], assistant(f"answer {i}"), user("more")]
        return tracker.decide(m, SessionMeta()).session_id

    assert follow(0) != sids[0]  # evicted
    assert follow(1) == sids[1]
    assert follow(2) == sids[2]
