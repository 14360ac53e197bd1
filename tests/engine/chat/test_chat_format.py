"""Prompt rendering, answer parsing and safe streaming with the embedded model's tokenizer.

Only the tokenizer is loaded (no weights): SmolLM2's ChatML template has no tool support,
so tools are inlined into the system prompt and tool calls travel as `<tool_call>` text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from transformers import AutoTokenizer

from clawrl_app.engine.chat.formatter import ChatFormatter, IncrementalText, parse_answer
from clawrl_app.models import ResolvedModel

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def tokenizer(embedded_model: ResolvedModel) -> Any:
    return AutoTokenizer.from_pretrained(str(embedded_model.path), local_files_only=True)


@pytest.fixture(scope="module")
def fmt(tokenizer: Any) -> ChatFormatter:
    return ChatFormatter(tokenizer)


def rendered(fmt: ChatFormatter, messages: list[dict[str, Any]], **kw: Any) -> str:
    return str(fmt.tokenizer.decode(fmt.render(messages, **kw)))


def stream(
    fmt: ChatFormatter,
    text: str,
    stop: Sequence[str] = (),
    tools: bool = False,
) -> tuple[list[str], str, IncrementalText]:
    """Push `text`'s tokens one by one, as the service does; return (deltas, finish(), state)."""
    ids = fmt.tokenizer(text, add_special_tokens=False)["input_ids"]
    inc = IncrementalText(fmt, list(stop), tools)
    deltas = []
    for token_id in ids:
        deltas.append(inc.push(token_id))
        if inc.stopped:
            break
    return deltas, inc.finish(), inc


# --- parse_answer -------------------------------------------------------------------------


def test_parse_single_tool_call() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    ans = parse_answer(text, tools_offered=True)
    assert ans.content == ""
    assert len(ans.tool_calls) == 1
    tc = ans.tool_calls[0]
    assert tc["type"] == "function"
    assert tc["id"].startswith("call_")
    assert tc["function"]["name"] == "get_weather"
    assert isinstance(tc["function"]["arguments"], str)
    assert json.loads(tc["function"]["arguments"]) == {"city": "Paris"}
    msg = ans.message()
    assert (
        msg["role"] == "assistant"
        and msg["content"] is None
        and msg["tool_calls"] == ans.tool_calls
    )


def test_parse_multiple_tool_calls_with_preamble() -> None:
    text = (
        "Let me check both.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    )
    ans = parse_answer(text, tools_offered=True)
    assert ans.content == "Let me check both."
    cities = [json.loads(c["function"]["arguments"])["city"] for c in ans.tool_calls]
    assert cities == ["Paris", "Rome"]
    assert ans.tool_calls[0]["id"] != ans.tool_calls[1]["id"]
    assert ans.message()["content"] == "Let me check both."


def test_parse_invalid_json_block_is_ignored() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call>'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    )
    ans = parse_answer(text, tools_offered=True)
    assert [json.loads(c["function"]["arguments"]) for c in ans.tool_calls] == [{"city": "Rome"}]


def test_parse_only_invalid_blocks_is_plain_text() -> None:
    text = "Hmm <tool_call>not json</tool_call>"
    ans = parse_answer(text, tools_offered=True)
    assert ans.content == text
    assert ans.tool_calls == []


def test_parse_block_without_name_is_ignored() -> None:
    text = '<tool_call>{"arguments": {}}</tool_call>'
    assert parse_answer(text, tools_offered=True).tool_calls == []


def test_parse_unterminated_final_block() -> None:
    text = 'ok <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    ans = parse_answer(text, tools_offered=True)
    assert ans.content == "ok"
    assert json.loads(ans.tool_calls[0]["function"]["arguments"]) == {"city": "Oslo"}


def test_parse_string_arguments_and_parameters_key() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
        '<tool_call>{"name": "b", "parameters": {"y": 2}}</tool_call>'
        '<tool_call>{"name": "c"}</tool_call>'
    )
    calls = parse_answer(text, tools_offered=True).tool_calls
    assert [c["function"]["arguments"] for c in calls] == ['{"x": 1}', '{"y": 2}', "{}"]


def test_parse_without_tools_offered_is_plain_text() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    ans = parse_answer(text, tools_offered=False)
    assert ans.content == text
    assert ans.tool_calls == []
    assert ans.message() == {"role": "assistant", "content": text}


def test_parse_plain_answer() -> None:
    ans = parse_answer("Just text.", tools_offered=True)
    assert (ans.content, ans.tool_calls) == ("Just text.", [])
    assert parse_answer("", tools_offered=False).message()["content"] is None


# --- IncrementalText ----------------------------------------------------------------------


def test_deltas_concatenate_to_final_text(fmt: ChatFormatter) -> None:
    text = "Grüße, café 😀 and 中文 are fine."
    deltas, tail, inc = stream(fmt, text)
    assert "".join(deltas) + tail == text == inc.text
    assert not any("\ufffd" in d for d in deltas)  # split UTF-8 is held back, never sent
    assert inc.stopped is False


def test_stop_string_split_across_tokens_is_never_emitted(fmt: ChatFormatter) -> None:
    text = "Hello there STOP and more text"
    ids = fmt.tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [fmt.decode([i]) for i in ids]
    assert not any("STOP" in p for p in pieces), "precondition: STOP spans several tokens"
    deltas, tail, inc = stream(fmt, text, stop=["STOP"])
    assert inc.stopped is True
    assert "".join(deltas) + tail == "Hello there "
    assert inc.text == "Hello there "
    assert not any("S" in d for d in deltas)


def test_stop_prefix_that_is_not_a_stop_is_released(fmt: ChatFormatter) -> None:
    text = "Hello there STAY calm"
    deltas, tail, inc = stream(fmt, text, stop=["STOP"])
    assert inc.stopped is False
    assert "".join(deltas) + tail == text


def test_finish_flushes_held_back_prefix(fmt: ChatFormatter) -> None:
    deltas, tail, inc = stream(fmt, "Hello there ST", stop=["STOP"])
    assert "ST" not in "".join(deltas)
    assert tail.endswith("ST")
    assert "".join(deltas) + tail == "Hello there ST"
    assert inc.finish() == ""  # nothing left the second time


def test_tool_call_is_held_back_when_tools_offered(fmt: ChatFormatter) -> None:
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    text = f"Sure.<tool_call>{call}</tool_call>"
    deltas, tail, inc = stream(fmt, text, tools=True)
    assert "".join(deltas) == "Sure."
    assert tail == ""
    assert not any("<" in d for d in deltas)  # not even the partial "<tool" prefix
    assert inc.text == text  # kept for parse_answer
    assert len(parse_answer(inc.text, True).tool_calls) == 1


def test_angle_bracket_that_is_not_a_tool_call_is_released(fmt: ChatFormatter) -> None:
    text = "Use a <b> tag and x < y."
    deltas, tail, _ = stream(fmt, text, tools=True)
    assert "".join(deltas) + tail == text


def test_tool_call_text_streams_when_tools_not_offered(fmt: ChatFormatter) -> None:
    text = 'Sure.<tool_call>{"name": "x"}</tool_call>'
    deltas, tail, _ = stream(fmt, text, tools=False)
    assert "".join(deltas) + tail == text


def test_stop_after_tool_call_does_not_leak_markup(fmt: ChatFormatter) -> None:
    text = 'Sure.<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>\n\nmore'
    deltas, tail, inc = stream(fmt, text, stop=["\n\n"], tools=True)
    assert inc.stopped is True
    assert "".join(deltas) + tail == "Sure."


# --- ChatFormatter.render -----------------------------------------------------------------


def test_smollm2_template_has_no_tool_support(fmt: ChatFormatter) -> None:
    assert fmt.template_has_tools is False


def test_render_chatml_markers(fmt: ChatFormatter, tokenizer: Any) -> None:
    ids = fmt.render([{"role": "user", "content": "hi"}])
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n")  # the template's default system prompt
    assert "<|im_start|>user\nhi<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(im_start) == 3  # markers are single special tokens, not split text


def test_render_developer_becomes_system(fmt: ChatFormatter) -> None:
    text = rendered(
        fmt, [{"role": "developer", "content": "Be terse."}, {"role": "user", "content": "hi"}]
    )
    assert text.startswith("<|im_start|>system\nBe terse.<|im_end|>\n")
    assert "developer" not in text
    assert "SmolLM" not in text  # our system prompt replaced the default one


def test_render_content_parts_flattened(fmt: ChatFormatter) -> None:
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    text = rendered(fmt, [{"role": "user", "content": parts}])
    assert "<|im_start|>user\nfirst\nsecond<|im_end|>" in text


def test_render_inlines_tools_into_new_system_prompt(fmt: ChatFormatter) -> None:
    text = rendered(fmt, [{"role": "user", "content": "weather?"}], tools=[WEATHER_TOOL])
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou can call tools.")
    assert "<tool_call>" in system
    assert json.dumps(WEATHER_TOOL["function"]) in system
    assert text.count("<|im_start|>system") == 1


def test_render_inlines_tools_after_existing_system_prompt(fmt: ChatFormatter) -> None:
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "weather?"}]
    text = rendered(fmt, messages, tools=[WEATHER_TOOL], tool_choice="required")
    assert text.startswith("<|im_start|>system\nBe terse.\n\nYou can call tools.")
    assert "You must call a tool." in text
    assert text.count("<|im_start|>system") == 1


def test_render_named_tool_choice(fmt: ChatFormatter) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    text = rendered(
        fmt, [{"role": "user", "content": "x"}], tools=[WEATHER_TOOL], tool_choice=choice
    )
    assert "You must call the tool get_weather." in text


@pytest.mark.parametrize(
    ("choice", "forced"),
    [("required", True), ({"type": "function", "function": {"name": "get_weather"}}, True),
     ("auto", False), (None, False)],
)  # fmt: skip
def test_a_forced_call_ends_the_prompt_with_the_opening(
    fmt: ChatFormatter, choice: Any, forced: bool
) -> None:
    """The opening is part of the prompt (the answer is constrained from there on); the
    inline convention writes no newline after it, like rendered history."""
    text = rendered(
        fmt, [{"role": "user", "content": "x"}], tools=[WEATHER_TOOL], tool_choice=choice
    )
    assert text.endswith("<|im_start|>assistant\n<tool_call>") is forced
    assert fmt.answer_prefix([WEATHER_TOOL], choice) == ("<tool_call>" if forced else "")
    assert fmt.answer_prefix(None, choice) == ""  # no tools (or tool_choice "none"): nothing


def test_a_forced_call_streams_no_content(fmt: ChatFormatter) -> None:
    """With the opening as prefix, the constrained JSON is held back as a tool call."""
    ids = fmt.tokenizer('{"name": "get_weather", "arguments": {}}', add_special_tokens=False)
    inc = IncrementalText(fmt, [], True, prefix="<tool_call>")
    assert [inc.push(t) for t in ids["input_ids"]] == [""] * len(ids["input_ids"])
    assert inc.finish() == ""
    (call,) = parse_answer(inc.text + "</tool_call>", True).tool_calls
    assert call["function"] == {"name": "get_weather", "arguments": "{}"}


def test_render_without_tools_has_no_tool_block(fmt: ChatFormatter) -> None:
    assert "You can call tools" not in rendered(fmt, [{"role": "user", "content": "x"}])


def test_render_assistant_tool_calls_and_tool_messages(fmt: ChatFormatter) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
    ]
    text = rendered(fmt, messages, tools=[WEATHER_TOOL])
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert f"<|im_start|>assistant\n{call}<|im_end|>\n" in text
    assert "<|im_start|>tool\nsunny, 21C<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    # What the model would answer parses back to the same call.
    parsed = parse_answer(call, tools_offered=True).tool_calls[0]["function"]
    assert (parsed["name"], json.loads(parsed["arguments"])) == ("get_weather", {"city": "Paris"})


def test_render_assistant_text_plus_tool_call(fmt: ChatFormatter) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "done"},
    ]
    text = rendered(fmt, messages, tools=[WEATHER_TOOL])
    assert (
        '<|im_start|>assistant\nChecking.\n<tool_call>{"name": "f", "arguments": {}}</tool_call>'
        in text
    )


def test_template_with_tool_support_gets_tools_natively(embedded_model: ResolvedModel) -> None:
    tok = AutoTokenizer.from_pretrained(str(embedded_model.path), local_files_only=True)
    tok.chat_template = (
        "{% if tools %}TOOLS={{ tools | length }}\n{% endif %}"
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    fmt = ChatFormatter(tok)
    assert fmt.template_has_tools is True
    text = tok.decode(fmt.render([{"role": "user", "content": "hi"}], tools=[WEATHER_TOOL]))
    assert text == "TOOLS=1\nuser: hi\nassistant: "
