"""Messages the app posts from other threads (engine events, log lines, engine start)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from clawrl_app.tui.client import EngineClient


@dataclass
class EngineEventReceived(Message, bubble=False):
    """An engine event (`kind`, `payload`), posted from the engine's thread.

    It must not bubble: the app forwards each one to the current screen, and a copy that
    bubbled back up to the app would be forwarded again, forever (a busy event loop).
    """

    kind: str
    payload: dict[str, Any]


@dataclass
class LogRecorded(Message):
    """A log line from the engine (or the trainer's log file)."""

    level: int
    line: str


@dataclass
class EngineStarted(Message):
    """The engine started by `launch` is ready (or failed: `error`)."""

    client: EngineClient | None
    error: str | None = None
