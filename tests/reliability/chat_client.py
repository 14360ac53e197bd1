"""A user of the app through the official `openai` SDK: multi-turn sessions whose next user
message is the feedback on the previous answer, explicit ratings (`POST /v1/feedback`), and
a record of every answer it got in full.

Shared by tests/reliability/test_kill9.py and bench/chaos.py (kill and load parts). The
driver keeps going while the app is down (it retries the same turn), so what it records
is exactly what a client saw: an answer counts only when it arrived complete.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "How many legs does a spider have?",
    "Give me a synonym for happy.",
    "Write one sentence about the sea.",
    "What is two plus three?",
    "Suggest a name for a cat.",
    "Which planet is the largest?",
]
FOLLOW_UPS = [
    "Thanks, that is right. Can you say it shorter?",
    "No, that is wrong. Try again, please.",
    "Good. Now explain why in one sentence.",
    "That was not what I asked. Answer the question directly.",
    "Great answer! Add one more detail.",
]


@dataclass(frozen=True)
class Answered:
    """A turn the client received in full (finish_reason seen, stream ended normally)."""

    session_id: str
    user: str
    content: str
    model: str
    streamed: bool
    at: float


@dataclass(frozen=True)
class Rated:
    """An explicit rating the app acknowledged (200) for the session's last answer."""

    session_id: str
    content: str
    rating: int


@dataclass(frozen=True)
class Timing:
    """One streamed answer: time to the first content token, tokens, wall time."""

    ttft_s: float | None
    tokens: int
    total_s: float
    at: float


@dataclass
class DriverLog:
    """What the client saw; appended from the driver threads under `lock`."""

    answered: list[Answered] = field(default_factory=list)
    rated: list[Rated] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ChatDriver:
    """`clients` threads, each running sessions of `turns` turns against `base_url`.

    `stream`: None alternates streaming and non-streaming answers; `rate_p` is the chance
    of an explicit rating after an answer. Stop with `stop()`; `log` holds the record.
    """

    def __init__(
        self,
        base_url: str,
        *,
        clients: int = 2,
        turns: int = 3,
        max_tokens: int = 12,
        stream: bool | None = None,
        rate_p: float = 0.5,
        seed: int = 0,
        timeout_s: float = 120.0,
        pause_s: float = 0.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.clients, self.turns, self.max_tokens = clients, turns, max_tokens
        self.stream, self.rate_p, self.seed = stream, rate_p, seed
        self.timeout_s, self.pause_s = timeout_s, pause_s
        self.log = DriverLog()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> ChatDriver:
        for i in range(self.clients):
            t = threading.Thread(target=self._run, args=(i,), name=f"chat-client-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, join_s: float = 180.0) -> DriverLog:
        """Ask every client to finish its current request and wait for them."""
        self._stop.set()
        deadline = time.monotonic() + join_s
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))
        return self.log

    def wait_answers(self, n: int, timeout_s: float) -> bool:
        """Wait until `n` answers in total arrived; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.log.answered) >= n:
                return True
            time.sleep(0.1)
        return False

    # -- one client ---------------------------------------------------------------------
    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        client = openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key="local", max_retries=0, timeout=self.timeout_s
        )
        http = httpx.Client(timeout=self.timeout_s)
        n = 0
        try:
            while not self._stop.is_set():
                sid = f"chaos-{index}-{n}-{uuid.uuid4().hex[:8]}"
                n += 1
                self._session(client, http, rng, sid)
        finally:
            client.close()
            http.close()

    def _session(self, client: Any, http: httpx.Client, rng: random.Random, sid: str) -> None:
        messages: list[dict[str, Any]] = []
        for turn in range(self.turns):
            user = rng.choice(QUESTIONS) if turn == 0 else rng.choice(FOLLOW_UPS)
            messages.append({"role": "user", "content": f"{user} ({sid}:{turn})"})
            streamed = self.stream if self.stream is not None else rng.random() < 0.5
            got = None
            while got is None and not self._stop.is_set():  # the same turn until it arrives
                got = self._ask(client, sid, messages, streamed)
                if got is None:
                    time.sleep(0.3)
            if got is None:
                return
            messages.append({"role": "assistant", "content": got.content})
            with self.log.lock:
                self.log.answered.append(got)
            if rng.random() < self.rate_p:
                self._rate(http, sid, got.content, rng.choice((1, -1)))
            if self.pause_s:
                time.sleep(self.pause_s)

    def _ask(
        self, client: Any, sid: str, messages: list[dict[str, Any]], streamed: bool
    ) -> Answered | None:
        kwargs: dict[str, Any] = {
            "model": "clawrl",
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": 0.8,
            "extra_headers": {"X-Session-Id": sid},
        }
        user = str(messages[-1]["content"])
        try:
            if not streamed:
                r = client.chat.completions.create(**kwargs)
                content = r.choices[0].message.content or ""
                return Answered(sid, user, content, r.model, False, time.time())
            return self._ask_streaming(client, kwargs, sid, user)
        except openai.APIStatusError as exc:
            self._error(f"http_{exc.status_code}")
        except openai.APIConnectionError as exc:  # the app is down (killed, restarting)
            self._error("timeout" if isinstance(exc, openai.APITimeoutError) else "connection")
        except (openai.APIError, httpx.HTTPError) as exc:  # a stream cut short, an error event
            self._error(f"stream_{type(exc).__name__}")
        return None

    def _ask_streaming(
        self, client: Any, kwargs: dict[str, Any], sid: str, user: str
    ) -> Answered | None:
        t0 = time.monotonic()
        ttft: float | None = None
        parts: list[str] = []
        finish, model, tokens = None, "", 0
        stream = client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
        with stream:
            for chunk in stream:
                model = chunk.model or model
                if chunk.usage is not None:
                    tokens = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    if choice.delta.content:
                        if ttft is None:
                            ttft = time.monotonic() - t0
                        parts.append(choice.delta.content)
                    finish = choice.finish_reason or finish
        if finish is None:
            self._error("stream_without_finish")
            return None
        with self.log.lock:
            self.log.timings.append(Timing(ttft, tokens, time.monotonic() - t0, time.time()))
        return Answered(sid, user, "".join(parts), model, True, time.time())

    def _rate(self, http: httpx.Client, sid: str, content: str, rating: int) -> None:
        try:
            r = http.post(
                f"{self.base_url}/v1/feedback",
                json={"session_id": sid, "turn": -1, "rating": rating},
            )
        except httpx.HTTPError:
            self._error("feedback_connection")
            return
        if r.status_code == 200:
            with self.log.lock:
                self.log.rated.append(Rated(sid, content, rating))
        else:
            self._error(f"feedback_http_{r.status_code}")

    def _error(self, kind: str) -> None:
        with self.log.lock:
            self.log.errors[kind] += 1
