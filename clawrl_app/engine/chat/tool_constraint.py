"""Forced tool calls: the JSON schema an answer must follow when `tool_choice` forces a call.

OpenAI's contract for `tool_choice: "required"` or `{"type": "function", "function":
{"name": "f"}}` is that the answer *is* a call. A sentence in the system prompt cannot
promise that, so a forced call is decoded under a constraint (llguidance, see
`backends/grammar.py`): the service appends the formatter's tool-call opening to the prompt
and the continuation must be the JSON object

    {"name": <one of the allowed names>, "arguments": <that tool's `parameters` schema>}

then end of sequence. This module builds that schema (a pure function of the request) and
checks up front that it compiles, so a schema the grammar engine cannot enforce is a 400 at
once, never a failed generation. The schema is plain JSON schema (backend-agnostic): the
torch backend compiles it with llguidance, SGLang receives it as `json_schema`.

Two deliberate rewrites of the tool's schema, both keeping every answer valid against the
schema the client sent:

- an object schema that lists `properties` but says nothing about `additionalProperties`
  gets `false`: a small model otherwise invents extra keys until `max_tokens` (still
  "valid", never useful). A schema that sets it keeps its own choice.
- `$ref`s that point into the tool's schema (`#/...`) are rebased onto where the schema now
  sits inside the call object, so `$defs` and recursion keep working.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import llguidance

from clawrl_app.engine.chat.openai_schema import ApiError

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

TOOL_CHOICES = ("none", "auto", "required")
# Compact JSON in the shape `json.dumps` writes (and the prompt shows): no free whitespace,
# so the model cannot spend its token budget on blank lines inside the call.
JSON_OPTIONS: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
# Keywords whose value is one sub-schema / a list of them / a name -> sub-schema map.
_ONE = ("items", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def forced_tool_names(tools: list[dict[str, Any]] | None, tool_choice: Any) -> list[str] | None:
    """The tool names a forced answer may call; None when `tool_choice` forces nothing.

    Raises ApiError(400) in OpenAI's wording for a choice that cannot be honoured: an
    unknown string, a named function that is not among `tools`, or forcing without tools.
    """
    if tool_choice is None or tool_choice in ("none", "auto"):
        return None
    names = [_tool_name(t) for t in tools or []]
    if isinstance(tool_choice, str):
        if tool_choice != "required":
            raise _invalid(
                f"Invalid value for 'tool_choice': '{tool_choice}'. Supported values are: "
                "'none', 'auto', 'required', or an object naming a function."
            )
        wanted = names
    elif isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if tool_choice.get("type", "function") != "function" or not isinstance(name, str):
            raise _invalid(
                "Invalid value for 'tool_choice': expected "
                '{"type": "function", "function": {"name": "..."}}.'
            )
        if tools and name not in names:
            raise _invalid(
                f"Invalid value for 'tool_choice': no function named '{name}' in 'tools' "
                f"(available: {', '.join(names) or 'none'}).",
                code="invalid_tool_choice",
            )
        wanted = [name]
    else:
        raise _invalid("Invalid value for 'tool_choice': expected a string or an object.")
    if not tools:
        raise _invalid(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
            "are specified."
        )
    return list(dict.fromkeys(wanted))


def forced_call_schema(
    tools: list[dict[str, Any]] | None, tool_choice: Any
) -> dict[str, Any] | None:
    """The JSON schema of a forced call's JSON object, or None when no call is forced.

    One allowed tool: `{"name": const, "arguments": parameters}`; several (`"required"`):
    `anyOf` over them. Raises ApiError(400) as `forced_tool_names` does, and when a tool's
    `parameters` is not a JSON schema object.
    """
    names = forced_tool_names(tools, tool_choice)
    if names is None:
        return None
    specs = {_tool_name(t): _function(t) for t in tools or []}
    try:
        if len(names) == 1:
            return _call_schema(names[0], specs[names[0]], "#/properties/arguments")
        return {
            "anyOf": [
                _call_schema(name, specs[name], f"#/anyOf/{i}/properties/arguments")
                for i, name in enumerate(names)
            ]
        }
    except RecursionError:  # a body may nest as deep as the JSON decoder allows
        raise _invalid(
            "Invalid 'tools': a parameters schema nests too deeply.", param="tools"
        ) from None


def grammar_of(schema_json: str) -> str:
    """The llguidance grammar for a schema given as JSON text (compact JSON_OPTIONS)."""
    return str(llguidance.LLMatcher.grammar_from_json_schema(schema_json, defaults=JSON_OPTIONS))


def check_enforceable(schema: dict[str, Any]) -> None:
    """ApiError(400) when the grammar engine cannot compile `schema` (a keyword it does not
    implement, an invalid type name, ...): refusing is honest, a call we cannot guarantee
    is not."""
    try:
        error = llguidance.LLMatcher.validate_grammar(grammar_of(json.dumps(schema)))
    except (ValueError, TypeError) as exc:
        error = str(exc)
    if error:
        raise _invalid(
            f"Invalid 'tools' for a forced tool call: the parameters schema cannot be "
            f"enforced ({error.strip()[:300]}).",
            param="tools",
        )


def _call_schema(name: str, fn: dict[str, Any], base: str) -> dict[str, Any]:
    params = fn.get("parameters")
    if params is None or params == {}:
        args: dict[str, Any] = dict(NO_ARGUMENTS)
    elif isinstance(params, dict):
        args = _rebase_refs(_closed_objects(params), base)
    else:
        raise _invalid(
            f"Invalid 'tools': function '{name}' has 'parameters' that is not a JSON schema "
            "object.",
            param="tools",
        )
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": args},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _closed_objects(schema: Any) -> Any:
    """A copy in which object schemas with `properties` and no `additionalProperties`
    allow no other keys (see the module docstring)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _ONE:
        if key in out:
            out[key] = _closed_objects(out[key])
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [_closed_objects(s) for s in out[key]]
    for key in _NAMED:
        if isinstance(out.get(key), dict):
            out[key] = {k: _closed_objects(s) for k, s in out[key].items()}
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _closed_objects(out["additionalProperties"])
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _rebase_refs(node: Any, base: str) -> Any:
    """A copy with every local `$ref` ("#", "#/...") moved under `base`."""
    if isinstance(node, list):
        return [_rebase_refs(v, base) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rebase_refs(v, base) for k, v in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        out["$ref"] = base + ref[1:]
    return out


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function", tool)
    return fn if isinstance(fn, dict) else {}


def _tool_name(tool: dict[str, Any]) -> str:
    return str(_function(tool).get("name", ""))


def _invalid(message: str, *, code: str | None = None, param: str = "tool_choice") -> ApiError:
    return ApiError(400, message, code=code, param=param)
