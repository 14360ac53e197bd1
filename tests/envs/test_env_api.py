"""Env rollouts through the real endpoint: turns sent with `X-Session-Source: env:<name>`
are recorded like any turn but never judged or collected; posting the episode group turns
them into samples carrying the env's observations and the group's advantages. Real engine
(embedded model), the official `openai` client, real SQLite."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI

pytestmark = pytest.mark.slow


def env_turns(engine: Any, session_id: str, n: int) -> list[dict[str, Any]]:
    client = OpenAI(base_url=engine.url, api_key="x", max_retries=0)
    headers = {"X-Session-Id": session_id, "X-Session-Source": "env:toolcall"}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 17 * 23?"},
    ]
    for i in range(n):
        r = client.chat.completions.create(
            model="clawrl",
            messages=messages,
            max_tokens=6,
            extra_headers=headers,  # type: ignore[arg-type]
        )
        messages += [
            {"role": "assistant", "content": r.choices[0].message.content or ""},
            {"role": "user", "content": f"<tool_response>{391 + i}</tool_response>"},
        ]
    return messages


def group(session_id: str, rewards: list[float | None], **kw: Any) -> dict[str, Any]:
    return {
        "env": "toolcall", "task_id": "calc-0001", "group_id": f"g-{session_id}",
        "split": "train", "train": True,
        "episodes": [{
            "session_id": session_id, "status": "completed", "reason": "final answer",
            "outcome_reward": 1.0, "verdict": {"score": 1.0}, "duration_s": 0.5,
            "turns": [{"observation": f"obs {i}", "reward": r} for i, r in enumerate(rewards)],
        }],
        **kw,
    }  # fmt: skip


def test_env_turns_become_samples_only_through_their_episode(engine: Any) -> None:
    store = engine.engine.store
    sid = f"env-toolcall-{uuid.uuid4().hex[:8]}"
    env_turns(engine, sid, 2)
    assert store.get_session(sid).source == "env:toolcall"
    assert len(store.turns_for_session(sid, type="main")) == 2
    time.sleep(1.5)  # three collector passes: none may touch an env session
    assert store.samples_for_session(sid) == []
    http = httpx.Client(base_url=engine.url.removesuffix("/v1"), timeout=30)
    r = http.post("/admin/env/episodes", json=group(sid, [0.75, -0.5]))
    assert r.status_code == 200, r.text
    assert r.json()["data"] == [{"session_id": sid, "samples": 2, "trainable": 2}]
    samples = sorted(store.samples_for_session(sid), key=lambda s: s.turn_id)
    assert [s.state for s in samples] == ["judged", "judged"]
    assert [s.next_state_text for s in samples] == ["obs 0", "obs 1"]
    assert [store.get_judgment(s.id).score for s in samples] == [0.75, -0.5]
    assert store.get_session(sid).closed_at is not None
    listed = http.get("/admin/env/episodes", params={"env": "toolcall"}).json()["data"]
    assert any(e["session_id"] == sid and e["trained"] for e in listed)
    # the same episode twice, or one that does not match what the endpoint recorded: 409
    again = http.post("/admin/env/episodes", json=group(sid, [0.75, -0.5]))
    assert again.status_code == 409 and "already has its episode" in again.text
    sid2 = f"env-toolcall-{uuid.uuid4().hex[:8]}"
    env_turns(engine, sid2, 1)
    short = http.post("/admin/env/episodes", json=group(sid2, [0.5, 0.5, 0.5]))
    assert short.status_code == 409 and "1 recorded turns, the episode 3" in short.text


def test_bad_env_requests_get_clear_4xx(engine: Any) -> None:
    client = OpenAI(base_url=engine.url, api_key="x", max_retries=0)
    with pytest.raises(BadRequestError, match="X-Session-Source must be env:<name>"):
        client.chat.completions.create(
            model="clawrl", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
            extra_headers={"X-Session-Source": "openclaw"},
        )  # fmt: skip
    http = httpx.Client(base_url=engine.url.removesuffix("/v1"), timeout=30)
    for body, where in [
        ({**group("s", [0.1]), "env": "Bad Name"}, "env"),
        (group("s", [3.0]), "episodes.0.turns.0.reward"),
        ({**group("s", [0.1]), "extra": 1}, "extra"),
        ({**group("s", [0.1]), "episodes": []}, "episodes"),
    ]:
        r = http.post("/admin/env/episodes", json=body)
        assert r.status_code == 400, r.text
        assert where in r.json()["error"]["message"]
    r = http.post("/admin/env/episodes", json=group("no-such-session", [0.1]))
    assert r.status_code == 409 and "not an env session" in r.text
