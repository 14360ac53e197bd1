"""Env episodes in the store: recording turns an env session's turns into samples in one
transaction; the collector never touches env sessions. Real SQLite files in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clawrl_app.engine.store import EpisodeRow, NewTurn, Store, StoreError, TurnSignal


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "clawrl.sqlite3") as s:
        yield s


def record_turns(store: Store, session_id: str, source: str, n: int) -> None:
    store.ensure_session(session_id, source)
    for i in range(n):
        store.record_turn(
            NewTurn(
                session_id=session_id,
                type="main",
                request={"messages": [{"role": "user", "content": f"task {i}"}]},
                response_text=f"call {i}",
                prompt_ids=[1, 2, i],
                response_ids=[5, i],
                logprobs=[-0.5, -1.0],
                policy_version="base",
                response={"finish_reason": "tool_calls"},
                latency_ms=3.0,
                prompt_tokens=3,
                completion_tokens=2,
                finish_reason="tool_calls",
            )
        )


def episode(session_id: str, status: str = "completed", reward: float | None = 1.0) -> EpisodeRow:
    return EpisodeRow(
        session_id=session_id, env="toolcall", task_id="calc-0001", group_id="g1",
        split="train", status=status, reason="final answer", outcome_reward=reward,
        verdict={"score": 1.0}, trained=reward is not None, turns=0, duration_s=1.5, created=0.0,
    )  # fmt: skip


def test_an_episode_turns_its_turns_into_judged_samples_at_once(store: Store) -> None:
    record_turns(store, "env-1", "env:toolcall", 3)
    record_turns(store, "chat-1", "api", 2)
    # the collector's query sees only the conversation's turns, never the env session's
    assert {t.session_id for t in store.main_turns_without_sample()} == {"chat-1"}
    signals = [TurnSignal(f"obs {i}", {"exit_code": 0}, r) for i, r in enumerate([0.5, -0.25, 0.5])]
    ids = store.record_episode(episode("env-1"), signals, "env:toolcall", 100.0, "unused", now=50.0)
    assert len(ids) == 3
    samples = [store.get_sample(i) for i in ids]
    assert [s.state for s in samples if s] == ["judged"] * 3
    assert [s.next_state_text for s in samples if s] == ["obs 0", "obs 1", "obs 2"]
    assert [store.get_judgment(i).score for i in ids] == [0.5, -0.25, 0.5]  # type: ignore[union-attr]
    assert store.trainable_samples(10, now=99.0) == []  # review grace first
    assert [s.id for s in store.trainable_samples(10, now=100.0)] == ids
    ep = store.get_episode("env-1")
    assert ep is not None and ep.turns == 3 and ep.trained and ep.verdict == {"score": 1.0}
    assert store.get_session("env-1").closed_at == 50.0  # type: ignore[union-attr]
    assert [e.session_id for e in store.list_episodes(env="toolcall")] == ["env-1"]
    assert store.list_episodes(env="terminal") == []


def test_an_untrainable_episode_is_recorded_but_never_trained(store: Store) -> None:
    record_turns(store, "env-2", "env:terminal", 2)
    signals = [TurnSignal("obs", None, None)]  # the rollout lost its last answer: still fine
    ids = store.record_episode(
        episode("env-2", "aborted", None), signals, "env:terminal", 0.0, "infrastructure failure"
    )
    rows = [store.get_sample(i) for i in ids]
    assert {(s.state, s.skip_reason) for s in rows if s} == {("skipped", "infrastructure failure")}
    assert store.trainable_samples(10, now=1e12) == []
    assert store.get_episode("env-2").status == "aborted"  # type: ignore[union-attr]


def test_mismatched_or_foreign_episodes_are_refused_and_write_nothing(store: Store) -> None:
    record_turns(store, "env-3", "env:toolcall", 2)
    record_turns(store, "chat-2", "openclaw", 1)
    with pytest.raises(StoreError, match="2 recorded turns, the episode 3"):
        store.record_episode(episode("env-3"), [TurnSignal("o", None, 1.0)] * 3, "b", 0.0, "x")
    with pytest.raises(StoreError, match="not an env session"):
        store.record_episode(episode("chat-2"), [TurnSignal("o", None, 1.0)], "b", 0.0, "x")
    with pytest.raises(ValueError, match="episode status"):
        store.record_episode(
            episode("env-3", "weird"), [TurnSignal("o", None, 1.0)] * 2, "b", 0.0, "x"
        )
    assert store.get_episode("env-3") is None and store.samples_for_session("env-3") == []
    store.record_episode(episode("env-3"), [TurnSignal("o", None, 1.0)] * 2, "b", 0.0, "x")
    with pytest.raises(StoreError, match="already has its episode"):
        store.record_episode(episode("env-3"), [TurnSignal("o", None, 1.0)] * 2, "b", 0.0, "x")
