"""Session identity and main/side turn classification for every chat request.

Explicit metadata wins: `X-Session-Id` / `X-Turn-Type` / `X-Session-Done` headers, or the
body keys `session_id` / `turn_type` / `session_done` (stripped before generation).
Without it the session is inferred: a request whose messages are an earlier request's
messages plus the answer we gave it (then new user/tool messages) continues that
session; anything else starts a new one. Unrelated traffic is never merged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from clawrl_app.engine.chat.messages import message_text
from clawrl_app.engine.chat.openai_schema import ApiError, reject_lone_surrogates
from clawrl_app.engine.store import ENV_SOURCE_PREFIX

TurnType = Literal["main", "side"]
TRUTHY = {"1", "true", "yes", "on"}
ENV_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # the <name> of an env session source, env:<name>
_OPENCLAW_ID = re.compile(r"sessionId=([A-Za-z0-9._:-]{4,128})")
_UTILITY = re.compile(
    r"(generate|write|create|suggest)\s+(a\s+)?(short\s+|concise\s+|brief\s+)?title"
    r"|^\s*title\s*:|summari[sz]e\s+(this|the)\s+conversation|conversation\s+title",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SessionMeta:
    """What the request says about its session (headers, body fallbacks, shape)."""

    session_id: str | None = None
    turn_type: str | None = None
    done: bool = False
    max_tokens: int | None = None
    has_tools: bool = False
    source_hint: str | None = None


@dataclass(frozen=True)
class SessionDecision:
    """Where a request belongs."""

    session_id: str
    turn_type: TurnType
    source: str
    inferred: bool
    """True when no explicit session id was given."""
    done: bool


def pop_session_fields(body: dict[str, Any]) -> tuple[str | None, str | None, bool]:
    """Remove the body fallbacks (`session_id`, `turn_type`, `session_done`) from `body`."""
    sid = body.pop("session_id", None)
    ttype = body.pop("turn_type", None)
    done = body.pop("session_done", None)
    reject_lone_surrogates({"session_id": sid, "turn_type": ttype})
    return (
        str(sid) if sid not in (None, "") else None,
        str(ttype) if ttype not in (None, "") else None,
        is_truthy(done),
    )


def is_truthy(value: Any) -> bool:
    """Upstream truthiness for X-Session-Done: 1, true, yes, on."""
    if isinstance(value, bool):
        return value
    return value is not None and str(value).strip().lower() in TRUTHY


def canonical_message(msg: dict[str, Any]) -> dict[str, Any]:
    """The parts of a message that identify it (ids and formatting noise removed)."""
    role = msg.get("role", "")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role}
    out["content"] = message_text(msg.get("content")).strip()
    calls = msg.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [_canonical_call(c) for c in calls if isinstance(c, dict)]
    if role == "tool":
        out["tool_call_id"] = msg.get("tool_call_id")
    return out


def _canonical_call(call: dict[str, Any]) -> list[Any]:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(ValueError):
            args = json.loads(args)
    return [fn.get("name"), args]


def conversation_key(messages: list[dict[str, Any]]) -> str:
    """A stable hash of a message list, insensitive to ids and content-part formatting."""
    blob = json.dumps([canonical_message(m) for m in messages], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def looks_like_utility(messages: list[dict[str, Any]], meta: SessionMeta) -> bool:
    """Probe or utility request (title generation and the like): a side turn."""
    if meta.max_tokens is not None and meta.max_tokens <= 1:
        return True
    if meta.has_tools:
        return False
    non_system = [m for m in messages if m.get("role") not in ("system", "developer")]
    if len(non_system) != 1:
        return False
    text = " ".join(message_text(m.get("content")) for m in non_system)
    return bool(_UTILITY.search(text))


class SessionTracker:
    """Remembers `messages + answer` of recent main turns to infer header-less sessions."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._by_key: OrderedDict[str, str] = OrderedDict()
        self._capacity = capacity
        self._closed: set[str] = set()
        self._lock = threading.Lock()

    def decide(self, messages: list[dict[str, Any]], meta: SessionMeta) -> SessionDecision:
        """Pick the session and turn type of a request (does not remember it yet)."""
        side = (meta.turn_type is not None and meta.turn_type.lower() != "main") or (
            meta.turn_type is None and looks_like_utility(messages, meta)
        )
        turn_type: TurnType = "side" if side else "main"
        if meta.session_id:
            return SessionDecision(
                meta.session_id, turn_type, meta.source_hint or "header", False, meta.done
            )
        sid = self._continued(messages)
        source = meta.source_hint or "api"
        if sid is None:
            hint = _openclaw_session(messages)
            if hint is not None:
                sid, source = f"openclaw-{hint}", "openclaw"
        if sid is None or sid in self._closed:
            sid = f"s-{uuid.uuid4().hex[:16]}"
        elif sid.startswith("openclaw-"):
            source = "openclaw"
        return SessionDecision(sid, turn_type, source, True, meta.done)

    def remember(
        self, session_id: str, messages: list[dict[str, Any]], answer: dict[str, Any]
    ) -> None:
        """Record that `messages + [answer]` belongs to `session_id`."""
        key = conversation_key([*messages, answer])
        with self._lock:
            self._by_key[key] = session_id
            self._by_key.move_to_end(key)
            while len(self._by_key) > self._capacity:
                self._by_key.popitem(last=False)

    def close(self, session_id: str) -> None:
        """Forget a closed session: later requests extending it start a new session."""
        with self._lock:
            self._closed.add(session_id)
            for key in [k for k, v in self._by_key.items() if v == session_id]:
                del self._by_key[key]

    def _continued(self, messages: list[dict[str, Any]]) -> str | None:
        # The longest prefix ending with an assistant message that we answered, followed
        # only by new user/tool messages.
        for k in range(len(messages) - 1, 0, -1):
            if messages[k - 1].get("role") != "assistant":
                continue
            tail = messages[k:]
            if not tail or any(m.get("role") not in ("user", "tool") for m in tail):
                continue
            with self._lock:
                sid = self._by_key.get(conversation_key(messages[:k]))
            if sid is not None:
                return sid
        return None


def _openclaw_session(messages: list[dict[str, Any]]) -> str | None:
    for m in messages[:3]:
        match = _OPENCLAW_ID.search(message_text(m.get("content")))
        if match:
            return match.group(1)
    return None


def env_source(header: str | None) -> str | None:
    """The session source named by an `X-Session-Source` header (`env:<name>`), None when
    absent; ApiError 400 for anything else (only env rollouts name their source)."""
    if header is None or header == "":
        return None
    name = header.removeprefix(ENV_SOURCE_PREFIX)
    if not header.startswith(ENV_SOURCE_PREFIX) or not ENV_NAME.match(name):
        raise ApiError(
            400,
            "X-Session-Source must be env:<name> (lower-case letters, digits, _ or -).",
            param="X-Session-Source",
        )
    return header
