"""What llama.cpp itself gains from decoding several sequences at once on this machine.

The endpoint's 4-stream / 1-stream ratio cannot exceed what one llama_decode of 4 rows
costs against 4 decodes of 1 row on the same weights. Measured here on the GGUF the backend
serves (the F16 copy or the shipped Q4_1), in a process of its own, same thread count:
median step time of 40 decode steps per batch size, each row its own sequence.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any


def step_times(
    gguf: str, threads: int, sizes: tuple[int, ...], steps: int = 40
) -> dict[int, float]:
    """Median seconds of one llama_decode step with n rows, for each n in `sizes`."""
    from clawrl_app.engine.backends.llamacpp.runtime import LlamaRuntime

    rt = LlamaRuntime(Path(gguf), kv_tokens=2048, seqs=max(sizes), threads=threads)
    out: dict[int, float] = {}
    try:
        for rows in sizes:
            for seq in range(rows):
                rt.seq_clear(seq)
                rt.prefill([100 + seq + j for j in range(16)], 0, seq, 15)
            times = []
            for step in range(steps):
                entries = [(200 + step, 16 + step, seq, True) for seq in range(rows)]
                t0 = time.perf_counter()
                rt.decode(entries)
                times.append(time.perf_counter() - t0)
            out[rows] = statistics.median(times)
            for seq in range(rows):
                rt.seq_clear(seq)
    finally:
        rt.close()
    return out


def ceiling_rows(backend: Any, sizes: tuple[int, ...] = (1, 4)) -> list[str]:
    """Markdown rows: llama.cpp's own tokens/s at 1 and 4 rows on the served weights."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    gguf = getattr(backend, "_gguf", None)
    if gguf is None:
        return ["| llama.cpp batch scaling | not measured (not the llama.cpp backend) | |"]
    threads = getattr(backend, "_threads", None) or 2
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        t = pool.submit(step_times, str(gguf), threads, sizes).result()
    one = 1 / t[1]
    rows = []
    for n in sizes:
        rate = n / t[n]
        rows.append(
            f"| llama.cpp itself, {n} row(s) per decode step ({Path(gguf).name}) "
            f"| {rate:.1f} tok/s ({rate / one:.2f}x), {t[n] * 1000:.1f} ms a step | |"
        )
    return rows
