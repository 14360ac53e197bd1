"""A generation stream of the SGLang backend that holds its version's in-flight count.

`backend` is the `SGLangBackend` (typed loosely: that module imports this one)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from clawrl_app.engine.backends.base import GenerationEvent, GenerationRequest

BASE_VERSION = "base"
"""The launch weights, no adapter."""


class Admitted:
    """A generation stream that holds its version's in-flight count until it ends.

    The count is taken at admission (the `generate` call, or the end of the weight swap
    it waited for) and released exactly once: at the end of the stream, on `aclose()`,
    or when the stream is dropped unread.
    """

    def __init__(self, backend: Any, request: GenerationRequest, version: str | None):
        self._backend = backend
        self._request = request
        self._version = BASE_VERSION
        self._inner: AsyncGenerator[GenerationEvent, None] | None = None
        self._held = False
        if version is not None:
            self._admit(version)

    def _admit(self, version: str) -> None:
        self._version = version
        self._inner = self._backend._stream(self._request, version)
        self._backend._inflight[version] += 1
        self._held = True

    def __aiter__(self) -> Admitted:
        return self

    async def __anext__(self) -> GenerationEvent:
        try:
            if self._inner is None:  # admitted during a weight swap: choose after it
                backend = self._backend
                while not backend._swap_idle.is_set():
                    await backend._swap_idle.wait()
                version = self._request.version or backend._active
                backend._require_servable(version)
                self._admit(version)
            assert self._inner is not None
            return await self._inner.__anext__()
        except BaseException:
            self._release()
            raise

    async def aclose(self) -> None:
        try:
            if self._inner is not None:
                await self._inner.aclose()
        finally:
            self._release()

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._backend._inflight[self._version] -= 1

    def __del__(self) -> None:
        self._release()
