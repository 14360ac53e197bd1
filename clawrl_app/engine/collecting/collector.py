"""Collection loop: link each main turn to its next state and create a pending sample.

The next state of main turn t is what the client sent after our answer in the session's
next main request: the new trailing user message, or *all* tool results of a parallel
tool-call batch (REFERENCE §2). A closed session's last turn has no next state: it gets a
sample in state `skipped` (trainable only if the user rates it). Side turns never become
samples. Idempotent: the store refuses a second sample for a turn. A turn that had
secrets or personal data redacted was stored without its token ids: its sample is skipped
(`NOT_TRAINABLE_REASON`), never judged or trained on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from clawrl_app.engine.chat.messages import message_text
from clawrl_app.engine.core.events import EventSink, SampleCreated, wait_for_poke
from clawrl_app.engine.store import Store, TurnRow
from clawrl_app.engine.store.faults import log_failure
from clawrl_app.privacy.redact import NOT_TRAINABLE_REASON

log = logging.getLogger("clawrl.collector")


@dataclass(frozen=True)
class NextState:
    """What followed an answer: its role, readable text and the raw messages."""

    role: str
    text: str
    messages: list[dict[str, Any]]


def next_state_of(request_messages: list[dict[str, Any]]) -> NextState | None:
    """The messages after the last assistant message of a request (None if there are none)."""
    last_assistant = max(
        (i for i, m in enumerate(request_messages) if m.get("role") == "assistant"), default=-1
    )
    if last_assistant < 0:
        return None
    tail = [m for m in request_messages[last_assistant + 1 :] if m.get("role") in ("user", "tool")]
    if not tail:
        return None
    role = "tool" if all(m.get("role") == "tool" for m in tail) else "user"
    if role == "tool" and len(tail) > 1:
        text = "\n\n".join(
            f"[tool result {i + 1}{_tool_name(m)}]\n{message_text(m.get('content'))}"
            for i, m in enumerate(tail)
        )
    else:
        text = "\n\n".join(message_text(m.get("content")) for m in tail)
    return NextState(role, text, tail)


def _tool_name(msg: dict[str, Any]) -> str:
    name = msg.get("name") or msg.get("tool_call_id")
    return f": {name}" if name else ""


class Collector:
    """Turns recorded main turns into samples, polling the store."""

    def __init__(
        self, store: Store, events: EventSink | None = None, interval_s: float = 0.5
    ) -> None:
        self.store = store
        self.events: EventSink = events or (lambda e: None)
        self.interval_s = interval_s
        self.created = 0
        self.waiting = 0
        self.last_error: str | None = None
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """Look again now (e.g. after a turn was recorded)."""
        self._wake.set()

    def collect_once(self) -> int:
        """One pass over unhandled main turns; returns how many samples were created."""
        made = 0
        waiting = 0
        for turn in self.store.main_turns_without_sample():
            if self._link(turn):
                made += 1
            else:
                waiting += 1
        self.created += made
        self.waiting = waiting
        return made

    def _link(self, turn: TurnRow) -> bool:
        nxt_turn = self.store.next_main_turn(turn.session_id, turn.idx)
        if nxt_turn is not None:
            state = next_state_of(nxt_turn.request.get("messages", []))
            if state is None:  # the client restarted the conversation: nothing followed
                return self._no_next_state(turn, "next request did not continue this answer")
            with self.store.atomic():
                sample_id = self.store.create_sample(
                    turn.id, turn.session_id, state.role, state.text, state.messages
                )
                if sample_id is not None and turn.redacted:
                    self.store.set_sample_state(sample_id, "skipped", NOT_TRAINABLE_REASON)
            if sample_id is not None:
                self.events(SampleCreated(sample_id, turn.id, turn.session_id, state.role))
            return True
        session = self.store.get_session(turn.session_id)
        if session is not None and session.closed_at is not None:
            return self._no_next_state(turn, f"session closed ({session.close_reason})")
        return False  # still waiting for the next request

    def _no_next_state(self, turn: TurnRow, reason: str) -> bool:
        with self.store.atomic():
            sample_id = self.store.create_sample(turn.id, turn.session_id, None, None)
            if sample_id is not None:
                self.store.set_sample_state(sample_id, "skipped", f"no next state: {reason}")
        return True

    async def run(self) -> None:
        """Poll forever; errors are logged and retried."""
        while True:
            try:
                await asyncio.to_thread(self.collect_once)
                self.last_error = None
            except Exception as exc:
                log_failure(log, "collector pass failed", exc)
                self.last_error = f"{type(exc).__name__}: {exc}"
            await wait_for_poke(self._wake, self.interval_s)

    def status(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "waiting": self.waiting,
            "last_error": self.last_error,
            "ts": time.time(),
        }
