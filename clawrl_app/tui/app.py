"""`ClawrlApp`: the terminal UI over an `EngineClient` (in process or attached over HTTP).

Engine events arrive on a background thread and are posted as `EngineEventReceived`
messages; the app forwards each one to the current screen, which reloads what it shows.
Log records reach the Logs screen the same way; errors also raise a notification, and so do
a failing store (`StoreFailed`: answers go on unrecorded) and its recovery.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from clawrl_app.tui.client import EngineClient
from clawrl_app.tui.messages import EngineEventReceived, EngineStarted, LogRecorded
from clawrl_app.tui.screens.chat import ChatScreen
from clawrl_app.tui.screens.checkpoints import CheckpointsScreen
from clawrl_app.tui.screens.compare import CompareScreen
from clawrl_app.tui.screens.dashboard import DashboardScreen
from clawrl_app.tui.screens.environments import EnvironmentsScreen
from clawrl_app.tui.screens.loading import LoadingScreen
from clawrl_app.tui.screens.logs import LogsScreen
from clawrl_app.tui.screens.sessions import SessionsScreen

LOG_LINES = 2000
STORE_BANNER_S = 60.0
"""How long the "storage failed" notification stays (the dashboard keeps showing it)."""


class UiLogHandler(logging.Handler):
    """Posts `clawrl.*` log records to the app (thread-safe)."""

    def __init__(self, app: ClawrlApp) -> None:
        super().__init__(logging.INFO)
        self.app = app
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.app.post_message(LogRecorded(record.levelno, self.format(record)))
        except Exception:
            self.handleError(record)


class ClawrlApp(App[None]):
    """Dashboard, sessions, checkpoints, chat, logs, environments and compare of one engine."""

    TITLE = "clawrl-app"
    DEFAULT_MODE = "dashboard"
    MODES = {
        "dashboard": DashboardScreen,
        "sessions": SessionsScreen,
        "checkpoints": CheckpointsScreen,
        "chat": ChatScreen,
        "logs": LogsScreen,
        "envs": EnvironmentsScreen,
        "compare": CompareScreen,
    }
    BINDINGS = [
        Binding("1", "switch_mode('dashboard')", "Dashboard", id="screen.dashboard"),
        Binding("2", "switch_mode('sessions')", "Sessions", id="screen.sessions"),
        Binding("3", "switch_mode('checkpoints')", "Checkpoints", id="screen.checkpoints"),
        Binding("4", "switch_mode('chat')", "Chat", id="screen.chat"),
        Binding("5", "switch_mode('logs')", "Logs", id="screen.logs"),
        Binding("6", "switch_mode('envs')", "Envs", id="screen.envs"),
        Binding("7", "switch_mode('compare')", "Compare", id="screen.compare"),
        Binding("ctrl+q", "quit", "Quit", id="app.quit", priority=True),
    ]

    def __init__(
        self,
        client: EngineClient | None = None,
        *,
        start: Callable[[], EngineClient] | None = None,
        capture_logs: bool = True,
        keys: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._keys = dict(keys or {})
        """Binding id -> key(s), from the `[ui] keys` setting."""
        self.client: EngineClient | None = client
        """The engine this UI drives (None until `start` returns, in `launch`)."""
        self._start = start
        self.logs: deque[tuple[int, str]] = deque(maxlen=LOG_LINES)
        """Recent log lines, shown by the Logs screen."""
        self._handler = UiLogHandler(self) if capture_logs else None

    def on_mount(self) -> None:
        if self._keys:
            self.set_keymap(self._keys)
        if self._handler is not None:
            logger = logging.getLogger("clawrl")
            logger.addHandler(self._handler)
            if logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)  # start-up stages are INFO lines
        if self.client is not None:
            self._connect(self.client)
        else:
            self.push_screen(LoadingScreen())
            self.start_engine()

    def on_unmount(self) -> None:
        if self.client is not None:
            self.client.close()
        if self._handler is not None:
            logging.getLogger("clawrl").removeHandler(self._handler)

    @work(thread=True, group="engine-start", exclusive=True)
    def start_engine(self) -> None:
        """Start the engine (model conversion and load can take a while) off the event loop."""
        assert self._start is not None
        try:
            self.post_message(EngineStarted(self._start()))
        except Exception as exc:
            self.post_message(EngineStarted(None, f"{type(exc).__name__}: {exc}"))

    @on(EngineStarted)
    def _engine_started(self, message: EngineStarted) -> None:
        if message.client is None:
            loading = self.screen
            if isinstance(loading, LoadingScreen):
                loading.failed(message.error or "unknown error")
            return
        self.client = message.client
        if isinstance(self.screen, LoadingScreen):
            self.pop_screen()
        self._connect(message.client)

    def _connect(self, client: EngineClient) -> None:
        def deliver(kind: str, payload: dict[str, Any]) -> None:
            self.post_message(EngineEventReceived(kind, payload))

        client.subscribe(deliver)
        self.screen.post_message(EngineEventReceived("Connected", {}))

    @on(EngineEventReceived)
    def _forward_event(self, message: EngineEventReceived) -> None:
        if message.kind == "LoopFailed":
            loop, error = message.payload.get("loop"), message.payload.get("error")
            self.notify(f"{loop}: {error}", title="Loop failed", severity="error")
        elif message.kind == "StoreFailed":  # stays up: nothing is recorded until it clears
            self.notify(
                str(message.payload.get("error")),
                title="Storage failed: answers are not recorded",
                severity="error",
                timeout=STORE_BANNER_S,
            )
        elif message.kind == "StoreRecovered":
            lost = message.payload.get("unrecorded_turns", 0)
            self.notify(
                f"{lost} turns were answered without being recorded.", title="Storage works again"
            )
        if message.kind != "StatusReported":
            self.logs.append((logging.INFO, f"event {message.kind} {message.payload}"))
        if self.screen_stack and not isinstance(self.screen, LoadingScreen):
            self.screen.post_message(EngineEventReceived(message.kind, message.payload))

    @on(LogRecorded)
    def _log_recorded(self, message: LogRecorded) -> None:
        self.logs.append((message.level, message.line))
        if message.level >= logging.ERROR:
            self.notify(message.line[-200:], title="Error", severity="error")
        if self.screen_stack and isinstance(screen := self.screen, LogsScreen):
            screen.add_line(message.level, message.line)
        elif self.screen_stack and isinstance(screen, LoadingScreen):
            screen.show_stage(message.line)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The command palette: screens and the main actions besides Textual's own."""
        yield from super().get_system_commands(screen)
        for mode, help_text in (
            ("dashboard", "Endpoint, loops, counters and training curves"),
            ("sessions", "Review, rate and teach recorded conversations"),
            ("checkpoints", "Roll the served policy back or forward"),
            ("chat", "Talk to the served model"),
            ("logs", "Engine and trainer log"),
            ("envs", "Agentic environments: train and evaluate on tasks"),
            ("compare", "Two versions' answers side by side; serve either"),
        ):
            yield SystemCommand(
                f"Show {mode}",
                help_text,
                lambda m=mode: self.switch_mode(m),  # type: ignore[misc]
            )
        if self.client is not None:
            yield SystemCommand(
                "Roll back to the previous version",
                "Serve the parent of the served checkpoint (asks first)",
                self._palette_rollback,
            )

    def _palette_rollback(self) -> None:
        self.switch_mode("checkpoints")
        screen = self.screen
        if isinstance(screen, CheckpointsScreen):
            screen.action_rollback(previous=True)
