"""After a chaos run: what the client saw against what the app kept (read through `Store`).

- every answer the client got in full is a recorded turn (same session, user message and
  text), and every acknowledged rating is on that turn;
- no sample was trained twice: each sample id is in at most one registered checkpoint,
  the checkpoint folder's manifest lists the same samples, and the sample row points back;
- no folder in the checkpoints dir is half-written or unregistered;
- every version the app served (after a restart or in an answer's `model`) was published,
  or is the base model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clawrl_app.engine.core.checkpoints import MANIFEST, read_manifest
from clawrl_app.engine.store import Store, TurnRow
from tests.reliability.chat_client import Answered, Rated

BASE = "base"


@dataclass
class StoreFindings:
    """Counts and the offending items; `problems()` lists what broke a promise."""

    answered: int = 0
    missing: list[Answered] = field(default_factory=list)
    """Answered in full but not in the store."""
    differs: list[tuple[Answered, str]] = field(default_factory=list)
    """Recorded for that user message, but with other text than the client got."""
    rated: int = 0
    ratings_missing: list[Rated] = field(default_factory=list)
    checkpoints: int = 0
    trained_samples: int = 0
    trained_twice: dict[int, list[str]] = field(default_factory=dict)
    manifest_mismatch: list[str] = field(default_factory=list)
    back_pointer_mismatch: list[int] = field(default_factory=list)
    unregistered_dirs: list[str] = field(default_factory=list)
    temp_dirs: list[str] = field(default_factory=list)
    versions_seen: list[str] = field(default_factory=list)
    unpublished_served: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """One line per broken promise (empty: all held)."""
        out = []
        if self.missing:
            out.append(f"{len(self.missing)} answered turns not in the store: {self.missing[:3]}")
        if self.differs:
            out.append(f"{len(self.differs)} turns recorded with other text: {self.differs[:3]}")
        if self.ratings_missing:
            out.append(f"{len(self.ratings_missing)} acknowledged ratings lost")
        if self.trained_twice:
            out.append(
                f"samples in several checkpoints: {dict(list(self.trained_twice.items())[:5])}"
            )
        if self.manifest_mismatch:
            out.append(f"manifest differs from the store: {self.manifest_mismatch[:5]}")
        if self.back_pointer_mismatch:
            out.append(f"samples whose trained_in disagrees: {self.back_pointer_mismatch[:5]}")
        if self.unregistered_dirs or self.temp_dirs:
            out.append(
                f"checkpoint folders left over: {[*self.temp_dirs, *self.unregistered_dirs][:5]}"
            )
        if self.unpublished_served:
            out.append(f"served versions never published: {sorted(set(self.unpublished_served))}")
        return out


def last_user_text(turn: TurnRow) -> str:
    """The text of the last user message of a recorded request."""
    users = [m for m in turn.request.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return content if isinstance(content, str) else str(content)


def check_answers(store: Store, answered: Sequence[Answered], f: StoreFindings) -> None:
    f.answered = len(answered)
    by_session: dict[str, list[TurnRow]] = {}
    for a in answered:
        if a.session_id not in by_session:
            by_session[a.session_id] = store.turns_for_session(a.session_id)
        same_user = [t for t in by_session[a.session_id] if last_user_text(t) == a.user]
        if any(t.response_text == a.content for t in same_user):
            continue
        if same_user:
            f.differs.append((a, same_user[-1].response_text))
        else:
            f.missing.append(a)


def check_ratings(store: Store, rated: Sequence[Rated], f: StoreFindings) -> None:
    f.rated = len(rated)
    for r in rated:
        turns = {
            t.id for t in store.turns_for_session(r.session_id) if t.response_text == r.content
        }
        ok = False
        for s in store.samples_for_session(r.session_id):
            j = store.get_judgment(s.id) if s.turn_id in turns else None
            ok = ok or (j is not None and j.user_rating == r.rating)
        if not ok:
            f.ratings_missing.append(r)


def check_training(store: Store, checkpoints_dir: Path, f: StoreFindings) -> None:
    rows = store.list_checkpoints()
    f.checkpoints = len(rows)
    owners: dict[int, list[str]] = {}
    for row in rows:
        for sid in row.samples:
            owners.setdefault(sid, []).append(row.version)
        path = Path(row.path)
        if (path / MANIFEST).exists():
            m = read_manifest(path)
            if m.version != row.version or sorted(m.samples) != sorted(row.samples):
                f.manifest_mismatch.append(row.version)
    f.trained_twice = {sid: vs for sid, vs in owners.items() if len(vs) > 1}
    trained = [
        s
        for sess in store.list_sessions(limit=1_000_000)
        for s in store.samples_for_session(sess.id)
        if s.state == "trained" or s.id in owners
    ]
    f.trained_samples = len(trained)
    for s in trained:
        if s.trained_in is None or s.trained_in not in owners.get(s.id, []):
            f.back_pointer_mismatch.append(s.id)
    registered = {Path(r.path).resolve() for r in rows}
    if checkpoints_dir.exists():
        for d in sorted(checkpoints_dir.iterdir()):
            if d.name.startswith(".tmp-"):
                f.temp_dirs.append(d.name)
            elif d.is_dir() and d.resolve() not in registered:
                f.unregistered_dirs.append(d.name)


def check_versions(store: Store, versions: Iterable[str], f: StoreFindings) -> None:
    published = {r.version for r in store.list_checkpoints() if r.published_at is not None}
    f.versions_seen = sorted(Counter(versions))
    f.unpublished_served = [v for v in versions if v != BASE and v not in published]


def version_of(model_field: str, alias: str = "clawrl") -> str:
    """`clawrl-v12` -> `v12`; `clawrl-base` -> `base`."""
    return model_field.removeprefix(f"{alias}-")


def check_store(
    store_file: Path,
    checkpoints_dir: Path,
    answered: Sequence[Answered],
    rated: Sequence[Rated],
    versions: Iterable[str],
) -> StoreFindings:
    """Every check above, on the store of a stopped app."""
    f = StoreFindings()
    with Store(store_file) as store:
        check_answers(store, answered, f)
        check_ratings(store, rated, f)
        check_training(store, checkpoints_dir, f)
        check_versions(store, list(versions), f)
    return f
