"""Shown while `launch` starts the engine (first start converts the model: ~25-60 s)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, LoadingIndicator


class LoadingScreen(Screen[None]):
    """A spinner and what is happening; shows the error if the engine fails to start."""

    CSS_PATH = "loading.tcss"
    stage = ""
    """The latest start-up step (it may arrive before the screen is mounted)."""

    def compose(self) -> ComposeResult:
        with Vertical(id="loading-box"):
            yield Label(
                "Starting the engine: loading the model, the endpoint and the trainer…\n"
                "(the first start converts the embedded model, about a minute)",
                id="loading-text",
            )
            yield LoadingIndicator(id="loading-spinner")
            yield Label("", id="loading-stage")
        yield Footer()

    def show_stage(self, line: str) -> None:
        """The engine's latest start-up step (a `clawrl.*` log line, time stamp cut)."""
        self.stage = f"… {line.split(': ', 1)[-1]}"
        if self.is_mounted:
            self.query_one("#loading-stage", Label).update(self.stage)

    def on_mount(self) -> None:
        self.query_one("#loading-stage", Label).update(self.stage)

    def failed(self, error: str) -> None:
        """Replace the spinner by the start-up error."""
        self.query_one("#loading-spinner", LoadingIndicator).display = False
        label = self.query_one("#loading-text", Label)
        label.update(f"The engine failed to start:\n{error}\n\nctrl+q quits.")
        label.add_class("error")
