"""Driving and watching the engine for bench/learn.py: chat requests with 503 retries, the
trainer's CPU use, training-step windows, latency probes and the checkpoint watcher."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import psutil

from clawrl_app.engine.core.events import PolicyPublished, StepFinished, StepStarted
from clawrl_app.engine.engine_thread import EngineThread


def post_chat(
    client: httpx.Client,
    url: str,
    messages: list[dict[str, Any]],
    *,
    max_tokens: int,
    temperature: float | None,
    headers: dict[str, str],
    seed: int | None = None,
) -> dict[str, Any]:
    """One chat completion; `temperature=None` leaves it to the server's default."""
    body: dict[str, Any] = {"model": "clawrl", "messages": messages, "max_tokens": max_tokens}
    if temperature is not None:
        body["temperature"] = temperature
    if seed is not None:
        body["seed"] = seed
    for _ in range(20):
        r = client.post(f"{url}/chat/completions", headers=headers, json=body)
        if r.status_code == 503:  # queue full: the endpoint says when to retry
            time.sleep(float(r.headers.get("Retry-After", "1")))
            continue
        r.raise_for_status()
        return dict(r.json())
    raise RuntimeError("endpoint kept answering 503")


SIDE = {"X-Turn-Type": "side"}
LATENCY_PROMPT = "Tell me about the weather in spring."
LATENCY_TOKENS = 16


class TrainerCPU:
    """CPU seconds used by the trainer process tree (the `accelerate launch` child)."""

    def __init__(self, et: EngineThread) -> None:
        self.et = et

    def _procs(self) -> list[psutil.Process]:
        tr = self.et.engine.trainer
        pid = tr.pid if tr is not None else None
        if pid is None:
            return []
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def wait_idle(self, timeout_s: float = 300.0) -> float:
        """Wait until the trainer process has started up and idles (< 0.05 core over 1 s,
        i.e. it only polls the store); returns the seconds waited."""
        t0 = time.time()
        while time.time() - t0 < timeout_s:
            c0 = self.seconds()
            time.sleep(1.0)
            if self._procs() and self.seconds() - c0 < 0.05:
                break
        return time.time() - t0

    def seconds(self) -> float:
        total = 0.0
        for p in self._procs():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total


class StepWindows:
    """Wall-clock intervals of the trainer's steps (StepStarted -> StepFinished events)."""

    def __init__(self) -> None:
        self.windows: list[tuple[float, float]] = []
        self._open: float | None = None

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, StepStarted):
            self._open = time.time()
        elif isinstance(ev, StepFinished) and self._open is not None:
            self.windows.append((self._open, time.time()))
            self._open = None

    def share(self, t0: float, t1: float) -> float:
        """The fraction of [t0, t1] spent inside a training step."""
        spans = [*self.windows, *([(self._open, time.time())] if self._open else [])]
        inside = sum(max(0.0, min(t1, b) - max(t0, a)) for a, b in spans)
        return inside / max(t1 - t0, 1e-9)


@dataclass
class Probe:
    t0: float
    t1: float
    latency_s: float
    tokens: int
    trainer_cores: float  # trainer CPU seconds / wall seconds during the probe
    phase: str  # "before" (no training yet) or "loop"
    in_step: float = 0.0  # fraction of the request during a training step (set afterwards)


def latency_probe(client: httpx.Client, url: str, cpu: TrainerCPU, phase: str) -> Probe:
    c0, t0 = cpu.seconds(), time.time()
    j = post_chat(
        client,
        url,
        [{"role": "user", "content": LATENCY_PROMPT}],
        max_tokens=LATENCY_TOKENS,
        temperature=0.0,
        headers=SIDE,
    )
    t1, c1 = time.time(), cpu.seconds()
    return Probe(
        t0, t1, t1 - t0, int(j["usage"]["completion_tokens"]), (c1 - c0) / (t1 - t0), phase
    )


@dataclass
class FirstAnswer:
    version: str
    created: float
    published_at: float | None = None  # PolicyPublished event seen by the engine
    first_answer_at: float | None = None
    probes: int = 0
    outcome: str = "pending"  # served | superseded | refused | timeout

    @property
    def seconds(self) -> float | None:
        return None if self.first_answer_at is None else self.first_answer_at - self.created


class CheckpointWatcher(threading.Thread):
    """Notices each new checkpoint and probes the endpoint until an answer names it."""

    def __init__(self, et: EngineThread, timeout_s: float = 120.0) -> None:
        super().__init__(name="ckpt-watcher", daemon=True)
        self.et = et
        self.timeout_s = timeout_s
        self.results: dict[str, FirstAnswer] = {}
        self.published: dict[str, float] = {}
        self._halt = threading.Event()

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, PolicyPublished):
            self.published.setdefault(ev.version, time.time())

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def busy(self) -> bool:
        return any(r.outcome == "pending" for r in self.results.values())

    def run(self) -> None:
        store = self.et.engine.store
        assert store is not None
        with httpx.Client(timeout=120) as client:
            while not self._halt.is_set():
                rows = [c for c in store.list_checkpoints() if c.version not in self.results]
                if not rows:
                    time.sleep(0.02)
                    continue
                row = max(rows, key=lambda c: c.created)
                for c in rows:  # older ones noticed together with a newer one
                    self.results[c.version] = FirstAnswer(c.version, c.created)
                    if c is not row:
                        self.results[c.version].outcome = "superseded"
                self._chase(client, store, self.results[row.version])

    def _chase(self, client: httpx.Client, store: Any, fa: FirstAnswer) -> None:
        want = f"clawrl-{fa.version}"
        noticed = time.time()
        deadline = time.time() + self.timeout_s
        while not self._halt.is_set() and time.time() < deadline:
            try:
                j = post_chat(
                    client,
                    self.et.url,
                    [{"role": "user", "content": "Hi"}],
                    max_tokens=1,
                    temperature=0.0,
                    headers=SIDE,
                )
            except httpx.HTTPError as e:  # a starved machine: probe again, the run goes on
                print(
                    f"  [ckpt] {fa.version}: probe failed ({type(e).__name__}), again", flush=True
                )
                time.sleep(1.0)
                continue
            fa.probes += 1
            if j["model"] != want:
                time.sleep(0.1)  # 1-token probes ~10/s: enough resolution, little load
            if j["model"] == want:
                fa.first_answer_at = time.time()
                fa.outcome = "served"
                break
            row = store.get_checkpoint(fa.version)
            if row is not None and row.status == "refused":
                fa.outcome = "refused"
                break
            if any(c.created > fa.created for c in store.list_checkpoints()):
                fa.outcome = "superseded"
                break
        else:
            if fa.outcome == "pending":
                fa.outcome = "timeout"
        fa.published_at = self.published.get(fa.version)
        print(
            f"  [ckpt] {fa.version}: {fa.outcome} "
            f"{'' if fa.seconds is None else f'{fa.seconds:.2f}s after registration '}"
            f"({fa.probes} probes, noticed {noticed - fa.created:.2f}s after)",
            flush=True,
        )
