"""The worker-thread machinery shared by the in-process backends (torch, llama.cpp).

One worker thread owns the model. Requests are prefilled one by one and merged into the
decode batch of their policy version; each loop iteration decodes one token for every
active batch (round-robin over versions, so a newly published adapter never waits for
the old version's answers to finish). Between steps the worker runs queued commands
(load/unload adapters) and at most one scoring job, so user requests keep priority.

A subclass supplies the model calls: `_start_row` (prefill one request), `_decode_logits`
(one token for every row of a lane), `_score_now`, `_topk_now`, `_load_now`,
`_delete_now`, `device`, and may react to `_row_done` (keep a finished row's KV).
Every path that takes a request either answers it or releases it (`_finish`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from clawrl_app.engine.backends.base import (
    BackendError,
    BackendInfo,
    BackendOverloaded,
    Finished,
    GenerationEvent,
    GenerationRequest,
    TokenOut,
    UnknownVersion,
)
from clawrl_app.engine.backends.grammar import GrammarCompiler, mask_logits
from clawrl_app.engine.backends.sampling import sample_next
from clawrl_app.engine.backends.torch_rows import BASE_VERSION, Row, RowStream
from clawrl_app.engine.chat.formatter import eos_token_ids
from clawrl_app.engine.chat.repetition import repeating_tail

log = logging.getLogger("clawrl.worker_backend")
# Under continuous user traffic, background work (teacher/canary scoring, judge votes) still
# gets one pass per this many seconds: bounded starvation, bounded user slowdown.
BACKGROUND_EVERY_S = 1.0
# This many failed model calls in a row (no success between them) mark the backend not
# ready: /readyz says why instead of clients queueing for an answer that never comes.
UNHEALTHY_AFTER = 3


class WorkerBackend(ABC):
    """Queues, lanes, versions and health of an in-process backend (see the module doc)."""

    thread_name = "model-worker"

    def __init__(
        self,
        tokenizer: Any,
        *,
        model_name: str,
        context_length: int,
        max_batch: int = 8,
        max_queue: int = 64,
    ) -> None:
        self._tokenizer = tokenizer
        self._model_name = model_name
        self._context_length = context_length
        self._max_batch = max_batch
        self._max_queue = max_queue
        self._eos = eos_token_ids(tokenizer)
        self._grammars = GrammarCompiler(tokenizer)
        self._pending: queue.Queue[Row] = queue.Queue()
        self._pending_bg: queue.Queue[Row] = queue.Queue()
        self._commands: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._scores: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._wake = threading.Event()
        # one decode batch per (version, background) lane
        self._batches: dict[tuple[str, bool], Any] = {}
        self._versions: dict[str, Path | None] = {BASE_VERSION: None}
        self._active = BASE_VERSION
        self._inflight: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.busy_since: float | None = None
        self._last_background = time.monotonic()
        self._failures = 0  # consecutive failed model calls
        self._last_failure: str | None = None
        self._dead: str | None = None  # the worker thread ended by an unexpected error

    # -- what a subclass supplies -------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where the logits live: every tensor the worker creates goes there."""
        return torch.device("cpu")

    @abstractmethod
    def _start_row(self, row: Row) -> tuple[Any, torch.Tensor]:
        """Prefill `row` alone: its one-row lane batch and the logits of its next token (1, V)."""
        ...

    @abstractmethod
    def _decode_logits(self, key: tuple[str, bool], batch: Any) -> torch.Tensor:
        """Feed every row's `next_id` to the model; the next-token logits (B, V)."""
        ...

    def _row_done(self, batch: Any, index: int, row: Row) -> None:  # noqa: B027 (optional hook)
        """Row `index` of `batch` finished (its client already heard): keep what is useful."""

    @abstractmethod
    def _score_now(
        self, prompt_ids: list[int], response_ids: list[int], version: str
    ) -> list[float]: ...

    @abstractmethod
    def _topk_now(
        self, prompt_ids: list[int], response_ids: list[int], k: int, version: str
    ) -> tuple[list[list[int]], list[list[float]]]: ...

    @abstractmethod
    def _delete_now(self, version: str) -> None: ...

    # -- lifecycle -------------------------------------------------------------------
    @property
    def active_version(self) -> str:
        return self._active

    def health(self) -> str | None:
        """None when serving works; otherwise why not (backs /readyz)."""
        if self._dead is not None:
            return self._dead
        if self._failures >= UNHEALTHY_AFTER:
            return f"{self._failures} model calls failed in a row; last: {self._last_failure}"
        return None

    def inflight(self, version: str) -> int:
        """Requests admitted on `version` whose answers are not finished yet."""
        return self._inflight.get(version, 0)

    def info(self) -> BackendInfo:
        return BackendInfo(
            model_name=self._model_name,
            context_length=self._context_length,
            eos_token_ids=self._eos,
            versions=list(self._versions),
        )

    async def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
            self._thread = None

    # -- requests --------------------------------------------------------------------
    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Queue the request now (raising BackendOverloaded at once) and stream its events."""
        if self._dead is not None or self._thread is None:
            raise BackendError(self._dead or "backend is not started")
        if self._pending.qsize() >= self._max_queue:
            raise BackendOverloaded(f"{self._pending.qsize()} requests already waiting")
        if request.version is not None and request.version not in self._versions:
            raise UnknownVersion(request.version)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[GenerationEvent | BaseException] = asyncio.Queue()

        def emit(ev: GenerationEvent | BaseException) -> None:
            loop.call_soon_threadsafe(events.put_nowait, ev)

        row = Row(request=request, emit=emit)  # type: ignore[arg-type]
        if request.version is not None:  # counted from now: unloading it waits for this row
            row.version = request.version
            self._hold(row)
        (self._pending_bg if request.background else self._pending).put(row)
        self._wake.set()
        return RowStream(row, events)

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        version: str | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]:
        if not response_ids:
            return []
        if len(prompt_ids) + len(response_ids) > self._context_length:
            raise BackendError("prompt + response exceed the model's context window")
        v = version or BASE_VERSION
        if v not in self._versions:
            raise UnknownVersion(v)
        lane = self._commands if urgent else self._scores  # urgent: next loop round
        return await self._submit(
            lane, self._counted("scoring", lambda: self._score_now(prompt_ids, response_ids, v))
        )

    async def score_topk(
        self, prompt_ids: list[int], response_ids: list[int], k: int, version: str | None = None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """The top-k token ids and log-probs (T = 1) at each response position (top-k OPD)."""
        v = version or BASE_VERSION
        if v not in self._versions:
            raise UnknownVersion(v)
        return await self._submit(
            self._scores,
            self._counted("top-k scoring", lambda: self._topk_now(prompt_ids, response_ids, k, v)),
        )

    async def activate(self, version: str) -> None:
        if version not in self._versions:
            raise UnknownVersion(version)
        self._active = version

    async def unload_adapter(self, version: str) -> None:
        if version == BASE_VERSION:
            raise BackendError("the base version cannot be unloaded")
        if version == self._active:
            raise BackendError(f"{version} is being served; activate another version first")
        while self._inflight.get(version, 0) > 0:  # its in-flight answers finish first
            await asyncio.sleep(0.05)
        self._versions.pop(version, None)
        await self._submit(self._commands, lambda: self._delete_now(version))

    async def _submit(
        self, q: queue.Queue[tuple[Callable[[], Any], Future[Any]]], fn: Callable[[], Any]
    ) -> Any:
        if self._dead is not None or self._thread is None:
            raise BackendError(self._dead or "backend is not started")
        fut: Future[Any] = Future()
        q.put((fn, fut))
        self._wake.set()
        return await asyncio.wrap_future(fut)

    # -- worker thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._serve_forever()
        except BaseException as exc:  # the worker must never vanish silently
            log.exception("torch backend worker died")
            self._dead = f"the model worker stopped: {type(exc).__name__}: {exc}"
            raise
        finally:
            self._fail_all(BackendError(self._dead or "backend stopped"), queued_work=True)

    def _serve_forever(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stopping.is_set():
            if (
                not self._batches
                and self._pending.empty()
                and self._pending_bg.empty()
                and self._commands.empty()
                and self._scores.empty()
            ):
                self.busy_since = None
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            self.busy_since = self.busy_since or time.monotonic()
            try:
                self._serve_round()
            except Exception as exc:  # a bug outside one model call: fail what is in flight
                self._fail_all(self._model_call_failed("serving round", exc))

    def _serve_round(self) -> None:
        """Commands, admission, then one decode step per lane (user lanes first)."""
        self._run_commands()
        self._admit(self._pending, background=False)
        user_keys = [k for k in self._batches if not k[1]]
        if user_keys:  # user answers first; background lanes wait ...
            for key in user_keys:
                self._decode_step(key)
            # ... but never starve: under continuous traffic, one scoring pass and one
            # step of each admitted background lane at most every BACKGROUND_EVERY_S
            if time.monotonic() - self._last_background >= BACKGROUND_EVERY_S:
                self._last_background = time.monotonic()
                self._run_one(self._scores)
                for key in [k for k in self._batches if k[1]]:
                    self._decode_step(key)
            return
        self._last_background = time.monotonic()
        self._run_one(self._scores)  # judge scoring: one forward pass per round
        self._admit(self._pending_bg, background=True)
        for key in list(self._batches):
            self._decode_step(key)

    def _counted(self, what: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        """`fn` as a model call whose failures count towards the backend's health."""

        def call() -> Any:
            try:
                result = fn()
            except Exception as exc:
                raise self._model_call_failed(what, exc) from exc
            self._model_call_ok()
            return result

        return call

    def _model_call_ok(self) -> None:
        self._failures = 0

    def _model_call_failed(self, what: str, exc: BaseException) -> BackendError:
        """Count a failed model call; the error to hand to the requests involved."""
        log.error("torch backend: %s failed: %s: %s", what, type(exc).__name__, exc)
        self._failures += 1
        self._last_failure = f"{what}: {type(exc).__name__}: {exc}"
        return BackendError(f"{what} failed: {type(exc).__name__}: {exc}")

    def _run_commands(self) -> None:
        while not self._commands.empty():
            self._run_one(self._commands)

    @staticmethod
    def _run_one(q: queue.Queue[tuple[Callable[[], Any], Future[Any]]]) -> None:
        try:
            fn, fut = q.get_nowait()
        except queue.Empty:
            return
        if not fut.set_running_or_notify_cancel():
            return  # the caller went away
        try:
            fut.set_result(fn())
        except Exception as exc:
            fut.set_exception(exc)

    def _admit(self, pending: queue.Queue[Row], background: bool) -> None:
        room = self._max_batch - sum(b.size for b in self._batches.values())
        while room > 0:
            if background and not self._pending.empty():
                return  # a user request arrived: it goes first
            try:
                row = pending.get_nowait()
            except queue.Empty:
                return
            if row.cancelled.is_set():
                self._finish(row, None)
                continue
            if not row.counted:  # no version asked: the one active now
                row.version = self._active
                self._hold(row)
            if row.version not in self._versions:
                self._finish(row, UnknownVersion(row.version))
                continue
            try:  # from here on every path either batches the row or releases it
                single = self._prefill(row)
            except Exception as exc:
                self._finish(row, self._model_call_failed("prefill", exc))
                continue
            self._model_call_ok()
            if single is None:
                continue
            key = (row.version, background)
            if key in self._batches:
                self._batches[key].merge(single)
            else:
                self._batches[key] = single
            room -= 1

    def _prefill(self, row: Row) -> Any | None:
        """Prefill a new row and sample its first token; its batch, or None once finished."""
        params = row.request.params
        if params.seed is not None:  # sampling draws on the logits' device
            row.generator = torch.Generator(device=self.device).manual_seed(params.seed)
        if params.json_schema is not None:
            row.grammar = self._grammars.matcher(params.json_schema)
        batch, logits_1V = self._start_row(row)
        row.total_len = len(row.request.prompt_ids)
        if self._emit_tokens(batch, logits_1V):
            return batch
        return None

    def _decode_step(self, key: tuple[str, bool]) -> None:
        batch = self._batches[key]
        alive = [i for i, r in enumerate(batch.rows) if not r.cancelled.is_set()]
        self._drop(batch, alive)
        if not batch.rows:
            del self._batches[key]
            return
        try:
            alive_after = self._emit_tokens(batch, self._decode_logits(key, batch))
        except Exception as exc:  # fail this batch's requests only; other lanes go on
            error = self._model_call_failed("decode", exc)
            for row in batch.rows:
                self._finish(row, error)
            del self._batches[key]
            return
        self._model_call_ok()
        if not alive_after:
            del self._batches[key]

    def _emit_tokens(self, batch: Any, logits_BV: torch.Tensor) -> bool:
        """Sample one token per row, stream it, drop finished rows; False when none remain.

        Constrained rows sample from their grammar-masked logits (log-probs included)."""
        rows = batch.rows
        params = [r.request.params for r in rows]
        ids, lps, tops = sample_next(
            mask_logits(logits_BV, [r.grammar for r in rows]),
            [p.temperature for p in params],
            [p.top_p for p in params],
            [r.generator for r in rows],
            max(p.top_logprobs for p in params),
        )
        keep = []
        for i, row in enumerate(rows):
            p = params[i]
            top = tuple(tops[i][: p.top_logprobs])
            row.emit(TokenOut(ids[i], lps[i], top))
            if row.grammar is not None:
                row.grammar.consume(ids[i])
            row.produced += 1
            row.total_len += 1
            row.next_id = ids[i]
            row.out_ids.append(ids[i])
            reason = None
            if ids[i] in self._eos or ids[i] in p.stop_token_ids:
                reason = "stop"
            elif row.produced >= p.max_new_tokens or row.total_len >= self._context_length:
                reason = "length"
            elif p.stop_on_repetition and repeating_tail(row.out_ids):
                reason = "length"  # a loop would run to max_tokens anyway: cut off now
            if reason is None and not row.cancelled.is_set():
                keep.append(i)
                continue
            done = None
            if reason is not None:
                done = Finished(reason, row.version, len(row.request.prompt_ids), row.produced)  # type: ignore[arg-type]
            self._finish(row, done)
            self._row_done(batch, i, row)  # after the client heard (no added latency)
        batch.keep(keep)
        return bool(batch.rows)

    def _drop(self, batch: Any, keep: list[int]) -> None:
        """Keep the rows at `keep`; the others (cancelled by their client) are released."""
        kept = set(keep)
        for i, row in enumerate(batch.rows):
            if i not in kept:
                self._finish(row, None)
        batch.keep(keep)

    def _hold(self, row: Row) -> None:
        with self._lock:  # the event loop and the worker thread both count
            row.counted = True
            self._inflight[row.version] = self._inflight.get(row.version, 0) + 1

    def _finish(self, row: Row, last: Finished | BaseException | None) -> None:
        """Send the row's last event (if any) and release its in-flight unit, exactly once."""
        if row.closed:
            return
        row.closed = True
        if row.counted:  # released before the client hears of it: nothing lags behind
            with self._lock:
                row.counted = False
                self._inflight[row.version] -= 1
        if last is not None:
            row.emit(last)  # type: ignore[arg-type]

    def _fail_all(self, exc: BaseException, queued_work: bool = False) -> None:
        """Fail every request in flight or waiting (and, when the worker ends, queued
        commands and scoring jobs too: nothing may wait for a worker that is gone)."""
        for batch in self._batches.values():
            for row in batch.rows:
                self._finish(row, exc)
        self._batches.clear()
        for pending in (self._pending, self._pending_bg):
            while not pending.empty():
                self._finish(pending.get_nowait(), exc)
        for lane in (self._commands, self._scores) if queued_work else ():
            while not lane.empty():
                _, fut = lane.get_nowait()
                if fut.set_running_or_notify_cancel():
                    fut.set_exception(exc)
