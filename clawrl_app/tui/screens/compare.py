"""Compare: two versions' greedy answers to the last prompts, side by side; serve either one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Header, Label, Select, Static

from clawrl_app.tui import compare_views, views
from clawrl_app.tui.screens.base import EngineScreen
from clawrl_app.tui.screens.modals import ConfirmModal

LAST_PROMPTS = 5
MAX_TOKENS = 96


class CompareScreen(EngineScreen):
    """Pick A and B (default: the served version and its parent), compare, serve one."""

    CSS_PATH = "compare.tcss"
    AUTO_FOCUS = "#compare-items"  # a focused Select would take the letter keys
    RELOAD_ON = frozenset({"PolicyPublished", "RolledBack"})
    BINDINGS = [
        Binding("c", "compare", "Compare", id="compare.run"),
        Binding("a", "serve('a')", "Serve A", id="compare.serve_a"),
        Binding("b", "serve('b')", "Serve B", id="compare.serve_b"),
    ]

    @dataclass
    class CheckpointsLoaded(Message):
        """The checkpoint list arrived from a worker."""

        rows: list[dict[str, Any]]

    @dataclass
    class Compared(Message):
        """A comparison finished: the engine's `result`, or `error`."""

        result: dict[str, Any] | None
        error: str | None = None

    @dataclass
    class Served(Message):
        """Serving A or B finished: `result` from the engine, or `error`."""

        result: dict[str, Any] | None
        error: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.choices: list[str] = []
        self.result: dict[str, Any] | None = None
        """The last comparison shown."""
        self.last = LAST_PROMPTS
        """How many recorded prompts a comparison replays."""
        self.max_tokens = MAX_TOKENS
        """Tokens per answer (greedy answers wait behind user requests: keep it small)."""

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="compare-pick"):
            yield Label("A")
            yield Select[str]([], id="version-a", allow_blank=True, prompt="version A")
            yield Label("B")
            yield Select[str]([], id="version-b", allow_blank=True, prompt="version B")
        yield Static(
            f"c: compare on the last {LAST_PROMPTS} prompts · a / b: serve A / B", id="compare-bar"
        )
        yield VerticalScroll(id="compare-items")
        yield Footer()

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="compare", exclusive=True)
    def load(self) -> None:
        self.post_message(self.CheckpointsLoaded(self.client.checkpoints()))

    @property
    def served(self) -> str:
        return next((c["version"] for c in self.rows if c["served"]), "base")

    def _select(self, side: str) -> Select[str]:
        return self.query_one(f"#version-{side}", Select)

    def picked(self, side: str) -> str | None:
        value = self._select(side).value
        return value if isinstance(value, str) else None

    @on(CheckpointsLoaded)
    def _show(self, message: CheckpointsLoaded) -> None:
        self.rows = message.rows
        choices = compare_views.version_choices(message.rows)
        if choices == self.choices:
            return
        first = not self.choices
        self.choices = choices
        a, b = compare_views.default_pair(message.rows)
        for side, default in (("a", a), ("b", b)):
            select = self._select(side)
            keep = self.picked(side)
            select.set_options([(v, v) for v in choices])
            select.value = default if first or keep not in choices else keep

    def action_compare(self) -> None:
        a, b = self.picked("a"), self.picked("b")
        if a is None or b is None:
            self.notify("Pick versions A and B first.")
            return
        self.query_one("#compare-bar", Static).update(f"comparing {a} and {b} …")
        self.compare(a, b)

    @work(thread=True, group="compare-run", exclusive=True)
    def compare(self, a: str, b: str) -> None:
        try:
            self.post_message(self.Compared(self.client.compare(a, b, self.last, self.max_tokens)))
        except Exception as exc:
            self.post_message(self.Compared(None, str(exc)))

    @on(Compared)
    async def _compared(self, message: Compared) -> None:
        bar = self.query_one("#compare-bar", Static)
        if message.result is None:
            bar.update("c: compare · a / b: serve A / B")
            self.notify(message.error or "?", title="Compare failed", severity="error")
            return
        self.result = result = message.result
        bar.update(compare_views.summary_line(result))
        box = self.query_one("#compare-items", VerticalScroll)
        await box.remove_children()
        for n, item in enumerate(result["items"], 1):
            await box.mount(
                Static(compare_views.item_title(n, item), classes="compare-title"),
                Horizontal(
                    Static(compare_views.diff_text(item["a_segments"]), classes="compare-a"),
                    Static(compare_views.diff_text(item["b_segments"]), classes="compare-b"),
                    classes="compare-row",
                ),
            )

    def action_serve(self, side: str) -> None:
        """Confirm, then serve version A or B (the rollback command path)."""
        target = self.picked(side)
        if target is None:
            return
        if target == self.served:
            self.notify(f"Already serving {target}.")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.serve(target)

        text = views.rollback_plan(target, self.served, self.rows)
        self.app.push_screen(ConfirmModal(f"Serve {target}?", text), answered)

    @work(thread=True, group="compare-cmd", exclusive=True)
    def serve(self, version: str) -> None:
        try:
            self.post_message(self.Served(self.client.rollback(version)))
        except Exception as exc:
            self.post_message(self.Served(None, str(exc)))

    @on(Served)
    def _served(self, message: Served) -> None:
        if message.result is None:
            self.notify(message.error or "?", title="Serving failed", severity="error")
        else:
            self.notify(f"serving {message.result['to']} (was {message.result['from']})")
        self.reload()
