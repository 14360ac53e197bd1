"""Pure view-model tests (no Textual app) and the TUI's import discipline."""

from __future__ import annotations

import json
import subprocess
import sys

from clawrl_app.tui import views

CKPTS = [
    {"version": "v2", "parent": "v1", "step": 2, "created": 20.0, "status": "published",
     "metrics": {"loss": 0.25, "reward/mean": 0.5, "kl": 0.0012}, "sessions": ["a", "b"],
     "served": True},
    {"version": "v1", "parent": None, "step": 1, "created": 10.0, "status": "published",
     "metrics": {}, "sessions": ["a"], "served": False},
]  # fmt: skip


def test_session_row_formats_reward_and_review_state() -> None:
    row = views.session_row(
        {
            "id": "s1",
            "source": "api",
            "turns": 3,
            "mean_reward": 0.5,
            "review_state": "pending",
            "created": None,
        }  # fmt: skip
    )
    assert row == ("s1", "api", "3", "+0.50", "pending", "–")
    assert views.reward(None) == "–" and views.reward(-1) == "-1.00"


def test_turn_row_shows_user_rating_votes_hint_and_checkpoint() -> None:
    turn = {"idx": 2, "type": "main", "prompt": "hi\nthere", "response": "x" * 100,
            "reward": 1.0, "user_rating": 1, "votes": [{"score": 1}, {"score": -1}, 1],
            "hint": None, "trained_in": "v3"}  # fmt: skip
    idx, kind, prompt, answer, reward, votes, hint, trained = views.turn_row(turn)
    assert (idx, kind, prompt) == ("2", "main", "hi there")
    assert len(answer) == 60 and answer.endswith("…")
    assert reward == "+1.00 (you +1)" and votes == "+1 -1 +1" and hint == "–" and trained == "v3"


def test_trained_versions_are_unique_and_sorted() -> None:
    detail = {"turns": [{"trained_in": "v2"}, {"trained_in": None}, {"trained_in": "v1"},
                        {"trained_in": "v2"}]}  # fmt: skip
    assert views.trained_versions(detail) == ["v1", "v2"]


def test_checkpoint_row_marks_the_served_version() -> None:
    assert views.checkpoint_row(CKPTS[0]) == (
        "▶ v2",
        "v1",
        "2",
        views.clock(20.0),
        "published",
        "0.25",
        "0.5",
        "0.0012",
        "2",
    )
    assert views.checkpoint_row(CKPTS[1])[:2] == ("  v1", "base")


def test_rollback_plan_says_what_happens() -> None:
    text = views.rollback_plan("v1", "v2", CKPTS)
    assert text.startswith("Serve v1 instead of v2: new requests use v1 at once")
    assert "trainer restarts from v1 (its weights and optimizer)" in text
    assert "v2 stay on disk; roll forward with f." in text
    assert "(the base model, no adapter)" in views.rollback_plan("base", "v2", CKPTS)
    assert views.newest_version(CKPTS) == "v2"


def test_curve_sorts_points_by_step() -> None:
    assert views.curve([[2, 0.5], [1, 0.7], [3, 0.1]]) == ([1, 2, 3], [0.7, 0.5, 0.1])
    assert views.curve([]) == ([], [])


def test_status_lines() -> None:
    status = {
        "url": "http://127.0.0.1:30000/v1",
        "api_key_hint": "…abcd",
        "serving": {"state": "running", "version": "v2"},
        "judging": {"judged": 3, "queue_depth": 2, "last_error": "boom"},
        "training": {"state": "running", "stepping": True, "last_error": None},
        "counts": {"sessions": 4, "turns": 9, "samples_pending": 2, "samples_trained": 1},
        "storage": {"state": "failed", "last_error": "The disk holding /d is full: free space."},
    }
    assert views.endpoint_line(status) == (
        "http://127.0.0.1:30000/v1  ·  key …abcd (clawrl-app api-key)  ·  serving v2"
    )
    assert views.loop_lines(status) == [
        "serving     running ",
        "judging     failed   queue 2  last error: boom",
        "training    running  step in progress",
        "storage     failed    last error: The disk holding /d is full: free space.",
    ]
    assert "turns 9" in views.counter_line(status) and "pending 2" in views.counter_line(status)


def test_tui_does_not_import_torch() -> None:
    """Importing the whole UI (app, screens, clients) loads no ML framework."""
    code = (
        "import json, sys, clawrl_app.tui.app, clawrl_app.tui.client;"
        "print(json.dumps([m for m in ('torch','transformers','peft','accelerate') "
        "if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
