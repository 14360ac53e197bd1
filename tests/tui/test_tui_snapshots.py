"""SVG snapshots of each screen (pytest-textual-snapshot, textual pinned in pyproject).

These use `FixedClient`, a fake EngineClient with fixed data: snapshots must be
byte-for-byte deterministic, which a live engine (timestamps, sampled answers) is not.
The real app against a real engine is covered by tests/tui/test_tui_pilot.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.config import HealthSettings
from clawrl_app.engine.judging.health import summarize
from clawrl_app.engine.store import VersionLength
from clawrl_app.tui.app import ClawrlApp

T0 = 1_750_000_000.0
# 6 of 10 ratings agreed (a warning); rewards 22 / 8 / 10; v2 answers 58 % longer than base's
JUDGE_HEALTH = summarize(
    [1.0] * 6 + [0.0] * 4,
    {1: 22, 0: 8, -1: 10},
    [VersionLength("base", 30, 120.0), VersionLength("v1", 20, 132.0),
     VersionLength("v2", 12, 190.0)],
    HealthSettings(),
)  # fmt: skip
TURNS = [
    {"turn_id": 1, "idx": 0, "type": "main", "prompt": "Tell me about topic 0.",
     "response": "Topic 0 is a long story that starts in the year 1900.", "version": "base",
     "sample_state": "trained", "next_state": "No, that's too long.", "reward": -1.0,
     "votes": [{"score": -1}, {"score": -1}, {"score": 1}], "user_rating": None,
     "hint": "Answer in one sentence.", "trained_in": "v1"},
    {"turn_id": 2, "idx": 1, "type": "main", "prompt": "No, that's too long.",
     "response": "Topic 0 began in 1900.", "version": "base", "sample_state": "judged",
     "next_state": "Thanks, perfect!", "reward": 1.0, "votes": [{"score": 1}] * 3,
     "user_rating": 1, "hint": None, "trained_in": None},
]  # fmt: skip


class FixedClient:
    """A fake EngineClient with fixed data (for deterministic snapshots only)."""

    url = "http://127.0.0.1:30000/v1"
    trainer_log: Path | None = None

    def status(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "api_key_hint": None,
            "model": "SmolLM2-135M-Instruct",
            "plan": "Backend:  torch\nServing:  cpu\nTrainer:  lora on cpu",
            "serving": {"state": "running", "version": "v2"},
            "collection": {"created": 4, "waiting": 0, "last_error": None, "queue_depth": 0},
            "judging": {"judged": 4, "failed": 0, "last_error": None, "queue_depth": 1},
            "training": {"state": "running", "last_error": None},
            "publishing": {"published": 2, "last_error": None, "version": "v2", "guard": {
                "enabled": True, "min_personal_items": 8, "max_degeneration_rise": 0.05,
                "last": {"candidate": "v3", "served": "v2", "passed": False,
                "reasons": ["degeneration 0.42 vs base 0.12 (max rise 0.05) on 52 answers"]},
                "recent": [
                    {"candidate": "v2", "served": "v1", "passed": True, "personal": 0.6,
                     "personal_n": 5, "personal_decides": False, "general": 0.58,
                     "degeneration": 0.13, "base_degeneration": 0.12},
                    {"candidate": "v3", "served": "v2", "passed": False, "personal": 0.62,
                     "personal_n": 6, "personal_decides": False, "general": 0.65,
                     "degeneration": 0.42, "base_degeneration": 0.12}]}},
            "counts": {"sessions": 2, "turns": 6, "samples_pending": 1, "samples_judged": 1,
                       "samples_trained": 2},
            "judge_health": JUDGE_HEALTH,
        }  # fmt: skip

    def sessions(self, review_state: str | None = None) -> list[dict[str, Any]]:
        rows = [
            {"id": "chat-1", "source": "api", "created": T0 + 60, "closed": False, "turns": 1,
             "mean_reward": None, "review_state": "pending"},
            {"id": "train-0", "source": "api", "created": T0, "closed": True, "turns": 3,
             "mean_reward": 0.0, "review_state": "approved"},
        ]  # fmt: skip
        return [r for r in rows if review_state in (None, r["review_state"])]

    def session_detail(self, session_id: str) -> dict[str, Any] | None:
        return {"id": session_id, "source": "api", "review_state": "approved", "closed": True,
                "turns": TURNS if session_id == "train-0" else []}  # fmt: skip

    def set_review(self, session_id: str, state: str) -> None:
        pass

    def delete_session(self, session_id: str) -> dict[str, Any] | None:
        return None

    def rate(self, session_id: str, turn_id: int, rating: int, hint: str | None = None) -> None:
        pass

    def checkpoints(self) -> list[dict[str, Any]]:
        return [
            {"version": "v2", "parent": "v1", "step": 2, "created": T0 + 200,
             "status": "published", "metrics": {"loss": 0.21, "reward/mean": 0.5, "kl": 0.001},
             "sessions": ["train-0"], "served": True},
            {"version": "v1", "parent": None, "step": 1, "created": T0 + 100,
             "status": "published", "metrics": {"loss": 0.34, "reward/mean": 0.0, "kl": 0.0},
             "sessions": ["train-0"], "served": False},
        ]  # fmt: skip

    def metrics(self, names: tuple[str, ...] = ()) -> dict[str, list[list[float]]]:
        series = {"loss": [0.4, 0.34, 0.3, 0.21], "reward/mean": [-0.5, 0.0, 0.25, 0.5],
                  "kl": [0.0, 0.001, 0.002, 0.001], "clip_frac": [0.0, 0.1, 0.05, 0.0],
                  "guard/personal": [0.5, 0.56, 0.62, 0.6],
                  "guard/general": [0.6, 0.6, 0.58, 0.65],
                  "guard/degeneration": [0.12, 0.1, 0.13, 0.42]}  # fmt: skip
        return {n: [[i + 1, v] for i, v in enumerate(series.get(n, []))] for n in names}

    def rollback(self, version: str | None = None, before_session: str | None = None) -> Any:
        return {"from": "v2", "to": version or "v1"}

    def chat_stream(self, messages: list[dict[str, Any]], session_id: str) -> Iterator[str]:
        yield from ["Hello", " there", "!"]

    def compare(self, a: str, b: str, last: int = 5, max_tokens: int = 128) -> dict[str, Any]:
        from clawrl_app.engine.publishing.compare import compare_item, summary

        pairs = [
            ("Write a haiku about rain.", "Soft rain on the roof, the garden drinks slowly, "
             "night keeps the secret.", "Rain on the roof, the garden drinks, night keeps it."),
            ("What is 2 + 2?", "2 + 2 = 4.", "2 + 2 = 4."),
        ]  # fmt: skip
        items = [compare_item([{"role": "user", "content": p}], x, y) for p, x, y in pairs]
        return {"a": a, "b": b, "max_tokens": max_tokens, "items": items, "summary": summary(items)}

    def env_overview(self) -> dict[str, Any]:
        return {
            "envs": [
                {"name": "browser", "tasks": 26, "train": 21, "heldout": 5,
                 "families": {"form": 6, "settings": 5, "table": 5, "todo": 5, "wizard": 5},
                 "available": False, "why": "missing Chromium (sudo apt-get install -y chromium)"},
                {"name": "terminal", "tasks": 24, "train": 20, "heldout": 4,
                 "families": {"data": 6, "files": 6, "scripting": 6, "text": 6},
                 "available": True, "why": None},
                {"name": "toolcall", "tasks": 125, "train": 100, "heldout": 25,
                 "families": {"dates": 25, "lookup": 25, "number": 25, "units": 25,
                              "word_arith": 25}, "available": True, "why": None},
            ],
            "sandbox": {"ok": True, "name": "bubblewrap", "detail": "bwrap 0.8.0"},
            "browser": {"ok": False, "detail": "missing Chromium (sudo apt-get install -y chromium)"},
        }  # fmt: skip

    def env_job(self) -> dict[str, Any] | None:
        return ENV_JOB

    def start_env_job(self, request: dict[str, Any]) -> dict[str, Any]:
        return ENV_JOB

    def stop_env_job(self) -> dict[str, Any] | None:
        return ENV_JOB

    def subscribe(self, callback: Any) -> None:
        pass

    def close(self) -> None:
        pass


ENV_JOB = {
    "id": "job-1", "kind": "train", "env": "toolcall", "state": "finished", "started": T0,
    "finished": T0 + 754, "error": None, "steps": 2, "split": "train", "checkpoints": 2,
    "episodes": 24, "successes": 5, "aborted": 0, "success_rate": 5 / 24,
    "rounds": [
        {"round": i + 1, "episodes": 8, "successes": s, "success_rate": s / 8,
         "reward_mean": -1 + s / 4, "checkpoints": i} for i, s in enumerate((1, 1, 3))
    ],
    "live": {"task_id": "calc-0042", "instruction": "A train travels 180 km in 2.5 hours. "
             "What is its speed in km/h? End with 'Answer: \\boxed{...}'.",
             "session_id": "env-toolcall-1", "result": {"status": "completed",
             "reason": "final answer", "score": 1.0, "success": True, "reward": 1.0},
             "turns": [
                 {"index": 0, "response": '<tool_call>{"name": "calculator", "arguments": '
                  '{"expression": "180 / 2.5"}}</tool_call>',
                  "actions": ["calculator {'expression': '180 / 2.5'}"],
                  "observations": ["72.0"], "parse_error": None},
                 {"index": 1, "response": "The speed is 72 km/h. Answer: \\boxed{72}",
                  "actions": [], "observations": ["correct"], "parse_error": None},
             ]},
}  # fmt: skip


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fixed time zone and chat session id, so the SVGs are the same on every machine."""
    monkeypatch.setattr("clawrl_app.tui.screens.chat.new_chat_session_id", lambda: "chat-fixed")
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def app() -> ClawrlApp:
    return ClawrlApp(FixedClient(), capture_logs=False)  # type: ignore[arg-type]


SIZE = (140, 40)


async def settle(pilot: Any, selector: str, check: Any) -> None:
    """Wait (not sleep) until the widget at `selector` satisfies `check`, then let it draw."""
    for _ in range(100):
        if check(pilot.app.screen.query_one(selector)):
            break
        await pilot.pause(0.05)
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.2)


def test_dashboard(snap_compare: Any) -> None:
    async def loaded(pilot: Any) -> None:
        await settle(pilot, "#endpoint", lambda w: "serving v2" in str(w.render()))

    assert snap_compare(app(), terminal_size=SIZE, run_before=loaded)


def test_sessions(snap_compare: Any) -> None:
    async def select(pilot: Any) -> None:
        await pilot.press("2")
        await settle(pilot, "#sessions", lambda t: t.row_count == 2)
        await pilot.press("down")
        await settle(pilot, "#turns", lambda t: t.row_count == 2)

    assert snap_compare(app(), terminal_size=SIZE, run_before=select)


def test_checkpoints_with_confirmation(snap_compare: Any) -> None:
    async def confirm(pilot: Any) -> None:
        await pilot.press("3")
        await settle(pilot, "#checkpoints", lambda t: t.row_count == 3)
        await pilot.press("down", "r")
        await settle(pilot, "#dialog-text", lambda w: True)

    assert snap_compare(app(), terminal_size=SIZE, run_before=confirm)


def test_compare_side_by_side(snap_compare: Any) -> None:
    async def compared(pilot: Any) -> None:
        await pilot.press("7")
        await settle(pilot, "#version-a", lambda w: w.value == "v2")
        await pilot.press("c")
        await settle(pilot, "#compare-items", lambda w: len(w.query(".compare-row")) == 2)

    assert snap_compare(app(), terminal_size=SIZE, run_before=compared)


def test_chat(snap_compare: Any) -> None:
    async def chat(pilot: Any) -> None:
        await pilot.press("4")
        await pilot.click("#chat-input")
        await pilot.press(*"hi", "enter")
        await settle(pilot, "#chat-input", lambda w: len(pilot.app.screen.messages) == 2)
        await pilot.press("escape")  # focus leaves the input: no blinking cursor in the SVG

    assert snap_compare(app(), terminal_size=SIZE, run_before=chat)


def test_environments(snap_compare: Any) -> None:
    async def loaded(pilot: Any) -> None:
        await pilot.press("6")
        await settle(pilot, "#envs", lambda t: t.row_count == 3)
        await settle(pilot, "#job-summary", lambda w: "state finished" in str(w.render()))

    assert snap_compare(app(), terminal_size=SIZE, run_before=loaded)


LOG_LINES = [
    (20, "2026-11-22 04:00:01 INFO    clawrl.engine: serving SmolLM2-135M-Instruct at http://127.0.0.1:30000/v1"),
    (20, "2026-11-22 04:00:09 INFO    clawrl.judge: judged sample 1: -1 (heuristic)"),
    (40, "2026-11-22 04:00:12 ERROR   clawrl.publisher: publishing v3 failed: canary mismatch"),
    (20, "2026-11-22 04:00:15 INFO    clawrl.judge: judged sample 2: +1 (heuristic)"),
]  # fmt: skip


def test_logs_filtered(snap_compare: Any) -> None:
    """The Logs screen with fixed lines, filtered to the judge's."""
    a = app()
    a.logs.extend(LOG_LINES)

    async def filtered(pilot: Any) -> None:
        await pilot.press("5", "slash", *"judge")
        await settle(pilot, "#log-filter", lambda w: w.value == "judge")
        await pilot.press("escape")  # no blinking cursor in the SVG

    assert snap_compare(a, terminal_size=SIZE, run_before=filtered)


async def test_keys_are_remapped_by_binding_id() -> None:
    """`[ui] keys` remaps bindings by id (here the Sessions screen to `s`)."""
    from clawrl_app.tui.screens.sessions import SessionsScreen

    app = ClawrlApp(FixedClient(), capture_logs=False, keys={"screen.sessions": "s"})
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")  # the old key no longer switches
        assert not isinstance(app.screen, SessionsScreen)
        await pilot.press("s")
        assert isinstance(app.screen, SessionsScreen)
