"""One llama.cpp model and its context, through llama-cpp-python's low-level API.

`LlamaRuntime` owns a loaded GGUF model, one context (a unified KV pool shared by all its
sequences), one token batch, and the LoRA adapters loaded for it. Only the backend's worker
thread calls it (llama.cpp contexts are not thread-safe), except `load_runtime`, which
builds a new one beside it (a full fine-tuning version: its own weights and context).

Logits come back as float32 torch tensors on the CPU, copied out of llama.cpp's buffer
(which the next decode overwrites); sampling and log-probs stay the app's own
(`sampling.py`), so the behaviour log-probs are those of what was sampled.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

_init_lock = threading.Lock()
_initialised = False

# one entry of a batch: token id, position, sequence id, whether its logits are wanted
Entry = tuple[int, int, int, bool]
MakeRoom = Callable[[], bool]


class LlamaCppError(RuntimeError):
    """llama.cpp refused a call (the message says which and why)."""


class KvFull(LlamaCppError):
    """No room in the KV pool for this batch (evict cached prefixes, or fail the request)."""


def llama_cpp_module() -> Any:
    """The `llama_cpp` package, with llama.cpp's backend initialised once per process."""
    global _initialised
    import llama_cpp

    with _init_lock:
        if not _initialised:
            llama_cpp.llama_log_set(_silent_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _initialised = True
    return llama_cpp


def _quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp's log lines are for its own CLI: the app logs what matters itself."""


_silent_log: Any = None
try:  # the callback object must outlive every llama.cpp call: kept at module level
    import llama_cpp as _lc

    _silent_log = _lc.llama_log_callback(_quiet)
except ImportError:  # not installed: the plan never picks this backend
    pass


@dataclass(frozen=True)
class KvShape:
    """What one cached token costs in the KV pool (f16 keys and values)."""

    layers: int
    kv_dim: int

    @property
    def bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_dim * 2


class LlamaRuntime:
    """A loaded GGUF model with one context of `kv_tokens` cells and `seqs` sequences."""

    def __init__(self, gguf: Path, *, kv_tokens: int, seqs: int, threads: int, batch: int = 512):
        lc = llama_cpp_module()
        self._lc = lc
        mp = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(gguf).encode(), mp)
        if not self.model:
            raise LlamaCppError(f"llama.cpp could not load {gguf}")
        cp = lc.llama_context_default_params()
        cp.n_ctx = kv_tokens
        cp.n_batch = batch
        cp.n_ubatch = batch
        cp.n_seq_max = seqs
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.kv_unified = True  # sequences share cells: copying a prefix costs no memory
        cp.no_perf = True
        self.ctx = lc.llama_init_from_model(self.model, cp)
        if not self.ctx:
            lc.llama_model_free(self.model)
            raise LlamaCppError(f"llama.cpp could not make a context of {kv_tokens} tokens")
        self.batch_size = batch
        self.seqs = seqs
        self._batch = lc.llama_batch_init(batch, 0, 1)
        self._mem = lc.llama_get_memory(self.ctx)
        vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        self.kv_tokens = int(lc.llama_n_ctx(self.ctx))
        heads = int(lc.llama_model_n_head(self.model))
        head_dim = int(lc.llama_model_n_embd(self.model)) // max(heads, 1)
        self.kv = KvShape(
            int(lc.llama_model_n_layer(self.model)),
            int(lc.llama_model_n_head_kv(self.model)) * head_dim,
        )
        self._adapters: dict[str, Any] = {}
        self._current: str | None = None

    # -- adapters --------------------------------------------------------------------
    def load_adapter(self, name: str, gguf: Path) -> None:
        adapter = self._lc.llama_adapter_lora_init(self.model, str(gguf).encode())
        if not adapter:
            raise LlamaCppError(f"llama.cpp could not load the LoRA adapter {gguf}")
        self._adapters[name] = adapter

    def use_adapter(self, name: str | None) -> None:
        """Apply adapter `name` (scale 1) to the next decodes; None = the plain model."""
        if name == self._current:
            return
        if name is None:
            rc = self._lc.llama_set_adapters_lora(self.ctx, None, 0, None)
        else:
            arr = (self._lc.llama_adapter_lora_p_ctypes * 1)(self._adapters[name])
            scales = (ctypes.c_float * 1)(1.0)
            rc = self._lc.llama_set_adapters_lora(self.ctx, arr, 1, scales)
        if rc != 0:
            raise LlamaCppError(f"llama.cpp could not apply adapter {name}: code {rc}")
        self._current = name

    def drop_adapter(self, name: str) -> None:
        adapter = self._adapters.pop(name, None)
        if adapter is None:
            return
        if self._current == name:
            self.use_adapter(None)  # the context must not point at freed memory
        self._lc.llama_adapter_lora_free(adapter)

    # -- sequences ---------------------------------------------------------------------
    def seq_copy(self, src: int, dst: int, length: int) -> None:
        """Share the first `length` cached positions of `src` with `dst` (no copy: cells
        of a unified pool carry several sequence ids)."""
        self._lc.llama_memory_seq_cp(self._mem, src, dst, 0, length)

    def seq_clear(self, seq: int) -> None:
        self._lc.llama_memory_seq_rm(self._mem, seq, -1, -1)

    def seq_trim(self, seq: int, keep: int) -> None:
        """Forget the positions of `seq` from `keep` on."""
        self._lc.llama_memory_seq_rm(self._mem, seq, keep, -1)

    # -- forward passes ----------------------------------------------------------------
    def decode(self, entries: Sequence[Entry], make_room: MakeRoom | None = None) -> torch.Tensor:
        """One llama_decode over at most `batch_size` entries; the logits of the entries
        that asked for them, in order, as a (N, V) float32 CPU tensor (a copy). When the KV
        pool is full, `make_room` (evict a cached prefix) is called and the batch retried
        until it fits or nothing more can be freed (KvFull)."""
        while True:
            try:
                return self._decode_once(entries)
            except KvFull:
                if make_room is None or not make_room():
                    raise

    def _decode_once(self, entries: Sequence[Entry]) -> torch.Tensor:
        b = self._batch
        n_out = 0
        for i, (tok, pos, seq, want) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = want
            n_out += bool(want)
        b.n_tokens = len(entries)
        rc = self._lc.llama_decode(self.ctx, b)
        if rc == 1:
            raise KvFull("no room left in the KV pool for this batch")
        if rc != 0:
            raise LlamaCppError(f"llama_decode failed with code {rc}")
        if n_out == 0:
            return torch.empty(0, self.n_vocab)
        ptr = self._lc.llama_get_logits(self.ctx)
        view = np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))
        return torch.from_numpy(view.copy())

    def prefill(
        self,
        ids: Sequence[int],
        start: int,
        seq: int,
        want_from: int,
        make_room: MakeRoom | None = None,
    ) -> torch.Tensor:
        """Feed `ids` at positions start.. into `seq` in chunks; the logits of every position
        from `want_from` on (absolute), (N, V)."""
        parts = []
        for off in range(0, len(ids), self.batch_size):
            chunk = ids[off : off + self.batch_size]
            entries = [
                (tok, start + off + j, seq, start + off + j >= want_from)
                for j, tok in enumerate(chunk)
            ]
            parts.append(self.decode(entries, make_room))
        return torch.cat(parts) if parts else torch.empty(0, self.n_vocab)

    def close(self) -> None:
        for name in list(self._adapters):
            self.drop_adapter(name)
        if self._batch is not None:
            self._lc.llama_batch_free(self._batch)
            self._batch = None
        if self.ctx:
            self._lc.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self._lc.llama_model_free(self.model)
            self.model = None
