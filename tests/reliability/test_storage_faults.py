"""Storage faults, injected for real: a full disk, a lock held by another process, a damaged
or read-only store at start-up, damaged checkpoint folders.

- Full disk: `PRAGMA max_page_count` on the engine's own writer connection, so SQLite
  itself fails the write with SQLITE_FULL ("database or disk is full").
- Lock: a second connection (as another process would) holds `BEGIN EXCLUSIVE`.
- Damage: the store file overwritten with garbage, cut in half, or garbled mid-file.
- Read-only: the folders are made read-only with chmod. Under root, chmod does not stop
  writes, so the CLI then runs without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (dropped from
  its capability bounding set before exec): root then obeys permission bits like anyone.
- Checkpoints: real PEFT adapter folders with a garbled manifest or truncated weights.

While the store fails, clients still get their answers (unrecorded), one `StoreFailed`
event and the status say what happened and what to do, and nothing already committed is
lost; when writes succeed again, `StoreRecovered` follows and recording resumes.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from clawrl_app.engine.core.checkpoints import (
    MANIFEST,
    Manifest,
    newest_resumable,
    write_checkpoint,
)
from clawrl_app.engine.core.events import LoopFailed, StoreFailed, StoreRecovered
from clawrl_app.engine.store import Store
from clawrl_app.models import ResolvedModel, load_model
from clawrl_app.paths import app_paths
from tests.conftest import start_engine, wait_for

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# 6 KB of request that is only ~100 tokens (quick to answer): recording it needs new pages.
BULKY = "-" * 6000


@pytest.fixture(scope="module")
def events() -> list[Any]:
    return []


@pytest.fixture(scope="module")
def fault_engine(
    embedded_model: ResolvedModel, tmp_path_factory: pytest.TempPathFactory, events: list[Any]
) -> Iterator[Any]:
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "6",
        "CLAWRL_TRAIN__ENABLED": "false",
    }
    running = start_engine(tmp_path_factory.mktemp("faults-home"), env, events=events.append)
    yield running
    running.stop()


def chat(running: Any, session: str, text: str = "Say hi.") -> str:
    """One answered turn (the official client); returns the answer."""
    client = openai.OpenAI(base_url=running.url, api_key="local", max_retries=0, timeout=120)
    out = client.chat.completions.create(
        model="clawrl",
        messages=[{"role": "user", "content": text}],
        max_tokens=6,
        extra_headers={"X-Session-Id": session},
    )
    return out.choices[0].message.content or ""


def committed_turns(store_file: Path) -> list[tuple[Any, ...]]:
    """Every turn row, read by a connection of its own (what is on disk, not in memory)."""
    with sqlite3.connect(store_file) as raw:
        return raw.execute("SELECT id, session_id, idx, response_text FROM turns").fetchall()


def storage_status(running: Any) -> dict[str, Any]:
    """The `storage` entry of GET /admin/status (what the dashboard shows)."""
    r = httpx.get(f"{running.base}/admin/status", timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json()["storage"])


def of_kind(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def set_max_pages(store: Store, pages: int | None) -> None:
    """Fault injection: cap the file at `pages` pages (None: at its size now) on the
    engine's writer connection; SQLite then fails growing writes with SQLITE_FULL."""
    with store._lock:
        conn = store._connection()
        if pages is None:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")


# --- while serving ----------------------------------------------------------------------


def test_full_disk_answers_unrecorded_then_records_again(
    fault_engine: Any, events: list[Any]
) -> None:
    store = fault_engine.engine.store
    assert chat(fault_engine, "full-before")
    before = committed_turns(store.path)
    assert len(before) >= 1 and storage_status(fault_engine)["state"] == "ok"

    set_max_pages(store, None)
    try:
        assert chat(fault_engine, "full-during", BULKY)  # answered, though not recorded
        failed = wait_for(lambda: of_kind(events, StoreFailed))
        assert chat(fault_engine, "full-during-2", BULKY)
        status = storage_status(fault_engine)
    finally:
        set_max_pages(store, 1_073_741_823)
    assert len(failed) == 1 and failed[0].kind == "full"  # one event per outage
    assert str(store.path) in failed[0].error and "free some space" in failed[0].error
    assert len(of_kind(events, StoreFailed)) == 1
    assert status["state"] == "failed" and status["kind"] == "full"
    assert "is full" in status["last_error"] and status["unrecorded_turns"] == 2
    assert committed_turns(store.path) == before  # nothing committed was lost
    assert store.get_session("full-during") is None

    assert chat(fault_engine, "full-after")
    recovered = wait_for(lambda: of_kind(events, StoreRecovered))
    assert recovered[0].unrecorded_turns == 2
    assert storage_status(fault_engine)["state"] == "ok"
    after = committed_turns(store.path)
    assert after[: len(before)] == before and [t[1] for t in after[len(before) :]] == ["full-after"]
    assert store.integrity_check() == "ok"


def test_locked_store_answers_unrecorded_then_records_again(
    fault_engine: Any, events: list[Any]
) -> None:
    store = fault_engine.engine.store
    assert chat(fault_engine, "lock-before")
    before = committed_turns(store.path)
    seen = len(of_kind(events, StoreFailed)), len(of_kind(events, StoreRecovered))
    other = sqlite3.connect(store.path, isolation_level=None, timeout=30)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        assert chat(fault_engine, "lock-during")  # after the 5 s busy timeout, unrecorded
        failed = wait_for(lambda: of_kind(events, StoreFailed)[seen[0] :])
        status = storage_status(fault_engine)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert failed[0].kind == "locked" and "Another process holds a lock" in failed[0].error
    assert status["state"] == "failed" and status["kind"] == "locked"
    assert chat(fault_engine, "lock-after")
    wait_for(lambda: of_kind(events, StoreRecovered)[seen[1] :])
    sessions = [t[1] for t in committed_turns(store.path)]
    assert "lock-after" in sessions and "lock-during" not in sessions
    assert committed_turns(store.path)[: len(before)] == before


# --- damaged checkpoint folders ---------------------------------------------------------


def adapter_checkpoint(peft_model: Any, root: Path, version: str) -> Path:
    """A real PEFT LoRA adapter folder with a manifest (no canary: nothing to compare)."""
    folder = root / version
    peft_model.save_pretrained(str(folder))
    manifest = Manifest(version, 1, None, "lora", "combine", {}, [], [])
    (folder / MANIFEST).write_text(json.dumps(asdict(manifest)))
    return folder


def served_version(running: Any) -> str:
    data = httpx.get(f"{running.url}/models", timeout=10).json()["data"]
    return str(data[0]["current_version"])


def test_damaged_checkpoints_are_refused_and_later_ones_published(
    fault_engine: Any,
    events: list[Any],
    embedded_model: ResolvedModel,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="clawrl.publisher")
    store = fault_engine.engine.store
    from peft import LoraConfig, get_peft_model

    model, _ = load_model(embedded_model)  # a private copy: peft wraps it in place
    model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    garbled = adapter_checkpoint(model, tmp_path, "v1")
    (garbled / MANIFEST).write_text('{"version": "v1", "step": ')  # cut short
    truncated = adapter_checkpoint(model, tmp_path, "v2")
    weights = truncated / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    good = adapter_checkpoint(model, tmp_path, "v3")
    store.register_checkpoint("v1", garbled, None, 1, {}, [], [])
    store.register_checkpoint("v2", truncated, None, 2, {}, [], [])

    def status(version: str) -> str:
        row = store.get_checkpoint(version)
        assert row is not None
        return row.status

    wait_for(lambda: status("v1") == status("v2") == "refused")
    assert served_version(fault_engine) == "clawrl-base"
    reasons = [r.getMessage() for r in caplog.records if r.name == "clawrl.publisher"]
    assert any("v1 refused" in m and "manifest.json is unreadable" in m for m in reasons)
    assert any("v2 refused" in m and "adapter_model.safetensors is damaged" in m for m in reasons)
    failures = [e.error for e in of_kind(events, LoopFailed) if e.loop == "publishing"]
    assert len(failures) == 2

    store.register_checkpoint("v3", good, None, 3, {}, [], [])
    wait_for(lambda: served_version(fault_engine) == "clawrl-v3")
    assert status("v3") == "published"


def test_trainer_resumes_from_the_newest_sound_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine picks the checkpoint the trainer resumes from; damaged ones are skipped
    with a warning naming what is wrong (written by the trainer's own checkpoint writer)."""
    from safetensors.numpy import save_file

    from clawrl_app.config import load_settings
    from clawrl_app.engine.orchestrator import Engine

    paths = app_paths(tmp_path / "home").ensure()

    def write(step: int, version: str) -> Path:
        def weights(d: Path) -> None:
            save_file({"w": np.zeros(3, np.float32)}, str(d / "model.safetensors"))
            state = {"step": step, "baseline": None, "version": version}
            (d / "trainer_state.json").write_text(json.dumps(state))

        manifest = Manifest(version, step, None, "lora", "combine", {}, [], [])
        extra = {"optimizer.pt": {"state": {}}, "rng.pt": {"torch": None}}
        return write_checkpoint(paths.checkpoints_dir, step, "lora", weights, extra, manifest)

    engine = Engine(load_settings(env={}).settings, paths, progress=False)
    with Store(paths.store_file) as store:
        for step, version in ((1, "v1"), (2, "v2"), (3, "v3")):
            store.register_checkpoint(version, write(step, version), None, step, {}, [], [])
            time.sleep(0.01)  # distinct creation times
        assert newest_resumable(store.list_checkpoints()) == ("v3", [])
        v3, v2 = Path(store.get_checkpoint("v3").path), Path(store.get_checkpoint("v2").path)  # type: ignore[union-attr]
        (v3 / "model.safetensors").write_bytes(os.urandom(64))  # garbled header
        (v2 / MANIFEST).unlink()
        engine.store = store
        caplog.set_level(logging.WARNING, logger="clawrl.engine")
        assert engine._resume_target() == "v1"
        engine.store = None
    warnings = [r.getMessage() for r in caplog.records if r.name == "clawrl.engine"]
    assert any("v3" in w and "model.safetensors is damaged" in w for w in warnings)
    assert any("v2" in w and "manifest.json is missing" in w for w in warnings)


# --- start-up with an unusable store ----------------------------------------------------


def drop_dac_override() -> None:
    """preexec_fn: take CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH out of the capability
    bounding set, so the program exec'd next (even as root) obeys permission bits."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def serve(home: Path, *, as_unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    """`clawrl-app serve` as a user starts it; returns when it exits (60 s at most)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWRL_")}
    env.update(CLAWRL_HOME=str(home), CLAWRL_SERVER__PORT="0", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, "-m", "clawrl_app.cli", "serve"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=drop_dac_override if as_unprivileged else None,  # noqa: PLW1509
    )


def damaged_store(home: Path, how: str) -> Path:
    store_file = app_paths(home).ensure().store_file
    with Store(store_file) as store:
        for i in range(300):
            store.ensure_session(f"s-{i:04d}", "api " * 40)
    data = store_file.read_bytes()
    if how == "garbage":
        store_file.write_bytes(os.urandom(len(data)))
    elif how == "truncated":
        store_file.write_bytes(data[: len(data) // 2])
    else:  # garbled pages in the middle: the file still opens
        store_file.write_bytes(data[: 8 * 4096] + os.urandom(4 * 4096) + data[12 * 4096 :])
    return store_file


@pytest.mark.parametrize("how", ["garbage", "truncated", "garbled-pages"])
def test_damaged_store_stops_start_up_with_what_to_do(tmp_path: Path, how: str) -> None:
    store_file = damaged_store(tmp_path, how)
    digest = hashlib.sha256(store_file.read_bytes()).hexdigest()
    done = serve(tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and str(store_file) in error[0] and "move it away" in error[0]
    assert hashlib.sha256(store_file.read_bytes()).hexdigest() == digest  # left as it was


def can_drop_dac_override() -> bool:
    try:
        done = subprocess.run(["true"], preexec_fn=drop_dac_override, timeout=10)  # noqa: PLW1509
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@pytest.mark.parametrize("scope", ["home", "data-folder"])
def test_read_only_home_stops_start_up_with_what_to_do(tmp_path: Path, scope: str) -> None:
    """`home`: every folder 0500 and file 0400. `data-folder`: only the folder holding the
    store is read-only, so SQLite cannot create the store's -wal/-shm files beside it."""
    as_root = os.geteuid() == 0
    if as_root and not can_drop_dac_override():
        pytest.skip("running as root without the right to drop CAP_DAC_OVERRIDE")
    paths = app_paths(tmp_path / "home").ensure()
    with Store(paths.store_file) as store:
        store.ensure_session("kept", "api")
    targets = [paths.data_dir] if scope == "data-folder" else [tmp_path / "home"]
    if scope == "home":
        targets += sorted((tmp_path / "home").rglob("*"), reverse=True)
    for p in targets:
        os.chmod(p, 0o500 if p.is_dir() else 0o400)
    try:
        done = serve(tmp_path / "home", as_unprivileged=as_root)
    finally:
        for p in targets:
            os.chmod(p, 0o700 if p.is_dir() else 0o600)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and str(paths.store_file) in error[0]
    assert "writable" in error[0] and "CLAWRL_HOME" in error[0]
    with Store(paths.store_file) as store:  # writable again: the row is still there
        assert store.get_session("kept") is not None
