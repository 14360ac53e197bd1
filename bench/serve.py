"""Serving benchmark on the embedded model (CPU).

(a) Endpoint overhead: the same prompts answered with 1 token through the HTTP endpoint
    (the server parses and validates the JSON, infers the session and records the turn in
    SQLite before answering) vs the backend called directly (chat template + generate).
    Two clients in a process of their own: httpx (what a Python SDK costs on top) and raw
    bytes on a kept-alive socket (bench/raw_http.py: the endpoint's own overhead).
    Interleaved, paired per round, median of N.
(b) Throughput: output tokens/s with 1 vs 4 concurrent streaming clients (closed loop, in a
    process of their own, --window seconds each), and llama.cpp's own gain from decoding
    4 rows per step on the same weights (bench/serve_rows.py): the ceiling of that ratio.
(c) Decode: single-stream greedy decode of the app's backend vs llama.cpp itself on the
    same GGUF (bench/serve_decode.py).
(d) With --prefix: time to first token of a session's turn 2 vs turn 1 (prefix KV reuse),
    see bench/serve_prefix.py.

The overhead is measured --overhead-runs times in a row (the goal must hold in each).
Run: `.venv/bin/python bench/serve.py [--backend auto|torch|llamacpp] [--weights f16|gguf]
[--rounds 60] [--tokens 64] [--repeats 3] [--window 15] [--overhead-runs 5]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raw_http import RawHttpClient  # noqa: E402  (bench/ is on sys.path when run)

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.engine.backends.base import GenerationRequest, SamplingParams  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Give me a synonym for happy.",
    "How many legs does a spider have?",
    "Name a programming language.",
    "What colour is the sky on a clear day?",
    "Suggest a name for a cat.",
]


async def direct_once(engine: Any, prompt: str) -> float:
    """Chat template + backend generation of one token, timed on the engine's loop."""
    svc = engine.service
    t0 = time.perf_counter()
    ids = svc.formatter.render([{"role": "user", "content": prompt}])
    req = GenerationRequest("bench", ids, SamplingParams(1, temperature=0.0))
    async for _ in engine.backend.generate(req):
        pass
    return time.perf_counter() - t0


def one_token_body(prompt: str) -> dict[str, Any]:
    return {
        "model": "clawrl",
        "max_tokens": 1,
        "temperature": 0,
        "messages": [{"role": "user", "content": prompt}],
    }


def endpoint_once(client: httpx.Client, url: str, prompt: str) -> float:
    t0 = time.perf_counter()
    r = client.post(url, json=one_token_body(prompt))
    r.raise_for_status()
    return time.perf_counter() - t0


def raw_once(client: RawHttpClient, prompt: str) -> float:
    t0 = time.perf_counter()
    status, body = client.post_json(one_token_body(prompt))
    if status != 200:
        raise RuntimeError(f"the endpoint answered {status}: {body[:300]!r}")
    return time.perf_counter() - t0


def client_process(url: str, conn: Any) -> None:
    """The HTTP clients, in their own process like a real one (OpenClaw, an SDK): they do
    not compete with the server for its GIL. Answers each (client, prompt) with its timing."""
    raw = RawHttpClient(url)
    with httpx.Client(timeout=60) as client:
        while (job := conn.recv()) is not None:
            kind, prompt = job
            took = endpoint_once(client, url, prompt) if kind == "httpx" else raw_once(raw, prompt)
            conn.send(took)
    raw.close()


def overhead(et: EngineThread, rounds: int) -> dict[str, float]:
    """Direct backend vs the endpoint through httpx and through a raw socket, interleaved."""
    url = f"{et.url}/chat/completions"
    direct: list[float] = []
    endpoint: list[float] = []
    raw: list[float] = []
    here, there = mp.Pipe()
    child = mp.get_context("spawn").Process(target=client_process, args=(url, there))
    child.start()

    def via(kind: str, prompt: str) -> float:
        here.send((kind, prompt))
        return float(here.recv())

    try:
        for p in PROMPTS:  # warm-up
            via("httpx", p)
            via("raw", p)
            et.call(direct_once(et.engine, p))
        for i in range(rounds):
            p = PROMPTS[i % len(PROMPTS)]
            direct.append(et.call(direct_once(et.engine, p)))
            endpoint.append(via("httpx", p))
            raw.append(via("raw", p))
    finally:
        here.send(None)
        child.join(30)
    d50, e50 = statistics.median(direct), statistics.median(endpoint)

    def paired(xs: list[float]) -> float:
        # the same round's endpoint minus direct time: less noisy than a difference of medians
        return statistics.median(e - d for e, d in zip(xs, direct, strict=True)) * 1000

    return {
        "direct_p50_ms": d50 * 1000,
        "endpoint_p50_ms": e50 * 1000,
        "overhead_p50_ms": (e50 - d50) * 1000,
        "paired_overhead_p50_ms": paired(endpoint),
        "paired_raw_overhead_p50_ms": paired(raw),
        "median_ratio": statistics.median(e / d for e, d in zip(endpoint, direct, strict=True)),
    }


async def stream_tokens(client: httpx.AsyncClient, url: str, prompt: str, tokens: int) -> int:
    """One streamed answer; its completion tokens (from the usage chunk)."""
    body = {
        "model": "clawrl",
        "max_tokens": tokens,
        "temperature": 0.7,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"Write a long story. {prompt}"}],
    }
    n = 0
    async with client.stream("POST", url, json=body) as r:
        async for line in r.aiter_lines():
            if '"usage"' in line and '"choices": []' in line:
                n = json.loads(line[6:])["usage"]["completion_tokens"]
    return n


def load_process(url: str, clients: int, tokens: int, window_s: float, conn: Any) -> None:
    """`clients` streaming clients in a process of their own (a real client does not share
    the server's GIL), each sending its next request as soon as the last one ended, for
    `window_s` seconds (closed loop: the server always has `clients` answers in flight, so
    answers that stop early do not leave it idle). Sends (tokens, seconds) back."""

    async def client(c: httpx.AsyncClient, i: int, deadline: float) -> int:
        total, k = 0, 0
        while time.perf_counter() < deadline:
            total += await stream_tokens(c, url, PROMPTS[(i + k) % len(PROMPTS)], tokens)
            k += 1
        return total

    async def go() -> tuple[int, float]:
        async with httpx.AsyncClient(timeout=600) as c:
            t0 = time.perf_counter()
            counts = await asyncio.gather(*[client(c, i, t0 + window_s) for i in range(clients)])
            return sum(counts), time.perf_counter() - t0

    conn.send(asyncio.run(go()))


def throughput(et: EngineThread, clients: int, tokens: int, window_s: float = 15.0) -> float:
    """Output tokens/s of `clients` concurrent streaming clients over `window_s`."""
    here, there = mp.Pipe()
    url = f"{et.url}/chat/completions"
    child = mp.get_context("spawn").Process(
        target=load_process, args=(url, clients, tokens, window_s, there)
    )
    child.start()
    try:
        n, seconds = here.recv()
    finally:
        child.join(60)
    return float(n) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=60, help="overhead samples")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per streaming client")
    ap.add_argument("--repeats", type=int, default=3, help="throughput runs per setting (median)")
    ap.add_argument("--window", type=float, default=15.0, help="seconds per throughput run")
    ap.add_argument("--backend", default="auto", choices=["auto", "torch", "llamacpp"])
    ap.add_argument("--weights", default="f16", choices=["f16", "gguf"], help="llama.cpp weights")
    ap.add_argument("--overhead-runs", type=int, default=5, help="consecutive overhead runs")
    ap.add_argument(
        "--prefix",
        action="store_true",
        help="instead: time to first token of turn 1 vs turn 2 (bench/serve_prefix.py)",
    )
    args = ap.parse_args()
    if args.prefix:
        from serve_prefix import main as prefix_main  # bench/ is on sys.path when run

        prefix_main([])
        return
    model = resolve_model(None, app_paths())  # the user's cache: converted once
    home = tempfile.mkdtemp(prefix="clawrl-bench-")
    env = {
        "CLAWRL_MODEL__PATH": str(model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__ENABLED": "false",  # serving only: no trainer competing for the CPU
        "CLAWRL_HARDWARE__BACKEND": args.backend,
        "CLAWRL_HARDWARE__LLAMACPP_WEIGHTS": args.weights,
    }
    settings = load_settings(env=env).settings
    et = EngineThread(settings, app_paths(home)).start()
    try:
        print(f"backend: {type(et.engine.backend).__name__} ({et.engine.plan.backend})", flush=True)
        runs = [overhead(et, args.rounds) for _ in range(args.overhead_runs)]
        throughput(et, 4, 8, 3.0)  # warm-up of the batched shapes
        ones, fours = [], []
        for _ in range(args.repeats):  # interleaved, median: this machine is noisy
            ones.append(throughput(et, 1, args.tokens, args.window))
            fours.append(throughput(et, 4, args.tokens, args.window))
        one, four = statistics.median(ones), statistics.median(fours)
        print_table(runs, one, four)
        from serve_decode import decode_rows  # bench/ is on sys.path when run
        from serve_rows import ceiling_rows

        for row in ceiling_rows(et.engine.backend):
            print(row, flush=True)

        for row in decode_rows(et, model, args.tokens, args.repeats):
            print(row, flush=True)
    finally:
        et.stop()
        shutil.rmtree(home, ignore_errors=True)  # its F16 copy of the model alone is ~270 MB


def print_table(runs: list[dict[str, float]], one: float, four: float) -> None:
    o = runs[0]
    print("\n| measure | value | goal |")
    print("|---|---|---|")
    for key, what in (
        ("paired_raw_overhead_p50_ms", "endpoint overhead (raw HTTP client), paired p50"),
        ("paired_overhead_p50_ms", "endpoint + httpx client overhead, paired p50"),
    ):
        paired = ", ".join(f"{r[key]:.2f}" for r in runs)
        worst = max(r[key] for r in runs)
        print(f"| {what}, {len(runs)} runs | {paired} ms (worst {worst:.2f}) | <= 3 ms each |")
    print(f"| direct backend, 1-token answer, p50 | {o['direct_p50_ms']:.1f} ms | |")
    print(f"| endpoint, 1-token answer, p50 | {o['endpoint_p50_ms']:.1f} ms | |")
    print(
        f"| endpoint overhead, difference of the p50s (run 1) | {o['overhead_p50_ms']:.2f} ms | |"
    )
    print(f"| endpoint / direct, median ratio | {o['median_ratio']:.3f}x | <= 1.05x |")
    print(f"| 1 streaming client | {one:.1f} tok/s | |")
    print(
        f"| 4 concurrent streaming clients | {four:.1f} tok/s ({four / one:.2f}x) | >= 2.5x |",
        flush=True,
    )


if __name__ == "__main__":
    main()
