"""Judging benchmark on the embedded model (CPU).

1. Chat latency (16-token answers) with the judge idle vs busy working through a backlog.
   The busy case uses the `policy` judge (LLM votes from the base weights on the
   backend's background lane): the heaviest judge the embedded default can run.
2. Judged samples per minute for the `heuristic` judge (the default for the 135M model,
   including teacher log-probs for its hints) and for the `policy` judge.

Run: `.venv/bin/python bench/judge.py [--backlog 12] [--probes 10]`
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.engine.core.events import SampleJudged  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

TOPICS = [
    "rain",
    "the sea",
    "a cat",
    "mountains",
    "coffee",
    "trains",
    "winter",
    "a garden",
    "the moon",
    "bread",
    "a river",
    "music",
    "autumn",
    "a city",
    "books",
    "stars",
]


def start(model_dir: Path, judge: str, max_tokens: int, events: list[Any]) -> EngineThread:
    env = {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_JUDGE__BACKEND": judge,
        "CLAWRL_TRAIN__ENABLED": "false",
        "CLAWRL_JUDGE__MAX_TOKENS": str(max_tokens),
    }
    home = tempfile.mkdtemp(prefix="clawrl-bench-judge-")
    return EngineThread(
        load_settings(env=env).settings, app_paths(home), events=events.append
    ).start()


def chat(
    client: httpx.Client,
    url: str,
    messages: list[dict[str, Any]],
    headers: dict[str, str],
    max_tokens: int = 16,
) -> str:
    r = client.post(
        url,
        headers=headers,
        json={"model": "clawrl", "messages": messages, "max_tokens": max_tokens, "temperature": 0},
    )
    r.raise_for_status()
    return str(r.json()["choices"][0]["message"]["content"])


def make_backlog(et: EngineThread, n: int) -> None:
    """n two-turn sessions whose first answers get a corrective reply: n pending samples."""
    url = f"{et.url}/chat/completions"
    with httpx.Client(timeout=120) as c:
        for i in range(n):
            sid = {"X-Session-Id": f"bench-{time.monotonic_ns()}-{i}"}
            first = [{"role": "user", "content": f"Write a poem about {TOPICS[i % len(TOPICS)]}."}]
            answer = chat(c, url, first, sid, max_tokens=24)
            second = [
                *first,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "No, that's too long. Answer in one short sentence."},
            ]
            chat(c, url, second, sid, max_tokens=4)
            print(f"  backlog: {i + 1}/{n} sessions recorded", flush=True)


def pending(et: EngineThread) -> int:
    stats = et.engine.store.session_stats()  # type: ignore[union-attr]
    return int(stats.get("samples_pending", 0))


def probe_latency(et: EngineThread, probes: int, while_busy: bool) -> list[float]:
    """Median-able chat latencies; side turns, so the probes add no samples."""
    url = f"{et.url}/chat/completions"
    out = []
    with httpx.Client(timeout=120) as c:
        for i in range(probes):
            if while_busy and pending(et) == 0:
                break
            t0 = time.perf_counter()
            chat(
                c,
                url,
                [{"role": "user", "content": f"Name a fact about {TOPICS[i % len(TOPICS)]}."}],
                {"X-Turn-Type": "side"},
            )
            out.append(time.perf_counter() - t0)
            state = "busy" if while_busy else "idle"
            print(f"  probe {i + 1}/{probes} (judge {state}): {out[-1] * 1000:.0f} ms", flush=True)
            time.sleep(0.2)
    return out


def judged_per_min(events: list[Any]) -> float:
    """60 / mean time to judge one sample (the loop judges one sample at a time)."""
    times = [e.latency_s for e in events if isinstance(e, SampleJudged)]
    return 60 / statistics.mean(times) if times else float("nan")


def wait_drained(et: EngineThread, timeout_s: float) -> None:
    t0 = time.monotonic()
    last = -1
    while (left := pending(et)) and time.monotonic() - t0 < timeout_s:
        if left != last:
            print(f"  judging: {left} samples pending ({time.monotonic() - t0:.0f} s)", flush=True)
            last = left
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--backlog", type=int, default=12, help="samples to judge per judge")
    ap.add_argument("--probes", type=int, default=10, help="chat requests per latency phase")
    ap.add_argument("--judge-tokens", type=int, default=96, help="max tokens per policy-judge vote")
    args = ap.parse_args()
    model = resolve_model(None, app_paths())

    heur_events: list[Any] = []
    et = start(model.path, "heuristic", args.judge_tokens, heur_events)
    try:
        make_backlog(et, args.backlog)
        wait_drained(et, 120)
    finally:
        et.stop()

    policy_events: list[Any] = []
    et = start(model.path, "policy", args.judge_tokens, policy_events)
    try:
        idle = probe_latency(et, args.probes, while_busy=False)
        make_backlog(et, args.backlog)
        busy = probe_latency(et, args.probes, while_busy=True)
        wait_drained(et, 900)
    finally:
        et.stop()
    heur_per_min, policy_per_min = judged_per_min(heur_events), judged_per_min(policy_events)
    ratio = statistics.median(busy) / statistics.median(idle) if busy else float("nan")
    print("\n| measure | value | goal |")
    print("|---|---|---|")
    print(
        f"| chat latency, judge idle (median of {len(idle)}) | {statistics.median(idle) * 1000:.0f} ms | |"
    )
    print(
        f"| chat latency, policy judge busy (median of {len(busy)}) | "
        f"{statistics.median(busy) * 1000:.0f} ms ({ratio:.2f}x) | <= 1.5x |"
    )
    n_h = sum(isinstance(e, SampleJudged) for e in heur_events)
    n_p = sum(isinstance(e, SampleJudged) for e in policy_events)
    print(
        f"| judged samples/min, heuristic judge + teacher log-probs ({n_h} samples) | {heur_per_min:.1f} | |"
    )
    print(
        f"| judged samples/min, policy judge, 3+3 votes of <= {args.judge_tokens} tokens ({n_p} samples) "
        f"| {policy_per_min:.1f} | |"
    )


if __name__ == "__main__":
    main()
