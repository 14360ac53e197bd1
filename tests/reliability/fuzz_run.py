"""Sending fuzz cases to a real engine and judging the answers.

The promise: bad input gets an OpenAI-shaped 4xx, never a 5xx; the only 5xx allowed are
the documented overload and timeout answers (429 is a 4xx but counted with them):
429 `overloaded` (server.max_concurrent or the queue is full), 503 from /readyz while the
engine starts or stops, 504 `timeout` (server.request_timeout_s). Every other 5xx, a
stream cut short, an error event inside a stream that is not one of those, and every
traceback the app logs is a failure.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import seed as hypothesis_seed

from tests.reliability.fuzz_cases import Case, cases

OVERLOAD_CODES = {"overloaded", "timeout"}
LOGGERS = ("", "uvicorn")  # the root (clawrl.*, fastapi, starlette) and uvicorn's own tree


@dataclass(frozen=True)
class Outcome:
    """What one case got back."""

    status: int
    kind: str
    """ok | client_error | overload | server_error | stream_broken | bad_error_shape"""
    detail: str = ""


def _error_of(text: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    return err if isinstance(err, dict) else None


def _sse_errors(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: {") and '"error"' in line:
            err = _error_of(line[6:])
            if err is not None:
                out.append(err)
    return out


def judge(case: Case, r: httpx.Response) -> Outcome:
    """Classify one answer (see the module docstring)."""
    s = r.status_code
    text = r.text if case.method != "HEAD" else ""
    err = _error_of(text) if s >= 400 and text else None
    if s >= 400 and case.method != "HEAD":
        shaped = err is not None and isinstance(err.get("message"), str) and "type" in err
        if not shaped:
            return Outcome(s, "bad_error_shape", text[:200])
    if s == 429 or (s == 504 and err and err.get("code") == "timeout"):
        return Outcome(s, "overload", str(err))
    if s == 503 and case.path.startswith("/readyz"):
        return Outcome(s, "overload", text[:200])
    if s >= 500:
        return Outcome(s, "server_error", text[:300])
    if s >= 400:
        return Outcome(s, "client_error")
    for e in _sse_errors(text):  # a stream that failed after its 200
        kind = "overload" if e.get("code") in OVERLOAD_CODES else "server_error"
        if e.get("type") != "server_error":
            kind = "client_error"
        return Outcome(s, kind, str(e)[:300])
    if "text/event-stream" in r.headers.get("content-type", "") and "[DONE]" not in text:
        return Outcome(s, "stream_broken", text[-200:])
    return Outcome(s, "ok")


def send(client: httpx.Client, base: str, case: Case) -> Outcome:
    """Send one case; a connection cut by the server counts as `stream_broken`."""
    raw = [(k.encode(), v.encode("latin-1")) for k, v in case.headers]  # as they go on the wire
    try:
        r = client.request(case.method, f"{base}{case.path}", headers=raw, content=case.body)
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        return Outcome(0, "stream_broken", f"{type(exc).__name__}: {exc}")
    return judge(case, r)


@dataclass
class Tally:
    """Counts by status and by kind, plus the failing cases (first few kept); failures of
    a known bug (KNOWN_BUGS) are counted apart, by bug."""

    by_status: Counter[int] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    by_route: Counter[tuple[str, int]] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)
    valid: int = 0
    valid_ok: int = 0
    failures: list[tuple[Outcome, Case]] = field(default_factory=list)
    overloads: list[tuple[Outcome, Case]] = field(default_factory=list)
    seconds: float = 0.0

    FAILING = ("server_error", "stream_broken", "bad_error_shape")

    def add(self, case: Case, out: Outcome) -> None:
        self.by_status[out.status] += 1
        self.by_kind[out.kind] += 1
        self.by_route[(case.route, out.status)] += 1
        self.valid += case.valid
        self.valid_ok += case.valid and out.kind == "ok"
        if out.kind in self.FAILING:
            bug = known_bug(case)
            if bug is not None:
                self.known[bug.name] += 1
            elif len(self.failures) < 20:
                self.failures.append((out, case))
        if out.kind == "overload" and len(self.overloads) < 20:
            self.overloads.append((out, case))

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def failed(self) -> int:
        """Failing answers not explained by a known bug."""
        return sum(self.by_kind[k] for k in self.FAILING) - sum(self.known.values())


class TracebackCatcher(logging.Handler):
    """Collects every record logged with a traceback or at ERROR and above."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(f"{record.name}: {record.getMessage()} | {self.format(record)}")

    def __enter__(self) -> TracebackCatcher:
        for name in LOGGERS:  # attach after the engine started: uvicorn resets its loggers
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(self)


def still_answers(base: str, timeout_s: float = 120.0) -> str | None:
    """None when /readyz is 200 and a normal chat request is answered; else what failed."""
    with httpx.Client(timeout=timeout_s) as c:
        ready = c.get(f"{base}/readyz")
        if ready.status_code != 200:
            return f"/readyz {ready.status_code}: {ready.text[:200]}"
        body = {
            "model": "clawrl",
            "max_tokens": 3,
            "messages": [{"role": "user", "content": "Say hi."}],
        }
        t0 = time.monotonic()
        r = c.post(f"{base}/v1/chat/completions", json=body)
        if r.status_code != 200 or r.json()["choices"][0]["finish_reason"] is None:
            return f"chat {r.status_code} after {time.monotonic() - t0:.1f} s: {r.text[:200]}"
    return None


def run_cases(
    base: str,
    examples: int,
    *,
    seed: int | None = None,
    shrink: bool = False,
    check: Callable[[Case, Outcome], None] | None = None,
    skip: Callable[[Case], Any] | None = None,
    timeout_s: float = 120.0,
    on_progress: Callable[[Tally], None] | None = None,
) -> Tally:
    """Send `examples` generated cases to `base`; `check` may raise to fail a case (then
    Hypothesis shrinks it when `shrink`); cases `skip` returns truthy for are not sent.
    `seed` None = derandomized (the same cases each run)."""
    tally = Tally()
    phases = [Phase.explicit, Phase.generate, *([Phase.shrink] if shrink else [])]
    t0 = time.monotonic()
    # one connection per case: after a 500 Starlette re-raises and uvicorn drops the
    # connection, which must not fail the next (innocent) case
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(timeout=timeout_s, limits=limits) as client:

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=seed is None,
            phases=phases,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases())
        def one(case: Case) -> None:
            assume(skip is None or not skip(case))
            out = send(client, base, case)
            tally.add(case, out)
            if on_progress is not None and tally.total % 500 == 0:
                on_progress(tally)
            if check is not None:
                check(case, out)

        (one if seed is None else hypothesis_seed(seed)(one))()
    tally.seconds = time.monotonic() - t0
    return tally


@dataclass(frozen=True)
class KnownBug:
    """A 5xx the fuzzer finds in code another engineer owns right now: `matches` picks the
    cases it causes, `trace` is a piece of its logged traceback, `example` one request.
    tests/reliability/test_fuzz_routes.py runs each example as a strict xfail, and skips
    the matching cases in its fuzz run; bench/chaos.py counts them apart."""

    name: str
    description: str
    trace: str
    example: Case

    def matches(self, case: Case) -> bool:
        return _MATCHERS[self.name](case)


def _json_or_none(body: bytes | None) -> Any:
    try:
        return json.loads(body or b"")
    except (ValueError, RecursionError):
        return None


def _deep(case: Case) -> bool:
    return case.body is not None and b"[" * 900 in case.body


def _review_not_json(case: Case) -> bool:
    review = case.method == "POST" and case.path.startswith("/admin/sessions/")
    return review and case.path.endswith("/review") and _json_or_none(case.body) is None


def _since_beyond_64_bits(case: Case) -> bool:
    prefix = "/admin/events?since="
    if case.method != "GET" or not case.path.startswith(prefix):
        return False
    try:
        return not -(2**63) <= int(case.path[len(prefix) :]) < 2**63
    except ValueError:
        return False


def _rollback_surrogate(case: Case) -> bool:
    body = _json_or_none(case.body) if case.path == "/admin/rollback" else None
    before = body.get("before_session") if isinstance(body, dict) else None
    return isinstance(before, str) and any("\ud800" <= c <= "\udfff" for c in before)


_MATCHERS: dict[str, Callable[[Case], bool]] = {
    "deep-json": _deep,
    "review-not-json": _review_not_json,
    "events-since-beyond-64-bits": _since_beyond_64_bits,
    "rollback-lone-surrogate": _rollback_surrogate,
}
_JSON = (("Content-Type", "application/json"),)
KNOWN_BUGS: list[KnownBug] = []
"""Bugs found by the fuzz run and not fixed yet (none now: deep JSON, non-JSON review bodies,
`since` beyond 64 bits and lone surrogates in admin bodies all answer 400)."""


def known_bug(case: Case) -> KnownBug | None:
    """The known bug this case runs into, if any."""
    return next((b for b in KNOWN_BUGS if b.matches(case)), None)
