"""Dashboard: endpoint and key, served version, plan, loop states, judge health, the
regression guard's last refusal and its last checked versions (personal and general score,
degeneration rate), counters, training curves and each version's guard scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.message import Message
from textual.widgets import Footer, Header, Static
from textual_plotext import PlotextPlot

from clawrl_app.tui import views
from clawrl_app.tui.client import CURVES
from clawrl_app.tui.screens.base import EngineScreen


def plot_id(name: str) -> str:
    return "plot-" + name.replace("/", "-")


class DashboardScreen(EngineScreen):
    """What the engine is doing now, and how training went."""

    CSS_PATH = "dashboard.tcss"
    RELOAD_ON = frozenset(
        {
            "PolicyPublished",
            "RolledBack",
            "StatusReported",
            "LoopFailed",
            "PublishRefused",
            "StoreFailed",
            "StoreRecovered",
            "StepStarted",
            "StepFinished",
            "GuardChecked",
        }
    )
    BINDINGS = [Binding("r", "reload", "Refresh", id="dashboard.refresh")]

    @dataclass
    class DataLoaded(Message):
        """Fresh status and metric series arrived from a worker."""

        status: dict[str, Any]
        metrics: dict[str, list[list[float]]]

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, DashboardScreen.DataLoaded)

    def __init__(self) -> None:
        super().__init__()
        self._drawn: dict[str, list[list[float]]] = {}
        """The points each chart shows now (charts redraw only when they change)."""

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="dash"):
            yield Static("connecting…", id="endpoint")
            with Horizontal(id="panels"):
                yield Static("", id="loops")
                yield Static("", id="plan")
                yield Static("", id="health")
            yield Static("", id="health-warnings")
            yield Static("", id="guard-banner")
            yield Static("", id="guard-scores")
            yield Static("", id="counters")
            with Grid(id="curves"):
                for name in CURVES:
                    yield PlotextPlot(id=plot_id(name))
        yield Footer()

    def action_reload(self) -> None:
        self.reload()

    def reload(self) -> None:
        self.load()

    @work(thread=True, group="dashboard", exclusive=True)
    def load(self) -> None:
        self.post_message(self.DataLoaded(self.client.status(), self.client.metrics(CURVES)))

    def on_engine_event(self, kind: str, payload: dict[str, Any]) -> None:
        self.reload()

    @on(DataLoaded)
    def _show(self, message: DataLoaded) -> None:
        status = message.status
        self.query_one("#endpoint", Static).update(views.endpoint_line(status))
        self.query_one("#loops", Static).update(
            "[b]Loops[/b]\n" + "\n".join(views.loop_lines(status))
        )
        plan = status.get("plan") or "(no plan)"
        self.query_one("#plan", Static).update(f"[b]Plan[/b] ({status.get('model')})\n{plan}")
        self.query_one("#health", Static).update(
            "[b]Judge health[/b]\n" + "\n".join(views.judge_health_lines(status))
        )
        warnings = views.judge_health_warnings(status)
        box = self.query_one("#health-warnings", Static)
        box.update(Text("\n".join(warnings)))  # plain text: no markup in engine sentences
        box.set_class(bool(warnings), "-warn")
        banner = views.guard_banner(status)
        guard = self.query_one("#guard-banner", Static)
        guard.update(Text(banner))
        guard.set_class(bool(banner), "-warn")
        scores = views.guard_score_lines(status)
        table = self.query_one("#guard-scores", Static)
        table.update(Text("\n".join(scores)))
        table.set_class(bool(scores), "-shown")
        self.query_one("#counters", Static).update(views.counter_line(status))
        for name in CURVES:
            points = message.metrics.get(name, [])
            if self._drawn.get(name) == points:
                continue  # redrawing a plotext chart costs the UI thread tens of ms
            self._drawn[name] = points
            widget = self.query_one(f"#{plot_id(name)}", PlotextPlot)
            steps, values = views.curve(points)
            plt = widget.plt
            plt.clear_data()
            plt.title(views.curve_title(name))
            if steps:
                plt.plot(steps, values, marker="braille")
            plt.xlabel("step" if not name.startswith("guard/") else "version's step")
            widget.refresh()
