"""Scripted policies: drive episodes without a model (tests, CI, `env run --policy oracle`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clawrl_app.envs.base import Env, PolicyReply, Task


class ScriptedPolicy:
    """Plays `replies` in order, then answers with empty text (which ends an episode)."""

    def __init__(self, replies: Sequence[PolicyReply]) -> None:
        self.replies = list(replies)
        self.calls = 0

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, session_id: str
    ) -> PolicyReply:
        self.calls += 1
        return self.replies.pop(0) if self.replies else PolicyReply("")


def oracle_policy(env: Env, task: Task) -> ScriptedPolicy:
    """The task's shipped solution, as the env writes it (`Env.oracle_replies`)."""
    return ScriptedPolicy(env.oracle_replies(task))


def noop_policy() -> ScriptedPolicy:
    """Gives up at once: no tool call, no answer."""
    return ScriptedPolicy([PolicyReply("I give up.")])


class MalformedPolicy:
    """Writes a broken tool call forever (the parse-error path)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, session_id: str
    ) -> PolicyReply:
        self.calls += 1
        return PolicyReply('<tool_call>{"name": "calculator", "arguments": {oops</tool_call>')


def tool_call(name: str, call_id: str = "call_0", **arguments: Any) -> PolicyReply:
    """A reply holding one OpenAI-shaped tool call."""
    import json

    return PolicyReply(
        "",
        [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    )
