"""From OpenAI messages to prompt token ids, and from sampled ids back to an answer.

We apply the model's chat template ourselves so the app owns the exact prompt ids.
Tools go through the template when it supports them; otherwise they are described in the
system prompt with the common `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
convention, which is also what we parse out of answers.

When `tool_choice` forces a call (`"required"` or a named function), the rendered prompt
ends with the tool-call opening (`call_opening`) and the answer is decoded under a JSON
schema (`tool_constraint.py`): the prompt ids therefore already hold the opening, which was
not sampled, and the judge's re-rendered teacher prompt holds it too.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from clawrl_app.engine.chat.messages import message_text

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class ParsedAnswer:
    """The visible answer: text and OpenAI-shaped tool calls."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        """The assistant message as a client will send it back next turn."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


class ChatFormatter:
    """Renders requests with a tokenizer's chat template and parses answers."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None) or ""
        self.template_has_tools = "tools" in template
        self.call_opening = f"{TOOL_OPEN}\n" if self.template_has_tools else TOOL_OPEN
        """What a forced call's prompt ends with. Templates that render tools themselves use
        the Hermes/Qwen layout (`<tool_call>` + newline); the inline convention, as shown
        in our system prompt and in rendered history, has no newline."""

    def normalize(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any = None,
    ) -> list[dict[str, Any]]:
        """Messages the template can render: developer->system, parts flattened, tools inlined."""
        out: list[dict[str, Any]] = []
        for m in messages:
            role = "system" if m.get("role") == "developer" else m.get("role", "user")
            text = message_text(m.get("content"))
            calls = m.get("tool_calls") or []
            if role == "assistant" and calls and not self.template_has_tools:
                text = (text + "\n" if text else "") + "\n".join(_render_call(c) for c in calls)
                out.append({"role": "assistant", "content": text})
                continue
            msg: dict[str, Any] = {"role": role, "content": text}
            if role == "assistant" and calls:
                msg["tool_calls"] = calls
            if role == "tool":
                msg["tool_call_id"] = m.get("tool_call_id")
                if m.get("name"):
                    msg["name"] = m.get("name")
            out.append(msg)
        if tools and not self.template_has_tools:
            out = _inline_tools(out, tools, tool_choice)
        return out

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> list[int]:
        """Prompt token ids for the request, ending with the assistant generation prompt
        (and the tool-call opening when `tool_choice` forces a call)."""
        norm = self.normalize(messages, tools, tool_choice)
        kwargs: dict[str, Any] = {}
        if tools and self.template_has_tools:
            kwargs["tools"] = tools
        text = self.tokenizer.apply_chat_template(
            norm, tokenize=False, add_generation_prompt=True, **kwargs
        )
        text += self.answer_prefix(tools, tool_choice)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def answer_prefix(self, tools: list[dict[str, Any]] | None, tool_choice: Any) -> str:
        """The text the prompt ends with, which counts as the start of the answer: the
        tool-call opening when a call is forced, else nothing."""
        return self.call_opening if forces_call(tools, tool_choice) else ""

    def decode(self, ids: list[int]) -> str:
        """Visible text of sampled ids (special tokens such as EOS dropped)."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def token_str(self, token_id: int) -> str:
        """Text of a single token, for `logprobs` entries."""
        return str(self.tokenizer.decode([token_id], skip_special_tokens=False))


def forces_call(tools: list[dict[str, Any]] | None, tool_choice: Any) -> bool:
    """True when the request forces a tool call (`"required"` or a named function)."""
    return bool(tools) and (tool_choice == "required" or isinstance(tool_choice, dict))


def _render_call(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(ValueError):
            args = json.loads(args)
    return f"{TOOL_OPEN}{json.dumps({'name': fn.get('name'), 'arguments': args})}</tool_call>"


def _inline_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any
) -> list[dict[str, Any]]:
    specs = [t.get("function", t) for t in tools if isinstance(t, dict)]
    lines = [
        "You can call tools. To call one, answer with",
        '<tool_call>{"name": "<tool name>", "arguments": {<JSON arguments>}}</tool_call>',
        "and nothing else. Available tools (JSON schema):",
        *(json.dumps(s, ensure_ascii=False) for s in specs),
    ]
    if tool_choice == "required":
        lines.append("You must call a tool.")
    elif isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        lines.append(f"You must call the tool {name}.")
    block = "\n".join(lines)
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0])
        first["content"] = f"{first['content']}\n\n{block}".strip()
        return [first, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def parse_answer(text: str, tools_offered: bool) -> ParsedAnswer:
    """Split an answer into visible content and `<tool_call>` blocks (when tools were offered)."""
    if not tools_offered or TOOL_OPEN not in text:
        return ParsedAnswer(text)
    calls = []
    for raw in TOOL_CALL_RE.findall(text):
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": obj["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    if not calls:
        return ParsedAnswer(text)
    content = text[: text.index(TOOL_OPEN)].strip()
    return ParsedAnswer(content, calls)


class IncrementalText:
    """Turns a growing list of token ids into text deltas safe to stream.

    Holds back incomplete UTF-8 (replacement char at the end), a possible start of a
    stop string, and, when tools are offered, anything from `<tool_call>` on.
    """

    def __init__(
        self, formatter: ChatFormatter, stop: list[str], tools_offered: bool, prefix: str = ""
    ) -> None:
        self._fmt = formatter
        self._stop = [s for s in stop if s]
        self._tools = tools_offered
        self._prefix = prefix
        """Answer text that came with the prompt (a forced call's opening): never streamed
        as content, since it starts a `<tool_call>` block."""
        self.ids: list[int] = []
        self.text = prefix
        self.sent = 0
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add a token; return the new text that can be sent now."""
        self.ids.append(token_id)
        self.text = self._prefix + self._fmt.decode(self.ids)
        for s in self._stop:
            pos = self.text.find(s, max(0, self.sent - len(s)))
            if pos >= 0:
                self.text = self.text[:pos]
                self.stopped = True
                return self._flush(self._tool_start())
        safe = len(self.text)
        if self.text.endswith("\ufffd"):
            safe = len(self.text.rstrip("\ufffd"))
        for marker in [*self._stop, *([TOOL_OPEN] if self._tools else [])]:
            safe = min(safe, _holdback(self.text, marker))
        return self._flush(safe)

    def finish(self) -> str:
        """Everything not yet sent (tool-call blocks excluded when tools were offered)."""
        return self._flush(self._tool_start())

    def _tool_start(self) -> int:
        """Where visible content ends: the first `<tool_call>` when tools were offered."""
        if self._tools and TOOL_OPEN in self.text[self.sent :]:
            return self.text.index(TOOL_OPEN, self.sent)
        return len(self.text)

    def _flush(self, upto: int) -> str:
        if upto <= self.sent:
            return ""
        delta = self.text[self.sent : upto]
        self.sent = upto
        return delta


def _holdback(text: str, marker: str) -> int:
    """Index up to which `text` can be sent without splitting a possible `marker`."""
    full = text.find(marker)
    if full >= 0:
        return full
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return len(text) - k
    return len(text)


def eos_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """Token ids that end an answer: the tokenizer's EOS plus common end-of-turn markers."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    for tok in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.add(tid)
    return tuple(sorted(ids))
