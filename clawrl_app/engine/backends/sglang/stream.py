"""Parsing SGLang's native /generate replies: cumulative stream chunks, finish reasons,
teacher-scoring log-probs, and error bodies (pure functions), and the event lines of a
streamed reply (`_sse_events`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from clawrl_app.engine.backends.base import (
    BackendError,
    BackendOverloaded,
    Finished,
    FinishReason,
    GenerationRequest,
    TokenOut,
)

_FINISH_TYPES: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


def _parse_chunk(
    chunk: dict[str, Any], emitted: int
) -> tuple[list[TokenOut], dict[str, Any] | None]:
    """The tokens a cumulative chunk adds past `emitted`, and its finish_reason (or None)."""
    if "error" in chunk:
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise BackendError(f"SGLang /generate failed: {message}")
    meta = chunk.get("meta_info") or {}
    entries = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or []
    output_ids = chunk.get("output_ids")
    if len(entries) < emitted:
        raise BackendError(
            "SGLang sent a non-cumulative stream; launch it without --incremental-streaming-output"
        )
    tokens = []
    for i in range(emitted, len(entries)):
        logprob, token_id = entries[i][0], int(entries[i][1])
        if logprob is None:
            raise BackendError(f"SGLang sent no log-prob for output position {i}")
        if isinstance(output_ids, list) and len(output_ids) > i and output_ids[i] != token_id:
            raise BackendError(f"SGLang output_ids and logprobs disagree at position {i}")
        top = tuple(
            (int(t[1]), float(t[0])) for t in (tops[i] if i < len(tops) and tops[i] else ())
        )
        tokens.append(TokenOut(token_id=token_id, logprob=float(logprob), top_logprobs=top))
    finish = meta.get("finish_reason")
    return tokens, finish if isinstance(finish, dict) else None


def _finished(
    finish: dict[str, Any],
    chunk: dict[str, Any],
    version: str,
    request: GenerationRequest,
    emitted: int,
) -> Finished:
    meta = chunk.get("meta_info") or {}
    reason = _FINISH_TYPES.get(str(finish.get("type")), "abort")
    if reason == "abort" and emitted == 0:
        status = finish.get("status_code")
        message = finish.get("message", "aborted")
        if status == 503:
            raise BackendOverloaded(f"SGLang /generate: {message}")
        if isinstance(status, int) and status >= 400:
            raise BackendError(f"SGLang /generate aborted ({status}): {message}")
    completion = meta.get("completion_tokens", emitted)
    if reason != "abort" and completion != emitted:
        raise BackendError(
            f"SGLang reported {completion} completion tokens but streamed {emitted}; "
            "is it running with --incremental-streaming-output?"
        )
    return Finished(
        reason=reason,
        policy_version=version,
        prompt_tokens=int(meta.get("prompt_tokens", len(request.prompt_ids))),
        completion_tokens=emitted,
    )


def _response_logprobs(reply: Any, response_ids: list[int]) -> list[float]:
    """Drop the leading `[null, id, null]` entry and check the ids against the response."""
    entries = (
        (reply.get("meta_info") or {}).get("input_token_logprobs")
        if isinstance(reply, dict)
        else None
    )
    if not isinstance(entries, list) or len(entries) != len(response_ids) + 1:
        got = len(entries) if isinstance(entries, list) else None
        raise BackendError(
            f"SGLang scoring returned {got} input log-prob entries; expected {len(response_ids) + 1}"
        )
    values = []
    for entry, expected in zip(entries[1:], response_ids, strict=True):
        if entry[0] is None or int(entry[1]) != expected:
            raise BackendError(
                f"SGLang scoring misaligned: got {entry[:2]}, expected id {expected}"
            )
        values.append(float(entry[0]))
    return values


def _raise_for_status(route: str, response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    message = f"SGLang {route} answered {response.status_code}: {_excerpt(response.text)}"
    if response.status_code == 503:
        raise BackendOverloaded(message)
    raise BackendError(message)


def _excerpt(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


async def _sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of `data:` lines until `data: [DONE]`."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise BackendError(
                f"SGLang /generate sent a malformed event: {_excerpt(data)}"
            ) from exc
        if isinstance(event, dict):
            yield event
