"""The held-out split: which recorded turns join the personal set that the regression guard
scores versions on (serving marks them when they are recorded; training never uses them)."""

from __future__ import annotations

import hashlib


def is_held_out(key: str, share: float) -> bool:
    """Whether the turn with this key (session id and position) joins the personal set: a
    fixed hash, so the same turn is always chosen the same way."""
    if share <= 0.0:
        return False
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return h / 2**64 < share
