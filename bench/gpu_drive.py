"""Driving a served model for bench/gpu.py with the official `openai` client: feedback
sessions, latency probes, streamed ms/token, training-step windows and the watcher that
times checkpoint registered -> published -> first answer naming it.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai
from gpu_serve import Server, say

NO = "No, that's too long. Answer in one short sentence."
YES = "Thanks, that's perfect!"
PROMPTS = [
    "Tell me about the sea.",
    "How do trains work?",
    "Describe a cat.",
    "What is bread made of?",
    "Why is the sky blue?",
    "Explain rain to a child.",
    "What makes music sound happy?",
    "Describe a city at night.",
]
SIDE = {"X-Turn-Type": "side"}  # probes and measurements: never trained on
PROBE_TOKENS = 16


def client(url: str, timeout_s: float) -> openai.OpenAI:
    """The official client; it retries 503 (queue full) with backoff on its own."""
    return openai.OpenAI(base_url=url, api_key="bench", max_retries=5, timeout=timeout_s)


def chat(
    c: openai.OpenAI,
    messages: list[dict[str, Any]],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    headers: dict[str, str] | None = None,
    model: str = "clawrl",
    seed: int | None = None,
) -> Any:
    return c.chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        extra_headers=headers or {},
    )


def feedback_session(c: openai.OpenAI, server: Server, k: int, answer_tokens: int) -> int:
    """Three sampled answers in one session: the user's next message judges the first two
    (a correction or thanks, alternating), an explicit rating via POST /v1/feedback the
    third. The answers run to `answer_tokens` (finish_reason length), and a thanks after a
    cut-off answer counts 0 unless rated explicitly, so the thanked one is also rated +1.
    Returns the number of answers that carry a training signal (3)."""
    sid = f"gpu-bench-{k:03d}-{uuid.uuid4().hex[:6]}"
    msgs: list[dict[str, Any]] = [{"role": "user", "content": PROMPTS[k % len(PROMPTS)]}]
    replies = (NO, YES) if k % 2 == 0 else (YES, NO)
    for i in range(3):
        headers = {"X-Session-Id": sid, **({"X-Session-Done": "1"} if i == 2 else {})}
        r = chat(
            c, msgs, max_tokens=answer_tokens, temperature=1.0, headers=headers, seed=k * 10 + i
        )
        if i < 2:
            msgs += [
                {"role": "assistant", "content": r.choices[0].message.content or ""},
                {"role": "user", "content": replies[i]},
            ]
    thanked = replies.index(YES)
    server.feedback({"session_id": sid, "turn": thanked - 3, "rating": 1})  # -3/-2: mains
    rating = 1 if k % 2 else -1
    body: dict[str, Any] = {"session_id": sid, "turn": -1, "rating": rating}
    if rating < 0:
        body["hint"] = "Answer in one short sentence."
    server.feedback(body)
    return 3


@dataclass
class Probe:
    t0: float
    t1: float
    tokens: int
    model: str

    @property
    def ms_per_token(self) -> float:
        return (self.t1 - self.t0) * 1000 / max(self.tokens, 1)


def probe(c: openai.OpenAI, k: int) -> Probe:
    """A 16-token greedy side turn on the alias (wall clock, to compare with event times)."""
    t0 = time.time()
    r = chat(
        c,
        [{"role": "user", "content": f"Name a fact about {PROMPTS[k % len(PROMPTS)]}"}],
        max_tokens=PROBE_TOKENS,
        headers=SIDE,
    )
    tokens = r.usage.completion_tokens if r.usage else 0
    return Probe(t0, time.time(), tokens, r.model)


class Prober(threading.Thread):
    """Latency probes every `every_s` until stopped (while sessions are driven)."""

    def __init__(self, c: openai.OpenAI, every_s: float) -> None:
        super().__init__(name="prober", daemon=True)
        self.c, self.every_s = c, every_s
        self.probes: list[Probe] = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        k = 0
        while not self._halt.wait(self.every_s):
            try:
                self.probes.append(probe(self.c, k))
            except openai.OpenAIError as exc:
                self.errors.append(repr(exc))
            k += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(300)


def step_windows(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) wall-clock times of training steps from StepStarted/StepFinished events."""
    out, start = [], None
    for e in events:
        if e["kind"] == "StepStarted":
            start = e["ts"]
        elif e["kind"] == "StepFinished" and start is not None:
            out.append((start, e["ts"]))
            start = None
    if start is not None:
        out.append((start, time.time()))
    return out


def in_step(windows: list[tuple[float, float]], t0: float, t1: float) -> float:
    """The fraction of [t0, t1] spent inside a training step."""
    inside = sum(max(0.0, min(t1, b) - max(t0, a)) for a, b in windows)
    return inside / max(t1 - t0, 1e-9)


@dataclass
class FirstAnswer:
    version: str
    created: float
    first_answer_at: float | None = None
    published_at: float | None = None
    outcome: str = "pending"  # served | superseded | refused | timeout


class CheckpointWatcher(threading.Thread):
    """Notices each new checkpoint and sends 1-token probes until an answer names it."""

    def __init__(self, server: Server, c: openai.OpenAI, timeout_s: float) -> None:
        super().__init__(name="ckpt-watcher", daemon=True)
        self.server, self.c, self.timeout_s = server, c, timeout_s
        self.results: dict[str, FirstAnswer] = {}
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(300)

    def run(self) -> None:
        while not self._halt.wait(0.1):
            try:
                rows = [r for r in self.server.checkpoints() if r["version"] not in self.results]
            except Exception as exc:  # the server may be going away
                say(f"checkpoint watcher: {exc}")
                continue
            if not rows:
                continue
            newest = max(rows, key=lambda r: r["created"])
            for r in rows:  # older ones noticed together with a newer one are superseded
                fa = self.results[r["version"]] = FirstAnswer(r["version"], r["created"])
                fa.outcome = "pending" if r is newest else "superseded"
            try:
                self._chase(self.results[newest["version"]])
            except Exception as exc:  # the server went away (Ctrl-C, a failure elsewhere)
                say(f"checkpoint watcher: {exc}")

    def _chase(self, fa: FirstAnswer) -> None:
        want = f"clawrl-{fa.version}"
        deadline = time.time() + self.timeout_s
        while not self._halt.is_set() and time.time() < deadline:
            r = chat(self.c, [{"role": "user", "content": "Hi"}], max_tokens=1, headers=SIDE)
            if r.model == want:
                fa.first_answer_at, fa.outcome = time.time(), "served"
                break
            rows = {x["version"]: x for x in self.server.checkpoints()}
            if rows.get(fa.version, {}).get("status") == "refused":
                fa.outcome = "refused"
                break
            if any(x["created"] > fa.created for x in rows.values()):
                fa.outcome = "superseded"
                break
            time.sleep(0.05)
        else:
            fa.outcome = "timeout" if fa.outcome == "pending" else fa.outcome
        say(
            f"checkpoint {fa.version}: {fa.outcome}"
            + (
                f", first answer {fa.first_answer_at - fa.created:.2f} s after registration"
                if fa.first_answer_at
                else ""
            )
        )

    def finish(self) -> list[FirstAnswer]:
        """Stop, then fill in when each checkpoint was published (the store's time)."""
        self.stop()
        published = {r["version"]: r.get("published_at") for r in self.server.checkpoints()}
        for fa in self.results.values():
            fa.published_at = published.get(fa.version)
        return sorted(self.results.values(), key=lambda f: f.created)


def settle(server: Server, batch: int, timeout_s: float) -> bool:
    """Wait until judging caught up, the trainer has fewer than `batch` samples left, is not
    stepping, and its newest checkpoint was published or refused (twice in a row, 1 s apart)."""
    deadline, calm = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        st = server.status()
        counts, training = st.get("counts", {}), st.get("training") or {}
        rows = server.checkpoints()
        newest = max(rows, key=lambda r: (r["step"], r["created"])) if rows else None
        busy = (
            counts.get("samples_pending", 0) > 0
            or counts.get("samples_judged", 0) >= batch
            or bool(training.get("stepping"))
            or (newest is not None and newest["status"] == "ready")
        )
        calm = 0 if busy else calm + 1
        if calm >= 2:
            return True
        time.sleep(1.0)
    return False


@dataclass
class StreamStats:
    ms_per_token: float  # median over streams of decode time per token after the first
    ttft_ms: float  # median time to the first content
    tokens_per_s: float  # all streams' tokens / wall time
    tokens: int
    models: list[str]


def _stream_once(c: openai.OpenAI, model: str, k: int, tokens: int) -> tuple[float, ...]:
    t0 = time.perf_counter()
    first = last = None
    n, name = 0, ""
    stream = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": f"Write a long story. {PROMPTS[k % len(PROMPTS)]}"}],
        max_tokens=tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=SIDE,
    )
    for chunk in stream:
        name = chunk.model or name
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
        if chunk.usage is not None:
            n = chunk.usage.completion_tokens
    t1 = time.perf_counter()
    first, last = first or t1, last or t1
    per_token = (last - first) / max(n - 1, 1)
    return per_token * 1000, (first - t0) * 1000, n, t0, t1, name  # type: ignore[return-value]


def stream_stats(c: openai.OpenAI, model: str, streams: int, tokens: int) -> StreamStats:
    """`streams` concurrent greedy streams pinned to `model`, `tokens` tokens each."""
    with ThreadPoolExecutor(max_workers=streams) as pool:
        rows = list(pool.map(lambda k: _stream_once(c, model, k, tokens), range(streams)))
    wall = max(r[4] for r in rows) - min(r[3] for r in rows)
    total = sum(int(r[2]) for r in rows)
    return StreamStats(
        ms_per_token=statistics.median(r[0] for r in rows),
        ttft_ms=statistics.median(r[1] for r in rows),
        tokens_per_s=total / max(wall, 1e-9),
        tokens=total,
        models=sorted({str(r[5]) for r in rows}),
    )
