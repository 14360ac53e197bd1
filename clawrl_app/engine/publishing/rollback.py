"""Choosing a rollback target (pure) and remembering what is served across restarts.

A checkpoint's weights contain everything its ancestors were trained on, so "before
session S" means the newest checkpoint whose whole lineage never consumed S (or `base`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clawrl_app.engine.store import CheckpointRow
from clawrl_app.paths import write_private

BASE = "base"
USABLE = ("ready", "published")


class RollbackError(ValueError):
    """The requested target does not exist or cannot be served."""


def lineage_sessions(rows: Sequence[CheckpointRow]) -> dict[str, set[str]]:
    """version -> every session its weights were trained on (itself and its ancestors)."""
    by_version = {r.version: r for r in rows}
    memo: dict[str, set[str]] = {}

    def consumed(version: str | None) -> set[str]:
        if version is None or version not in by_version:
            return set()
        if version not in memo:
            row = by_version[version]
            memo[version] = set(row.sessions) | consumed(row.parent)
        return memo[version]

    return {r.version: consumed(r.version) for r in rows}


def chain(by_version: Mapping[str, CheckpointRow], version: str) -> Iterator[CheckpointRow]:
    """`version`'s row, then its parent's, and so on up to the root (stops at a parent
    that is not in `by_version`, and at a cycle)."""
    seen: set[str] = set()
    row = by_version.get(version)
    while row is not None and row.version not in seen:
        seen.add(row.version)
        yield row
        row = by_version.get(row.parent) if row.parent is not None else None


def descends_from(by_version: Mapping[str, CheckpointRow], row: CheckpointRow, root: str) -> bool:
    """Whether `root` is an ancestor of `row` (every checkpoint descends from `base`)."""
    return root == BASE or any(r.parent == root for r in chain(by_version, row.version))


def descendants(rows: Sequence[CheckpointRow], ancestor: str) -> set[str]:
    """Versions whose chain of parents passes through `ancestor` (not `ancestor` itself)."""
    by_version = {r.version: r for r in rows}
    return {
        r.version for r in rows if any(a.parent == ancestor for a in chain(by_version, r.version))
    }


def left_behind(rows: Sequence[CheckpointRow], target: str, since: float) -> set[str]:
    """Ready versions on a branch the trainer left when it restarted from `target` at time
    `since`: they descend from `target` through a checkpoint made before `since`. The
    restarted trainer's own checkpoints descend from `target` through new ones only."""
    by_version = {r.version: r for r in rows}
    out: set[str] = set()
    for row in (r for r in rows if r.status == "ready"):
        old = False
        for node in chain(by_version, row.version):
            old = old or node.created < since
            if node.parent == target or (target == BASE and node.parent is None):
                if old:
                    out.add(row.version)
                break
    return out


def choose_target(
    rows: Sequence[CheckpointRow],
    current: str,
    version: str | None = None,
    before_session: str | None = None,
) -> str:
    """The version to serve: explicit, before a session, or the current one's parent."""
    usable = [r for r in rows if r.status in USABLE]
    names = {r.version for r in usable}
    if version is not None:
        if version != BASE and version not in names:
            known = ", ".join([BASE, *sorted(names)])
            raise RollbackError(f"no usable checkpoint {version!r}; known: {known}")
        return version
    if before_session is not None:
        consumed = lineage_sessions(rows)
        clean = [r for r in usable if before_session not in consumed[r.version]]
        return max(clean, key=lambda r: (r.step, r.created)).version if clean else BASE
    by_version = {r.version: r for r in rows}
    if current == BASE or current not in by_version:
        raise RollbackError("already serving the base model: nothing to roll back to")
    parent = by_version[current].parent
    while parent is not None and parent not in names:  # skip refused/pruned ancestors
        parent = by_version[parent].parent if parent in by_version else None
    return parent or BASE


@dataclass(frozen=True)
class ServedState:
    """What serving uses, kept in a small file so a restart serves the same version."""

    version: str
    rolled_back: bool = False


def read_served(path: Path) -> ServedState | None:
    try:
        data = json.loads(path.read_text())
        return ServedState(str(data["version"]), bool(data.get("rolled_back", False)))
    except (OSError, ValueError, KeyError):
        return None


def write_served(path: Path, state: ServedState) -> None:
    write_private(
        path, json.dumps({"version": state.version, "rolled_back": state.rolled_back}).encode()
    )
