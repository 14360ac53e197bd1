"""`clawrl-app data export DIR`: everything the app keeps about the user, as JSON Lines.

One file per kind of record (the format is documented in docs/data-export.md); the folder
is created owner-only (0700) and every file 0600, because it holds the user's
conversations. Checkpoint weights are not copied: `checkpoints.jsonl` is their manifest
(with each folder's path) and `clawrl-app export VERSION --merged DIR` writes a model.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from clawrl_app import __version__
from clawrl_app.engine.store import Store
from clawrl_app.paths import AppPaths, private_dir

FORMAT_VERSION = 1
FILES = {
    "sessions.jsonl": "one conversation per line (id, source, times, review state, note)",
    "turns.jsonl": "every recorded request/answer: messages, answer text, token ids, "
    "behaviour log-probs, policy version, usage, `redacted` findings, `holdout`",
    "samples.jsonl": "each main turn's next state and state (pending/judged/trained/...), "
    "with its `judgment` (votes, score, hint, user rating, teacher log-probs) or null",
    "episodes.jsonl": "agentic-environment episodes (task, status, verifier outcome)",
    "checkpoints.jsonl": "the checkpoint manifest: version, parent, step, metrics, the "
    "sessions and samples each trained on, folder path (weights are not copied)",
    "metrics.jsonl": "training metrics as the trainer appended them (step, name, value)",
    "events.jsonl": "the engine's event feed (turns recorded, judged, published, ...)",
    "redaction_counts.json": "how many findings of each kind were redacted",
    "config.toml": "a copy of the settings file (only when one exists)",
    "manifest.json": "what this export holds: app and format version, time, line counts",
}
README = """# clawrl-app data export

Everything clawrl-app kept about you when this export was written. Each `.jsonl` file
holds one JSON object per line; the fields are described in clawrl-app's
docs/data-export.md (format version {version}).

{files}

This folder holds your conversations: keep it private (it was written 0700/0600).
"""


def _row(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def _write(folder: Path, name: str, data: bytes) -> None:
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _write_jsonl(folder: Path, name: str, rows: Iterable[dict[str, Any]]) -> int:
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    n = 0
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            n += 1
    return n


def _samples(store: Store, session_ids: list[str]) -> Iterator[dict[str, Any]]:
    for sid in session_ids:
        for s in store.samples_for_session(sid):
            j = store.get_judgment(s.id)
            yield {**_row(s), "judgment": _row(j) if j is not None else None}


def export_data(store: Store, paths: AppPaths, out: Path) -> dict[str, int]:
    """Write the export into `out` (new or empty); returns the line count per file.
    ValueError if `out` exists and is not an empty folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} is not an empty folder; choose a new one")
    folder = private_dir(out)
    sessions = store.all_sessions()
    ids = [s.id for s in sessions]
    counts = {
        "sessions.jsonl": _write_jsonl(folder, "sessions.jsonl", map(_row, sessions)),
        "turns.jsonl": _write_jsonl(
            folder, "turns.jsonl", (_row(t) for sid in ids for t in store.turns_for_session(sid))
        ),
        "samples.jsonl": _write_jsonl(folder, "samples.jsonl", _samples(store, ids)),
        "episodes.jsonl": _write_jsonl(
            folder, "episodes.jsonl", (_row(e) for sid in ids if (e := store.get_episode(sid)))
        ),
        "checkpoints.jsonl": _write_jsonl(
            folder, "checkpoints.jsonl", map(_row, store.list_checkpoints())
        ),
        "metrics.jsonl": _write_jsonl(folder, "metrics.jsonl", map(_row, store.metrics())),
        "events.jsonl": _write_jsonl(folder, "events.jsonl", map(_row, store.all_events())),
    }
    _write(folder, "redaction_counts.json", json.dumps(store.redaction_counts()).encode())
    if paths.config_file.exists():
        _write(folder, "config.toml", paths.config_file.read_bytes())
    manifest = {
        "app": f"clawrl-app {__version__}",
        "format_version": FORMAT_VERSION,
        "schema_version": store.schema_version(),
        "created": time.time(),
        "lines": counts,
    }
    _write(folder, "manifest.json", json.dumps(manifest, indent=2).encode())
    files = "\n".join(f"- `{name}`: {what}" for name, what in FILES.items())
    _write(folder, "README.md", README.format(version=FORMAT_VERSION, files=files).encode())
    return counts
