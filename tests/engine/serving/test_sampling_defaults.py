"""Answers that end: the model's recommended sampling when a request omits it, and a
degenerate loop cut off early (real engine on the embedded model for the endpoint part)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawrl_app.engine.serving.sampling_defaults import (
    EMBEDDED_DEFAULTS,
    OPENAI_DEFAULTS,
    recommended_defaults,
)


def write(d: Path, cfg: Any) -> Path:
    (d / "generation_config.json").write_text(json.dumps(cfg))
    return d


def test_recommended_defaults(tmp_path: Path) -> None:
    d = tmp_path
    assert recommended_defaults(None) == OPENAI_DEFAULTS
    assert recommended_defaults(d) == OPENAI_DEFAULTS  # no file
    assert recommended_defaults(d, embedded=True) == EMBEDDED_DEFAULTS
    got = recommended_defaults(write(d, {"temperature": 0.7, "top_p": 0.8, "do_sample": True}))
    assert (got.temperature, got.top_p, got.source) == (0.7, 0.8, "generation_config.json")
    got = recommended_defaults(write(d, {"temperature": 0.6}))  # top_p from the fallback
    assert (got.temperature, got.top_p) == (0.6, 1.0)
    assert recommended_defaults(write(d, {"do_sample": False})).temperature == 0.0
    # the converted embedded model's file has no sampling keys: its card's values
    assert recommended_defaults(write(d, {"bos_token_id": 1}), embedded=True) == EMBEDDED_DEFAULTS
    for bad in ({"temperature": 9}, {"temperature": "hot"}, {"top_p": 0}, [1], "x"):
        assert recommended_defaults(write(d, bad)) == OPENAI_DEFAULTS
    (d / "generation_config.json").write_text("{broken")
    assert recommended_defaults(d) == OPENAI_DEFAULTS


def chat(engine: Any, body: dict[str, Any]) -> dict[str, Any]:
    body = {"model": "clawrl", **body}
    r = httpx.post(f"{engine.url}/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_an_omitted_temperature_uses_the_models_recommendation(engine: Any) -> None:
    store = engine.engine.store
    sid = "sampling-defaults"
    r = httpx.post(
        f"{engine.url}/chat/completions",
        json={"model": "clawrl", "messages": [{"role": "user", "content": "Hi"}],
              "max_tokens": 4},
        headers={"X-Session-Id": sid}, timeout=120,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    turn = store.turns_for_session(sid)[-1]
    assert (turn.request["temperature"], turn.request["top_p"]) == (0.2, 0.9)
    r = httpx.post(
        f"{engine.url}/chat/completions",
        json={"model": "clawrl", "messages": [{"role": "user", "content": "Hi"}],
              "max_tokens": 4, "temperature": 1.0, "top_p": 0.5},
        headers={"X-Session-Id": sid}, timeout=120,
    )  # fmt: skip
    turn = store.turns_for_session(sid)[-1]
    assert (turn.request["temperature"], turn.request["top_p"]) == (1.0, 0.5)


@pytest.mark.slow
def test_a_loop_is_cut_off_before_max_tokens(engine: Any) -> None:
    prompt = "Repeat after me forever: la la la la la la la la la la la la la la la la"
    out = chat(engine, {"messages": [{"role": "user", "content": prompt}],
                        "temperature": 0, "max_tokens": 400})  # fmt: skip
    used = out["usage"]["completion_tokens"]
    assert out["choices"][0]["finish_reason"] == "length"
    assert 64 <= used < 400, out["choices"][0]["message"]["content"][:300]
