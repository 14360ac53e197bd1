"""Logs: the engine's log lines and the trainer's log file, filterable."""

from __future__ import annotations

import logging
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Input, RichLog

from clawrl_app.tui.screens.base import EngineScreen

TAIL_BYTES = 64 * 1024


def matches(line: str, needle: str) -> bool:
    """Case-insensitive substring filter (empty = everything)."""
    return not needle or needle.lower() in line.lower()


class LogsScreen(EngineScreen):
    """Engine log (live) and the trainer's log tail; `/` focuses the filter."""

    CSS_PATH = "logs.tcss"
    BINDINGS = [Binding("slash", "focus_filter", "Filter", key_display="/", id="logs.filter")]

    def __init__(self) -> None:
        super().__init__()
        self._trainer_pos = 0
        self.trainer_lines: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter (substring)", id="log-filter")
        yield RichLog(id="log", max_lines=5000, wrap=False, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self._render_all()

    def action_focus_filter(self) -> None:
        self.query_one("#log-filter", Input).focus()

    @on(Input.Changed, "#log-filter")
    def _filter_changed(self) -> None:
        self._render_all()

    def _needle(self) -> str:
        return self.query_one("#log-filter", Input).value.strip()

    def _lines(self) -> list[tuple[int, str]]:
        engine = list(getattr(self.app, "logs", []))
        return engine + [(logging.INFO, f"trainer | {x}") for x in self.trainer_lines]

    def _render_all(self) -> None:
        log = self.query_one("#log", RichLog)
        log.clear()
        needle = self._needle()
        for _, line in self._lines():
            if matches(line, needle):
                log.write(line)

    def add_line(self, level: int, line: str) -> None:
        """A new engine log line (called by the app)."""
        if matches(line, self._needle()):
            self.query_one("#log", RichLog).write(line)

    def reload(self) -> None:
        """Append what the trainer wrote since the last look (small reads, on the loop)."""
        path = self.client.trainer_log
        if path is None:
            return
        for line in _read_new(path, self)[-500:]:
            self.trainer_lines.append(line)
            self.add_line(logging.INFO, f"trainer | {line}")


def _read_new(path: Path, screen: LogsScreen) -> list[str]:
    try:
        size = path.stat().st_size
        if size < screen._trainer_pos:
            screen._trainer_pos = 0
        start = max(screen._trainer_pos, size - TAIL_BYTES)
        with path.open("rb") as f:
            f.seek(start)
            data = f.read(size - start)
        screen._trainer_pos = size
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()
