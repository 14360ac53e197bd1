"""The store's row objects and how values go to and from their stored form.

Token ids are stored as little-endian int32 blobs and log-probs as float64 blobs, so they
round-trip exactly. JSON columns come back parsed.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

# Token ids: int32 on disk; pick the native typecode that has 4 bytes.
_INT32 = "i" if array("i").itemsize == 4 else "l"
_SWAP = sys.byteorder == "big"

R = TypeVar("R")


@dataclass(frozen=True)
class SessionRow:
    """One conversation."""

    id: str
    source: str
    created: float
    last_seen: float
    closed_at: float | None
    close_reason: str | None
    review_state: str
    note: str


@dataclass(frozen=True)
class EpisodeRow:
    """One agentic-environment episode: the session that recorded its turns, the task, the
    rollout group it belongs to, how it ended and the verifier's outcome."""

    session_id: str
    env: str
    task_id: str
    group_id: str
    split: str
    status: str
    reason: str
    outcome_reward: float | None
    verdict: dict[str, Any]
    trained: bool
    turns: int
    duration_s: float
    created: float


@dataclass(frozen=True)
class TurnSignal:
    """What an episode says about one of its model turns: the next state (the env's
    observation) and the reward to train on (None: not trained)."""

    next_state_text: str
    next_state_json: Any
    reward: float | None
    step_score: float | None = None


@dataclass(frozen=True)
class NewTurn:
    """A turn to record; `record_turn` assigns id, idx and created."""

    session_id: str
    type: str
    request: dict[str, Any]
    response_text: str
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    logprobs: Sequence[float]
    policy_version: str
    response: dict[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    redactions: Mapping[str, int] = field(default_factory=dict)
    """Findings redacted from `request`/`response_text`/`response` per kind. When there
    are any, the caller passes empty `prompt_ids`/`response_ids`/`logprobs`: the ids encode
    the original text (decoding them gives the secret back) and cannot be re-derived from
    the redacted text without breaking the behaviour log-probs, so such a turn is recorded
    for reading but never trained on (its sample is skipped with a reason)."""
    holdout: bool = False
    """Held out for the regression guard's personal evaluation set: judged, never trained."""


@dataclass(frozen=True)
class TurnRow:
    """One recorded request/response pair, with tokens and behaviour log-probs."""

    id: int
    session_id: str
    idx: int
    type: str
    request: dict[str, Any]
    response_text: str
    response: dict[str, Any]
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    policy_version: str
    latency_ms: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    created: float
    redacted: int = 0
    """How many findings were redacted from this turn (its ids were dropped then)."""
    holdout: int = 0
    """1: in the regression guard's personal evaluation set (judged, never trained on)."""


@dataclass(frozen=True)
class SampleRow:
    """A main turn linked to its next state, on its way through judging and training."""

    id: int
    turn_id: int
    session_id: str
    next_state_role: str | None
    next_state_text: str | None
    next_state: Any
    state: str
    created: float
    claimed_at: float | None
    judged_at: float | None
    eligible_at: float | None
    trained_at: float | None
    trained_in: str | None
    skip_reason: str | None


@dataclass(frozen=True)
class JudgmentRow:
    """The judge's verdict on a sample; `score` is the reward (a user rating overrides)."""

    id: int
    sample_id: int
    backend: str
    votes: list[Any]
    score: float
    judge_score: float | None
    hint: str | None
    hint_candidates: list[Any]
    hint_rule: str | None
    teacher_logprobs: list[float] | None
    user_rating: int | None
    user_hint: str | None
    created: float
    teacher_topk: dict[str, Any] | None = None
    """Teacher top-k per response token: {"ids": [[...K]...], "logprobs": [[...K]...]}."""
    teacher_answer_ids: list[int] | None = None
    """The teacher's own greedy answer to the turn's prompt with the hint (token ids)."""


@dataclass(frozen=True)
class CheckpointRow:
    """A trained policy version and where it came from."""

    version: str
    path: str
    parent: str | None
    step: int
    created: float
    metrics: dict[str, Any]
    sessions: list[str]
    samples: list[int]
    status: str
    published_at: float | None
    pinned: bool


@dataclass(frozen=True)
class MetricRow:
    """One appended metric value."""

    id: int
    step: int
    name: str
    value: float
    version: str | None
    ts: float


@dataclass(frozen=True)
class EventRow:
    """One appended event for the UI feed."""

    id: int
    ts: float
    kind: str
    payload: dict[str, Any]


def _pack(typecode: str, values: Sequence[Any]) -> bytes:
    """Values as a little-endian array blob (int32 ids or float64 log-probs)."""
    a = array(typecode, values)
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def _unpack(typecode: str, blob: bytes) -> list[Any]:
    a = array(typecode)
    a.frombytes(blob)
    if _SWAP:
        a.byteswap()
    return a.tolist()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")


# Columns whose stored form differs from the row object's field: column -> (field, decode).
_DECODED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "prompt_ids": ("prompt_ids", lambda b: _unpack(_INT32, b)),
    "response_ids": ("response_ids", lambda b: _unpack(_INT32, b)),
    "logprobs": ("logprobs", lambda b: _unpack("d", b)),
    "teacher_logprobs": ("teacher_logprobs", lambda b: _unpack("d", b)),
    "teacher_answer_ids": ("teacher_answer_ids", lambda b: _unpack(_INT32, b)),
    "pinned": ("pinned", bool),
    "trained": ("trained", bool),
    **{
        f"{name}_json": (name, json.loads)
        for name in (
            "request",
            "response",
            "next_state",
            "votes",
            "hint_candidates",
            "teacher_topk",
            "verdict",
        )
        + ("metrics", "sessions", "samples", "payload")
    },
}


def _build(cls: type[R], row: sqlite3.Row) -> R:
    """A row object from a `SELECT *` row, decoding blobs and JSON."""
    values: dict[str, Any] = {}
    for column, value in zip(row.keys(), row, strict=True):
        name, decode = _DECODED.get(column, (column, None))
        values[name] = decode(value) if decode is not None and value is not None else value
    return cls(**values)
