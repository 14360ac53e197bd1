"""The SQLite store: real files in tmp_path, real second processes, no mocks."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clawrl_app.engine import store as store_module
from clawrl_app.engine.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    NewTurn,
    Store,
    StoreError,
)

REPO = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("store_writer_child.py")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def new_turn(session_id: str, type: str = "main", n: int = 0) -> NewTurn:
    return NewTurn(
        session_id=session_id,
        type=type,
        request={"messages": [{"role": "user", "content": f"hello {n}"}]},
        response_text=f"answer {n}",
        prompt_ids=[1, 2, 3, n],
        response_ids=[7, n],
        logprobs=[-0.25, -1.5],
        policy_version="v0",
        response={"finish_reason": "stop", "tool_calls": []},
        latency_ms=12.5,
        prompt_tokens=4,
        completion_tokens=2,
        finish_reason="stop",
    )


def run_child(*args: str, stdout: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(CHILD), *args], env=env, text=True, stdout=stdout)


# -- opening, permissions, schema ---------------------------------------------------------


def test_new_store_is_private_wal_and_versioned(db_path: Path) -> None:
    old_umask = os.umask(0)  # the 0600 must come from the store, not from the umask
    try:
        with Store(db_path) as s:
            s.add_event("hello", {})
            assert mode_of(db_path) == 0o600
            for suffix in ("-wal", "-shm"):
                sidecar = db_path.with_name(db_path.name + suffix)
                assert sidecar.exists()
                assert mode_of(sidecar) == 0o600
            assert s.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
            assert s.integrity_check() == "ok"
    finally:
        os.umask(old_umask)
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_existing_file_is_made_private(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.touch()
    os.chmod(db_path, 0o644)
    Store(db_path).close()
    assert mode_of(db_path) == 0o600


def test_reopen_is_idempotent(db_path: Path) -> None:
    with Store(db_path) as s:
        s.ensure_session("a", "test", now=1.0)
    for _ in range(2):
        with Store(db_path) as s:
            assert s.schema_version() == SCHEMA_VERSION
            assert [r.id for r in s.list_sessions()] == ["a"]
            assert s.integrity_check() == "ok"


def test_newer_schema_is_refused_with_upgrade_advice(db_path: Path) -> None:
    Store(db_path).close()
    with sqlite3.connect(db_path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    with pytest.raises(StoreError, match=r"newer clawrl-app.*[Uu]pgrade clawrl-app"):
        Store(db_path)


def test_forward_migration_keeps_data(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(db_path) as s:
        s.ensure_session("a", "test")
    extra = "ALTER TABLE sessions ADD COLUMN extra TEXT; CREATE INDEX sx ON sessions(extra);"
    monkeypatch.setattr(store_module, "MIGRATIONS", [*MIGRATIONS, extra])
    with sqlite3.connect(db_path) as raw:  # the store must not need the new column
        assert "extra" not in [r[1] for r in raw.execute("PRAGMA table_info(sessions)")]
    s = Store(db_path)
    try:
        assert s.schema_version() == SCHEMA_VERSION + 1
    finally:
        s.close()
    with sqlite3.connect(db_path) as raw:
        assert "extra" in [r[1] for r in raw.execute("PRAGMA table_info(sessions)")]
        assert raw.execute("SELECT id FROM sessions").fetchall() == [("a",)]


def test_failed_migration_is_rolled_back(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Store(db_path).close()
    bad = "ALTER TABLE sessions ADD COLUMN extra TEXT; THIS IS NOT SQL;"
    monkeypatch.setattr(store_module, "MIGRATIONS", [*MIGRATIONS, bad])
    with pytest.raises(StoreError):
        Store(db_path)
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert "extra" not in [r[1] for r in raw.execute("PRAGMA table_info(sessions)")]


def test_unusable_locations_give_clear_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match=r"a-file.*writable"):
        Store(blocker / "clawrl.sqlite3")
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a clawrl-app store"):
        Store(garbage)


def test_closed_store_raises(db_path: Path) -> None:
    s = Store(db_path)
    s.close()
    s.close()  # twice is fine
    with pytest.raises(StoreError, match="closed"):
        s.get_session("a")


# -- sessions and turns -------------------------------------------------------------------


def test_review_state_is_validated(store: Store) -> None:
    store.ensure_session("a", "test", now=1.0)
    store.ensure_session("b", "test", now=2.0)
    with pytest.raises(ValueError, match="review_state"):
        store.set_review_state("a", "maybe")
    assert store.set_review_state("a", "excluded")
    assert not store.set_review_state("ghost", "approved")
    assert [s.id for s in store.list_sessions()] == ["b", "a"]  # newest first
    assert [s.id for s in store.list_sessions(review_state="excluded")] == ["a"]
    assert [s.id for s in store.list_sessions(limit=1)] == ["b"]
    with pytest.raises(ValueError):
        store.list_sessions(review_state="nope")
    assert store.set_session_note("b", "good one")
    b = store.get_session("b")
    assert b is not None and (b.note, b.review_state) == ("good one", "pending")


def test_close_and_idle_sessions(store: Store) -> None:
    store.ensure_session("old", "test", now=100.0)
    store.ensure_session("new", "test", now=500.0)
    store.ensure_session("done", "test", now=50.0)
    assert store.close_session("done", "session_done", now=60.0)
    assert not store.close_session("done", "again")
    assert [s.id for s in store.idle_sessions(last_seen_before=400.0)] == ["old"]
    done = store.get_session("done")
    assert done is not None and (done.closed_at, done.close_reason) == (60.0, "session_done")


def test_delete_session_cascades(store: Store) -> None:
    for sid in ("gone", "kept"):
        store.ensure_session(sid, "test")
        t0 = store.record_turn(new_turn(sid, n=0))
        store.record_turn(new_turn(sid, n=1))
        sample = store.create_sample(t0.id, sid, "user", "thanks", {"role": "user"})
        assert sample is not None
        store.record_judgment(sample, "prm", [1, 1], 1, None, [], None, None, eligible_at=0.0)
    gone_turn = store.turns_for_session("gone")[0]
    assert store.delete_session("gone")
    assert not store.delete_session("gone")
    assert store.get_session("gone") is None
    assert store.get_turn(gone_turn.id) is None
    assert store.samples_for_session("gone") == []
    stats = store.session_stats()
    assert (stats["sessions"], stats["turns"], stats["samples"]) == (1, 2, 1)
    kept = store.samples_for_session("kept")
    assert store.get_judgment(kept[0].id) is not None
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("SELECT count(*) FROM judgments").fetchone() == (1,)
    assert store.integrity_check() == "ok"


def test_session_stats(store: Store) -> None:
    store.ensure_session("a", "test")
    store.ensure_session("b", "test")
    store.set_review_state("b", "approved")
    store.close_session("b", "idle")
    t = store.record_turn(new_turn("a"))
    store.record_turn(new_turn("a", type="side"))
    store.create_sample(t.id, "a", "user", "ok", None)
    stats = store.session_stats()
    assert stats["sessions"] == 2 and stats["sessions_open"] == 1
    assert stats["sessions_pending"] == 1 and stats["sessions_approved"] == 1
    assert stats["sessions_excluded"] == 0
    assert (stats["turns"], stats["turns_main"]) == (2, 1)
    assert (stats["samples"], stats["samples_pending"], stats["samples_judged"]) == (1, 1, 0)


# -- samples and judgments ----------------------------------------------------------------


def session_with_turns(store: Store, sid: str, n: int) -> list[int]:
    store.ensure_session(sid, "test")
    return [store.record_turn(new_turn(sid, n=i)).id for i in range(n)]


def test_create_sample_is_idempotent(store: Store) -> None:
    [turn_id] = session_with_turns(store, "s", 1)
    first = store.create_sample(turn_id, "s", "tool", "result", [{"role": "tool"}], now=5.0)
    assert first is not None
    assert store.create_sample(turn_id, "s", "user", "other", None) is None
    [sample] = store.samples_for_session("s")
    assert (sample.id, sample.state, sample.created) == (first, "pending", 5.0)
    assert (sample.next_state_role, sample.next_state_text) == ("tool", "result")
    assert sample.next_state == [{"role": "tool"}]
    assert store.get_sample(first) == sample


def test_claims_are_exclusive_across_connections(db_path: Path) -> None:
    stores = [Store(db_path), Store(db_path)]
    turn_ids = session_with_turns(stores[0], "s", 40)
    for tid in turn_ids:
        stores[0].create_sample(tid, "s", "user", "next", None)
    claimed: list[list[int]] = [[], [], [], []]

    def judge(s: Store, out: list[int]) -> None:
        while batch := s.claim_pending_samples(3):
            out.extend(x.id for x in batch)

    threads = [threading.Thread(target=judge, args=(stores[i % 2], claimed[i])) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for part in claimed for i in part]
    assert sorted(everything) == sorted(set(everything))
    assert len(everything) == 40
    for s in stores:
        s.close()


def test_stale_claims_are_retaken(store: Store) -> None:
    turn_ids = session_with_turns(store, "s", 3)
    ids = [store.create_sample(t, "s", "user", "next", None) for t in turn_ids]
    first = store.claim_pending_samples(2, now=1000.0)
    assert [s.id for s in first] == ids[:2]
    assert all(s.claimed_at == 1000.0 for s in first)
    assert [s.id for s in store.claim_pending_samples(10, now=1100.0)] == ids[2:]
    assert store.claim_pending_samples(10, now=1200.0) == []
    # The judge holding the first two died; after stale_after_s they are handed out again.
    assert [s.id for s in store.claim_pending_samples(10, now=1301.0, stale_after_s=300)] == ids[:2]
    # Judged samples are never claimed again, even when their claim is stale.
    assert ids[0] is not None
    store.record_judgment(ids[0], "prm", [1], 1, None, [], None, None, eligible_at=None)
    assert [s.id for s in store.claim_pending_samples(10, now=9999.0)] == ids[1:]


def test_excluded_sessions_are_not_claimed(store: Store) -> None:
    [t] = session_with_turns(store, "s", 1)
    store.create_sample(t, "s", "user", "next", None)
    store.set_review_state("s", "excluded")
    assert store.claim_pending_samples(10) == []
    store.set_review_state("s", "pending")
    assert len(store.claim_pending_samples(10)) == 1


def test_record_judgment_and_user_rating_override(store: Store) -> None:
    t0, t1 = session_with_turns(store, "s", 2)
    sid = store.create_sample(t0, "s", "user", "thanks!", None)
    assert sid is not None
    store.claim_pending_samples(1, now=10.0)
    teacher = [-0.1, -2.0 / 3.0, -math.inf]
    j = store.record_judgment(
        sid, "prm:base", [1, 1, None], 1, "be brief", ["be brief", "short"], "majority",
        teacher, eligible_at=70.0, now=11.0,
    )  # fmt: skip
    assert (j.score, j.judge_score, j.user_rating, j.backend) == (1, 1, None, "prm:base")
    assert j.votes == [1, 1, None] and j.hint_candidates == ["be brief", "short"]
    assert j.teacher_logprobs == teacher and j.hint_rule == "majority"
    sample = store.get_sample(sid)
    assert sample is not None
    assert (sample.state, sample.judged_at, sample.eligible_at, sample.claimed_at) == (
        "judged", 11.0, 70.0, None,
    )  # fmt: skip
    rated = store.set_user_rating(t0, -1, "use a table", now=12.0)
    assert (rated.score, rated.judge_score, rated.user_rating, rated.user_hint) == (
        -1, 1, -1, "use a table",
    )  # fmt: skip
    # A later re-judgment updates the judge's view but the user's rating still wins.
    again = store.record_judgment(sid, "prm:base", [0], 0, None, [], None, None, None)
    assert (again.score, again.judge_score, again.user_rating) == (-1, 0, -1)
    # ... and never replaces the teacher scored for the user's own hint.
    assert again.teacher_logprobs == teacher
    assert store.get_judgment(sid) == again
    # Rating a turn without a sample creates one (no next state), judged at once.
    only_user = store.set_user_rating(t1, 1, None, eligible_at=5.0)
    assert (only_user.score, only_user.judge_score, only_user.backend) == (1, None, "user")
    new_sample = store.get_sample(only_user.sample_id)
    assert new_sample is not None
    assert (new_sample.state, new_sample.next_state_role, new_sample.eligible_at) == (
        "judged", None, 5.0,
    )  # fmt: skip
    # The collector arriving later fills the missing next state but makes no new sample;
    # the rating had no hint, so the sample goes to the judge to read the reply for one.
    assert store.create_sample(t1, "s", "user", "late reply", None) is None
    filled = store.get_sample(only_user.sample_id)
    assert filled is not None and filled.next_state_text == "late reply"
    assert filled.state == "pending"
    with pytest.raises(ValueError):
        store.set_user_rating(t0, 2, None)
    with pytest.raises(StoreError, match="unknown turn"):
        store.set_user_rating(999, 1, None)


def test_rating_without_hint_leaves_the_hint_to_the_judge(store: Store) -> None:
    """A user who rates (no hint) and then corrects in words: the rating is the reward and
    the judge still reads the reply for the hint, in either order."""
    t0, t1, t2 = session_with_turns(store, "s", 3)
    # Rated first (no sample yet), reply later: judged by the user, then back to the judge.
    rated = store.set_user_rating(t0, -1, None, now=1.0)
    assert store.get_sample(rated.sample_id).state == "judged"  # type: ignore[union-attr]
    # The collector still looks at it (a later main turn exists: its reply may hold a hint).
    assert t0 in [t.id for t in store.main_turns_without_sample()]
    store.create_sample(t0, "s", "user", "Too long. Fifteen words.", None)
    assert t0 not in [t.id for t in store.main_turns_without_sample()]
    assert [s.id for s in store.claim_pending_samples(10)] == [rated.sample_id]
    j = store.record_judgment(
        rated.sample_id, "heuristic", [-1], 0, "Fifteen words.", [], "rule", [-0.5, -0.25], None
    )
    assert (j.score, j.judge_score, j.user_rating, j.hint) == (-1, 0, -1, "Fifteen words.")
    assert j.teacher_logprobs == [-0.5, -0.25]
    assert store.get_sample(rated.sample_id).state == "judged"  # type: ignore[union-attr]
    # Reply first, rated before the judge read it: the sample stays with the judge.
    sid1 = store.create_sample(t1, "s", "user", "Shorter please.", None)
    assert sid1 is not None
    store.set_user_rating(t1, 1, None)
    assert store.get_sample(sid1).state == "pending"  # type: ignore[union-attr]
    # Once the judge has read it, a later rating only changes the reward.
    store.record_judgment(sid1, "heuristic", [-1], -1, None, [], None, None, None)
    again = store.set_user_rating(t1, 1, None)
    assert (again.score, again.judge_score) == (1, -1)
    assert store.get_sample(sid1).state == "judged"  # type: ignore[union-attr]
    # A rating with its own hint needs no judge: judged at once, reply or not.
    sid2 = store.create_sample(t2, "s", "user", "ok", None)
    assert sid2 is not None
    store.set_user_rating(t2, -1, "use a table")
    assert store.get_sample(sid2).state == "judged"  # type: ignore[union-attr]
    assert store.claim_pending_samples(10) == []


def test_a_rated_turn_whose_next_request_restarted_is_looked_at_once(store: Store) -> None:
    """Rated before a reply that never came (the client restarted the conversation): the
    rating stays trainable, and the collector does not look at the turn forever."""
    t0, _t1 = session_with_turns(store, "s", 2)
    rated = store.set_user_rating(t0, 1, None)
    assert [t.id for t in store.main_turns_without_sample()] == [t0, _t1]
    assert store.create_sample(t0, "s", None, None) is None  # looked: nothing followed
    assert [t.id for t in store.main_turns_without_sample()] == [_t1]
    sample = store.get_sample(rated.sample_id)
    assert sample is not None and sample.state == "judged" and sample.next_state_role is None
    assert store.claim_pending_samples(10) == []


def test_trainable_samples_respect_review(store: Store) -> None:
    a0, a1 = session_with_turns(store, "a", 2)
    [b0] = session_with_turns(store, "b", 1)
    ids: list[int] = []
    for turn_id, sid, eligible in [(a0, "a", 10.0), (a1, "a", 100.0), (b0, "b", 10.0)]:
        sample_id = store.create_sample(turn_id, sid, "user", "x", None)
        assert sample_id is not None
        store.record_judgment(sample_id, "prm", [1], 1, None, [], None, None, eligible_at=eligible)
        ids.append(sample_id)
    assert [s.id for s in store.trainable_samples(10, now=50.0)] == [ids[0], ids[2]]
    assert store.trainable_samples(10, now=50.0, approved_only=True) == []
    store.set_review_state("b", "excluded")
    store.set_review_state("a", "approved")
    assert [s.id for s in store.trainable_samples(10, now=200.0, approved_only=True)] == ids[:2]
    store.mark_trained([ids[0]], "adapter_000001", now=300.0)
    assert [s.id for s in store.trainable_samples(10, now=400.0)] == [ids[1]]
    trained = store.get_sample(ids[0])
    assert trained is not None
    assert (trained.state, trained.trained_in, trained.trained_at) == (
        "trained", "adapter_000001", 300.0,
    )  # fmt: skip
    assert store.set_sample_state(ids[1], "skipped", "neutral reward")
    skipped = store.get_sample(ids[1])
    assert skipped is not None
    assert (skipped.state, skipped.skip_reason) == ("skipped", "neutral reward")
    with pytest.raises(ValueError):
        store.set_sample_state(ids[1], "lost")


# -- checkpoints, metrics, events, transactions -------------------------------------------


def test_checkpoints(store: Store, tmp_path: Path) -> None:
    c2 = store.register_checkpoint(
        "adapter_000002", tmp_path / "c2", "adapter_000001", 2, {"reward/mean": 0.5},
        ["s1", "s2"], [3, 4], now=20.0,
    )  # fmt: skip
    store.register_checkpoint("adapter_000001", "/x/c1", None, 1, {}, [], [], now=10.0)
    assert (c2.path, c2.status, c2.pinned, c2.published_at) == (
        str(tmp_path / "c2"),
        "ready",
        False,
        None,
    )
    assert (c2.metrics, c2.sessions, c2.samples) == ({"reward/mean": 0.5}, ["s1", "s2"], [3, 4])
    with pytest.raises(StoreError, match="already registered"):
        store.register_checkpoint("adapter_000001", "/y", None, 1, {}, [], [])
    assert [c.version for c in store.list_checkpoints()] == ["adapter_000001", "adapter_000002"]
    assert store.served_checkpoint() is None
    assert store.mark_published("adapter_000002", now=30.0)
    assert store.mark_published("adapter_000001", now=40.0)  # rollback
    served = store.served_checkpoint()
    assert served is not None and (served.version, served.published_at) == ("adapter_000001", 40.0)
    assert store.set_checkpoint_status("adapter_000002", "pruned")
    assert not store.set_checkpoint_status("nope", "ready")
    with pytest.raises(ValueError):
        store.set_checkpoint_status("adapter_000002", "deleted")
    assert store.set_checkpoint_pinned("adapter_000001", True)
    c1 = store.get_checkpoint("adapter_000001")
    assert c1 is not None and (c1.status, c1.pinned, c1.parent) == ("published", True, None)
    assert store.get_checkpoint("nope") is None


def test_metrics_and_events_are_append_only_feeds(store: Store) -> None:
    first = store.add_metric(1, "reward/mean", 0.25, "v1", now=5.0)
    store.add_metrics(2, {"reward/mean": 0.5, "optim/lr": 1e-4}, "v2")
    loss_id = store.add_metric(2, "loss", 3)
    assert [m.name for m in store.metrics()] == ["reward/mean", "reward/mean", "optim/lr", "loss"]
    rewards = store.metrics("reward/mean")
    assert [(m.step, m.value, m.version) for m in rewards] == [(1, 0.25, "v1"), (2, 0.5, "v2")]
    assert rewards[0].id == first and rewards[0].ts == 5.0
    assert [m.id for m in store.metrics(since_id=loss_id - 1)] == [loss_id]
    assert store.metrics("nothing") == []
    ids = [store.add_event("turn", {"n": i, "text": "✓"}, now=float(i)) for i in range(5)]
    assert ids == sorted(ids)
    events = store.events_since(ids[1], limit=2)
    assert [(e.id, e.kind, e.payload, e.ts) for e in events] == [
        (ids[2], "turn", {"n": 2, "text": "✓"}, 2.0),
        (ids[3], "turn", {"n": 3, "text": "✓"}, 3.0),
    ]
    assert len(store.events_since()) == 5


def test_atomic_is_all_or_nothing_and_nests(store: Store) -> None:
    with pytest.raises(RuntimeError), store.atomic():
        store.add_event("a", {})
        store.add_event("b", {})
        raise RuntimeError("boom")
    assert store.events_since() == []
    with store.atomic():
        store.add_event("kept", {})
        with pytest.raises(StoreError):  # a failing inner call undoes only itself
            store.register_checkpoint("v", "/p", None, 0, {}, [], [])
            store.register_checkpoint("v", "/p", None, 0, {}, [], [])
    assert [e.kind for e in store.events_since()] == ["kept"]
    assert [c.version for c in store.list_checkpoints()] == ["v"]


def test_threads_share_one_store(store: Store) -> None:
    def write(k: int) -> None:
        for i in range(25):
            store.add_event("t", {"k": k, "i": i})
            store.events_since(limit=5)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.events_since(limit=1000)) == 100


# -- several processes --------------------------------------------------------------------


def test_open_store_sees_rows_committed_by_another_process(store: Store) -> None:
    assert store.get_session("child") is None
    child = run_child("turns", str(store.path), "5")
    assert child.wait(timeout=30) == 0
    session = store.get_session("child")
    assert session is not None and session.source == "child-process"
    turns = store.turns_for_session("child")
    assert [t.idx for t in turns] == list(range(5))
    assert turns[4].prompt_ids == [1, 2, 4] and turns[4].response_ids == [4, 2**31 - 1]
    assert turns[4].logprobs == [-0.5, -1.0 / 3.0]


def test_killed_writer_leaves_only_whole_committed_batches(db_path: Path) -> None:
    rows_per_batch, wanted = 4, 5
    Store(db_path).close()
    child = run_child("batches", str(db_path), str(rows_per_batch), "0.03", stdout=subprocess.PIPE)
    assert child.stdout is not None
    committed: set[int] = set()
    in_flight = -1
    for line in child.stdout:
        kind, number, *rest = line.split()
        if kind == "C":
            committed.add(int(number))
        elif len(committed) >= wanted and rest == ["1"]:
            in_flight = int(number)  # two rows of this batch written, not committed: kill now
            os.kill(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=10)
    committed |= {int(line.split()[1]) for line in child.stdout if line.startswith("C ")}
    assert child.returncode == -signal.SIGKILL
    assert in_flight >= wanted
    with Store(db_path) as s:
        assert s.integrity_check() == "ok"
        rows: dict[int, list[int]] = {}
        for event in s.events_since(limit=10_000):
            rows.setdefault(event.payload["batch"], []).append(event.payload["row"])
    assert committed <= rows.keys()
    assert rows.keys() <= committed | {in_flight}  # at most the batch being killed, if whole
    for batch, batch_rows in rows.items():
        assert batch_rows == list(range(rows_per_batch)), f"partial batch {batch}"


def test_sql_uses_no_numbered_placeholders() -> None:
    """`?1`-style placeholders with a sequence of values warn on Python 3.12 (seen on a GPU
    machine's 3.12.3) and are refused from 3.14: the store uses `?` or `:name` only."""
    import re

    store_dir = Path(__file__).resolve().parents[3] / "clawrl_app" / "engine" / "store"
    numbered = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(store_dir.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\?\d", line)
    ]
    assert numbered == []
