"""Side-by-side compare of two policy versions (issue #16).

Replays prompts (the last user message of recent real conversations with their earlier
context, or prompts the user gives) through two loaded versions, greedily, on the backend's
background lane: the answers are never recorded (no session, turn or sample, so never
training data) and never slow user requests down. A version the backend has not loaded (an
older checkpoint) is loaded for the comparison from its checkpoint folder and unloaded after
it. Each side also carries the version's stored regression-guard scores (personal and
general, `engine.guard`), when the guard scored it.

The diff and score functions are pure; `run_compare` is the replay.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawrl_app.engine.backends.greedy import NoRoom, greedy_answer
from clawrl_app.engine.chat.messages import message_text
from clawrl_app.engine.core.checkpoints import checkpoint_problem
from clawrl_app.engine.publishing.rollback import USABLE
from clawrl_app.engine.store import ENV_SOURCE_PREFIX, Store
from clawrl_app.engine.store.guard import DEGENERATION, GENERAL, PERSONAL

if TYPE_CHECKING:
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter

COMPARABLE = (*USABLE, "refused")
"""Checkpoints a comparison may load: the usable ones, and the ones the guard refused (to
see what it refused: a comparison never serves them)."""


Messages = list[dict[str, Any]]
DEFAULT_LAST = 5
SESSIONS_SCANNED = 200
_WORD = re.compile(r"\S+\s*|\s+")


class CompareError(ValueError):
    """The comparison cannot run as asked (unknown or unloaded version, no prompts)."""


@dataclass(frozen=True)
class Segment:
    """A run of an answer's text; `changed` when the other answer differs here."""

    text: str
    changed: bool


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _merge(parts: list[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for p in parts:
        if out and out[-1].changed == p.changed:
            out[-1] = Segment(out[-1].text + p.text, p.changed)
        elif p.text:
            out.append(p)
    return out


def word_diff(a: str, b: str) -> tuple[list[Segment], list[Segment]]:
    """Word-level diff: each answer as segments, the words the other lacks marked changed."""
    wa, wb = _words(a), _words(b)
    key_a, key_b = [w.strip() for w in wa], [w.strip() for w in wb]
    ops = difflib.SequenceMatcher(a=key_a, b=key_b, autojunk=False).get_opcodes()
    side_a: list[Segment] = []
    side_b: list[Segment] = []
    for tag, i1, i2, j1, j2 in ops:
        changed = tag != "equal"
        side_a.append(Segment("".join(wa[i1:i2]), changed))
        side_b.append(Segment("".join(wb[j1:j2]), changed))
    return _merge(side_a), _merge(side_b)


def answer_scores(text: str) -> dict[str, int]:
    """Simple code-scored checks of one answer (no shipped general set: length only)."""
    return {"words": len(text.split()), "chars": len(text)}


def prompt_label(messages: Messages, width: int = 80) -> str:
    """The last user message of a prompt, on one line, cut to `width`."""
    users = [m for m in messages if m.get("role") == "user"]
    text = " ".join(message_text(users[-1].get("content")).split()) if users else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _until_last_user(messages: Any) -> Messages | None:
    if not isinstance(messages, list):
        return None
    ms = [m for m in messages if isinstance(m, dict)]
    last = max((i for i, m in enumerate(ms) if m.get("role") == "user"), default=None)
    return ms[: last + 1] if last is not None else None


def recent_prompts(store: Store, n: int = DEFAULT_LAST) -> list[Messages]:
    """The last `n` real user prompts, newest first: each main turn's messages up to its last
    user message, from sessions that are neither env rollouts nor excluded by review."""
    out: list[Messages] = []
    for s in store.list_sessions(limit=SESSIONS_SCANNED):
        if s.source.startswith(ENV_SOURCE_PREFIX) or s.review_state == "excluded":
            continue
        for t in reversed(store.turns_for_session(s.id, type="main")):
            prompt = _until_last_user(t.request.get("messages"))
            if prompt:
                out.append(prompt)
            if len(out) >= n:
                return out
    return out


def parse_prompts(text: str) -> list[Messages]:
    """Prompts of a file: one per line, plain text or JSONL `{"messages": [...]}`."""
    out: list[Messages] = []
    for no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                prompt = _until_last_user(json.loads(line).get("messages"))
            except (ValueError, AttributeError):
                prompt = None
            if not prompt:
                raise CompareError(f'line {no}: expected {{"messages": [...]}} with a user message')
            out.append(prompt)
        else:
            out.append([{"role": "user", "content": line}])
    return out


def version_name(name: str, backend: Backend, alias: str = "clawrl") -> str:
    """`clawrl` -> the served version, `clawrl-v3` or `v3` -> v3."""
    return backend.active_version if name == alias else name.removeprefix(f"{alias}-")


def resolve_loaded(name: str, backend: Backend, alias: str = "clawrl") -> str:
    """The version `name` means, if the backend has it loaded; otherwise a CompareError
    saying what to do."""
    version = version_name(name, backend, alias)
    loaded = backend.info().versions
    if version not in loaded:
        raise CompareError(
            f"{version} is not loaded: only loaded versions can answer "
            f"({', '.join(loaded)}). Serve it first (`clawrl-app rollback {version}` or the "
            "Checkpoints screen), then compare it with the version served before."
        )
    return version


def checkpoint_to_load(version: str, backend: Backend, store: Store) -> Path | None:
    """The folder to load `version` from for a comparison, or None when it is loaded
    already; CompareError when no usable checkpoint has that name."""
    if version in backend.info().versions:
        return None
    row = store.get_checkpoint(version)
    if row is None or row.status not in COMPARABLE:
        usable = ["base", *(r.version for r in store.list_checkpoints() if r.status in COMPARABLE)]
        raise CompareError(
            f"no checkpoint {version!r} that can answer; usable: {', '.join(usable)}"
        )
    return Path(row.path)


async def load_for_compare(version: str, path: Path, backend: Backend) -> None:
    """Load an older checkpoint for a comparison (the caller unloads it after)."""
    problem = await asyncio.to_thread(checkpoint_problem, path)
    if problem is not None:
        raise CompareError(f"{version} cannot be loaded: its checkpoint folder: {problem}")
    await backend.load_adapter(version, path)


def guard_scores(store: Store | None, version: str) -> dict[str, float | None]:
    """The version's stored regression-guard scores (None where it was not scored)."""
    if store is None:
        return {"personal": None, "general": None, "degeneration": None}
    return {
        "personal": store.version_score(PERSONAL, version),
        "general": store.version_score(GENERAL, version),
        "degeneration": store.version_score(DEGENERATION, version),
    }


async def answer(
    backend: Backend, formatter: ChatFormatter, version: str, messages: Messages, max_tokens: int
) -> str:
    """One greedy answer of `version` on the background lane, never recorded."""
    try:
        return await greedy_answer(backend, formatter, version, messages, max_tokens)
    except NoRoom as exc:
        raise CompareError(str(exc)) from None


def compare_item(messages: Messages, a: str, b: str) -> dict[str, Any]:
    """One prompt's two answers with their diff and scores (JSON-shaped)."""
    seg_a, seg_b = word_diff(a, b)
    return {
        "prompt": prompt_label(messages),
        "a": a,
        "b": b,
        "a_segments": [[s.text, s.changed] for s in seg_a],
        "b_segments": [[s.text, s.changed] for s in seg_b],
        "same": a == b,
        "scores": {"a": answer_scores(a), "b": answer_scores(b)},
    }


def summary(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and mean answer lengths over all prompts."""
    n = len(items)

    def mean(side: str) -> float:
        return sum(i["scores"][side]["words"] for i in items) / n if n else 0.0

    return {
        "prompts": n,
        "identical": sum(1 for i in items if i["same"]),
        "a_words_mean": mean("a"),
        "b_words_mean": mean("b"),
    }


async def run_compare(
    backend: Backend,
    formatter: ChatFormatter,
    prompts: list[Messages],
    a: str,
    b: str,
    max_tokens: int = 128,
    alias: str = "clawrl",
    store: Store | None = None,
) -> dict[str, Any]:
    """Answer every prompt with versions `a` and `b`; the JSON the admin route returns. With
    a store, a checkpoint that is not loaded is loaded for the comparison and unloaded after
    it (unless it became the served version meanwhile)."""
    to_load: dict[str, Path] = {}
    if store is None:
        va, vb = resolve_loaded(a, backend, alias), resolve_loaded(b, backend, alias)
    else:
        va, vb = version_name(a, backend, alias), version_name(b, backend, alias)
        for v in (va, vb):
            if (path := checkpoint_to_load(v, backend, store)) is not None:
                to_load[v] = path
    if not prompts:
        raise CompareError("no prompts: no recorded conversations yet; chat first or pass prompts")
    loaded_here: list[str] = []
    try:
        for v, path in to_load.items():
            await load_for_compare(v, path, backend)
            loaded_here.append(v)
        items = []
        for messages in prompts:
            ans_a, ans_b = await asyncio.gather(
                answer(backend, formatter, va, messages, max_tokens),
                answer(backend, formatter, vb, messages, max_tokens),
            )
            items.append(compare_item(messages, ans_a, ans_b))
    finally:
        for v in loaded_here:
            if backend.active_version != v:
                await backend.unload_adapter(v)
    return {
        "a": va,
        "b": vb,
        "max_tokens": max_tokens,
        "items": items,
        "summary": summary(items),
        "guard": {"a": guard_scores(store, va), "b": guard_scores(store, vb)},
        "loaded_for_compare": loaded_here,
    }
