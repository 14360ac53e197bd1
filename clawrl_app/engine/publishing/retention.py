"""Checkpoint retention: keep the last N, every K-th, pinned ones and what is served."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from clawrl_app.engine.store import CheckpointRow, Store


def to_prune(
    rows: Sequence[CheckpointRow], served: str, keep_last: int, keep_every: int
) -> list[str]:
    """Versions whose files can go (pure). Kept: the newest `keep_last`, every step that is
    a multiple of `keep_every`, pinned ones, the served one and its parent (rollback)."""
    alive = [r for r in rows if r.status != "pruned"]
    newest = (
        {r.version for r in sorted(alive, key=lambda r: r.created)[-keep_last:]}
        if keep_last
        else set()
    )
    by_version = {r.version: r for r in rows}
    keep = set(newest) | {served}
    if served in by_version and by_version[served].parent:
        keep.add(by_version[served].parent or "")
    out = []
    for r in alive:
        if r.version in keep or r.pinned or (keep_every and r.step % keep_every == 0):
            continue
        out.append(r.version)
    return out


def prune(store: Store, served: str, keep_last: int, keep_every: int) -> list[str]:
    """Delete pruned checkpoints' folders and mark them `pruned` (their rows stay)."""
    pruned = []
    for version in to_prune(store.list_checkpoints(), served, keep_last, keep_every):
        row = store.get_checkpoint(version)
        if row is None:
            continue
        shutil.rmtree(Path(row.path), ignore_errors=True)
        store.set_checkpoint_status(version, "pruned")
        pruned.append(version)
    return pruned
