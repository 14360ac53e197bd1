"""Actions out of a policy reply (ENVS.md §5.3): OpenAI `tool_calls`, else
`<tool_call>{...}</tool_call>` blocks in the text, else fenced ```python / ```bash blocks
for envs that map them to a tool; and final answers (`\\boxed{...}`, `Answer: ...`).

Never raises: every problem becomes a `ParseResult.error`, the message shown to the policy
(it counts towards the episode's parse-error limit).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from clawrl_app.envs.base import Action, PolicyReply, ToolSpec

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
FENCE_RE = re.compile(r"```(python|bash|sh)\s*\n(.*?)```", re.DOTALL)
ANSWER_RE = re.compile(r"answer\s*[:=]\s*(.+)", re.IGNORECASE)
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


@dataclass(frozen=True)
class ParseResult:
    actions: list[Action] = field(default_factory=list)
    error: str | None = None
    native: bool = False  # from OpenAI tool_calls (results go back as `tool` messages)


def _check_args(spec: ToolSpec, args: Any) -> str | None:
    if not isinstance(args, dict):
        return f"the arguments of {spec.name} must be a JSON object"
    props = spec.parameters.get("properties", {})
    missing = [k for k in spec.parameters.get("required", []) if k not in args]
    if missing:
        return f"{spec.name} needs the argument(s) {', '.join(missing)}"
    extra = [k for k in args if k not in props]
    if extra and spec.parameters.get("additionalProperties", True) is False:
        return f"{spec.name} takes no argument(s) {', '.join(extra)}"
    for key, value in args.items():
        want = _JSON_TYPES.get(str(props.get(key, {}).get("type", "")))
        if want and (not isinstance(value, want) or (bool not in want and isinstance(value, bool))):
            return f"argument {key} of {spec.name} must be a {props[key]['type']}"
    return None


def _action(name: Any, args: Any, specs: dict[str, ToolSpec], call_id: str | None) -> Action | str:
    if not isinstance(name, str) or not name:
        return "a tool call needs a tool name"
    spec = specs.get(name)
    if spec is None:
        return f"unknown tool {name!r}; the tools are: {', '.join(sorted(specs)) or 'none'}"
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return f"the arguments of {name} are not valid JSON ({exc.msg})"
    if args is None:
        args = {}
    problem = _check_args(spec, args)
    return problem if problem else Action(name, dict(args), call_id=call_id)


def parse_reply(
    reply: PolicyReply, specs: list[ToolSpec], fence_tools: dict[str, str] | None = None
) -> ParseResult:
    """The actions of `reply`. `fence_tools` maps a fence language to a tool taking one
    argument (e.g. {"python": "code_interpreter.code"}) for models that write code blocks."""
    by_name = {s.name: s for s in specs}
    try:
        if reply.tool_calls:
            actions: list[Action] = []
            for call in reply.tool_calls:
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict):
                    return ParseResult(error="a tool call without a function", native=True)
                got = _action(fn.get("name"), fn.get("arguments"), by_name, call.get("id"))
                if isinstance(got, str):
                    return ParseResult(error=got, native=True)
                actions.append(got)
            return ParseResult(actions, native=True)
        text = reply.text or ""
        blocks = TOOL_CALL_RE.findall(text)
        if blocks:
            actions = []
            for block in blocks:
                try:
                    obj = json.loads(block)
                except json.JSONDecodeError as exc:
                    return ParseResult(error=f"a <tool_call> block is not valid JSON ({exc.msg})")
                if not isinstance(obj, dict):
                    return ParseResult(error="a <tool_call> block must hold a JSON object")
                got = _action(obj.get("name"), obj.get("arguments", {}), by_name, None)
                if isinstance(got, str):
                    return ParseResult(error=got)
                actions.append(got)
            return ParseResult(actions)
        for lang, code in FENCE_RE.findall(text):
            target = (fence_tools or {}).get("sh" if lang == "sh" else lang)
            if target:
                tool, _, arg = target.partition(".")
                if tool in by_name:
                    return ParseResult([Action(tool, {arg: code})])
        return ParseResult()
    except Exception as exc:  # a parser must never take the episode down
        return ParseResult(error=f"could not read the reply ({type(exc).__name__})")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (balanced braces), or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i, depth = start + len("\\boxed{"), 1
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[i:j].strip()
        start = text.rfind("\\boxed{", 0, start)
    return None


def final_answer_text(text: str) -> str | None:
    """The final answer of a reply: its last `\\boxed{}`, else what follows `Answer:`."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    found = ANSWER_RE.findall(text)
    return found[-1].strip().rstrip(".") if found else None
