"""Checkpoints: every trained version; roll the served policy back or forward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static

from clawrl_app.tui import views
from clawrl_app.tui.screens.base import EngineScreen
from clawrl_app.tui.screens.modals import ConfirmModal

COLUMNS = ("version", "parent", "step", "created", "status", "loss", "reward", "kl", "sessions")
BASE_ROW: dict[str, Any] = {
    "version": "base",
    "parent": None,
    "step": 0,
    "created": None,
    "status": "base model",
    "metrics": {},
    "sessions": [],
}


class CheckpointsScreen(EngineScreen):
    """The versions the trainer published; ▶ marks the one being served."""

    CSS_PATH = "checkpoints.tcss"
    RELOAD_ON = frozenset({"PolicyPublished", "RolledBack"})
    BINDINGS = [
        Binding("r", "rollback", "Roll back to selected", id="checkpoints.rollback"),
        Binding("f", "roll_forward", "Roll forward", id="checkpoints.forward"),
    ]

    @dataclass
    class CheckpointsLoaded(Message):
        """The checkpoint list arrived from a worker."""

        rows: list[dict[str, Any]]

    @dataclass
    class RolledBack(Message):
        """A rollback finished: `result` from the engine, or `error`."""

        result: dict[str, Any] | None
        error: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="served")
        yield DataTable(id="checkpoints", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#checkpoints", DataTable).add_columns(*COLUMNS)

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="checkpoints", exclusive=True)
    def load(self) -> None:
        self.post_message(self.CheckpointsLoaded(self.client.checkpoints()))

    @property
    def served(self) -> str:
        return next((c["version"] for c in self.rows if c["served"]), "base")

    @on(CheckpointsLoaded)
    def _show(self, message: CheckpointsLoaded) -> None:
        rows = list(message.rows)
        rows.append({**BASE_ROW, "served": not any(c["served"] for c in rows)})
        if rows == self.rows:
            return
        self.rows = rows
        table = self.query_one("#checkpoints", DataTable)
        cursor = table.cursor_row
        table.clear()
        for c in rows:
            table.add_row(*views.checkpoint_row(c), key=c["version"])
        table.move_cursor(row=min(cursor, len(rows) - 1))
        self.query_one("#served", Static).update(
            f"serving [b]{self.served}[/b] · r: roll back to the selected version · "
            "f: roll forward to the newest"
        )

    def selected_version(self) -> str | None:
        row = self.query_one("#checkpoints", DataTable).cursor_row
        return self.rows[row]["version"] if 0 <= row < len(self.rows) else None

    def action_rollback(self, previous: bool = False) -> None:
        """Confirm, then serve the selected version (or the served one's parent)."""
        if previous:
            current = next((c for c in self.rows if c["served"]), None)
            target = (current or {}).get("parent") or "base"
        else:
            target = self.selected_version() or "base"
        self._confirm(target, "Roll back")

    def action_roll_forward(self) -> None:
        target = views.newest_version(self.rows[:-1])
        if target is None or target == self.served:
            self.notify("Already serving the newest checkpoint.")
            return
        self._confirm(target, "Roll forward")

    def _confirm(self, target: str, verb: str) -> None:
        if target == self.served:
            self.notify(f"Already serving {target}.")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.rollback(target)

        text = views.rollback_plan(target, self.served, self.rows[:-1])
        self.app.push_screen(ConfirmModal(f"{verb} to {target}?", text), answered)

    @work(thread=True, group="checkpoints-cmd", exclusive=True)
    def rollback(self, version: str) -> None:
        try:
            self.post_message(self.RolledBack(self.client.rollback(version)))
        except Exception as exc:
            self.post_message(self.RolledBack(None, str(exc)))

    @on(RolledBack)
    def _rolled_back(self, message: RolledBack) -> None:
        if message.result is None:
            self.notify(message.error or "?", title="Rollback failed", severity="error")
        else:
            self.notify(f"serving {message.result['to']} (was {message.result['from']})")
        self.reload()
