"""`EngineScreen`: a screen that shows engine data and reloads it when the engine changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from textual import on
from textual.message import Message
from textual.screen import Screen

from clawrl_app.tui.client import EngineClient
from clawrl_app.tui.messages import EngineEventReceived

RELOAD_EVERY_S = 2.0


class EngineScreen(Screen[None]):
    """Reloads on resume, on the engine events it names, and every few seconds while shown."""

    RELOAD_ON: ClassVar[frozenset[str]] = frozenset()
    """Event kinds that make this screen reload."""

    @dataclass
    class CommandFinished(Message):
        """A command a worker ran for this screen finished (`error` None on success)."""

        text: str
        error: str | None = None

    @on(CommandFinished)
    def _command_finished(self, message: CommandFinished) -> None:
        if message.error:
            self.notify(message.error, title=f"{message.text} failed", severity="error")
        else:
            self.notify(message.text)
        self.after_command()

    def after_command(self) -> None:
        """What to reload once a command finished (default: everything)."""
        self.reload()

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
