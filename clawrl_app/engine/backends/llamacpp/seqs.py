"""Sequence slots of one llama.cpp context, and the prefixes kept in them for reuse.

Each request in flight holds one sequence id of the context's unified KV pool. When it
finishes, its sequence (prompt + answer) can stay cached under its policy version; a new
prompt of the same version that shares at least `min_tokens` leading ids with a cached
sequence gets those positions shared into its own sequence (`seq_copy`: the cells carry
both ids, nothing is copied) and prefills only the rest. The same rules as the torch
backend's prefix cache (prefix_cache.py): keyed by version (dropped when the version is
unloaded), bounded (by tokens: the byte budget over the KV cost of a token, and by free
sequence ids), evicted least recently used, and a session's newer turn supersedes its
older entry. Worker thread only; `stats()` may be read from any thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from clawrl_app.engine.backends.prefix_cache import (
    MIN_REUSE_TOKENS,
    SUPERSEDE_SLACK,
    common_prefix_len,
)


class SeqOps(Protocol):
    """What the slots need of a llama.cpp context (`LlamaRuntime`)."""

    def seq_copy(self, src: int, dst: int, length: int) -> None: ...

    def seq_clear(self, seq: int) -> None: ...


@dataclass
class _Cached:
    version: str
    ids: tuple[int, ...]


class NoFreeSequence(RuntimeError):
    """Every sequence id is held by a request in flight."""


class SeqSlots:
    """Free, busy and cached sequence ids of one context."""

    def __init__(
        self,
        ops: SeqOps,
        seqs: int,
        max_tokens: int,
        min_tokens: int = MIN_REUSE_TOKENS,
        bytes_per_token: int = 0,
    ) -> None:
        self._ops = ops
        self._bytes_per_token = bytes_per_token
        self._free = list(range(seqs - 1, -1, -1))
        self._cached: OrderedDict[int, _Cached] = OrderedDict()  # LRU first
        self._max_tokens = max_tokens
        self._min_tokens = min_tokens
        self._lock = threading.Lock()  # stats() from other threads
        self._hits = self._misses = self._reused = self._evictions = self._stored = 0

    @property
    def enabled(self) -> bool:
        return self._max_tokens > 0

    def acquire(self, version: str, ids: Sequence[int], reuse_up_to: int) -> tuple[int, int]:
        """A sequence id for a new request, and how many leading `ids` it already holds
        (shared from the best cached prefix of the same version, at most `reuse_up_to`)."""
        key = tuple(ids)
        best, best_len = None, 0
        if self.enabled and reuse_up_to >= self._min_tokens:
            for seq, entry in self._cached.items():
                if entry.version != version:
                    continue
                n = min(common_prefix_len(entry.ids, key), reuse_up_to)
                if n > best_len:
                    best, best_len = seq, n
        if best_len < self._min_tokens:
            best, best_len = None, 0
        seq = self._take_free(keep=best)
        with self._lock:
            if best is not None:
                self._hits += 1
                self._reused += best_len
                self._cached.move_to_end(best)
            elif self.enabled and len(ids) >= self._min_tokens:
                self._misses += 1
        if best is not None:
            self._ops.seq_copy(best, seq, best_len)
        return seq, best_len

    def release(self, seq: int, version: str | None = None, ids: Sequence[int] = ()) -> None:
        """Give `seq` back; with a version and its ids (the KV it holds), keep it cached."""
        if version is None or not self.enabled or len(ids) < self._min_tokens:
            self._ops.seq_clear(seq)
            self._free.append(seq)
            return
        if len(ids) > self._max_tokens:
            self._ops.seq_clear(seq)
            self._free.append(seq)
            return
        entry = _Cached(version, tuple(ids))
        for old_seq, old in list(self._cached.items()):  # the session's older turn
            if old.version == version and _superseded(old.ids, entry.ids):
                self._evict(old_seq)
        with self._lock:
            self._cached[seq] = entry
            self._stored += 1
        while self._cached_tokens() > self._max_tokens:
            self._evict(next(iter(self._cached)))

    def drop_version(self, version: str) -> int:
        """Forget every cached sequence of `version` (it was unloaded)."""
        gone = [s for s, e in self._cached.items() if e.version == version]
        for seq in gone:
            self._evict(seq, counted=False)
        return len(gone)

    def evict_one(self) -> bool:
        """Free the least recently used cached sequence (the KV pool is full); False if none."""
        if not self._cached:
            return False
        self._evict(next(iter(self._cached)))
        return True

    def stats(self) -> dict[str, int]:
        with self._lock:
            tokens = self._cached_tokens()
            return {
                "entries": len(self._cached),
                "bytes": tokens * self._bytes_per_token,  # an upper bound: cells are shared
                "max_bytes": self._max_tokens * self._bytes_per_token,
                "hits": self._hits,
                "misses": self._misses,
                "tokens_reused": self._reused,
                "evictions": self._evictions,
                "stored": self._stored,
                "failures": 0,
            }

    def _cached_tokens(self) -> int:
        return sum(len(e.ids) for e in self._cached.values())

    def _take_free(self, keep: int | None) -> int:
        while not self._free:
            victims = [s for s in self._cached if s != keep]
            if not victims:
                raise NoFreeSequence("every sequence of the KV pool is in use")
            self._evict(victims[0])
        return self._free.pop()

    def _evict(self, seq: int, counted: bool = True) -> None:
        with self._lock:
            self._cached.pop(seq, None)
            if counted:
                self._evictions += 1
        self._ops.seq_clear(seq)
        self._free.append(seq)


def _superseded(old: tuple[int, ...], new: tuple[int, ...]) -> bool:
    """`new` repeats `old` up to its last SUPERSEDE_SLACK ids and at least 7/8 of it."""
    shared = common_prefix_len(old, new)
    return shared >= len(old) - SUPERSEDE_SLACK and shared * 8 >= len(old) * 7
