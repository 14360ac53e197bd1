"""How the UI talks to an engine: in process (`LocalClient`) or over admin HTTP (`HttpClient`).

Every method is blocking; screens call them from thread workers, never on the event loop.
Both clients return the same JSON-shaped dicts (built by `clawrl_app.engine.wire.admin` and
`clawrl_app.engine.admin.routes`), and deliver engine events to one callback as
`(kind, payload)` from a background thread.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from clawrl_app.engine.admin import routes as admin
from clawrl_app.engine.admin.env_routes import JobIn
from clawrl_app.engine.chat.openai_schema import ApiError
from clawrl_app.engine.environments.jobs import EnvJobs, JobRequest
from clawrl_app.engine.store import Store
from clawrl_app.engine.wire import admin as shapes

if TYPE_CHECKING:
    from clawrl_app.engine.engine_thread import EngineThread

EventCallback = Callable[[str, dict[str, Any]], None]
CURVES = (
    "loss",
    "reward/mean",
    "kl",
    "clip_frac",
    "guard/personal",
    "guard/general",
    "guard/degeneration",
)


class EngineClient(Protocol):
    """What the UI needs from an engine."""

    url: str
    """The OpenAI-compatible endpoint, e.g. http://127.0.0.1:30000/v1."""
    trainer_log: Path | None
    """The trainer's log file when the engine runs on this machine."""

    def status(self) -> dict[str, Any]: ...
    def sessions(self, review_state: str | None = None) -> list[dict[str, Any]]: ...
    def session_detail(self, session_id: str) -> dict[str, Any] | None: ...
    def set_review(self, session_id: str, state: str) -> None: ...
    def delete_session(self, session_id: str) -> dict[str, Any] | None:
        """Delete the session and everything derived (shapes.deleted_json); None if unknown."""
        ...

    def rate(self, session_id: str, turn_id: int, rating: int, hint: str | None = None) -> None: ...
    def checkpoints(self) -> list[dict[str, Any]]: ...
    def metrics(self, names: tuple[str, ...] = CURVES) -> dict[str, list[list[float]]]: ...
    def rollback(
        self, version: str | None = None, before_session: str | None = None
    ) -> dict[str, Any]: ...
    def chat_stream(self, messages: list[dict[str, Any]], session_id: str) -> Iterator[str]: ...
    def compare(self, a: str, b: str, last: int = 5, max_tokens: int = 128) -> dict[str, Any]:
        """Greedy answers of versions a and b to the last `last` real prompts, never recorded
        (admin.compare_json); raises with the engine's reason (e.g. a version not loaded)."""
        ...

    def env_overview(self) -> dict[str, Any]: ...
    def env_job(self) -> dict[str, Any] | None: ...
    def start_env_job(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def stop_env_job(self) -> dict[str, Any] | None: ...
    def subscribe(self, callback: EventCallback) -> None: ...
    def close(self) -> None: ...


def new_chat_session_id() -> str:
    """A fresh session id for the chat pane (sent as X-Session-Id)."""
    return f"chat-{uuid.uuid4().hex[:12]}"


def stream_chat(
    url: str, api_key: str | None, messages: list[dict[str, Any]], session_id: str
) -> Iterator[str]:
    """Stream one answer from the endpoint (SSE), yielding text deltas; recorded like any client."""
    headers = {"X-Session-Id": session_id, "User-Agent": "clawrl-tui"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = {"model": "clawrl", "messages": messages, "stream": True}
    with (
        httpx.Client(timeout=httpx.Timeout(300, connect=10)) as http,
        http.stream("POST", f"{url}/chat/completions", json=body, headers=headers) as r,
    ):
        if r.status_code != 200:
            r.read()
            raise RuntimeError(f"endpoint answered {r.status_code}: {r.text[:200]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            if "error" in obj:
                raise RuntimeError(obj["error"].get("message", "stream failed"))
            for choice in obj.get("choices", []):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text


class LocalClient:
    """The engine of `clawrl-app launch`, running in this process (an EngineThread)."""

    def __init__(self, engine_thread: EngineThread) -> None:
        self.thread = engine_thread
        self.engine = engine_thread.engine
        self.url = engine_thread.url
        self.trainer_log: Path | None = self.engine.paths.log_dir / "trainer.log"
        self._closed = False

    @property
    def _store(self) -> Store:
        assert self.engine.store is not None
        return self.engine.store

    def status(self) -> dict[str, Any]:
        return admin.overview(self.engine)

    def sessions(self, review_state: str | None = None) -> list[dict[str, Any]]:
        return shapes.session_summaries(self._store, review_state)

    def session_detail(self, session_id: str) -> dict[str, Any] | None:
        return shapes.session_detail(self._store, session_id)

    def set_review(self, session_id: str, state: str) -> None:
        self._store.set_review_state(session_id, state)

    def delete_session(self, session_id: str) -> dict[str, Any] | None:
        gone = self.engine.delete_session(session_id)
        return shapes.deleted_json(gone) if gone is not None else None

    def rate(self, session_id: str, turn_id: int, rating: int, hint: str | None = None) -> None:
        self.thread.call(self.engine.rate_turn(session_id, None, rating, hint, turn_id=turn_id))

    def checkpoints(self) -> list[dict[str, Any]]:
        served = self.engine.backend.active_version if self.engine.backend else None
        return shapes.checkpoint_rows(self._store, served)

    def metrics(self, names: tuple[str, ...] = CURVES) -> dict[str, list[list[float]]]:
        return shapes.metric_series(self._store, list(names))

    def rollback(
        self, version: str | None = None, before_session: str | None = None
    ) -> dict[str, Any]:
        return self.thread.call(self.engine.rollback(version, before_session))

    def chat_stream(self, messages: list[dict[str, Any]], session_id: str) -> Iterator[str]:
        return stream_chat(self.url, self.engine.api_key, messages, session_id)

    def compare(self, a: str, b: str, last: int = 5, max_tokens: int = 128) -> dict[str, Any]:
        body = {"a": a, "b": b, "last": last, "max_tokens": max_tokens}
        try:
            return self.thread.call(admin.compare_json(self.engine, body), timeout=900)
        except ApiError as exc:
            raise RuntimeError(exc.message) from None

    def _jobs(self) -> EnvJobs:
        assert self.engine.env_jobs is not None, "the engine is not started"
        return self.engine.env_jobs

    def env_overview(self) -> dict[str, Any]:
        return self._jobs().overview()

    def env_job(self) -> dict[str, Any] | None:
        return self._jobs().status()

    def start_env_job(self, request: dict[str, Any]) -> dict[str, Any]:
        """Start an env job (ValueError saying why it cannot: one runs, training off...)."""
        from pydantic import ValidationError

        try:
            body = JobIn.model_validate(request)
        except ValidationError as exc:
            raise ValueError(str(exc.errors()[0].get("msg"))) from None
        return self._jobs().start(JobRequest(**body.model_dump()))

    def stop_env_job(self) -> dict[str, Any] | None:
        return self._jobs().stop()

    def subscribe(self, callback: EventCallback) -> None:
        def sink(event: Any) -> None:
            if not self._closed:
                callback(event.kind, event.payload())

        self.engine.add_sink(sink)

    def close(self) -> None:
        """Stop delivering events (whoever started the EngineThread stops it)."""
        self._closed = True


class HttpClient:
    """An engine elsewhere (`clawrl-app serve`), through its authenticated admin routes."""

    def __init__(self, base_url: str, api_key: str | None = None, poll_s: float = 1.0) -> None:
        base = base_url.rstrip("/").removesuffix("/v1")
        self.url = f"{base}/v1"
        self.trainer_log: Path | None = None
        self.api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base, headers=headers, timeout=30)
        self.poll_s = poll_s
        self._stop = threading.Event()

    def _get(self, path: str, **params: Any) -> Any:
        r = self.http.get(path, params={k: v for k, v in params.items() if v is not None})
        r.raise_for_status()
        return r.json()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        r = self.http.post(path, json=body, timeout=300)
        if r.status_code >= 400:
            raise RuntimeError(r.json().get("error", {}).get("message", r.text))
        return r.json()

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self._get("/admin/status")
        return result

    def sessions(self, review_state: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._get("/admin/sessions", review_state=review_state)[
            "data"
        ]
        return result

    def session_detail(self, session_id: str) -> dict[str, Any] | None:
        r = self.http.get(f"/admin/sessions/{session_id}")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        result: dict[str, Any] = r.json()
        return result

    def set_review(self, session_id: str, state: str) -> None:
        self._post(f"/admin/sessions/{session_id}/review", {"state": state})

    def delete_session(self, session_id: str) -> dict[str, Any] | None:
        r = self.http.post(f"/admin/sessions/{session_id}/delete", json={}, timeout=60)
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            raise RuntimeError(r.json().get("error", {}).get("message", r.text))
        result: dict[str, Any] = r.json()
        return result

    def rate(self, session_id: str, turn_id: int, rating: int, hint: str | None = None) -> None:
        body = {"session_id": session_id, "turn_id": turn_id, "rating": rating, "hint": hint}
        self._post("/v1/feedback", body)

    def checkpoints(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._get("/admin/checkpoints")["data"]
        return result

    def metrics(self, names: tuple[str, ...] = CURVES) -> dict[str, list[list[float]]]:
        result: dict[str, list[list[float]]] = self._get("/admin/metrics", names=",".join(names))[
            "data"
        ]
        return result

    def rollback(
        self, version: str | None = None, before_session: str | None = None
    ) -> dict[str, Any]:
        body = {k: v for k, v in (("version", version), ("before_session", before_session)) if v}
        result: dict[str, Any] = self._post("/admin/rollback", body)
        return result

    def chat_stream(self, messages: list[dict[str, Any]], session_id: str) -> Iterator[str]:
        return stream_chat(self.url, self.api_key, messages, session_id)

    def compare(self, a: str, b: str, last: int = 5, max_tokens: int = 128) -> dict[str, Any]:
        body = {"a": a, "b": b, "last": last, "max_tokens": max_tokens}
        result: dict[str, Any] = self._post("/admin/compare", body)
        return result

    def env_overview(self) -> dict[str, Any]:
        result: dict[str, Any] = self._get("/admin/env/overview")
        return result

    def env_job(self) -> dict[str, Any] | None:
        job: dict[str, Any] | None = self._get("/admin/env/job")["job"]
        return job

    def start_env_job(self, request: dict[str, Any]) -> dict[str, Any]:
        job: dict[str, Any] = self._post("/admin/env/job", request)["job"]
        return job

    def stop_env_job(self) -> dict[str, Any] | None:
        job: dict[str, Any] | None = self._post("/admin/env/job/stop", {})["job"]
        return job

    def subscribe(self, callback: EventCallback) -> None:
        """Poll /admin/events in a daemon thread (status snapshots come from `status()`)."""

        def poll() -> None:
            since = 0
            with httpx.Client(base_url=str(self.http.base_url), headers=self.http.headers) as h:
                try:  # start from now: the UI reloads its data anyway
                    rows = h.get("/admin/events", params={"since": 0}).json()["data"]
                    since = rows[-1]["id"] if rows else 0
                except (httpx.HTTPError, ValueError, KeyError):
                    pass
                while not self._stop.wait(self.poll_s):
                    try:
                        rows = h.get("/admin/events", params={"since": since}).json()["data"]
                    except (httpx.HTTPError, ValueError, KeyError):
                        continue
                    for row in rows:
                        since = row["id"]
                        callback(row["kind"], row["payload"])

        threading.Thread(target=poll, name="clawrl-tui-events", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.http.close()
