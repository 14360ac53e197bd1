"""The CPU serving backend on llama.cpp: the embedded model's own GGUF, ~6x the tokens/s of
transformers on a laptop (bench/serve.py), with the app's own sampling and log-probs.

The worker thread, lanes and bookkeeping are `WorkerBackend`'s (shared with the torch
backend). Here: every request holds one sequence of a unified KV pool (`llamacpp_seqs.py`:
finished sequences stay cached for prefix reuse), a lane decodes one token for each of its
rows in one `llama_decode`, and the logits come back to `sampling.py`, so sampling,
constrained decoding and behaviour log-probs work as on the torch backend.

Versions: a LoRA checkpoint is converted to a llama.cpp adapter GGUF (`gguf_export.py`) and
applied to the shared base weights for its lane's decodes; a full fine-tuning checkpoint is
written as its own GGUF and gets its own model and context. Conversion and loading run
beside the worker: publishing never pauses serving.

By default the served weights are an F16 copy of the GGUF (`llamacpp_weights.py`): their
log-probs stay within a few thousandths of the trainer's float32 ones. Served as shipped
(Q4_1), llama.cpp also quantizes activations and log-probs drift by ~0.1: the canary allows
for the kind of weights (backends.setup.CANARY_TOLERANCE) and the trainer corrects for the
gap (truncated importance sampling, losses.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from clawrl_app.engine.backends.base import BackendError, Finished
from clawrl_app.engine.backends.llamacpp.runtime import LlamaRuntime
from clawrl_app.engine.backends.llamacpp.seqs import SeqSlots
from clawrl_app.engine.backends.sampling import continuation_logprobs
from clawrl_app.engine.backends.torch_rows import BASE_VERSION, Row
from clawrl_app.engine.backends.worker_backend import WorkerBackend

log = logging.getLogger("clawrl.llamacpp_backend")


def default_threads() -> int:
    """llama.cpp threads: the cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


SHARED_PREFIX_MIN_TOKENS = 16
"""Shortest cached prefix worth sharing. In llama.cpp's unified KV pool sharing copies
nothing (the cells take one more sequence id), so even the chat template's default system
prompt (~30 tokens, in every request) is skipped at prefill; the torch backend copies its
cache and keeps a higher bar (prefix_cache.MIN_REUSE_TOKENS)."""


@dataclass(eq=False)
class SeqBatch:
    """The rows of one lane: each holds its own sequence of the same context."""

    rows: list[Row] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.rows)

    def merge(self, other: SeqBatch) -> None:
        self.rows.extend(other.rows)

    def keep(self, keep_idx: list[int]) -> None:
        self.rows = [self.rows[i] for i in keep_idx]


@dataclass(eq=False)
class _Weights:
    """One loaded model: its context and the sequence slots of its KV pool."""

    runtime: LlamaRuntime
    slots: SeqSlots


class LlamaCppBackend(WorkerBackend):
    """In-process llama.cpp backend for CPU machines (a GGUF model)."""

    thread_name = "llamacpp-backend"

    def __init__(
        self,
        gguf: Path,
        tokenizer: Any,
        *,
        model_name: str,
        context_length: int,
        work_dir: Path,
        max_batch: int = 8,
        max_queue: int = 64,
        threads: int | None = None,
        prefix_cache_bytes: int = 0,
        prefix_min_tokens: int = SHARED_PREFIX_MIN_TOKENS,
    ) -> None:
        super().__init__(
            tokenizer,
            model_name=model_name,
            context_length=context_length,
            max_batch=max_batch,
            max_queue=max_queue,
        )
        self._gguf = gguf
        self._work = work_dir
        work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for stale in work_dir.glob("*.gguf"):  # versions of an earlier run are never reused
            stale.unlink(missing_ok=True)
        self._threads = threads or default_threads()
        self._prefix_bytes = prefix_cache_bytes
        self._prefix_min = prefix_min_tokens
        self._base = self._load(gguf, cache_bytes=prefix_cache_bytes)
        self._served: dict[str, tuple[_Weights, str | None]] = {BASE_VERSION: (self._base, None)}
        """Each version: the weights that serve it and the adapter applied (None: none)."""
        self._files: dict[str, Path] = {}

    def _load(self, gguf: Path, cache_bytes: int) -> _Weights:
        """A model and a context whose KV pool (allocated up front, unlike the torch
        backend's cache) holds one full context window shared by the answers in flight plus
        the prefix cache (at most another window), with a sequence per row, per cached
        prefix and one for scoring. A full pool first evicts cached prefixes."""
        probe = LlamaRuntime(gguf, kv_tokens=256, seqs=1, threads=self._threads)
        per_token = probe.kv.bytes_per_token
        probe.close()
        cache_tokens = min(cache_bytes // max(per_token, 1), self._context_length)
        rows = self._max_batch
        runtime = LlamaRuntime(
            gguf,
            kv_tokens=self._context_length + cache_tokens,
            seqs=2 * rows + 1,
            threads=self._threads,
        )
        slots = SeqSlots(runtime, runtime.seqs, cache_tokens, self._prefix_min, per_token)
        return _Weights(runtime, slots)

    async def start(self) -> None:
        # Sampling needs a few tiny tensor ops per token: torch's own thread pool would only
        # spin against llama.cpp's threads for the same cores (halved decode speed, measured)
        torch.set_num_threads(1)
        await super().start()

    def prefix_cache_stats(self) -> dict[str, int]:
        """Entries, bytes (an upper bound), hits, misses, tokens reused and evictions."""
        return self._base.slots.stats()

    async def stop(self) -> None:
        await super().stop()
        if self._thread is None:  # the worker ended: nothing uses the contexts any more
            for weights, _ in {id(w): (w, a) for w, a in self._served.values()}.values():
                weights.runtime.close()
            self._served.clear()

    # -- versions ------------------------------------------------------------------------
    async def load_adapter(self, version: str, path: Path) -> None:
        from clawrl_app.engine.backends.llamacpp.gguf_export import full_to_gguf, lora_to_gguf

        if version in self._versions:
            raise BackendError(f"version name {version!r} is already used; never reuse one")
        out = self._work / f"{version}.gguf"
        try:
            if (path / "adapter_config.json").exists():
                await asyncio.to_thread(lora_to_gguf, path, self._gguf, out)
                await self._submit(self._commands, lambda: self._add_lora(version, out))
            else:  # full weights: their own GGUF, model and context, built beside the worker
                await asyncio.to_thread(full_to_gguf, path, self._gguf, out, log.info)
                weights = await asyncio.to_thread(self._load, out, 0)
                await self._submit(
                    self._commands, lambda: self._served.__setitem__(version, (weights, None))
                )
        except BaseException:
            out.unlink(missing_ok=True)
            raise
        self._files[version] = out
        self._versions[version] = path

    def _add_lora(self, version: str, gguf: Path) -> None:
        self._base.runtime.load_adapter(version, gguf)
        self._served[version] = (self._base, version)

    def _delete_now(self, version: str) -> None:
        weights, adapter = self._served.pop(version)
        weights.slots.drop_version(version)  # its KV must never serve anything again
        if adapter is not None:
            weights.runtime.drop_adapter(adapter)
        elif weights is not self._base:
            weights.runtime.close()
        if (file := self._files.pop(version, None)) is not None:
            file.unlink(missing_ok=True)

    # -- model calls (worker thread) -----------------------------------------------------
    def _start_row(self, row: Row) -> tuple[SeqBatch, torch.Tensor]:
        weights, adapter = self._served[row.version]
        ids = row.request.prompt_ids
        row.seq, reused = weights.slots.acquire(row.version, ids, len(ids) - 1)
        weights.runtime.use_adapter(adapter)
        logits = weights.runtime.prefill(
            ids[reused:], reused, row.seq, len(ids) - 1, weights.slots.evict_one
        )
        return SeqBatch([row]), logits[-1:]

    def _decode_logits(self, key: tuple[str, bool], batch: SeqBatch) -> torch.Tensor:
        weights, adapter = self._served[key[0]]
        weights.runtime.use_adapter(adapter)
        entries = [(r.next_id, r.total_len - 1, r.seq, True) for r in batch.rows]
        return weights.runtime.decode(entries, weights.slots.evict_one)

    def _finish(self, row: Row, last: Finished | BaseException | None) -> None:
        """Answer the row (base class), then give its sequence back: cached for reuse when
        it ended normally (the last sampled token was never fed, so the KV holds the prompt
        and the answer but that token), cleared otherwise."""
        was_closed = row.closed
        super()._finish(row, last)
        if was_closed or row.seq < 0:
            return
        seq, row.seq = row.seq, -1
        served = self._served.get(row.version)
        if served is None:
            return
        ended = isinstance(last, Finished) and row.produced > 0
        ids = [*row.request.prompt_ids, *row.out_ids[: row.produced - 1]] if ended else []
        served[0].slots.release(seq, row.version if ended else None, ids)

    def _topk_now(
        self, prompt_ids: list[int], response_ids: list[int], k: int, version: str
    ) -> tuple[list[list[int]], list[list[float]]]:
        logp_TV = torch.log_softmax(self._response_logits(prompt_ids, response_ids, version), -1)
        vals_TK, idx_TK = torch.topk(logp_TV, k, dim=-1)  # (T, K)
        return idx_TK.tolist(), vals_TK.tolist()

    def _score_now(
        self, prompt_ids: list[int], response_ids: list[int], version: str
    ) -> list[float]:
        logits = self._response_logits(prompt_ids, response_ids, version)  # (T, V)
        return continuation_logprobs(logits, response_ids)

    def _response_logits(
        self, prompt_ids: list[int], response_ids: list[int], version: str
    ) -> torch.Tensor:
        """The logits predicting each response token (T, V), from a sequence of their own
        (reusing a cached prefix of the prompt), cleared afterwards."""
        weights, adapter = self._served[version]
        ids = [*prompt_ids, *response_ids]
        seq, reused = weights.slots.acquire(version, ids, len(prompt_ids) - 1)
        try:
            weights.runtime.use_adapter(adapter)
            return weights.runtime.prefill(
                ids[reused:-1], reused, seq, len(prompt_ids) - 1, weights.slots.evict_one
            )
        finally:
            weights.slots.release(seq)
