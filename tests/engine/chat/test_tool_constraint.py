"""The forced-call schema builder (pure) and the bitmask unpacking of constrained decoding."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import pytest
import torch

from clawrl_app.engine.backends.grammar import allowed_tokens, mask_logits
from clawrl_app.engine.chat.openai_schema import ApiError
from clawrl_app.engine.chat.tool_constraint import (
    NO_ARGUMENTS,
    check_enforceable,
    forced_call_schema,
    forced_tool_names,
    grammar_of,
)
from tests.device_guard import device_guard
from tests.schema_check import errors


def tool(name: str, parameters: Any = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name}
    if parameters is not None:
        fn["parameters"] = parameters
    return {"type": "function", "function": fn}


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [tool("get_weather", CITY), tool("get_time")]


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


@pytest.mark.parametrize("choice", [None, "auto", "none"])
def test_free_choices_force_nothing(choice: Any) -> None:
    assert forced_tool_names(TOOLS, choice) is None
    assert forced_call_schema(TOOLS, choice) is None


def test_named_function_is_a_const_name_and_its_parameters() -> None:
    schema = forced_call_schema(TOOLS, named("get_weather"))
    assert schema == {
        "type": "object",
        "properties": {
            "name": {"const": "get_weather"},
            # properties listed, additionalProperties unsaid: closed (module docstring)
            "arguments": {**CITY, "additionalProperties": False},
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert errors(call, schema) == []
    assert errors({"name": "get_time", "arguments": {"city": "Oslo"}}, schema) != []


def test_required_is_any_of_every_tool_and_no_parameters_means_no_arguments() -> None:
    schema = forced_call_schema(TOOLS, "required")
    assert schema is not None
    branches = schema["anyOf"]
    assert [b["properties"]["name"]["const"] for b in branches] == ["get_weather", "get_time"]
    assert branches[1]["properties"]["arguments"] == NO_ARGUMENTS
    assert errors({"name": "get_time", "arguments": {}}, schema) == []
    assert errors({"name": "get_time", "arguments": {"x": 1}}, schema) != []


def test_nested_objects_close_but_explicit_choices_stay() -> None:
    params = {
        "type": "object",
        "properties": {
            "when": {"type": "object", "properties": {"date": {"type": "string"}}},
            "tags": {"type": "array", "items": {"type": "object", "properties": {}}},
            "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
        "additionalProperties": True,
    }
    schema = forced_call_schema([tool("f", params)], "required")
    assert schema is not None
    args = schema["properties"]["arguments"]
    assert args["additionalProperties"] is True  # the client's own choice
    assert args["properties"]["when"]["additionalProperties"] is False
    assert args["properties"]["tags"]["items"]["additionalProperties"] is False
    assert args["properties"]["extra"] == params["properties"]["extra"]  # type: ignore[index]
    assert params["properties"]["when"] == {  # type: ignore[index]
        "type": "object",
        "properties": {"date": {"type": "string"}},
    }, "the request's tools are not modified"


def test_local_refs_are_rebased_and_compile() -> None:
    node = {
        "type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
    }
    params = {"$ref": "#/$defs/node", "$defs": {"node": node}}
    one = forced_call_schema([tool("tree", params)], named("tree"))
    assert one is not None
    arguments = one["properties"]["arguments"]
    assert arguments["$ref"] == "#/properties/arguments/$defs/node"
    assert arguments["$defs"]["node"]["properties"]["kids"]["items"]["$ref"] == (
        "#/properties/arguments"
    )
    two = forced_call_schema([tool("a"), tool("tree", params)], "required")
    assert two is not None
    assert two["anyOf"][1]["properties"]["arguments"]["$ref"] == (
        "#/anyOf/1/properties/arguments/$defs/node"
    )
    check_enforceable(one)
    check_enforceable(two)


@pytest.mark.parametrize(
    ("tools", "choice", "match"),
    [
        (TOOLS, named("nope"), "no function named 'nope'"),
        (TOOLS, "always", "Invalid value for 'tool_choice': 'always'"),
        (TOOLS, {"type": "function"}, "expected"),
        (None, "required", "only allowed when 'tools' are specified"),
        ([], named("get_weather"), "only allowed when 'tools' are specified"),
        ([tool("f", [1, 2])], "required", "not a JSON schema object"),
    ],
)
def test_choices_that_cannot_be_honoured_are_400(tools: Any, choice: Any, match: str) -> None:
    with pytest.raises(ApiError, match=match) as err:
        forced_call_schema(tools, choice)
    assert err.value.status == 400 and err.value.type == "invalid_request_error"


def test_a_schema_nested_too_deep_is_400_not_a_crash() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(ApiError, match="nests too deeply") as err:
        forced_call_schema([tool("f", deep)], "required")
    assert err.value.status == 400


def test_a_schema_the_grammar_engine_cannot_enforce_is_400() -> None:
    schema = forced_call_schema([tool("f", {"type": "strang"})], "required")
    assert schema is not None
    with pytest.raises(ApiError, match="cannot be enforced") as err:
        check_enforceable(schema)
    assert err.value.status == 400 and err.value.param == "tools"


def test_grammar_is_compact_json() -> None:
    """The grammar fixes the separators json.dumps writes: no free whitespace."""
    grammar = grammar_of(json.dumps(forced_call_schema(TOOLS, named("get_time"))))
    assert llguidance.LLMatcher.validate_grammar(grammar) == ""
    assert '"whitespace_flexible":false' in grammar.replace(" ", "")


def test_bitmask_unpacks_lsb_first_and_wider_logits_are_masked() -> None:
    packed = bytearray(8)  # 64 token ids in two 32-bit words
    for token in (0, 9, 31, 33):
        packed[token // 8] |= 1 << (token % 8)
    allowed = allowed_tokens(bytes(packed), 70, torch.device("cpu"))
    assert allowed.shape == (70,) and allowed.dtype == torch.bool
    assert allowed.nonzero().flatten().tolist() == [0, 9, 31, 33]  # 64..69: past the vocab


def test_mask_logits_leaves_free_rows_and_the_input_alone() -> None:
    class Only:  # a grammar that allows tokens 1 and 3
        def packed_mask(self) -> bytes:
            return bytes([0b1010])

    logits_BV = torch.zeros(2, 5)
    masked_BV = mask_logits(logits_BV, [None, Only()])  # type: ignore[list-item]
    assert masked_BV[0].tolist() == [0.0] * 5
    assert torch.isinf(masked_BV[1]).tolist() == [True, False, True, False, True]
    assert logits_BV.abs().sum() == 0
    assert mask_logits(logits_BV, [None, None]) is logits_BV


def test_the_mask_is_built_on_the_logits_device() -> None:
    """Logits on a second device ("meta" stands in for a GPU): under the DeviceGuard every
    tensor the masking creates must name that device, and the result stays there."""

    class Only:
        def packed_mask(self) -> bytes:
            return bytes([0b1010])

    logits_BV = torch.zeros(2, 70, device="meta")
    with device_guard("meta") as guard:
        masked_BV = mask_logits(logits_BV, [None, Only()])  # type: ignore[list-item]
    assert guard.violations == [] and masked_BV.device.type == "meta"
