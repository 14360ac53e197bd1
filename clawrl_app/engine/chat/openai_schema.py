"""OpenAI chat-completions request validation, error bodies and response shapes."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class ApiError(Exception):
    """An error the client gets in OpenAI's shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any] | str] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ToolSpec(_Lenient):
    type: str = "function"
    function: dict[str, Any]

    @field_validator("function")
    @classmethod
    def _named(cls, v: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(v.get("name"), str) or not v["name"]:
            raise ValueError("each tool needs function.name")
        return v


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatRequest(_Lenient):
    """The fields we act on; unknown OpenAI fields are accepted and ignored."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    """What a torch generator takes; a bigger one failed in the backend as a 503."""
    n: int | None = Field(default=None, ge=1, le=1)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def answer_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


_SURROGATE = re.compile("[\ud800-\udfff]")


def reject_lone_surrogates(value: Any) -> None:
    """ApiError(400) naming the first string in a decoded JSON value that holds a lone
    UTF-16 surrogate. JSON allows the escape (`"\\ud83d"`, e.g. an emoji cut in half), but
    it is not Unicode text: the tokenizer, hashing and SQLite all fail on it."""
    stack: list[tuple[str, Any]] = [("", value)]  # no recursion: bodies may nest deeply
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            for k, item in v.items():
                key = f"{where}.{k}" if where else str(k)
                stack.append((key, k))
                stack.append((key, item))
        elif isinstance(v, list):
            stack.extend((f"{where}.{i}" if where else str(i), item) for i, item in enumerate(v))
        elif isinstance(v, str) and _SURROGATE.search(v):
            shown = where.encode("utf-8", "backslashreplace").decode()
            raise ApiError(
                400,
                f"Invalid request: {shown or 'the body'} holds a lone UTF-16 surrogate "
                "(an escape such as \\ud83d without its pair), which is not valid Unicode text.",
                param=shown or None,
            )


def parse_chat_request(payload: Any) -> ChatRequest:
    """Validate a decoded JSON body; raise ApiError(400) naming the offending field."""
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    reject_lone_surrogates(payload)
    try:
        return ChatRequest.model_validate(payload)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise ApiError(400, f"Invalid request: {param}: {err['msg']}", param=param) from None


@dataclass(frozen=True)
class TokenLogprob:
    """One answer token with its log-prob and alternatives, as OpenAI reports it."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()

    def as_openai(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "logprob": self.logprob,
            "bytes": list(self.token.encode()),
            "top_logprobs": [
                {"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in self.top
            ],
        }


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chunk(
    cid: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    logprobs: list[TokenLogprob] | None = None,
) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    choice["logprobs"] = {"content": [t.as_openai() for t in logprobs]} if logprobs else None
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }


def now_s() -> int:
    return int(time.time())
