"""`EngineScreen`: a screen that shows engine data and reloads it when the engine changes."""

from __future__ import annotations

from typing import Any, ClassVar

from textual import on
from textual.screen import Screen

from clawrl_app.tui.client import EngineClient
from clawrl_app.tui.messages import EngineEventReceived

RELOAD_EVERY_S = 2.0


class EngineScreen(Screen[None]):
    """Reloads on resume, on the engine events it names, and every few seconds while shown."""

    RELOAD_ON: ClassVar[frozenset[str]] = frozenset()
    """Event kinds that make this screen reload."""

    @property
    def client(self) -> EngineClient:
        client = getattr(self.app, "client", None)
        assert client is not None, "the engine is not started yet"
        return client  # type: ignore[no-any-return]

    def on_mount(self) -> None:
        self.set_interval(RELOAD_EVERY_S, self._tick)

    @property
    def connected(self) -> bool:
        return getattr(self.app, "client", None) is not None

    def on_screen_resume(self) -> None:
        if self.connected:
            self.reload()

    def _tick(self) -> None:
        if self.is_current and self.connected:
            self.reload()

    @on(EngineEventReceived)
    def _engine_event(self, message: EngineEventReceived) -> None:
        if message.kind in self.RELOAD_ON or message.kind == "Connected":
            self.on_engine_event(message.kind, message.payload)

    def on_engine_event(self, kind: str, payload: dict[str, Any]) -> None:
        """Default: reload everything."""
        self.reload()

    def reload(self) -> None:
        """Start a worker that fetches this screen's data (subclasses)."""
