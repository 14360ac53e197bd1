"""Single-stream decode side by side: llama.cpp itself (llama-cpp-python's `Llama` on the
embedded GGUF as shipped, Q4_1) vs the app's serving backend (called directly, and through
the endpoint with one streaming client), same prompt ids, greedy, interleaved repeats.

When the backend serves another file (the F16 copy, by default), llama.cpp also decodes
that very file: the last row then shows what the backend costs apart from the weights.

Decode tokens/s counts the tokens after the first (the first carries the prefill). If
llama-cpp-python is not installed the table says so and shows the app's figures alone.
The reference runs in a process of its own: two threads driving llama.cpp in one process
make libgomp throttle its spin-waits for every team (more OpenMP threads than cores), which
halved both figures when measured in-process.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from clawrl_app.engine.backends.base import GenerationRequest, SamplingParams, TokenOut
from clawrl_app.models import ResolvedModel, gguf_source

PROMPT = "Write a long story about a lighthouse keeper and the sea."


def reference_rates(
    gguf: str, threads: int, ids: list[int], tokens: int, repeats: int
) -> list[float]:
    """llama.cpp's own generation loop on the GGUF file (run in a child process)."""
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=2048, n_threads=threads, verbose=False)
    return [reference_decode(llm, ids, tokens) for _ in range(repeats)]


def reference(gguf: Any, threads: int, ids: list[int], tokens: int, n: int) -> Any:
    """The reference's decode rates on `gguf` from a spawned process, or None when
    llama-cpp-python is not installed (or there is no file)."""
    import importlib.util
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    if importlib.util.find_spec("llama_cpp") is None or gguf is None:
        return None
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(reference_rates, str(gguf), threads, ids, tokens, n).result()


def reference_decode(llm: Any, ids: list[int], tokens: int) -> float:
    llm.reset()
    t1 = 0.0
    for n, _ in enumerate(llm.generate(ids, temp=0.0, reset=True), start=1):
        if n == 1:
            t1 = time.perf_counter()
        if n > tokens:
            break
    return tokens / (time.perf_counter() - t1)


async def backend_decode(engine: Any, ids: list[int], tokens: int) -> float:
    req = GenerationRequest("bench-decode", ids, SamplingParams(tokens + 1, temperature=0.0))
    n, t1 = 0, 0.0
    async for ev in engine.backend.generate(req):
        if isinstance(ev, TokenOut):
            n += 1
            if n == 1:
                t1 = time.perf_counter()
    return (n - 1) / (time.perf_counter() - t1)


def decode_rows(et: Any, model: ResolvedModel, tokens: int, repeats: int) -> list[str]:
    """Markdown table rows: reference, backend direct, and the ratio."""
    from serve import throughput  # bench/ is on sys.path when run

    ids = et.engine.service.formatter.render([{"role": "user", "content": PROMPT}])
    threads = getattr(et.engine.backend, "_threads", None) or 2
    ours, endpoint = [], []
    for _ in range(repeats):
        ours.append(et.call(backend_decode(et.engine, ids, tokens)))
        endpoint.append(throughput(et, 1, tokens, 8.0))
    ref = reference(gguf_source(model), threads, ids, tokens, repeats)  # the engine idles
    served = getattr(et.engine.backend, "_gguf", None)
    same = None  # llama.cpp on the very file the backend serves (the F16 copy by default)
    if served is not None and served != gguf_source(model):
        same = reference(served, threads, ids, tokens, repeats)
    name = type(et.engine.backend).__name__
    mine = statistics.median(ours)
    rows = [f"| {name}, direct, 1 stream, greedy decode | {mine:.1f} tok/s | |"]
    rows.append(
        f"| {name}, endpoint, 1 streaming client | {statistics.median(endpoint):.1f} tok/s | |"
    )
    if ref is None:
        rows.append("| llama.cpp reference | not installed (pip install llama-cpp-python) | |")
        return rows
    theirs = statistics.median(ref)
    rows.append(
        f"| llama.cpp `Llama` on the shipped GGUF ({threads} threads) | {theirs:.1f} tok/s | |"
    )
    if not same:  # the backend serves the shipped file itself
        rows.append(f"| ours / llama.cpp on the same file | {mine / theirs:.2f}x | >= 0.8x |")
        return rows
    # the default serves an F16 copy: the backend's own cost is the same-file ratio, the
    # price of the choice of weights the other one
    own = statistics.median(same)
    rows.append(f"| ours (served weights) / llama.cpp (shipped GGUF) | {mine / theirs:.2f}x | |")
    rows.append(f"| llama.cpp `Llama` on the served file ({served.name}) | {own:.1f} tok/s | |")
    rows.append(f"| ours / llama.cpp on the same file | {mine / own:.2f}x | >= 0.8x |")
    return rows
