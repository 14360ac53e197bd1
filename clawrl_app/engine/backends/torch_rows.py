"""A request in flight on the torch backend's worker thread (`Row`), and the stream of its
events that the endpoint reads (`RowStream`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from clawrl_app.engine.backends.base import (
    Finished,
    GenerationEvent,
    GenerationRequest,
)
from clawrl_app.engine.backends.grammar import RowGrammar

BASE_VERSION = "base"
"""The served weights without any adapter."""


@dataclass(eq=False)
class Row:
    """One request in flight on the worker thread."""

    request: GenerationRequest
    emit: Callable[[GenerationEvent], None]
    version: str = BASE_VERSION
    generator: torch.Generator | None = None
    grammar: RowGrammar | None = None
    """The answer's constraint (a forced tool call), when it has one."""
    next_id: int = 0
    produced: int = 0
    out_ids: list[int] = field(default_factory=list)
    """The answer so far (checked for a degenerate loop when the request asks)."""
    total_len: int = 0
    seq: int = -1
    """The llama.cpp backend's KV sequence id held for this row (-1: none)."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    counted: bool = False
    """True while this row holds one unit of its version's in-flight count."""
    closed: bool = False
    """Its last event (Finished or an error) was sent, or its client went away."""


class RowStream:
    """The events of one request. Closing it, even before the first read (a client that
    disconnected at once), cancels the request: the worker drops it at its next step."""

    def __init__(self, row: Row, events: asyncio.Queue[GenerationEvent | BaseException]) -> None:
        self._row = row
        self._events = events
        self._done = False

    def __aiter__(self) -> RowStream:
        return self

    async def __anext__(self) -> GenerationEvent:
        if self._done:
            raise StopAsyncIteration
        try:
            ev = await self._events.get()
        except BaseException:  # cancelled while waiting: the client went away
            self.close()
            raise
        if isinstance(ev, BaseException):
            self.close()
            raise ev
        if isinstance(ev, Finished):
            self.close()  # no-op for the worker (already finished); ends iteration
        return ev

    def close(self) -> None:
        self._done = True
        self._row.cancelled.set()

    async def aclose(self) -> None:
        self.close()
