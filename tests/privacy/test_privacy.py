"""Privacy controls with real parts: the endpoint on the embedded model, the SQLite file's
raw bytes, the CLI (`sessions delete`, `data export`, `data wipe`) and the TUI's delete key.
"""

from __future__ import annotations

import json
import socket
import stat
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from clawrl_app.cli import main
from clawrl_app.engine.store import NewTurn, Store, TurnRow
from clawrl_app.paths import app_paths
from clawrl_app.privacy.redact import NOT_TRAINABLE_REASON
from tests.conftest import wait_for

SECRET = "sk-proj-" + "Zq7xW" * 6
EMAIL = "alice.secret.tester@example.org"


def client(engine: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0)


def ask(engine: Any, messages: list[dict[str, Any]], **headers: str) -> str:
    r = client(engine).chat.completions.create(
        model="clawrl", messages=messages, max_tokens=4, temperature=0, extra_headers=headers
    )
    return r.choices[0].message.content or ""


def raw_store_bytes(engine: Any) -> bytes:
    """The database file and its WAL as they are on disk."""
    path: Path = engine.engine.paths.store_file
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def admin(engine: Any) -> str:
    return engine.url.removesuffix("/v1")


def test_secrets_are_redacted_before_the_sqlite_write(engine: Any) -> None:
    sid = f"priv-{uuid.uuid4().hex[:8]}"
    first = [{"role": "user", "content": f"My key is {SECRET}, mail me at {EMAIL}. Say ok."}]
    answer = ask(engine, first, **{"X-Session-Id": sid})
    store: Store = engine.engine.store
    turn = wait_for(lambda: (store.turns_for_session(sid) or [None])[0])
    assert isinstance(turn, TurnRow)
    content = turn.request["messages"][0]["content"]
    assert "[REDACTED:openai_key]" in content and "[REDACTED:email]" in content
    assert turn.redacted == 2
    assert turn.prompt_ids == [] and turn.response_ids == [] and turn.logprobs == []
    assert turn.prompt_tokens > 0  # usage is kept
    raw = raw_store_bytes(engine)
    assert SECRET.encode() not in raw and EMAIL.encode() not in raw
    assert b"Zq7xW" not in raw

    # the next turn continues (its history still holds the secret): the first turn's
    # sample is skipped as not trainable
    ask(engine, [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "thanks"}],
        **{"X-Session-Id": sid})  # fmt: skip
    sample = wait_for(lambda: next(iter(store.samples_for_session(sid)), None))
    assert sample.state == "skipped" and sample.skip_reason == NOT_TRAINABLE_REASON
    assert SECRET.encode() not in raw_store_bytes(engine)

    counts = store.redaction_counts()
    assert counts["openai_key"] >= 2 and counts["email"] >= 2
    status = httpx.get(f"{admin(engine)}/admin/status", timeout=10).json()
    assert status["privacy"]["redactions"]["email"] >= 2


def _row_counts(store: Store) -> dict[str, int]:
    stats = store.session_stats()
    return {"sessions": stats["sessions"], "turns": stats["turns"]}


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        ("incognito header: say hi", {"X-Session-Incognito": "true"}),
        ("#off-the-record matched by privacy.incognito_patterns", {}),
        ("matched by its User-Agent", {"User-Agent": "scratch-tool/2.0"}),
    ],
    ids=["header", "message-rule", "source-rule"],
)
def test_incognito_requests_are_answered_and_never_stored(
    engine: Any, content: str, headers: dict[str, str]
) -> None:
    store: Store = engine.engine.store
    marker = f"quokka{uuid.uuid4().hex[:10]}"
    before = _row_counts(store)
    events_before = len(list(store.all_events()))
    service = engine.engine.service
    incognito_before = service.incognito_turns
    sid = f"incog-{marker}"
    answer = ask(engine, [{"role": "user", "content": f"{content} {marker}"}],
                 **{"X-Session-Id": sid}, **headers)  # fmt: skip
    assert isinstance(answer, str)
    assert service.incognito_turns == incognito_before + 1
    assert store.get_session(sid) is None
    assert _row_counts(store) == before
    assert not [e for e in store.all_events() if sid in json.dumps(e.payload)]
    assert len(list(store.all_events())) >= events_before
    assert marker.encode() not in raw_store_bytes(engine)


def test_incognito_header_is_allowed_by_cors(engine: Any) -> None:
    from clawrl_app.engine.serving.web_guard import CORS_HEADERS

    assert "X-Session-Incognito" in CORS_HEADERS


def test_delete_through_the_admin_route_leaves_no_row_and_no_text(engine: Any) -> None:
    store: Store = engine.engine.store
    sid = f"del-{uuid.uuid4().hex[:8]}"
    marker = f"platypus{uuid.uuid4().hex[:10]}"
    ask(engine, [{"role": "user", "content": f"Remember the word {marker}."}],
        **{"X-Session-Id": sid, "X-Session-Done": "true"})  # fmt: skip
    wait_for(lambda: store.samples_for_session(sid))  # closed: the collector made its sample
    wait_for(lambda: [e for e in store.all_events() if e.payload.get("session_id") == sid])
    assert marker.encode() in raw_store_bytes(engine)

    r = httpx.post(f"{admin(engine)}/admin/sessions/{sid}/delete", json={}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == sid and body["deleted"]["turns"] == 1 and body["trained_in"] == []
    assert store.get_session(sid) is None
    assert store.turns_for_session(sid) == [] and store.samples_for_session(sid) == []
    assert not [e for e in store.all_events() if e.payload.get("session_id") == sid]
    assert marker.encode() not in raw_store_bytes(engine)  # secure_delete + WAL truncated
    assert store.integrity_check() == "ok"
    again = httpx.post(f"{admin(engine)}/admin/sessions/{sid}/delete", json={}, timeout=30)
    assert again.status_code == 404
    bad = httpx.post(f"{admin(engine)}/admin/sessions/{sid}/delete", json=[1], timeout=30)
    assert bad.status_code == 400


# -- the CLI on a store of its own (CLAWRL_HOME in a temp folder, no engine running) ------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CLAWRL_HOME with one trained session, one plain session, metrics and events."""
    root = tmp_path / "home"
    monkeypatch.setenv("CLAWRL_HOME", str(root))
    monkeypatch.setenv("CLAWRL_SERVER__PORT", str(free_port()))  # nothing answers there
    paths = app_paths(root).ensure()
    with Store(paths.store_file) as store:
        for sid in ("keep", "gone"):
            store.ensure_session(sid, "api")
            turn = store.record_turn(
                NewTurn(sid, "main", {"messages": [{"role": "user", "content": f"hi {sid}-x9"}]},
                        f"answer {sid}", [1, 2, 3], [4, 5], [-0.5, -0.25], "base")
            )  # fmt: skip
            sample = store.create_sample(turn.id, sid, "user", "thanks")
            assert sample is not None
            store.record_judgment(sample, "heuristic", [1], 1.0, None, [], None, None, None)
            store.add_event("TurnRecorded", {"session_id": sid, "turn_id": turn.id})
        store.mark_trained([s.id for s in store.samples_for_session("gone")], "v1")
        store.register_checkpoint("v1", paths.checkpoints_dir / "v1", None, 1, {"loss": 0.5},
                                  ["gone"], [1])  # fmt: skip
        store.add_metrics(1, {"loss": 0.5, "reward/mean": 1.0}, "v1")
    (paths.checkpoints_dir / "v1").mkdir(parents=True)
    (paths.checkpoints_dir / "v1" / "adapter_model.safetensors").write_bytes(b"w" * 10)
    (paths.models_dir / "SmolLM2").mkdir(parents=True)
    (paths.models_dir / "SmolLM2" / "model.safetensors").write_bytes(b"m" * 10)
    (paths.log_dir / "trainer.log").write_text("step 1\n")
    paths.config_file.write_text("[privacy]\nredact = true\n")
    return root


def test_cli_sessions_delete_asks_then_deletes(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = app_paths(home)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert main(["sessions", "delete", "gone"]) == 1
    out = capsys.readouterr().out
    assert "v1 already trained on it" in out and "keep their weights" in out
    assert "rollback --before-session gone" in out and "nothing deleted" in out
    with Store(paths.store_file) as store:
        assert store.get_session("gone") is not None
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert main(["sessions", "delete", "gone"]) == 0
    with Store(paths.store_file) as store:
        assert store.get_session("gone") is None and store.turns_for_session("gone") == []
        assert store.get_session("keep") is not None
        assert [c.sessions for c in store.list_checkpoints()] == [["gone"]]  # id kept
    assert b"hi gone-x9" not in paths.store_file.read_bytes()
    assert main(["sessions", "delete", "keep", "--yes"]) == 0
    assert main(["sessions", "delete", "nope", "--yes"]) == 1


def test_data_export_writes_private_files_that_round_trip(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    assert main(["data", "export", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted([
        "README.md", "checkpoints.jsonl", "config.toml", "episodes.jsonl", "events.jsonl",
        "manifest.json", "metrics.jsonl", "redaction_counts.json", "samples.jsonl",
        "sessions.jsonl", "turns.jsonl",
    ])  # fmt: skip
    for p in out.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p

    def lines(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (out / name).read_text().splitlines()]

    with Store(app_paths(home).store_file) as store:
        assert [TurnRow(**t) for t in lines("turns.jsonl")] == [
            t for s in store.all_sessions() for t in store.turns_for_session(s.id)
        ]
        assert [s["id"] for s in lines("sessions.jsonl")] == ["keep", "gone"]
        samples = lines("samples.jsonl")
        assert [s["judgment"]["score"] for s in samples] == [1.0, 1.0]
        assert samples[1]["trained_in"] == "v1"
        assert lines("checkpoints.jsonl")[0]["sessions"] == ["gone"]
        assert {m["name"] for m in lines("metrics.jsonl")} == {"loss", "reward/mean"}
        assert [e["payload"]["session_id"] for e in lines("events.jsonl")] == ["keep", "gone"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["lines"]["turns.jsonl"] == 2
    assert (out / "config.toml").read_text().startswith("[privacy]")
    assert main(["data", "export", str(out)]) == 1  # not empty: refused


def test_data_wipe_keeps_the_model_cache_settings_and_key(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = app_paths(home)
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")  # not the typed word
    assert main(["data", "wipe"]) == 1
    assert paths.store_file.exists()
    assert main(["data", "wipe", "--yes"]) == 0
    assert list(paths.data_dir.iterdir()) == [] and list(paths.log_dir.iterdir()) == []
    assert (paths.models_dir / "SmolLM2" / "model.safetensors").read_bytes() == b"m" * 10
    assert paths.config_file.exists()
    capsys.readouterr()
    assert main(["data", "wipe"]) == 0
    assert "nothing to wipe" in capsys.readouterr().out


def test_data_wipe_refuses_while_the_engine_runs(
    engine: Any, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLAWRL_SERVER__PORT", str(engine.engine.http.port))
    assert main(["data", "wipe", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "clawrl-app is running" in err and "ctrl+c" in err
    assert app_paths(home).store_file.exists()


# -- the Sessions screen's delete key (Textual's Pilot, the session-wide engine) ----------
async def test_tui_delete_key_confirms_deletes_and_offers_rollback(engine: Any) -> None:
    import asyncio

    from clawrl_app.tui.app import ClawrlApp
    from clawrl_app.tui.client import LocalClient
    from clawrl_app.tui.screens.modals import ConfirmModal
    from clawrl_app.tui.screens.sessions import SessionsScreen
    from tests.tui.test_tui_pilot import until

    store: Store = engine.engine.store
    sid = f"tui-del-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(
        ask, engine, [{"role": "user", "content": "Hello there."}],
        **{"X-Session-Id": sid, "X-Session-Done": "true"},
    )  # fmt: skip
    sample = await asyncio.to_thread(wait_for, lambda: store.samples_for_session(sid))
    store.mark_trained([sample[0].id], "v99")  # as if a checkpoint had learned from it
    app = ClawrlApp(LocalClient(engine), capture_logs=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("2")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == sid)
        await pilot.press("d")
        modal = await until(
            pilot, lambda: app.screen if isinstance(app.screen, ConfirmModal) else None
        )
        assert "v99 already trained on it" in modal.text and "keep their weights" in modal.text
        await pilot.press("n")  # no: nothing happens
        await until(pilot, lambda: app.screen is screen)
        assert store.get_session(sid) is not None
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: store.get_session(sid) is None)
        offer = await until(
            pilot, lambda: app.screen if isinstance(app.screen, ConfirmModal) else None
        )
        assert "Roll back" in offer.text and "v99" in offer.text
        await pilot.press("n")
        assert store.turns_for_session(sid) == [] and store.samples_for_session(sid) == []


def test_doctor_shows_the_redaction_counters(home: Path) -> None:
    from clawrl_app.config import load_settings
    from clawrl_app.doctor import privacy_lines

    paths = app_paths(home)
    with Store(paths.store_file) as store:
        store.add_redactions({"email": 2, "card": 1})
        assert store.redaction_counts() == {"card": 1, "email": 2}
    lines = privacy_lines(load_settings(env={}).settings, paths.store_file)
    assert lines[0] == "redaction: on"
    assert lines[-1] == "redacted so far: card 1, email 2"
