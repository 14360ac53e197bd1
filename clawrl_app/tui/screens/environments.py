"""Environments: the agentic envs (task families and counts, sandbox status), and the env
job the engine runs for this screen: start training or an evaluation on the selected env,
follow its progress (episodes, success rate and reward per round) and its live episode,
stop it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static
from textual_plotext import PlotextPlot

from clawrl_app.tui import env_views
from clawrl_app.tui.screens.base import EngineScreen
from clawrl_app.tui.screens.modals import PromptModal

DEFAULT_STEPS = 2
ACTIVE = ("starting", "running", "stopping")


class EnvironmentsScreen(EngineScreen):
    """Agentic environments and the env-training / evaluation job."""

    CSS_PATH = "environments.tcss"
    RELOAD_ON = frozenset({"EnvJobUpdated", "PolicyPublished"})
    BINDINGS = [
        Binding("t", "train", "Train", id="envs.train"),
        Binding("e", "evaluate", "Evaluate", id="envs.evaluate"),
        Binding("s", "stop", "Stop job", id="envs.stop"),
        Binding("r", "reload", "Refresh", id="envs.refresh"),
    ]

    @dataclass
    class OverviewLoaded(Message):
        """The env list and sandbox/browser status arrived from a worker."""

        overview: dict[str, Any]

    @dataclass
    class JobLoaded(Message):
        """The job's status arrived from a worker (None: no job yet)."""

        job: dict[str, Any] | None

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, EnvironmentsScreen.JobLoaded)

    def __init__(self) -> None:
        super().__init__()
        self.overview: dict[str, Any] | None = None
        self.job: dict[str, Any] | None = None
        self._rows: list[tuple[str, ...]] = []
        self._drawn: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="envs-body"):
            yield Static("checking the sandbox…", id="env-reqs")
            with Horizontal(id="env-top"):
                with Vertical(id="env-list"):
                    yield DataTable(id="envs", cursor_type="row", zebra_stripes=True)
                    yield Static("", id="env-why")
                yield Static(env_views.job_summary(None), id="job-summary")
            with Horizontal(id="env-curves"):
                yield PlotextPlot(id="plot-env-success")
                yield PlotextPlot(id="plot-env-reward")
            with VerticalScroll(id="live-pane"):
                yield Static("No episode yet.", id="live")
        yield Footer()

    def on_mount(self) -> None:  # (EngineScreen's on_mount runs too: Textual calls each)
        self.query_one("#envs", DataTable).add_columns(*env_views.ENV_COLUMNS)

    # -- loading ----------------------------------------------------------------------
    def reload(self) -> None:
        if self.overview is None:
            self.load_overview()
        self.load_job()

    def action_reload(self) -> None:
        self.load_overview()
        self.load_job()

    def on_engine_event(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "Connected":
            self.load_overview()
        self.load_job()

    @work(thread=True, group="envs-overview", exclusive=True)
    def load_overview(self) -> None:
        self.post_message(self.OverviewLoaded(self.client.env_overview()))

    @work(thread=True, group="envs-job", exclusive=True)
    def load_job(self) -> None:
        self.post_message(self.JobLoaded(self.client.env_job()))

    @on(OverviewLoaded)
    def _show_overview(self, message: OverviewLoaded) -> None:
        self.overview = message.overview
        self.query_one("#env-reqs", Static).update(env_views.requirements_line(message.overview))
        self.query_one("#env-why", Static).update(env_views.unavailable_note(message.overview))
        envs = message.overview.get("envs", [])
        rows = [env_views.env_row(e) for e in envs]
        if rows == self._rows:
            return
        self._rows = rows
        table = self.query_one("#envs", DataTable)
        keep = table.cursor_row
        table.clear()
        for e, row in zip(envs, rows, strict=True):
            table.add_row(*row, key=e["name"])
        if rows:
            table.move_cursor(row=min(max(keep, 0), len(rows) - 1))

    @on(JobLoaded)
    def _show_job(self, message: JobLoaded) -> None:
        self.job = job = message.job
        self.query_one("#job-summary", Static).update(env_views.job_summary(job))
        self.query_one("#live", Static).update(env_views.live_text(job))
        curves = env_views.job_curves(job)
        for name, title, widget_id in (
            ("success", "success rate per round", "#plot-env-success"),
            ("reward", "mean outcome reward per round", "#plot-env-reward"),
        ):
            points = curves[name]
            if self._drawn.get(name) == points:
                continue  # redrawing a plotext chart costs the UI thread tens of ms
            self._drawn[name] = points
            widget = self.query_one(widget_id, PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.title(title)
            if points[0]:
                plt.plot(*points, marker="braille")
            plt.xlabel("round")
            widget.refresh()

    # -- commands ---------------------------------------------------------------------
    def selected_env(self) -> dict[str, Any] | None:
        """The env under the table's cursor."""
        envs = (self.overview or {}).get("envs", [])
        row = self.query_one("#envs", DataTable).cursor_row
        return envs[row] if 0 <= row < len(envs) else None

    def _startable(self) -> dict[str, Any] | None:
        env = self.selected_env()
        if env is None:
            self.notify("No env selected.", severity="warning")
            return None
        if not env["available"]:
            self.notify(str(env["why"]), title=f"{env['name']} cannot run here", severity="error")
            return None
        if self.job is not None and self.job["state"] in ACTIVE:
            self.notify("A job is running: stop it first (s).", severity="warning")
            return None
        return env

    def action_train(self) -> None:
        env = self._startable()
        if env is None:
            return

        def answered(value: str | None) -> None:
            if value is not None:
                self._start({"kind": "train", "env": env["name"], "steps": value})

        text = (
            f"Roll out {env['name']} train tasks (groups of 4 at temperature 1) until the "
            "trainer has made this many new checkpoints. Served versions change as usual."
        )
        self.app.push_screen(
            PromptModal(f"Train on {env['name']}", text, "checkpoints", str(DEFAULT_STEPS)),
            answered,
        )

    def action_evaluate(self) -> None:
        env = self._startable()
        if env is None:
            return

        def answered(value: str | None) -> None:
            if value is not None:
                self._start({"kind": "eval", "env": env["name"], "limit": value})

        text = (
            f"One greedy episode per held-out task of {env['name']} ({env['heldout']} tasks) "
            "with the served version; recorded, never trained on. How many tasks (0 = all)?"
        )
        self.app.push_screen(PromptModal(f"Evaluate {env['name']}", text, "tasks", "0"), answered)

    def _start(self, request: dict[str, Any]) -> None:
        key = "steps" if request["kind"] == "train" else "limit"
        try:
            request[key] = int(request[key])
        except ValueError:
            self.notify(f"{request[key]!r} is not a whole number.", severity="error")
            return
        self.start_job(request)

    @work(thread=True, group="envs-cmd")
    def start_job(self, request: dict[str, Any]) -> None:
        what = f"{'training' if request['kind'] == 'train' else 'evaluating'} {request['env']}"
        try:
            self.client.start_env_job(request)
        except Exception as exc:
            self.post_message(self.CommandFinished(what, str(exc)))
            return
        self.post_message(self.CommandFinished(f"started {what}"))

    def action_stop(self) -> None:
        if self.job is None or self.job["state"] not in ACTIVE:
            self.notify("No job is running.")
            return
        self.stop_job()

    @work(thread=True, group="envs-cmd")
    def stop_job(self) -> None:
        try:
            self.client.stop_env_job()
        except Exception as exc:
            self.post_message(self.CommandFinished("stopping the job", str(exc)))
            return
        self.post_message(self.CommandFinished("stopping the job (episodes in flight abort)"))

    def after_command(self) -> None:
        self.load_job()
