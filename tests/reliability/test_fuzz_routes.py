"""Every route fuzzed with Hypothesis against a real engine (embedded model, real HTTP):
bad input gets an OpenAI-shaped 4xx, never a 5xx, nothing logs a traceback, and the app
answers a normal request afterwards. A few hundred derandomized cases here; the full-size
run is `bench/chaos.py --parts fuzz`.

Bugs found in code other engineers own right now are listed in
`tests.reliability.fuzz_run.KNOWN_BUGS`: each runs below as a strict xfail, and the fuzz
run skips the cases that hit it. Fixing one makes its xfail pass (strict: the suite
fails), which is the cue to delete it from the list.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import start_engine
from tests.reliability.fuzz_cases import Case
from tests.reliability.fuzz_run import (
    KNOWN_BUGS,
    KnownBug,
    Outcome,
    Tally,
    TracebackCatcher,
    known_bug,
    run_cases,
    send,
    still_answers,
)

pytestmark = pytest.mark.slow
EXAMPLES = 300


@pytest.fixture(scope="module")
def base(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dedicated engine: the fuzz run rolls back, reviews and rates on it."""
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "4",
        "CLAWRL_TRAIN__ENABLED": "false",
    }
    running = start_engine(tmp_path_factory.mktemp("fuzz-home"), env)
    yield str(running.base)
    running.stop()


def no_failure(case: Case, out: Outcome) -> None:
    assert out.kind not in Tally.FAILING, f"{out} for {case.short()}"


def test_every_route_answers_bad_input_with_a_4xx(base: str) -> None:
    with TracebackCatcher() as tracebacks:
        tally = run_cases(base, EXAMPLES, shrink=True, check=no_failure, skip=known_bug)
    assert tally.total >= EXAMPLES * 0.9  # few skipped
    assert tally.by_kind["overload"] == 0  # one request at a time: nothing to overload
    assert tally.valid_ok >= tally.valid * 0.2, "the valid-ish cases are mostly refused"
    assert tally.by_status[200] and tally.by_kind["client_error"]
    assert not tracebacks.records, tracebacks.records[:3]
    assert still_answers(base) is None


@pytest.mark.parametrize(
    "bug",
    [
        pytest.param(b, marks=pytest.mark.xfail(strict=True, reason=b.description))
        for b in KNOWN_BUGS
    ],
    ids=[b.name for b in KNOWN_BUGS],
)
def test_known_bug(base: str, bug: KnownBug) -> None:
    assert bug.matches(bug.example)
    with httpx.Client(timeout=60) as client:
        out = send(client, base, bug.example)
    assert out.kind not in Tally.FAILING, out


LONE = "\\ud83d"  # half of an emoji, as a JSON escape


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", f'{{"model": "clawrl", "messages": [{{"role": "user", "content": "hi {LONE}"}}], "max_tokens": 2}}'),
        ("/v1/chat/completions", f'{{"model": "clawrl", "messages": [{{"role": "user", "content": [{{"type": "text", "text": "{LONE}"}}]}}], "max_tokens": 2}}'),
        ("/v1/chat/completions", f'{{"model": "clawrl", "messages": [{{"role": "user", "content": "hi"}}], "stop": ["{LONE}"], "max_tokens": 2}}'),
        ("/v1/chat/completions", f'{{"model": "clawrl", "session_id": "s{LONE}", "messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 2}}'),
        ("/v1/chat/completions", f'{{"model": "clawrl", "messages": [{{"role": "user", "content": "hi"}}], "tools": [{{"type": "function", "function": {{"name": "f{LONE}"}}}}], "max_tokens": 2}}'),
        ("/v1/feedback", f'{{"session_id": "s{LONE}", "rating": 1}}'),
        ("/v1/feedback", f'{{"session_id": "s", "rating": 1, "hint": "{LONE}"}}'),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_a_400_not_a_500_or_a_lost_turn(
    base: str, path: str, body: str
) -> None:
    """JSON lets a client send half a surrogate pair (a string cut inside an emoji); it is
    not Unicode text, and the tokenizer, session hashing and SQLite all failed on it: a 500,
    or an answer whose turn was never recorded."""
    with TracebackCatcher() as tracebacks:
        r = httpx.post(f"{base}{path}", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert "lone UTF-16 surrogate" in r.json()["error"]["message"]
    assert not tracebacks.records


def test_a_seed_beyond_64_bits_is_a_400_and_leaves_the_backend_healthy(base: str) -> None:
    """It used to reach the sampler, fail there as a 503 'backend failed', and three in a
    row made /readyz report the backend unhealthy."""
    body = {
        "model": "clawrl",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
        "seed": 2**64,
    }
    for _ in range(3):
        r = httpx.post(
            f"{base}/v1/chat/completions",
            content=json.dumps(body),
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "seed", r.text
    assert httpx.get(f"{base}/readyz").status_code == 200
    body["seed"] = 2**64 - 1  # the largest a generator takes is fine
    assert httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60).status_code == 200


def test_fuzz_helpers_recognise_what_they_skip() -> None:
    """The skip list must not swallow ordinary requests."""
    ordinary = Case("chat", "POST", "/v1/chat/completions", (), b'{"model": "clawrl"}', True)
    assert known_bug(ordinary) is None
    assert all(known_bug(b.example) is b for b in KNOWN_BUGS)
