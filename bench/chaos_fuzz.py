"""The fuzz part of bench/chaos.py: Hypothesis cases against every route of a real
in-process engine (embedded model, training off, answers of at most a few tokens).

Counts the answers by status and by kind (tests/reliability/fuzz_run.py says what each
kind means), the tracebacks the app logged, and whether it still answers a normal
request afterwards. 5xx caused by the known bugs (KNOWN_BUGS, strict xfails in
tests/reliability/test_fuzz_routes.py) are counted apart from unexplained ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

from chaos_table import Row

from clawrl_app.config import load_settings
from clawrl_app.engine.engine_thread import EngineThread
from clawrl_app.paths import app_paths
from tests.reliability.fuzz_run import KNOWN_BUGS, Tally, TracebackCatcher, run_cases, still_answers


def progress(msg: str) -> None:
    print(f"[fuzz] {msg}", file=sys.stderr, flush=True)


def run_fuzz(model_dir: Path, home: Path, *, requests: int, seed: int) -> list[Row]:
    """Send `requests` generated cases; returns the table rows."""
    env = {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "4",
        "CLAWRL_TRAIN__ENABLED": "false",
    }
    et = EngineThread(load_settings(env=env).settings, app_paths(home)).start()
    progress(f"engine at {et.base} (home {home}); {requests} cases, seed {seed}")

    def report(t: Tally) -> None:
        progress(f"{t.total} sent: {dict(sorted(t.by_status.items()))}")

    try:
        with TracebackCatcher() as tb:
            tally = run_cases(et.base, requests, seed=seed, on_progress=report)
        after = still_answers(et.base)
    finally:
        et.stop()
    for out, case in tally.failures:
        progress(f"FAILURE {out.status} {out.kind}: {out.detail[:200]} <- {case.short()[:400]}")
    for out, case in tally.overloads:
        progress(f"overload {out.status}: {out.detail[:200]} <- {case.short()[:200]}")
    known_tb = [r for r in tb.records if any(b.trace in r for b in KNOWN_BUGS)]
    for r in tb.records:
        if r not in known_tb:
            progress(f"TRACEBACK {r[-1500:]}")
    return fuzz_rows(tally, len(tb.records) - len(known_tb), len(known_tb), after)


def fuzz_rows(t: Tally, tracebacks: int, known_tb: int, after: str | None) -> list[Row]:
    p = "fuzz"
    statuses = ", ".join(f"{s or 'cut'}: {n}" for s, n in sorted(t.by_status.items()))
    over = t.by_kind["overload"]
    return [
        Row(p, "requests sent (every route, random methods, paths, headers)",
            f"{t.total} in {t.seconds:.0f} s ({t.total / max(t.seconds, 1e-9):.0f}/s)"),
        Row(p, "answers by status", statuses),
        Row(p, "valid-ish requests answered 200", f"{t.valid_ok} / {t.valid}"),
        Row(p, "5xx, cut streams or non-OpenAI error bodies, unexplained",
            str(t.failed), "0", t.failed == 0),
        Row(p, "5xx from known bugs in files others own (strict xfails)",
            ", ".join(f"{k} {v}" for k, v in sorted(t.known.items())) or "0", "0",
            not t.known),
        Row(p, "overload / timeout answers (429, 503 from /readyz, 504)", str(over),
            "only under overload", None),
        Row(p, "tracebacks in the app log, unexplained / from known bugs",
            f"{tracebacks} / {known_tb}", "0 / 0", tracebacks == 0 and known_tb == 0),
        Row(p, "answers a normal request afterwards", after or "yes", "yes", after is None),
    ]  # fmt: skip
