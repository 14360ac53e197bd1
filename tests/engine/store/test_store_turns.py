"""Recording turns in the SQLite store: exact round trips, per-session order under
concurrent writers, and the chat path's one-transaction write (`append_turn`)."""

from __future__ import annotations

import dataclasses
import math
import sqlite3
import threading
from pathlib import Path

import pytest

from clawrl_app.engine.store import NewTurn, Store, StoreError
from tests.engine.store.test_store import new_turn


def test_record_turn_round_trips_tokens_and_logprobs_exactly(store: Store) -> None:
    store.ensure_session("s", "test")
    prompt_ids = [0, 1, 151643, 2**31 - 1, 42]
    logprobs = [-0.0, -1.0 / 3.0, -5e-324, -1e-300, -math.inf, -123.456789012345678]
    turn = NewTurn(
        session_id="s",
        type="main",
        request={"messages": [{"role": "user", "content": "héllo ✓"}], "tools": []},
        response_text="hi",
        prompt_ids=prompt_ids,
        response_ids=[5, 6, 7, 8, 9, 10],
        logprobs=logprobs,
        policy_version="adapter_000003",
        response={"tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        finish_reason="tool_calls",
    )
    recorded = store.record_turn(turn, now=50.0)
    fetched = store.get_turn(recorded.id)
    assert fetched == recorded
    assert fetched.prompt_ids == prompt_ids
    assert fetched.response_ids == [5, 6, 7, 8, 9, 10]
    assert [math.copysign(1, x) for x in fetched.logprobs] == [-1.0] * 6  # keeps -0.0
    assert fetched.logprobs == logprobs
    assert fetched.request == turn.request and fetched.response == turn.response
    assert (fetched.idx, fetched.created, fetched.finish_reason) == (0, 50.0, "tool_calls")
    with sqlite3.connect(store.path) as raw:  # compact: 4 bytes per id, 8 per log-prob
        sizes = raw.execute("SELECT length(prompt_ids), length(logprobs) FROM turns").fetchone()
    assert sizes == (4 * len(prompt_ids), 8 * len(logprobs))


def test_idx_counts_per_session_and_last_seen_bumps(store: Store) -> None:
    store.ensure_session("a", "test", now=10.0)
    store.ensure_session("b", "test", now=10.0)
    for n, sid in enumerate(["a", "b", "a", "a", "b"]):
        store.record_turn(new_turn(sid, "side" if n == 3 else "main", n), now=20.0 + n)
    assert [t.idx for t in store.turns_for_session("a")] == [0, 1, 2]
    assert [t.idx for t in store.turns_for_session("b")] == [0, 1]
    assert [t.idx for t in store.turns_for_session("a", type="main")] == [0, 1]
    assert [t.idx for t in store.turns_for_session("a", type="side")] == [2]
    last = store.last_main_turn("a")
    assert last is not None and last.response_text == "answer 2"
    assert store.last_main_turn("nobody") is None
    a = store.get_session("a")
    assert a is not None and (a.created, a.last_seen, a.source) == (10.0, 23.0, "test")
    again = store.ensure_session("a", "other", now=30.0)
    assert (again.source, again.created, again.last_seen) == ("test", 10.0, 30.0)


def test_append_turn_creates_touches_counts_and_closes_in_one_call(store: Store) -> None:
    # the chat path's single write: same rows as ensure_session + record_turn + close
    first = store.append_turn(new_turn("s", n=0), "openclaw", now=10.0)
    redacted = dataclasses.replace(new_turn("s", n=1), redactions={"email": 2, "phone": 0})
    second = store.append_turn(redacted, "other", now=11.0)
    last = store.append_turn(new_turn("s", "side", n=2), "other", done=True, now=12.0)
    turns = store.turns_for_session("s")
    assert [t.id for t in turns] == [first, second, last]
    assert [(t.idx, t.type, t.created) for t in turns] == [
        (0, "main", 10.0),
        (1, "main", 11.0),
        (2, "side", 12.0),
    ]
    assert (turns[1].prompt_ids, turns[1].logprobs, turns[1].redacted) == (
        [1, 2, 3, 1],
        [-0.25, -1.5],
        2,
    )
    session = store.get_session("s")
    assert session is not None
    assert (session.source, session.created, session.last_seen) == ("openclaw", 10.0, 12.0)
    assert (session.closed_at, session.close_reason) == (12.0, "done")
    assert store.redaction_counts() == {"email": 2}
    with pytest.raises(ValueError, match="turn type"):
        store.append_turn(new_turn("s", "bogus"), "x")
    assert len(store.turns_for_session("s")) == 3


def test_session_idx_is_unique_even_under_concurrent_writers(db_path: Path) -> None:
    stores = [Store(db_path), Store(db_path)]
    stores[0].ensure_session("s", "test")

    def write(s: Store) -> None:
        for n in range(15):
            s.record_turn(new_turn("s", n=n))

    threads = [threading.Thread(target=write, args=(s,)) for s in stores for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [t.idx for t in stores[1].turns_for_session("s")] == list(range(60))
    with sqlite3.connect(db_path) as raw, pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        raw.execute(
            "INSERT INTO turns SELECT NULL, session_id, idx, type, request_json, response_text, "
            "response_json, prompt_ids, response_ids, logprobs, policy_version, latency_ms, "
            "prompt_tokens, completion_tokens, finish_reason, created, redacted, holdout "
            "FROM turns LIMIT 1"
        )
    for s in stores:
        s.close()


def test_record_turn_needs_a_known_session_and_valid_type(store: Store) -> None:
    with pytest.raises(StoreError, match="unknown session 'ghost'"):
        store.record_turn(new_turn("ghost"))
    store.ensure_session("s", "test")
    with pytest.raises(ValueError, match="turn type"):
        store.record_turn(new_turn("s", type="weird"))
    assert store.session_stats()["turns"] == 0
