"""Prefix KV-cache reuse for the torch backend: prefill only what an earlier prompt lacks.

An agent re-sends its whole prompt every turn (system prompt, tool schemas, the history so
far), and the next turn's prompt extends the previous prompt plus the answer it got. When a
row finishes, the backend stores a copy of its KV (prompt + answer) here, keyed by the
policy version that computed it; a new prompt of the same version that shares at least
`min_tokens` leading token ids with a stored entry starts from a copy of that KV and
prefills only the rest. Matching is on token ids alone, so it works without any session
header.

- Keyed by version: another version's KV is never reused (version names are never reused;
  an unloaded version's entries are dropped).
- Bounded by bytes, evicted least recently used; an entry larger than the bound is not kept.
- Entries are private copies on the model's device and dtype: the rows that reuse them get
  copies again, so no decode step can change what is stored.
- Everything runs on the backend's worker thread; `stats()` may be read from any thread.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by the backend; `doctor` reads the constants here
    import torch

MIN_REUSE_TOKENS = 64
"""Shorter common prefixes are prefilled again: copying their KV would cost about as much."""
SUPERSEDE_SLACK = 32
"""A stored entry whose ids a newer entry repeats up to its last SUPERSEDE_SLACK tokens (and
at least 7/8 of them) is dropped when that newer entry is stored: the next turn of the same
session, whose re-rendered answer may end differently. One entry per session, not one per
turn, and the newer one still matches about as much as the older did."""

log = logging.getLogger("clawrl.prefix_cache")
KV = tuple["torch.Tensor", "torch.Tensor"]  # keys, values of one layer, each (1, H, T, D)


def common_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many leading ids `a` and `b` share (binary search over slice comparisons, which
    run in C: a few compares of up to len(a) ids instead of a Python loop). Both are tuples:
    a tuple never equals a list."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, eq=False)
class PrefixEntry:
    """The KV of `ids` as computed by `version`, per layer."""

    serial: int
    version: str
    ids: tuple[int, ...]
    layers: tuple[KV, ...]
    nbytes: int


@dataclass(frozen=True)
class PrefixHit:
    """A stored entry whose first `length` tokens a new prompt repeats."""

    entry: PrefixEntry
    length: int

    def cache(self) -> Any:
        """A fresh DynamicCache holding copies of the first `length` tokens' KV."""
        from transformers import DynamicCache

        n = self.length  # DynamicLayer.update concatenates: the cache gets its own tensors
        return DynamicCache(
            ddp_cache_data=[(k[:, :, :n], v[:, :, :n]) for k, v in self.entry.layers]
        )


def row_kv(cache: Any, row: int, real_tokens: int) -> tuple[KV, ...] | None:
    """Copies of one row's KV (its last `real_tokens` positions: rows are left-padded) from a
    batch's DynamicCache; None when the cache has layers this module cannot copy."""
    from transformers.cache_utils import DynamicLayer

    out = []
    for layer in cache.layers:
        keys, values = layer.keys, layer.values  # (B, H, T, D)
        if type(layer) is not DynamicLayer or keys is None or values is None:
            return None  # sliding-window or quantized layers, or an empty one: not reused
        start = keys.shape[2] - real_tokens
        if start < 0:
            return None
        out.append(
            (
                keys[row : row + 1, :, start:].clone(),  # (1, H, real_tokens, D)
                values[row : row + 1, :, start:].clone(),
            )
        )
    return tuple(out)


class PrefixCache:
    """LRU store of KV prefixes, bounded by `max_bytes` (0 = disabled)."""

    def __init__(self, max_bytes: int, min_tokens: int = MIN_REUSE_TOKENS) -> None:
        self.max_bytes = max(0, max_bytes)
        self.min_tokens = max(1, min_tokens)
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()  # by serial, oldest use first
        self._serials = itertools.count()
        self._bytes = 0
        self._lock = threading.Lock()  # stats() is read from the event loop's thread
        self.hits = 0
        self.misses = 0
        self.tokens_reused = 0
        self.evictions = 0
        self.stored = 0
        self.failures = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def wants(self, n_ids: int) -> bool:
        """Whether a sequence of `n_ids` tokens is long enough to store or look up."""
        return self.enabled and n_ids > self.min_tokens

    def lookup(self, version: str, ids: Sequence[int]) -> PrefixHit | None:
        """The entry of `version` sharing the longest prefix with `ids` (at least
        `min_tokens`, and never all of `ids`: the last prompt token is always prefilled, its
        logits pick the first answer token). Counts a hit or a miss."""
        if not self.wants(len(ids)):
            return None
        best: PrefixEntry | None = None
        best_len, key = 0, tuple(ids)
        with self._lock:
            for entry in self._entries.values():
                if entry.version != version:
                    continue
                n = common_prefix_len(entry.ids, key)
                if n > best_len:
                    best, best_len = entry, n
            best_len = min(best_len, len(ids) - 1)
            if best is None or best_len < self.min_tokens:
                self.misses += 1
                return None
            self._entries.move_to_end(best.serial)
            self.hits += 1
            self.tokens_reused += best_len
        return PrefixHit(best, best_len)

    def store(self, version: str, ids: Sequence[int], layers: tuple[KV, ...]) -> bool:
        """Keep `layers` (private copies, the caller's to give away) as the KV of `ids`.
        Entries the new one supersedes are dropped; the least recently used ones are
        evicted until it fits. False when not kept (too short, too big, already covered)."""
        if not self.wants(len(ids)):
            return False
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if nbytes > self.max_bytes:
            return False
        key = tuple(ids)
        with self._lock:
            mine = [
                (e, common_prefix_len(e.ids, key))
                for e in self._entries.values()
                if e.version == version
            ]
            for old, shared in mine:
                if shared == len(key):  # an entry already holds all of it
                    self._entries.move_to_end(old.serial)
                    return False
            for old, shared in mine:
                slack = min(SUPERSEDE_SLACK, len(old.ids) // 8)
                if shared >= max(len(old.ids) - slack, self.min_tokens):
                    self._remove(old)
            while self._bytes + nbytes > self.max_bytes and self._entries:
                _, oldest = self._entries.popitem(last=False)
                self._bytes -= oldest.nbytes
                self.evictions += 1
            entry = PrefixEntry(next(self._serials), version, key, layers, nbytes)
            self._entries[entry.serial] = entry
            self._bytes += nbytes
            self.stored += 1
        return True

    def store_row(
        self, version: str, cache: Any, row: int, prompt: list[int], answer: list[int]
    ) -> bool:
        """Store a copy of one batch row's KV (a DynamicCache, rows left-padded) as the KV of
        `prompt + answer` (the tokens fed so far). Never raises: a failure costs the reuse."""
        n = len(prompt) + len(answer)
        if not self.wants(n):
            return False
        try:
            kv = row_kv(cache, row, n)
            return kv is not None and self.store(version, prompt + answer, kv)
        except Exception as exc:
            self.failed()
            log.warning("prefix cache: storing failed: %s: %s", type(exc).__name__, exc)
            return False

    def drop_version(self, version: str) -> int:
        """Forget every entry of `version` (it was unloaded); returns how many."""
        with self._lock:
            gone = [e for e in self._entries.values() if e.version == version]
            for entry in gone:
                self._remove(entry)
        return len(gone)

    def failed(self) -> None:
        """Count a use of an entry that failed (its request was prefilled in full)."""
        with self._lock:
            self.failures += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def stats(self) -> dict[str, int]:
        """Entries, bytes (and the bound), hits, misses, tokens reused, evictions, entries
        stored, and uses that failed (their requests were prefilled in full instead)."""
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "max_bytes": self.max_bytes,
                "hits": self.hits,
                "misses": self.misses,
                "tokens_reused": self.tokens_reused,
                "evictions": self.evictions,
                "stored": self.stored,
                "failures": self.failures,
            }

    def _remove(self, entry: PrefixEntry) -> None:
        if self._entries.pop(entry.serial, None) is not None:
            self._bytes -= entry.nbytes
