"""`clawrl-app data wipe`: delete everything recorded or learned from the user.

Removes the data folder's contents (the store with its `-wal`/`-shm` sidecars, the
checkpoints, the served-version and trainer state) and the log folder's contents. Keeps
what is not the user's data: the base model and its converted cache (the cache folder),
the settings file and the endpoint's API key (the config folder), so the app starts again
as freshly installed but without downloading or converting the model again.

The engine must not be running (it holds the store open and would write again); the
command checks the configured port first.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from clawrl_app.paths import AppPaths


@dataclass(frozen=True)
class WipePlan:
    """What a wipe removes and what it keeps."""

    remove: list[Path]
    keep: list[Path]

    def size_bytes(self) -> int:
        """The bytes the removed files take."""
        total = 0
        for p in self.remove:
            files = [p] if p.is_file() or p.is_symlink() else p.rglob("*")
            total += sum(f.lstat().st_size for f in files if f.is_file() and not f.is_symlink())
        return total


def plan_wipe(paths: AppPaths) -> WipePlan:
    """Every entry of the data and log folders; the config and cache folders are kept
    (a folder that holds another app folder, e.g. a cache inside data, is kept too)."""
    keep = [paths.config_dir, paths.cache_dir]
    remove: list[Path] = []
    for folder in (paths.data_dir, paths.log_dir):
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if any(k == entry or entry in k.parents for k in keep):
                continue
            remove.append(entry)
    return WipePlan(remove, keep)


def wipe(plan: WipePlan) -> int:
    """Delete what the plan removes (links are removed, never followed); returns how many
    entries were removed."""
    for p in plan.remove:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    return len(plan.remove)
