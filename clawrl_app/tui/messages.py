"""Messages the app posts from other threads (engine events, log lines, engine start)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from clawrl_app.tui.client import EngineClient


@dataclass
class EngineEventReceived(Message):
    """An engine event (`kind`, `payload`), posted from the engine's thread."""

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
