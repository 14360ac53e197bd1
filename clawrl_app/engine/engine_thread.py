"""Run an Engine on its own asyncio loop in a background thread.

The TUI, benchmarks and tests drive the engine from another thread this way;
`call()` runs a coroutine on the engine's loop and waits for the result.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from clawrl_app.config import Settings
from clawrl_app.engine.core.events import EventSink
from clawrl_app.engine.orchestrator import Engine
from clawrl_app.paths import AppPaths

T = TypeVar("T")


class EngineThread:
    """An Engine started in a daemon thread; `stop()` shuts it down cleanly."""

    def __init__(
        self,
        settings: Settings,
        paths: AppPaths,
        *,
        events: EventSink | None = None,
        progress: bool = False,
    ) -> None:
        self.engine = Engine(settings, paths, events=events, progress=progress)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="clawrl-engine", daemon=True)
        self._started = threading.Event()
        self._failure: BaseException | None = None

    def start(self, timeout: float = 600) -> EngineThread:
        """Start and wait until the endpoint is ready; re-raise a start-up failure."""
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"engine not ready after {timeout} s")
        if self._failure is not None:
            raise self._failure
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def boot() -> None:
            try:
                await self.engine.start()
            except BaseException as exc:
                self._failure = exc
            finally:
                self._started.set()

        self.loop.run_until_complete(boot())
        if self._failure is None:
            self.loop.run_forever()

    @property
    def url(self) -> str:
        return self.engine.url

    @property
    def base(self) -> str:
        return self.url.removesuffix("/v1")

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        """Run `coro` on the engine's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Stop the engine and its loop thread."""
        if self._failure is None and self._thread.is_alive():
            self.call(self.engine.stop())
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(15)
