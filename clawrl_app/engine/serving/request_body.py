"""Reading a JSON request body with the size limit (shared by the endpoint and admin routes)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from clawrl_app.engine.chat.openai_schema import ApiError


async def read_json(request: Request, limit: int) -> Any:
    """The parsed body; 413 past `limit` bytes (declared or streamed), 400 when not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            413,
            f"Request body is {declared} bytes; the limit is {limit} (server.max_body_bytes).",
            code="request_too_large",
        )
    body = bytearray()
    async for part in request.stream():
        body.extend(part)
        if len(body) > limit:
            raise ApiError(
                413,
                f"Request body exceeds {limit} bytes (server.max_body_bytes).",
                code="request_too_large",
            )
    try:
        value = json.loads(body)
    except RecursionError:
        raise ApiError(400, "The body is not valid JSON: it is nested too deeply.") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"The body is not valid JSON: {exc}.") from None
    if b"\\u" in body or b"\xed" in body:  # may decode to a lone UTF-16 surrogate: text no store
        try:  # or answer can encode, so refuse it here for every route
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(
                400, "The body holds a lone UTF-16 surrogate (\\ud800-\\udfff escape)."
            ) from None
    return value
