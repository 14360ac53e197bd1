"""Pilot tests: the real app against a real engine on the embedded model (no fakes).

One engine without training drives chat, review and rating; one with training (batch 2,
no review grace) trains v1 so the Checkpoints screen can roll back and forward, checked
through GET /v1/models.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from textual import on
from textual.widgets import DataTable, Input, Label

from clawrl_app.tui.app import ClawrlApp
from clawrl_app.tui.client import LocalClient
from clawrl_app.tui.messages import EngineEventReceived
from clawrl_app.tui.screens.chat import ChatScreen
from clawrl_app.tui.screens.checkpoints import CheckpointsScreen
from clawrl_app.tui.screens.dashboard import DashboardScreen
from clawrl_app.tui.screens.loading import LoadingScreen
from clawrl_app.tui.screens.modals import ConfirmModal
from clawrl_app.tui.screens.sessions import SessionsScreen
from tests.conftest import start_engine
from tests.engine.training.test_training import converse

pytestmark = pytest.mark.slow
SIZE = (140, 40)


async def until(pilot: Any, predicate: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Let the app run until `predicate()` is truthy (blocking checks run in a thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        await pilot.pause(0.1)
    raise AssertionError(f"condition not reached within {timeout} s")


@pytest.fixture(scope="module")
def ui_engine(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "12",
        "CLAWRL_TRAIN__ENABLED": "false",
    }
    running = start_engine(tmp_path_factory.mktemp("tui-home"), env)
    yield running
    running.stop()


def served_version(url: str) -> str:
    data = httpx.get(f"{url}/models", timeout=10).json()["data"]
    return str(data[0]["current_version"])


async def test_chat_message_becomes_a_session(ui_engine: Any) -> None:
    client = LocalClient(ui_engine)
    app = ClawrlApp(client, capture_logs=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        box = screen.query_one("#chat-input", Input)
        box.focus()
        box.value = "Say hi in three words."
        await pilot.press("enter")
        store = ui_engine.engine.store
        session = await until(pilot, lambda: store.get_session(screen.session_id))
        await until(pilot, lambda: len(screen.messages) == 2)
        turns = store.turns_for_session(session.id)
        assert turns and turns[0].response_text == screen.messages[1]["content"]
        await pilot.press("escape", "2")  # the session shows up in the Sessions list
        sessions = app.screen
        assert isinstance(sessions, SessionsScreen)
        table = sessions.query_one("#sessions", DataTable)
        await until(pilot, lambda: screen.session_id in [k.value for k in table.rows])


def keys(text: str) -> list[str]:
    """The key presses that type `text`."""
    return ["space" if c == " " else c for c in text]


async def test_chat_input_has_focus_when_the_screen_opens(ui_engine: Any) -> None:
    """Regression: after `4` typed text went nowhere until Tab moved focus to the input.
    No Tab, no click here: keys typed right after opening (and after coming back) send."""
    app = ClawrlApp(LocalClient(ui_engine), capture_logs=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        await pilot.press(*keys("hello there"), "enter")
        await until(pilot, lambda: len(screen.messages) == 2, timeout=30)
        assert screen.messages[0] == {"role": "user", "content": "hello there"}
        shown = [str(w.render()) for w in screen.query("#chat-log .user")]
        assert shown == ["hello there"]
        store = ui_engine.engine.store
        await until(pilot, lambda: store.turns_for_session(screen.session_id))

        # Escape leaves the input (so 1-5 switch screens); coming back focuses it again.
        await pilot.press("escape", "1")
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("4")
        assert app.screen is screen
        await pilot.press(*keys("bye"), "enter")
        await until(pilot, lambda: len(screen.messages) == 4, timeout=30)
        assert screen.messages[2] == {"role": "user", "content": "bye"}


async def test_review_and_rating_change_the_store(ui_engine: Any) -> None:
    converse(ui_engine.url, 1, "review")  # session "review-0": three main turns
    store = ui_engine.engine.store
    client = LocalClient(ui_engine)
    app = ClawrlApp(client, capture_logs=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        table = screen.query_one("#sessions", DataTable)
        await until(pilot, lambda: "review-0" in [k.value for k in table.rows])
        table.move_cursor(row=table.get_row_index("review-0"))
        await until(pilot, lambda: screen.detail and screen.detail["id"] == "review-0")
        await pilot.press("x")
        await until(pilot, lambda: store.get_session("review-0").review_state == "excluded")
        await pilot.press("a")
        await until(pilot, lambda: store.get_session("review-0").review_state == "approved")

        turns = screen.query_one("#turns", DataTable)
        turns.move_cursor(row=0)
        turn = screen.selected_turn()
        assert turn is not None and turn["idx"] == 0

        def reward() -> float | None:
            sample = next(
                s for s in store.samples_for_session("review-0") if s.turn_id == turn["turn_id"]
            )
            j = store.get_judgment(sample.id)
            return j.score if j else None

        await until(pilot, lambda: store.samples_for_session("review-0"))
        await pilot.press("plus")
        await until(pilot, lambda: reward() == 1.0)
        await pilot.press("minus")
        await until(pilot, lambda: reward() == -1.0)


@pytest.fixture(scope="module")
def trained_engine(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__BATCH_SIZE": "2",
        "CLAWRL_REVIEW__GRACE_S": "0",
    }
    running = start_engine(tmp_path_factory.mktemp("tui-train-home"), env)
    yield running
    running.stop()


async def test_rollback_switches_the_served_version(trained_engine: Any) -> None:
    converse(trained_engine.url, 1, "train")  # two corrected turns: one step of batch 2
    url = trained_engine.url
    deadline = time.monotonic() + 150
    while served_version(url) != "clawrl-v1":
        assert time.monotonic() < deadline, "v1 was not trained and published in time"
        await asyncio.sleep(0.5)
    app = ClawrlApp(LocalClient(trained_engine), capture_logs=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        screen = app.screen
        assert isinstance(screen, CheckpointsScreen)
        await until(pilot, lambda: [c["version"] for c in screen.rows] == ["v1", "base"])
        table = screen.query_one("#checkpoints", DataTable)
        table.move_cursor(row=1)  # base
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        modal = app.screen
        assert isinstance(modal, ConfirmModal) and "Serve base instead of v1" in modal.text
        await pilot.press("y")
        await until(pilot, lambda: served_version(url) == "clawrl-base")
        await until(pilot, lambda: screen.served == "base")
        await pilot.press("f")  # roll forward to the newest: v1
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: served_version(url) == "clawrl-v1")


def test_launch_module_paths_exist() -> None:
    """The .tcss files sit beside their screens."""
    screens = Path(__file__).resolve().parents[2] / "clawrl_app" / "tui" / "screens"
    for name in ("dashboard", "sessions", "checkpoints", "chat", "logs", "modals", "loading"):
        assert (screens / f"{name}.py").exists() and (screens / f"{name}.tcss").exists()


def test_http_client_drives_the_admin_routes(ui_engine: Any) -> None:
    """Attach mode: the same data and commands through /admin/* over HTTP."""
    from clawrl_app.tui.client import HttpClient

    converse(ui_engine.url, 1, "attach")
    client = HttpClient(ui_engine.base)
    try:
        status = client.status()
        assert status["url"] == ui_engine.url and status["serving"]["version"] == "base"
        health = status["judge_health"]  # recorded turns, judged or not: lengths per version
        assert [v["version"] for v in health["lengths"]] == ["base"]
        assert "attach-0" in [s["id"] for s in client.sessions()]
        detail = client.session_detail("attach-0")
        assert detail is not None and [t["idx"] for t in detail["turns"]] == [0, 1, 2]
        client.set_review("attach-0", "excluded")
        assert ui_engine.engine.store.get_session("attach-0").review_state == "excluded"
        assert [s["id"] for s in client.sessions("excluded")] == ["attach-0"]
        assert client.session_detail("nope") is None
        assert client.checkpoints() == []
        assert set(client.metrics()) == {"loss", "reward/mean", "kl", "clip_frac",
                                         "guard/personal", "guard/general",
                                         "guard/degeneration"}  # fmt: skip
        events = client.http.get("/admin/events", params={"since": 0}).json()["data"]
        assert any(e["kind"] == "TurnRecorded" and e["ts"] > 0 for e in events)
    finally:
        client.close()


class CountingApp(ClawrlApp):
    """The real app, counting the engine events that reach the app itself."""

    probes = 0

    @on(EngineEventReceived)
    def _count(self, message: EngineEventReceived) -> None:
        self.probes += message.kind == "Probe"


async def test_an_engine_event_reaches_the_app_once(ui_engine: Any) -> None:
    """Regression: an event forwarded to the screen bubbled back to the app and was
    forwarded again forever, starving every other thread of the GIL."""
    app = CountingApp(LocalClient(ui_engine), capture_logs=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")  # a screen that reloads on no event kind
        await asyncio.to_thread(app.post_message, EngineEventReceived("Probe", {}))
        await pilot.pause(1.0)
        assert app.probes == 1


async def test_loading_screen_shows_start_up_stages_then_the_dashboard(ui_engine: Any) -> None:
    """`launch` shows a loading screen with the engine's current start-up step (its
    `clawrl.*` log lines) instead of a frozen terminal, then the dashboard."""
    release = threading.Event()

    def start() -> LocalClient:
        logging.getLogger("clawrl.models").info("dequantizing GGUF weights")
        assert release.wait(60)
        return LocalClient(ui_engine)

    app = ClawrlApp(start=start)
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, LoadingScreen)
        stage = app.screen.query_one("#loading-stage", Label)
        await until(pilot, lambda: "dequantizing GGUF weights" in str(stage.render()))
        release.set()
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
