"""Frozen events the engine publishes to a sink (the TUI, tests, the store's event feed).

Commands go in as plain method calls; events come out through `EventSink`, e.g.
`events.append` in tests. Sinks must be quick and must not raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger("clawrl.events")


@dataclass(frozen=True)
class Event:
    """Base class: `kind` names the event in the store's `events` table."""

    @property
    def kind(self) -> str:
        return type(self).__name__

    def payload(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class TurnRecorded(Event):
    session_id: str
    turn_id: int
    turn_type: str
    policy_version: str
    completion_tokens: int
    latency_ms: float


@dataclass(frozen=True)
class SessionClosed(Event):
    session_id: str
    reason: str


@dataclass(frozen=True)
class StoreFailed(Event):
    """The store stopped working (disk full, read-only, locked, damaged): sent once when it
    begins. Clients still get their answers; they are not recorded until `StoreRecovered`."""

    operation: str
    error: str
    """What happened and what to do, naming the file."""
    kind: str = "other"
    """readonly | locked | full | corrupt | io (see `clawrl_app.engine.store.FAULT_KINDS`)."""


@dataclass(frozen=True)
class StoreRecovered(Event):
    """A write succeeded again after a `StoreFailed`."""

    down_s: float
    """How long the store was failing."""
    unrecorded_turns: int
    """Turns answered meanwhile without being recorded."""


@dataclass(frozen=True)
class SampleCreated(Event):
    """The collector linked a main turn to its next state."""

    sample_id: int
    turn_id: int
    session_id: str
    next_state_role: str


@dataclass(frozen=True)
class SampleJudged(Event):
    sample_id: int
    turn_id: int
    session_id: str
    score: int
    hint_accepted: bool
    backend: str
    latency_s: float


@dataclass(frozen=True)
class TurnRated(Event):
    """The user rated a turn explicitly (overrides the judge)."""

    session_id: str
    turn_id: int
    rating: int
    hint: str | None


@dataclass(frozen=True)
class LoopFailed(Event):
    loop: str
    error: str


@dataclass(frozen=True)
class RolledBack(Event):
    """The user rolled the served policy back (or forward)."""

    previous: str
    version: str
    reason: str


@dataclass(frozen=True)
class PolicyPublished(Event):
    version: str
    previous: str


@dataclass(frozen=True)
class PublishRefused(Event):
    """A checkpoint was not served: the server's canary log-probs differ from the trainer's
    by `gap` (> `tolerance`), or it could not be loaded (`gap` is None then)."""

    version: str
    reason: str
    gap: float | None = None
    tolerance: float | None = None


@dataclass(frozen=True)
class GuardChecked(Event):
    """The regression guard scored a candidate against the served version before serving it;
    `passed` False: it was refused (a PublishRefused follows) for `reasons`."""

    version: str
    served: str
    passed: bool
    summary: str
    reasons: list[str]
    personal: float | None = None
    general: float | None = None
    served_personal: float | None = None
    served_general: float | None = None
    degeneration: float | None = None
    """Share of the candidate's general-check answers that loop or repeat themselves."""
    served_degeneration: float | None = None
    base_degeneration: float | None = None
    """The base model's rate, which the candidate's was held to."""
    deferred_until: int = 0
    """> 0: not decided (the refusal rests on one answer, too few of the user's prompts to
    confirm it): checked again once this many exist; no PublishRefused follows."""


@dataclass(frozen=True)
class StepStarted(Event):
    """The trainer began optimizer step `step`."""

    step: int


@dataclass(frozen=True)
class StepFinished(Event):
    """The trainer wrote checkpoint `version` after step `step` (metrics of the step)."""

    step: int
    version: str
    metrics: dict[str, float]


@dataclass(frozen=True)
class StatusReported(Event):
    """Periodic snapshot of every loop (queue depths, throughput, last errors); not stored."""

    status: dict[str, Any]


@dataclass(frozen=True)
class EnvJobUpdated(Event):
    """An env-training or evaluation job started by the engine changed: its state, a turn
    of its live episode, an episode's end or a round's figures (progress only: not
    stored; the job's whole state is in `EnvJobs.status()`)."""

    job_id: str
    job_kind: str  # train | eval
    env: str
    state: str  # starting | running | stopping | finished | stopped | failed
    episodes: int
    successes: int
    checkpoints: int


EPHEMERAL_EVENTS = frozenset({"StatusReported", "EnvJobUpdated"})
EventSink = Callable[[Event], None]


def fan_out(*sinks: EventSink) -> EventSink:
    """One sink that calls several; a failing sink is logged and skipped."""

    def sink(event: Event) -> None:
        for s in sinks:
            try:
                s(event)
            except Exception:
                log.exception("event sink failed for %s", event.kind)

    return sink


async def wait_for_poke(poke: asyncio.Event, timeout_s: float) -> None:
    """Sleep until `poke` is set or `timeout_s` passes, then clear it (loop pacing)."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(poke.wait(), timeout_s)
    poke.clear()
