"""The prefix KV cache's pure parts: longest common prefix, LRU accounting by bytes, version
keys, superseded entries, and copies that nothing outside can change (tiny tensors)."""

from __future__ import annotations

import torch

from clawrl_app.engine.backends.prefix_cache import (
    SUPERSEDE_SLACK,
    PrefixCache,
    common_prefix_len,
    row_kv,
)

LAYERS = 2


def kv(n: int, fill: float = 1.0) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """The KV of `n` tokens: 2 layers of (1, H=1, n, D=2) float32 keys and values, 16 n bytes
    per layer (2 tensors x 2 floats x 4 bytes), 32 n bytes per entry."""
    return tuple(
        (torch.full((1, 1, n, 2), fill), torch.full((1, 1, n, 2), -fill)) for _ in range(LAYERS)
    )


def ids(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_common_prefix_len() -> None:
    assert common_prefix_len((), ()) == 0
    assert common_prefix_len((1, 2, 3), (1, 2, 3)) == 3
    assert common_prefix_len((1, 2, 3), (1, 2, 3, 4)) == 3  # one holds all of the other
    assert common_prefix_len((1, 2, 3, 4), (1, 2)) == 2
    assert common_prefix_len((9, 2, 3), (1, 2, 3)) == 0
    long = tuple(range(1000))
    for cut in (1, 499, 500, 998):  # every position the binary search can land on
        other = long[:cut] + (-1,) + long[cut + 1 :]
        assert common_prefix_len(long, other) == cut


def test_lookup_takes_the_longest_prefix_of_the_same_version_and_never_all_of_it() -> None:
    cache = PrefixCache(max_bytes=10**6, min_tokens=4)
    cache.store("v1", ids(10), kv(10))
    cache.store("v1", ids(6) + [99] * 14, kv(20))
    hit = cache.lookup("v1", ids(12))
    assert hit is not None and hit.length == 10 and len(hit.entry.ids) == 10
    same = cache.lookup("v1", ids(10))  # the whole prompt is stored: its last token is prefilled
    assert same is not None and same.length == 9
    assert cache.lookup("v2", ids(12)) is None  # another version's KV is never reused
    assert cache.lookup("v1", [5] * 12) is None
    assert cache.lookup("v1", ids(3)) is None  # too short to look up: neither hit nor miss
    s = cache.stats()
    assert (s["hits"], s["misses"], s["tokens_reused"]) == (2, 2, 19)


def test_a_prefix_under_min_tokens_is_a_miss() -> None:
    cache = PrefixCache(max_bytes=10**6, min_tokens=8)
    cache.store("v1", ids(20), kv(20))
    assert cache.lookup("v1", ids(7) + [-1] * 10) is None
    hit = cache.lookup("v1", ids(8) + [-1] * 10)
    assert hit is not None and hit.length == 8


def test_lru_eviction_by_bytes() -> None:
    cache = PrefixCache(max_bytes=32 * 25, min_tokens=4)  # room for 25 tokens of KV
    assert cache.store("v1", ids(10, start=0), kv(10))  # A: 320 bytes
    assert cache.store("v1", ids(10, start=100), kv(10))  # B
    assert cache.lookup("v1", ids(12, start=0)) is not None  # A used last: B is the oldest
    assert cache.store("v1", ids(10, start=200), kv(10))  # C: B goes
    s = cache.stats()
    assert (s["entries"], s["bytes"], s["evictions"]) == (2, 640, 1)
    assert cache.lookup("v1", ids(12, start=100)) is None
    assert cache.lookup("v1", ids(12, start=0)) is not None
    assert not cache.store("v1", ids(30, start=300), kv(30))  # bigger than the bound: not kept
    assert cache.stats()["entries"] == 2


def test_a_newer_turn_supersedes_the_entry_it_extends() -> None:
    cache = PrefixCache(max_bytes=10**6, min_tokens=4)
    turn1 = ids(400)
    cache.store("v1", turn1, kv(400))
    # the next turn re-sends turn 1 but for its last few tokens (a re-rendered answer)
    turn2 = turn1[: 400 - SUPERSEDE_SLACK] + ids(50, start=1000)
    assert cache.store("v1", turn2, kv(len(turn2)))
    assert cache.stats()["entries"] == 1
    # an entry the newer one shares only its system prompt with stays (another session)
    other = turn2[:300] + ids(100, start=5000)
    assert cache.store("v1", other, kv(len(other)))
    assert cache.stats()["entries"] == 2
    # a prompt that an entry already holds entirely is not stored twice
    assert not cache.store("v1", other[:50], kv(50))
    # another version's entries are never superseded by this one's
    assert cache.store("v2", other, kv(len(other)))
    assert cache.stats()["entries"] == 3


def test_drop_version_and_disabled() -> None:
    cache = PrefixCache(max_bytes=10**6, min_tokens=4)
    cache.store("v1", ids(10), kv(10))
    cache.store("v2", ids(10), kv(10))
    assert cache.drop_version("v1") == 1
    assert cache.lookup("v1", ids(12)) is None and cache.lookup("v2", ids(12)) is not None
    assert cache.stats()["bytes"] == 320
    off = PrefixCache(max_bytes=0)
    assert not off.enabled and not off.store("v1", ids(100), kv(100))
    assert off.lookup("v1", ids(100)) is None
    assert off.stats() == dict.fromkeys(off.stats(), 0)


def test_stored_kv_and_reused_kv_are_private_copies() -> None:
    """A batch's cache, row 1 of 2 left-padded by 3: the stored entry is a copy of that row's
    real positions, and a reusing request's cache is a copy of the entry again."""
    from transformers import DynamicCache

    keys = torch.arange(2 * 1 * 8 * 2, dtype=torch.float32).reshape(2, 1, 8, 2)  # (B, H, T, D)
    batch = DynamicCache(ddp_cache_data=[(keys, -keys)] * LAYERS)
    cache = PrefixCache(max_bytes=10**6, min_tokens=2)
    assert cache.store_row("v1", batch, 1, ids(4), ids(1, start=50))  # 5 real tokens
    (entry,) = cache._entries.values()
    assert entry.ids == (0, 1, 2, 3, 50)
    assert torch.equal(entry.layers[0][0], keys[1:2, :, 3:])
    batch.layers[0].keys.zero_()  # later decode steps of the batch cannot reach the entry
    assert torch.equal(entry.layers[0][0], keys[1:2, :, 3:]) and keys.abs().sum() > 0
    hit = cache.lookup("v1", [*ids(4), 50, 7])
    assert hit is not None and hit.length == 5
    reused = hit.cache()
    assert reused.get_seq_length() == 5
    reused.layers[1].values.add_(1.0)  # nor can the request that reuses it
    assert torch.equal(entry.layers[1][1], -keys[1:2, :, 3:])


def test_row_kv_refuses_layers_it_cannot_copy() -> None:
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicSlidingWindowLayer

    sliding = DynamicCache(ddp_cache_data=[(torch.ones(1, 1, 4, 2), torch.ones(1, 1, 4, 2))])
    sliding.layers[0].__class__ = DynamicSlidingWindowLayer
    assert row_kv(sliding, 0, 4) is None
    plain = DynamicCache(ddp_cache_data=[(torch.ones(1, 1, 4, 2), torch.ones(1, 1, 4, 2))])
    assert row_kv(plain, 0, 5) is None  # more tokens than the row has
    cache = PrefixCache(max_bytes=10**6, min_tokens=2)
    assert not cache.store_row("v1", object(), 0, ids(4), [])  # broken input: no raise
    assert cache.stats()["failures"] == 1
