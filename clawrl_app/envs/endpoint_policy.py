"""The policy of real rollouts: the app's own OpenAI-compatible endpoint.

Every call names the episode's session (`X-Session-Id`) and its source
(`X-Session-Source: env:<name>`), so the endpoint records each model turn with the prompt
ids, sampled ids and behaviour log-probs it produced: exactly what the trainer needs. The
reply's `model` field (`<alias>@<version>`) says which policy version answered.

`tool_choice` ("required" by default for env rollouts, `[envs] tool_choice`) is sent with
every turn that offers tools: the endpoint then decodes the answer under a grammar that
only allows a call to one of them, and records the request as asked, so the trainer
replays the same constraint on the recorded tokens (`engine/training/grammar_replay.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clawrl_app.envs.base import PolicyReply


class EndpointError(RuntimeError):
    """The endpoint did not answer (down, overloaded, 5xx): an infrastructure failure."""


@dataclass
class EndpointPolicy:
    """Calls `base_url` (`http://127.0.0.1:8000/v1`) through the official `openai` client."""

    base_url: str
    env_name: str
    model: str = "clawrl"
    api_key: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    """Sent with every request: a rollout samples from the whole distribution (upstream's
    rollout default), not the nucleus the endpoint's defaults would apply to a request that
    omits it (the embedded model's 0.9 leaves a small model's tool calls nearly
    deterministic, so a group's episodes all score the same)."""
    max_tokens: int | None = 256
    """None: the endpoint's default (`server.default_max_tokens`)."""
    seed: int | None = None
    timeout_s: float = 300.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    tool_choice: Any = None
    """Sent with turns that offer tools ("required", "auto", "none" or a named function);
    None: not sent (the endpoint's default, auto)."""

    def __post_init__(self) -> None:
        from openai import OpenAI

        self._client = OpenAI(
            base_url=self.base_url,
            api_key=self.api_key or "not-needed-on-loopback",
            timeout=self.timeout_s,
            max_retries=0,  # a failed call aborts the episode; retrying would fork it
        )

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, session_id: str
    ) -> PolicyReply:
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "extra_headers": {
                "X-Session-Id": session_id,
                "X-Session-Source": f"env:{self.env_name}",
            },
        }
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if tools:
            kwargs["tools"] = tools
            if self.tool_choice is not None:
                kwargs["tool_choice"] = self.tool_choice
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        try:
            resp = self._client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise EndpointError(f"the endpoint failed: {type(exc).__name__}: {exc}") from exc
        choice = resp.choices[0]
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in (choice.message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        return PolicyReply(
            text=choice.message.content or "",
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            meta={"model": resp.model, "tool_choice": kwargs.get("tool_choice")},
        )

    def close(self) -> None:
        self._client.close()
