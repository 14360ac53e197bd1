"""Checkpoint folders: `adapter_{step:06d}` (PEFT format) with optimizer, RNG, trainer state
and a manifest, written atomically (temp folder + rename) so a crash never leaves a
half checkpoint that could be loaded.

A folder can still be damaged later (a full disk, a copy cut short, a hand edit):
`checkpoint_problem` says why one cannot be served or resumed from, so the publisher
refuses it and the trainer resumes from an older one instead of failing on it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clawrl_app.engine.store import CheckpointRow

MANIFEST = "manifest.json"
STATE = "trainer_state.json"
RESUME_FILES = (STATE, "optimizer.pt", "rng.pt")
"""What the trainer reads besides the weights to continue from a checkpoint."""


@dataclass
class Manifest:
    """What a checkpoint is and where it came from."""

    version: str
    step: int
    parent: str | None
    mode: str
    method: str
    metrics: dict[str, float]
    sessions: list[str]
    samples: list[int]
    canary: list[dict[str, Any]] = field(default_factory=list)
    """Fixed prompts with the trainer's log-probs of fixed responses, for the serving check."""


def checkpoint_name(step: int, mode: str = "lora") -> str:
    return f"{'adapter' if mode in ('lora', 'qlora') else 'model'}_{step:06d}"


def version_number(version: str) -> int:
    """`v12` -> 12; anything else (`base`) -> 0."""
    return int(version[1:]) if version.startswith("v") and version[1:].isdigit() else 0


def next_version(existing: list[str]) -> str:
    """Versions are numbered across the whole history (rollbacks branch it), never reused."""
    return f"v{max((version_number(v) for v in existing), default=0) + 1}"


def write_checkpoint(
    root: Path, step: int, mode: str, save_weights: Any, extra: dict[str, Any], manifest: Manifest
) -> Path:
    """Write a checkpoint folder atomically; `save_weights(dir)` writes the model files and
    `extra` maps file names to torch-saveable objects (optimizer, RNG)."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    final = root / checkpoint_name(step, mode)
    if final.exists() and (final / MANIFEST).exists():  # another branch (after a rollback)
        final = root / f"{final.name}-{manifest.version}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(mode=0o700)
    os.chmod(tmp, 0o700)  # whatever the umask: weights learned from the user's data
    save_weights(tmp)
    for name, obj in extra.items():
        torch.save(obj, tmp / name)
    (tmp / MANIFEST).write_text(json.dumps(asdict(manifest), indent=1))
    for f in tmp.rglob("*"):
        os.chmod(f, 0o700 if f.is_dir() else 0o600)
    if final.exists():  # a leftover of a crash after the rename but before registration
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def read_manifest(path: Path) -> Manifest:
    return Manifest(**json.loads((path / MANIFEST).read_text()))


def clean_unregistered(root: Path, registered: list[Path]) -> list[str]:
    """Remove complete checkpoint folders the store does not know: a trainer killed after
    the rename and before the registration wrote them (nothing can load or publish them,
    and the next step of the same number would be written beside them). Only the trainer
    holding the trainer lock may call this. Returns the names removed."""
    if not root.exists():
        return []
    known = {p.resolve() for p in registered}
    removed = []
    for d in sorted(root.iterdir()):
        complete = d.is_dir() and not d.name.startswith(".") and (d / MANIFEST).exists()
        if complete and d.resolve() not in known:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d.name)
    return removed


def clean_temp(root: Path) -> None:
    """Remove half-written checkpoint folders left by a crash."""
    if root.exists():
        for d in root.glob(".tmp-*"):
            shutil.rmtree(d, ignore_errors=True)


def checkpoint_problem(path: Path, *, resume: bool = False) -> str | None:
    """Why the checkpoint folder `path` cannot be served (or, with `resume`, trained on
    from), or None when it looks sound: a missing or garbled manifest, no weights, a
    truncated or garbled safetensors file, missing trainer state. Reads headers only."""
    if not path.is_dir():
        return f"its folder {path} is missing"
    try:
        read_manifest(path)
    except FileNotFoundError:
        return f"{MANIFEST} is missing"
    except (OSError, ValueError, TypeError) as exc:  # not JSON, not an object, wrong fields
        return f"{MANIFEST} is unreadable ({type(exc).__name__}: {exc})"
    weights = sorted(path.glob("*.safetensors"))
    if not weights and not any(path.glob("*.bin")):
        return "it holds no weights (*.safetensors)"
    for file in weights:
        if (why := _safetensors_problem(file)) is not None:
            return f"{file.name} is damaged ({why})"
    if resume:
        for name in RESUME_FILES:
            if not (path / name).is_file() or (path / name).stat().st_size == 0:
                return f"{name} is missing or empty"
        try:
            state = json.loads((path / STATE).read_text())
        except (OSError, ValueError) as exc:
            return f"{STATE} is unreadable ({type(exc).__name__}: {exc})"
        if not isinstance(state, dict) or not {"step", "baseline", "version"} <= state.keys():
            return f"{STATE} lacks step, baseline or version"
    return None


def _safetensors_problem(file: Path) -> str | None:
    """Why the safetensors header of `file` does not describe the file, or None."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="np"):
            return None
    except Exception as exc:  # safetensors raises its own error type for every defect
        return str(exc)


def newest_resumable(rows: list[CheckpointRow]) -> tuple[str | None, list[str]]:
    """The newest checkpoint (not pruned, folder present) the trainer can continue from,
    and why each newer one was skipped (one line per checkpoint)."""
    skipped: list[str] = []
    candidates = [r for r in rows if r.status != "pruned" and Path(r.path).exists()]
    for row in sorted(candidates, key=lambda r: r.created, reverse=True):
        problem = checkpoint_problem(Path(row.path), resume=True)
        if problem is None:
            return row.version, skipped
        skipped.append(f"{row.version} ({row.path}): {problem}")
    return None, skipped
