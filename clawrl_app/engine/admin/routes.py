"""Admin routes for the terminal UI attached to a running engine (`clawrl-app tui --attach`).

The orchestrator builds these routers from itself (an `EngineView`) and hands them to the
endpoint's `create_app`, which mounts them behind its bearer-key check, so the endpoint and
the admin routes share one engine. `overview` and `compare_json` (and the shapes in
`engine.wire.admin`) are also what the in-process TUI client calls: both clients see the
same JSON.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request

from clawrl_app.engine.admin.engine_view import EngineView
from clawrl_app.engine.admin.env_routes import env_router
from clawrl_app.engine.chat.openai_schema import ApiError
from clawrl_app.engine.judging.health import judge_health
from clawrl_app.engine.publishing.compare import (
    DEFAULT_LAST,
    CompareError,
    recent_prompts,
    run_compare,
)
from clawrl_app.engine.serving.request_body import read_json
from clawrl_app.engine.store import REVIEW_STATES, Store, StoreError
from clawrl_app.engine.wire.admin import (
    checkpoint_rows,
    deleted_json,
    metric_series,
    session_detail,
    session_summaries,
)

log = logging.getLogger("clawrl.admin")


def overview(engine: EngineView) -> dict[str, Any]:
    """Status of every loop plus endpoint, key hint, model and plan (the dashboard's data)."""
    from clawrl_app.hardware import format_plan

    out = engine.status()
    out["url"] = engine.url if engine.http is not None else None
    out["api_key_hint"] = f"…{engine.api_key[-4:]}" if engine.api_key else None
    out["model"] = engine.model.name if engine.model else None
    out["plan"] = format_plan(engine.plan) if engine.plan else None
    out["ready"] = engine.ready()
    out["judge_health"] = _judge_health(engine)
    return out


def _judge_health(engine: EngineView) -> dict[str, Any] | None:
    """The judge-health summary, or None without a store (or with a damaged one: the
    storage loop's entry says what to do)."""
    if engine.store is None:
        return None
    try:
        return judge_health(engine.store, engine.settings.health)
    except StoreError:
        return None


MAX_COMPARE_PROMPTS = 50


def _compare_body(body: Any) -> tuple[str, str, int, int, list[Any] | None]:
    """Validate a compare body: {"a", "b", "last"?, "max_tokens"?, "prompts"?} (ApiError 400)."""
    if not isinstance(body, dict):
        raise ApiError(400, 'The body must be a JSON object, e.g. {"a": "base", "b": "v2"}.')
    a, b = body.get("a"), body.get("b")
    if not isinstance(a, str) or not a:
        raise ApiError(400, "a must be a version name (e.g. base, v3).", param="a")
    if not isinstance(b, str) or not b:
        raise ApiError(400, "b must be a version name (e.g. base, v3).", param="b")
    last, max_tokens = body.get("last", DEFAULT_LAST), body.get("max_tokens", 128)
    if not isinstance(last, int) or isinstance(last, bool) or not 1 <= last <= MAX_COMPARE_PROMPTS:
        raise ApiError(400, f"last must be 1 to {MAX_COMPARE_PROMPTS}.", param="last")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ApiError(400, "max_tokens must be a positive integer.", param="max_tokens")
    prompts = body.get("prompts")
    if prompts is not None and (
        not isinstance(prompts, list)
        or not 0 < len(prompts) <= MAX_COMPARE_PROMPTS
        or not all(isinstance(p, list) and p and all(_is_message(m) for m in p) for p in prompts)
    ):
        raise ApiError(
            400, f"prompts must be 1 to {MAX_COMPARE_PROMPTS} message lists.", param="prompts"
        )
    return a, b, last, max_tokens, prompts


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool")


async def compare_json(engine: EngineView, body: Any) -> dict[str, Any]:
    """Replay the last prompts (or the body's) through versions a and b (see publishing.compare);
    ApiError 400 for bad input, an unloaded version or no prompts."""
    a, b, last, max_tokens, prompts = _compare_body(body)
    if engine.store is None or engine.backend is None or engine.service is None:
        raise ApiError(503, "The engine is not started.", type="server_error")
    if prompts is None:
        prompts = recent_prompts(engine.store, last)
    try:
        return await run_compare(
            engine.backend, engine.service.formatter, prompts, a, b, max_tokens,
            alias=engine.service.alias, store=engine.store,
        )  # fmt: skip
    except CompareError as exc:
        raise ApiError(400, str(exc), code="compare_failed") from None


def admin_router(engine: EngineView, max_body_bytes: int = 1024 * 1024) -> APIRouter:
    """The admin routes of `engine` (status, sessions, review, delete, checkpoints, metrics,
    events).

    GETs only read; every change is a POST with a JSON body (the endpoint's WebGuard refuses
    other content types, so a web page cannot post here without a CORS preflight).
    """
    router = APIRouter(prefix="/admin")

    def store() -> Store:
        if engine.store is None:
            raise ApiError(503, "The engine is not started.", type="server_error")
        return engine.store

    @router.get("/status")
    async def get_status() -> dict[str, Any]:
        return overview(engine)

    @router.get("/sessions")
    async def get_sessions(review_state: str | None = None) -> dict[str, Any]:
        if review_state is not None and review_state not in REVIEW_STATES:
            raise ApiError(400, f"review_state must be one of {REVIEW_STATES}.")
        return {"data": session_summaries(store(), review_state)}

    @router.get("/sessions/{session_id}")
    async def get_session(session_id: str) -> dict[str, Any]:
        detail = session_detail(store(), session_id)
        if detail is None:
            raise ApiError(404, f"No session {session_id!r}.", type="not_found")
        return detail

    @router.post("/sessions/{session_id}/review")
    async def post_review(session_id: str, request: Request) -> dict[str, Any]:
        body = await read_json(request, max_body_bytes)
        state = body.get("state") if isinstance(body, dict) else None
        if state not in REVIEW_STATES:
            raise ApiError(400, f"state must be one of {REVIEW_STATES}.", param="state")
        if not store().set_review_state(session_id, state):
            raise ApiError(404, f"No session {session_id!r}.", type="not_found")
        log.info("session %s marked %s", session_id, state)
        return {"id": session_id, "review_state": state}

    @router.post("/sessions/{session_id}/delete")
    async def post_delete(session_id: str, request: Request) -> dict[str, Any]:
        """Delete the session and everything derived from it; checkpoints keep their weights."""
        body = await read_json(request, max_body_bytes)
        if not isinstance(body, dict):
            raise ApiError(400, "The body must be a JSON object (e.g. {}).")
        store()  # 503 before the engine has a store
        gone = engine.delete_session(session_id)
        if gone is None:
            raise ApiError(404, f"No session {session_id!r}.", type="not_found")
        return deleted_json(gone)

    @router.get("/checkpoints")
    async def get_checkpoints() -> dict[str, Any]:
        served = engine.backend.active_version if engine.backend else None
        return {"served": served, "data": checkpoint_rows(store(), served)}

    @router.post("/compare")
    async def post_compare(request: Request) -> dict[str, Any]:
        """Answers of two loaded versions to the last prompts, side by side (never recorded)."""
        return await compare_json(engine, await read_json(request, max_body_bytes))

    @router.get("/metrics")
    async def get_metrics(names: str = Query("")) -> dict[str, Any]:
        return {"data": metric_series(store(), [n for n in names.split(",") if n])}

    @router.get("/events")
    async def get_events(since: int = 0) -> dict[str, Any]:
        if not 0 <= since < 2**63:  # SQLite integers are 64-bit
            raise ApiError(400, "since must be an event id (0 or more).", param="since")
        rows = store().events_since(since)
        return {
            "data": [{"id": e.id, "ts": e.ts, "kind": e.kind, "payload": e.payload} for e in rows]
        }

    return router


def engine_routers(engine: EngineView, max_body_bytes: int) -> list[APIRouter]:
    """The admin and env routers of `engine`, for the endpoint's `create_app(routers=...)`."""
    return [admin_router(engine, max_body_bytes), env_router(engine)]
