"""The OpenAI-compatible HTTP endpoint (FastAPI), served by uvicorn on loopback.

Routes: POST /v1/chat/completions (streaming and not), GET /v1/models, GET /healthz,
GET /readyz. Every error has OpenAI's shape; bad input never gets a 500.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from clawrl_app.engine.backends.base import BackendError
from clawrl_app.engine.chat.openai_schema import ApiError, chunk, completion_id, now_s, usage
from clawrl_app.engine.serving.chat_service import ChatDelta, ChatResult, ChatService, PreparedChat
from clawrl_app.engine.serving.request_body import read_json
from clawrl_app.engine.serving.sessions import env_source, is_truthy
from clawrl_app.engine.serving.web_guard import GuardPolicy, WebGuard

log = logging.getLogger("clawrl.api")


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def create_app(
    service: ChatService,
    *,
    api_key: str | None = None,
    max_body_bytes: int = 8 * 1024 * 1024,
    ready: Any = lambda: True,
    feedback: Callable[[Any], Awaitable[dict[str, Any]]] | None = None,
    rollback: Callable[[Any], Awaitable[dict[str, Any]]] | None = None,
    routers: Sequence[APIRouter] = (),
    bind_host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> FastAPI:
    """The endpoint app. `api_key` None = no auth (loopback only); `ready()` backs /readyz.

    Every route sits behind `WebGuard`: Host names other than loopback, `bind_host` and
    `allowed_hosts`, browser origins not in `allowed_origins` and non-JSON bodies are refused.
    """
    app = FastAPI(title="clawrl-app", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.add_middleware(
        WebGuard, policy=GuardPolicy.build(bind_host, allowed_hosts, allowed_origins)
    )

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        # keeps `Allow` on a 405 (e.g. GET on a POST-only admin route)
        headers = dict(exc.headers or {})
        return error_response(
            ApiError(exc.status_code, str(exc.detail), type=kind, headers=headers)
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(ApiError(400, f"Invalid request: {exc.errors()[:1]}"))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(
            ApiError(500, "Internal error; see the app log.", type="server_error")
        )

    async def authorized(request: Request) -> None:
        """Dependency of every non-public route: the bearer key when one is configured."""
        if not api_key:
            return
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(token.encode(), api_key.encode()):
            raise ApiError(
                401,
                "Incorrect or missing API key. Send 'Authorization: Bearer <key>' "
                "(see `clawrl-app openclaw-config`).",
                code="invalid_api_key",
            )

    for router in routers:  # the admin and env routes the engine hands in
        app.include_router(router, dependencies=[Depends(authorized)])

    @app.exception_handler(BackendError)
    async def _backend_error(_: Request, exc: BackendError) -> JSONResponse:
        return error_response(
            ApiError(
                503,
                f"The model backend failed: {exc}",
                type="server_error",
                headers={"Retry-After": "1"},
            )
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        reason = None if ready() else "starting or stopping"
        health = getattr(service.backend, "health", None)
        if reason is None and health is not None:
            reason = health()  # e.g. repeated model failures: clients should not queue
        body: dict[str, Any] = {"ready": reason is None, "version": service.backend.active_version}
        if reason is not None:
            body["reason"] = reason
        return JSONResponse(body, status_code=200 if reason is None else 503)

    @app.get("/v1/models", dependencies=[Depends(authorized)])
    async def models() -> dict[str, Any]:
        created = now_s()
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "clawrl-app"}
            for name in service.model_names()
        ]
        data[0]["current_version"] = service.model_name(service.backend.active_version)
        return {"object": "list", "data": data}

    @app.post("/v1/feedback", dependencies=[Depends(authorized)])
    async def post_feedback(request: Request) -> JSONResponse:
        """Explicit rating (+1/-1) and optional hint for a turn; overrides the judge."""
        if feedback is None:
            raise ApiError(404, "Feedback is not enabled on this server.", type="not_found")
        return JSONResponse(await feedback(await read_json(request, max_body_bytes)))

    @app.post("/admin/rollback", dependencies=[Depends(authorized)])
    async def post_rollback(request: Request) -> JSONResponse:
        """Serve another checkpoint: {"version": "v3"} or {"before_session": ID} or {} (previous)."""
        if rollback is None:
            raise ApiError(404, "Rollback is not available on this server.", type="not_found")
        return JSONResponse(await rollback(await read_json(request, max_body_bytes)))

    @app.post("/v1/chat/completions", dependencies=[Depends(authorized)])
    async def chat(request: Request) -> Response:
        payload = await read_json(request, max_body_bytes)
        h = request.headers
        prep = service.prepare(
            payload,
            header_session=h.get("x-session-id") or None,
            header_turn_type=h.get("x-turn-type") or None,
            header_done=is_truthy(h.get("x-session-done")),
            source_hint=env_source(h.get("x-session-source"))
            or _source_hint(h.get("user-agent", "")),
            incognito=is_truthy(h.get("x-session-incognito")),
            client_sources=(h.get("user-agent"), h.get("x-session-source")),
        )
        events = service.start(prep)
        headers = {}
        if prep.request.seed is not None and not service.backend.info().seeded:
            headers["X-Clawrl-Seed"] = SEED_IGNORED
        if prep.request.stream:
            return StreamingResponse(
                _sse(prep, events),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", **headers},
            )
        return JSONResponse(await _collect(prep, events), headers=headers)

    return app


SEED_IGNORED = (
    "ignored: this server cannot repeat a seeded answer (SGLang without "
    "hardware.sglang_deterministic = true)"
)
"""The X-Clawrl-Seed header of an answer whose request's `seed` the backend cannot honour."""


def _source_hint(user_agent: str) -> str | None:
    return "openclaw" if "openclaw" in user_agent.lower() else None


async def _collect(
    prep: PreparedChat, events: AsyncIterator[ChatDelta | ChatResult]
) -> dict[str, Any]:
    result: ChatResult | None = None
    async for ev in events:
        if isinstance(ev, ChatResult):
            result = ev
    assert result is not None
    message: dict[str, Any] = {"role": "assistant", "content": result.content or None}
    if result.tool_calls:
        message["tool_calls"] = result.tool_calls
    elif message["content"] is None:
        message["content"] = ""
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": result.finish_reason,
        "logprobs": None,
    }
    if prep.request.logprobs:
        choice["logprobs"] = {"content": [t.as_openai() for t in result.logprobs]}
    return {
        "id": completion_id(),
        "object": "chat.completion",
        "created": now_s(),
        "model": prep.model_name,
        "choices": [choice],
        "usage": usage(result.prompt_tokens, result.completion_tokens),
    }


async def _sse(
    prep: PreparedChat, events: AsyncIterator[ChatDelta | ChatResult]
) -> AsyncIterator[str]:
    cid, created, model = completion_id(), now_s(), prep.model_name

    def line(obj: dict[str, Any]) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    try:
        yield line(chunk(cid, model, created, {"role": "assistant", "content": ""}))
        async for ev in events:
            if isinstance(ev, ChatDelta):
                yield line(chunk(cid, model, created, {"content": ev.text}, logprobs=ev.logprobs))
                continue
            for i, call in enumerate(ev.tool_calls):
                yield line(chunk(cid, model, created, {"tool_calls": [{"index": i, **call}]}))
            yield line(chunk(cid, model, created, {}, finish_reason=ev.finish_reason))
            opts = prep.request.stream_options
            if opts is not None and opts.include_usage:
                yield line(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage(ev.prompt_tokens, ev.completion_tokens),
                    }
                )
        yield "data: [DONE]\n\n"
    except (ApiError, BackendError) as exc:  # failed after the stream started: error event, done
        err = exc if isinstance(exc, ApiError) else ApiError(503, str(exc), type="server_error")
        yield line(err.body())
        yield "data: [DONE]\n\n"
    finally:
        await _aclose(events)


async def _aclose(it: AsyncIterator[Any]) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()
