"""What the admin and env routes read of the running engine: a protocol the orchestrator's
`Engine` satisfies, so these routes never import the orchestrator back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from clawrl_app.config import Settings
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.environments.jobs import EnvJobs
    from clawrl_app.engine.serving.chat_service import ChatService
    from clawrl_app.engine.serving.http_server import HttpServer
    from clawrl_app.engine.store import DeletedSession, Store
    from clawrl_app.hardware import Plan
    from clawrl_app.models import ResolvedModel


class EngineView(Protocol):
    """The engine as its admin routes and the TUI's in-process client see it."""

    settings: Settings
    store: Store | None
    backend: Backend | None
    service: ChatService | None
    http: HttpServer | None
    model: ResolvedModel | None
    plan: Plan | None
    api_key: str | None
    env_jobs: EnvJobs | None

    @property
    def url(self) -> str: ...

    def ready(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def delete_session(self, session_id: str) -> DeletedSession | None: ...
