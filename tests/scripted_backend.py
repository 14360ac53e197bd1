"""A backend that replays scripted answers, for endpoint behaviour the 135M model cannot show.

The embedded SmolLM2-135M never emits `<tool_call>` blocks, so tool-call parsing and
tool-driven session flows are driven with scripted answers tokenized by the real
tokenizer. Everything else in those tests (HTTP server, client, store) is real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from clawrl_app.engine.backends.base import (
    BackendInfo,
    Finished,
    GenerationEvent,
    GenerationRequest,
    TokenOut,
)


class ScriptedBackend:
    """Answers each request with the next scripted text, token by token."""

    def __init__(
        self, tokenizer: Any, answers: list[str], eos_id: int, *, seeded: bool = True
    ) -> None:
        self.tokenizer = tokenizer
        self.seeded = seeded
        self.answers = list(answers)
        self.eos_id = eos_id
        self.requests: list[GenerationRequest] = []

    @property
    def active_version(self) -> str:
        return "base"

    def info(self) -> BackendInfo:
        return BackendInfo("scripted", 8192, (self.eos_id,), ["base"], seeded=self.seeded)

    def health(self) -> str | None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        self.requests.append(request)
        text = self.answers.pop(0)
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.eos_id]
        return self._stream(request, ids)

    async def _stream(
        self, request: GenerationRequest, ids: list[int]
    ) -> AsyncIterator[GenerationEvent]:
        for tid in ids:
            await asyncio.sleep(0)
            yield TokenOut(tid, -0.5)
        yield Finished("stop", "base", len(request.prompt_ids), len(ids))

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        version: str | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]:
        return [-0.5] * len(response_ids)

    async def load_adapter(self, version: str, path: Path) -> None:
        raise NotImplementedError("scripted backend serves one version")

    async def activate(self, version: str) -> None:
        return None

    async def unload_adapter(self, version: str) -> None:
        return None
