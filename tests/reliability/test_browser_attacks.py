"""Browser attacks on the endpoint (issue #11): what a web page the user opens can send to
127.0.0.1, replayed with httpx against a real engine on a loopback port.

Two engines: the session-wide `engine` (defaults: no API key, no allowed origin) and
`guarded`, started here with `require_api_key` and one allowed origin.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import keyring.core
import openai
import pytest
from keyring.backends import fail

from clawrl_app.config import ConfigError, load_settings
from clawrl_app.tui.client import HttpClient
from tests.conftest import start_engine, wait_for

pytestmark = pytest.mark.slow

EVIL = "http://evil.example"
APP = "http://app.example"


def chat_body(session_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "clawrl",
        "max_tokens": 4,
        "session_id": session_id,
        "messages": [{"role": "user", "content": "Remember: my password is hunter2."}],
        **extra,
    }


def simple_post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    """What `fetch(url, {method: "POST", body: JSON.stringify(b)})` sends: text/plain, no preflight."""
    return httpx.post(
        url,
        content=json.dumps(body),
        headers={"Content-Type": "text/plain;charset=UTF-8", **headers},
        timeout=60,
    )


def rolled_back(events: list[Any]) -> int:
    return sum(1 for e in events if e.kind == "RolledBack")


def error_code(r: httpx.Response) -> str:
    err = r.json()["error"]
    assert err["message"] and err["type"] == "invalid_request_error"
    return str(err["code"])


@pytest.fixture(scope="module")
def guarded(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An engine that requires its API key and lets one web page (APP) call it."""
    home = tmp_path_factory.mktemp("guarded-home")
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "8",
        "CLAWRL_SERVER__REQUIRE_API_KEY": "true",
        "CLAWRL_SERVER__ALLOWED_ORIGINS": APP,
        "CLAWRL_TRAIN__ENABLED": "false",
    }
    events: list[Any] = []
    with pytest.MonkeyPatch.context() as mp:  # keep the key out of the developer's keyring
        mp.setattr(keyring.core, "_keyring_backend", fail.Keyring())
        running = start_engine(home, env, events=events.append)
    running.events = events
    yield running
    running.stop()


def key_of(guarded: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {guarded.engine.api_key}"}


# --- 1. cross-origin "simple" requests -----------------------------------------------------
@pytest.mark.parametrize("origin", [EVIL, "null", "http://127.0.0.1:1"])
def test_cross_origin_text_plain_chat_is_refused_and_not_recorded(engine: Any, origin: str) -> None:
    sid = f"attack-{uuid.uuid4().hex[:8]}"
    r = simple_post(f"{engine.url}/chat/completions", chat_body(sid), Origin=origin)
    assert r.status_code == 403, r.text
    assert error_code(r) == "origin_not_allowed"
    assert "server.allowed_origins" in r.json()["error"]["message"]
    assert "access-control-allow-origin" not in r.headers
    assert engine.engine.store.get_session(sid) is None
    assert httpx.get(f"{engine.base}/admin/sessions/{sid}").status_code == 404


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_non_json_bodies_get_415_and_are_not_recorded(
    engine: Any, content_type: str | None
) -> None:
    sid = f"form-{uuid.uuid4().hex[:8]}"
    headers = {"Content-Type": content_type} if content_type else {}
    r = httpx.post(
        f"{engine.url}/chat/completions", content=json.dumps(chat_body(sid)), headers=headers
    )
    assert r.status_code == 415, r.text
    assert error_code(r) == "unsupported_media_type"
    assert engine.engine.store.get_session(sid) is None


def test_json_with_charset_is_accepted_and_recorded(engine: Any) -> None:
    """The control for the two tests above: the same body, declared JSON, is recorded."""
    sid = f"ok-{uuid.uuid4().hex[:8]}"
    r = httpx.post(
        f"{engine.url}/chat/completions",
        content=json.dumps(chat_body(sid)),
        headers={"Content-Type": "application/json; charset=utf-8"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert wait_for(lambda: engine.engine.store.get_session(sid) is not None)


def test_text_plain_rollback_is_refused_and_nothing_rolls_back(
    engine: Any, engine_events: list[Any]
) -> None:
    url = f"{engine.base}/admin/rollback"
    before = rolled_back(engine_events)
    r = simple_post(url, {"version": "base"}, Origin=EVIL)
    assert (r.status_code, rolled_back(engine_events)) == (403, before), r.text
    r = simple_post(url, {"version": "base"})  # no Origin (e.g. curl -d): still not JSON
    assert (r.status_code, rolled_back(engine_events)) == (415, before), r.text


def test_feedback_and_review_refuse_text_plain(engine: Any) -> None:
    for path in ("/v1/feedback", "/admin/sessions/x/review"):
        r = simple_post(f"{engine.base}{path}", {"state": "excluded"}, Origin=EVIL)
        assert r.status_code == 403, (path, r.text)
        r = simple_post(f"{engine.base}{path}", {"state": "excluded"})
        assert r.status_code == 415, (path, r.text)


def test_cross_site_get_without_origin_is_refused(engine: Any) -> None:
    """`<script src=...>` / `<img src=...>` send no Origin but Sec-Fetch-Site: cross-site."""
    r = httpx.get(f"{engine.url}/models", headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403 and error_code(r) == "cross_site_request"
    typed_in = httpx.get(f"{engine.url}/models", headers={"Sec-Fetch-Site": "none"})
    assert typed_in.status_code == 200  # the user opened the URL in the browser


# --- 2. DNS rebinding ------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "localhost.evil.example"])
def test_foreign_host_is_refused(engine: Any, host: str) -> None:
    port = engine.engine.http.port
    headers = {"Host": host.format(port=port)}
    r = httpx.get(f"{engine.url}/models", headers=headers)
    assert r.status_code == 403, r.text
    assert error_code(r) == "host_not_allowed"
    assert "server.allowed_hosts" in r.json()["error"]["message"]
    sid = f"rebind-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{engine.url}/chat/completions", json=chat_body(sid), headers=headers)
    assert r.status_code == 403 and engine.engine.store.get_session(sid) is None


@pytest.mark.parametrize(
    "host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "localhost"]
)
def test_loopback_hosts_pass(engine: Any, host: str) -> None:
    r = httpx.get(
        f"{engine.url}/models", headers={"Host": host.format(port=engine.engine.http.port)}
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("header", "name"),
    [("[::1]:30000", "::1"), ("LocalHost.:80", "localhost"), ("a.lan", "a.lan"), ("::1", "::1")],
)
def test_host_name_strips_port_and_brackets(header: str, name: str) -> None:
    from clawrl_app.engine.serving.web_guard import (
        host_name,  # here: the other tests run without it
    )

    assert host_name(header) == name


def test_policy_names() -> None:
    from clawrl_app.engine.serving.web_guard import GuardPolicy

    policy = GuardPolicy.build("mybox.lan", ["Other.Lan:8080"])
    for ok in ("mybox.lan:30000", "other.lan", "192.168.1.5:30000", "[fe80::1]:1", "localhost"):
        assert policy.host_allowed(ok), ok
    assert not policy.host_allowed("evil.example")
    wildcard = GuardPolicy.build("0.0.0.0")
    assert "0.0.0.0" not in wildcard.hosts and not wildcard.host_allowed("mybox.lan")
    assert GuardPolicy.build("127.0.0.1", ["*"]).host_allowed("anything.example")


# --- 3. CORS preflight --------------------------------------------------------------------
def preflight(base: str, origin: str) -> httpx.Response:
    return httpx.options(
        f"{base}/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-session-id",
        },
    )


def test_preflight_from_unknown_origin_is_403(engine: Any, guarded: Any) -> None:
    for base in (engine.base, guarded.base):
        r = preflight(base, EVIL)
        assert r.status_code == 403, r.text
        assert error_code(r) == "origin_not_allowed"
        assert "access-control-allow-origin" not in r.headers


def test_preflight_from_allowed_origin_is_204_with_cors_headers(guarded: Any) -> None:
    r = preflight(guarded.base, APP)  # browsers send no credentials on a preflight
    assert r.status_code == 204, r.text
    assert r.headers["access-control-allow-origin"] == APP
    assert "POST" in r.headers["access-control-allow-methods"]
    allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
    expected = {"authorization", "content-type", "x-session-id", "x-turn-type", "x-session-done"}
    assert expected <= allowed
    assert "origin" in r.headers["vary"].lower()


def test_allowed_origin_gets_answers_with_cors_header(guarded: Any) -> None:
    headers = {"Origin": APP, **key_of(guarded)}
    sid = f"page-{uuid.uuid4().hex[:8]}"
    r = httpx.post(
        f"{guarded.url}/chat/completions", json=chat_body(sid), headers=headers, timeout=60
    )
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == APP
    assert wait_for(lambda: guarded.engine.store.get_session(sid) is not None)
    # errors are readable by the page too, and the key is still required
    denied = httpx.get(f"{guarded.url}/models", headers={"Origin": APP})
    assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == APP
    # the allowed page streams like any client
    body = chat_body(f"page-{uuid.uuid4().hex[:8]}", stream=True)
    with httpx.stream("POST", f"{guarded.url}/chat/completions", json=body, headers=headers) as s:
        assert s.status_code == 200 and s.headers["access-control-allow-origin"] == APP
        lines = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) >= 3


# --- 4. admin routes ------------------------------------------------------------------------
def test_admin_needs_the_key_when_one_is_set(guarded: Any) -> None:
    base = guarded.base
    assert httpx.get(f"{base}/admin/status").status_code == 401
    before = rolled_back(guarded.events)
    r = httpx.post(f"{base}/admin/rollback", json={"version": "base"})
    assert r.status_code == 401 and error_code(r) == "invalid_api_key"
    assert rolled_back(guarded.events) == before
    assert httpx.get(f"{base}/admin/status", headers=key_of(guarded)).status_code == 200


def test_admin_state_changes_are_post_only(guarded: Any) -> None:
    for path in ("/admin/rollback", "/admin/sessions/x/review"):
        r = httpx.get(f"{guarded.base}{path}", headers=key_of(guarded))
        assert r.status_code == 405, (path, r.text)
        assert r.headers["allow"] == "POST" and r.json()["error"]["message"]


def test_admin_review_with_broken_json_is_400_not_500(guarded: Any) -> None:
    r = httpx.post(
        f"{guarded.base}/admin/sessions/x/review",
        content=b"{not json",
        headers={"Content-Type": "application/json", **key_of(guarded)},
    )
    assert r.status_code == 400, r.text
    assert "not valid JSON" in r.json()["error"]["message"]


def test_json_rollback_with_key_still_works(guarded: Any) -> None:
    """The control for the refused rollbacks: the real client's request rolls back."""
    before = rolled_back(guarded.events)
    r = httpx.post(
        f"{guarded.base}/admin/rollback", json={"version": "base"}, headers=key_of(guarded)
    )
    assert r.status_code == 200 and r.json()["to"] == "base", r.text
    assert rolled_back(guarded.events) == before + 1


# --- 5. real clients are unchanged ----------------------------------------------------------
def test_openai_client_chat_and_stream(engine: Any, guarded: Any) -> None:
    for running, key in ((engine, "unused"), (guarded, guarded.engine.api_key)):
        c = openai.OpenAI(base_url=running.url, api_key=key, max_retries=0)
        msgs: list[Any] = [{"role": "user", "content": "Say hi."}]
        r = c.chat.completions.create(model="clawrl", messages=msgs, max_tokens=4)
        assert r.choices[0].message.content is not None
        stream = c.chat.completions.create(
            model="clawrl",
            messages=msgs,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_tui_http_client_works_against_the_guarded_engine(guarded: Any) -> None:
    client = HttpClient(guarded.base, guarded.engine.api_key)
    try:
        assert client.status()["ready"] is True
        text = "".join(client.chat_stream([{"role": "user", "content": "Hi"}], "tui-guard"))
        assert text
        assert client.rollback(version="base")["to"] == "base"
    finally:
        client.close()


# --- 6. settings ------------------------------------------------------------------------------
def test_settings_parse_lists_from_env_and_refuse_bad_origins() -> None:
    s = load_settings(
        env={
            "CLAWRL_SERVER__ALLOWED_ORIGINS": "http://LocalHost:5173/, chrome-extension://abc",
            "CLAWRL_SERVER__ALLOWED_HOSTS": '["mybox.lan"]',
        }
    ).settings.server
    assert s.allowed_origins == ["http://localhost:5173", "chrome-extension://abc"]
    assert s.allowed_hosts == ["mybox.lan"]
    for bad in ("*", "localhost:5173", "http://a.example/path"):
        with pytest.raises(ConfigError, match="server.allowed_origins"):
            load_settings(env={"CLAWRL_SERVER__ALLOWED_ORIGINS": bad})


def test_defaults_allow_no_page_and_no_extra_host() -> None:
    s = load_settings(env={}).settings.server
    assert s.allowed_origins == [] and s.allowed_hosts == []
