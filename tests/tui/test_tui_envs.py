"""The Environments screen against a real engine on the embedded model (no fakes): the
env list matches the shipped packs, an evaluation started with keys runs through the real
endpoint and shows its live episode, the rollout's session is marked as an env session on
the Sessions screen and can be excluded there, and a training job is refused with the
reason while training is off. Pure view functions are tested without Textual."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import DataTable, Input, Static

from clawrl_app.envs import env_names, make_env
from clawrl_app.tui import env_views, views
from clawrl_app.tui.app import ClawrlApp
from clawrl_app.tui.client import LocalClient
from clawrl_app.tui.screens.environments import EnvironmentsScreen
from clawrl_app.tui.screens.modals import PromptModal
from clawrl_app.tui.screens.sessions import SessionsScreen
from tests.tui.test_tui_pilot import SIZE, until

NO_SIGNAL_TEXT = "every group scored the same: this model gets no signal from this env"
JOB = {
    "id": "job-1", "kind": "train", "env": "toolcall", "state": "running", "started": 100.0,
    "finished": None, "error": None, "steps": 2, "split": "train", "checkpoints": 1,
    "episodes": 8, "successes": 2, "aborted": 1, "success_rate": 0.25,
    "rounds": [
        {"round": 1, "episodes": 4, "successes": 0, "success_rate": 0.0,
         "reward_mean": -1.0, "checkpoints": 0},
        {"round": 2, "episodes": 4, "successes": 2, "success_rate": 0.5,
         "reward_mean": None, "checkpoints": 1},
    ],
    "live": {"task_id": "calc-1", "instruction": "What is [e7] 2+2?", "session_id": "s",
             "turns": [{"index": 0, "response": "[b]bold[/b] <tool_call>", "actions": ["calc"],
                        "observations": ["4"], "parse_error": None}],
             "result": {"status": "completed", "reason": "final answer", "score": 1.0,
                        "success": True, "reward": 1.0}},
}  # fmt: skip


def test_job_views() -> None:
    text = env_views.job_summary(JOB, now=165.0)
    assert "training toolcall until 2 new checkpoints" in text
    assert "episodes 8 · solved 2 · success 25% · aborted 1" in text
    assert "checkpoints 1/2 · rounds 2" in text and "1:05" in text
    curves = env_views.job_curves(JOB)
    assert curves["success"] == ([1.0, 2.0], [0.0, 0.5])
    assert curves["reward"] == ([1.0], [-1.0])  # a round without rewards has no point
    live = env_views.live_text(JOB)
    # model and page text is escaped: `[e7]` and `[b]` are shown, not read as markup
    assert r"\[e7]" in live and r"\[b]bold\[/b]" in live
    assert "solved · score 1.00 · reward +1.00" in live
    assert env_views.job_summary(None).startswith("No env job")
    assert env_views.live_text(None) == "No episode yet."
    flat = {**JOB, "groups": 4, "varied": 0, "note": NO_SIGNAL_TEXT}
    text = env_views.job_summary(flat, now=165.0)
    assert "groups with variance 0/4" in text and NO_SIGNAL_TEXT in text
    assert NO_SIGNAL_TEXT not in env_views.job_summary({**JOB, "groups": 4, "varied": 1}, now=1.0)


def test_env_rows_and_requirements() -> None:
    overview = {
        "envs": [
            {"name": "terminal", "tasks": 24, "train": 20, "heldout": 4,
             "families": {"files": 6, "text": 6}, "available": False, "why": "no bwrap"},
        ],
        "sandbox": {"ok": False, "name": "none", "detail": "no bwrap"},
        "browser": {"ok": True, "detail": "Chromium"},
    }  # fmt: skip
    assert env_views.env_row(overview["envs"][0]) == (
        "terminal", "24", "20", "4", "files 6, text 6", "unavailable",
    )  # fmt: skip
    assert env_views.requirements_line(overview) == (
        "sandbox: unavailable (no bwrap) · browser: ok"
    )
    assert env_views.unavailable_note(overview) == "terminal: no bwrap"


def test_env_sessions_are_marked() -> None:
    ep = {"env": "terminal", "task_id": "fizzbuzz", "split": "train", "status": "completed",
          "outcome_reward": -1.0, "trained": True}  # fmt: skip
    row = {"id": "env-terminal-1", "source": "env:terminal", "turns": 2, "mean_reward": -0.5,
           "review_state": "pending", "created": None, "episode": ep}  # fmt: skip
    assert views.session_row(row)[1] == "env ▸ terminal fizzbuzz"
    assert views.source_label({"source": "env:swe"}) == "env ▸ swe"
    assert views.source_label({"source": "api"}) == "api"
    assert "outcome -1.00, trained on" in views.episode_line(ep)


async def test_evaluation_from_the_screen(engine: Any) -> None:
    client = LocalClient(engine)
    app = ClawrlApp(client, capture_logs=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        screen = app.screen
        assert isinstance(screen, EnvironmentsScreen)
        table = screen.query_one("#envs", DataTable)
        await until(pilot, lambda: table.row_count == len(env_names()))
        names = [str(k.value) for k in table.rows]
        assert names == env_names()
        for name in names:
            tasks = make_env(name, allow_unsafe=True).tasks()
            assert table.get_row(name)[1] == str(len(tasks))

        table.move_cursor(row=names.index("toolcall"))
        await pilot.press("e")
        modal = app.screen
        assert isinstance(modal, PromptModal)
        box = modal.query_one("#prompt-input", Input)
        box.value = "1"
        await pilot.press("enter")

        def ended() -> dict[str, Any] | None:
            job = client.env_job()
            return job if job and job["state"] in ("finished", "failed", "stopped") else None

        job = await until(pilot, ended, timeout=120)
        assert job["state"] == "finished", job["error"]
        assert (job["kind"], job["env"], job["episodes"]) == ("eval", "toolcall", 1)
        heldout = [t for t in make_env("toolcall").tasks() if t.split == "heldout"]
        live = job["live"]
        assert live["task_id"] == heldout[0].id and live["turns"]
        assert live["result"]["status"] in ("completed", "truncated", "failed")
        summary = screen.query_one("#job-summary", Static)
        await until(pilot, lambda: "state finished" in str(summary.render()))
        assert heldout[0].id in str(screen.query_one("#live", Static).render())

        # The rollout's session: recorded, held out, never trained on; marked on Sessions.
        sid = live["session_id"]
        store = engine.engine.store
        episode = store.get_episode(sid)
        assert episode is not None and episode.split == "heldout" and not episode.trained
        await pilot.press("2")
        sessions = app.screen
        assert isinstance(sessions, SessionsScreen)
        stable = sessions.query_one("#sessions", DataTable)
        await until(pilot, lambda: sid in [k.value for k in stable.rows])
        assert str(stable.get_row(sid)[1]).startswith("env ▸ toolcall")
        stable.move_cursor(row=[k.value for k in stable.rows].index(sid))
        await until(pilot, lambda: sessions.selected == sid)
        await pilot.press("x")
        await until(pilot, lambda: store.get_session(sid).review_state == "excluded")


async def test_training_job_refused_while_training_is_off(engine: Any) -> None:
    client = LocalClient(engine)
    app = ClawrlApp(client, capture_logs=False)
    said: list[str] = []
    notify = app.notify

    def capture(message: str, **kw: Any) -> None:
        said.append(message)
        notify(message, **kw)

    app.notify = capture  # type: ignore[method-assign]
    before = client.env_job()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        screen = app.screen
        assert isinstance(screen, EnvironmentsScreen)
        table = screen.query_one("#envs", DataTable)
        await until(pilot, lambda: table.row_count > 0)
        table.move_cursor(row=[k.value for k in table.rows].index("toolcall"))
        await pilot.press("t")
        assert isinstance(app.screen, PromptModal)
        await pilot.press("enter")
        await until(pilot, lambda: any("training is off" in m for m in said), timeout=30)
    after = client.env_job()
    assert (after or {}).get("id") == (before or {}).get("id")  # no job was started


def test_job_request_validation(engine: Any) -> None:
    client = LocalClient(engine)
    with pytest.raises(ValueError, match="unknown env"):
        client.start_env_job({"kind": "eval", "env": "nope"})
    with pytest.raises(ValueError):
        client.start_env_job({"kind": "dance", "env": "toolcall"})
    with pytest.raises(ValueError):
        client.start_env_job({"kind": "eval", "env": "toolcall", "limit": -1})
