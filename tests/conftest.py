"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.models import ResolvedModel, load_model, resolve_model
from clawrl_app.paths import app_paths


# --- embedded model fixtures (clawrl_app.models) -------------------------------------------
# Converted once per session; with CLAWRL_TEST_CACHE=<dir> the conversion is reused across
# runs (once per machine). Treat the loaded model as read-only: tests that train copy it.
@pytest.fixture(scope="session")
def embedded_model(tmp_path_factory: pytest.TempPathFactory) -> ResolvedModel:
    """The embedded SmolLM2-135M-Instruct, converted to safetensors in a session cache."""
    cache = os.environ.get("CLAWRL_TEST_CACHE")
    home = Path(cache).expanduser() if cache else tmp_path_factory.mktemp("clawrl-models")
    return resolve_model(None, app_paths(home), progress=False)


@pytest.fixture(scope="session")
def loaded_model(embedded_model: ResolvedModel) -> tuple[Any, Any]:
    """`(model, tokenizer)` of the embedded model on CPU, float32, eval mode (shared: don't mutate)."""
    return load_model(embedded_model)


# --- a real engine (endpoint + torch backend + store) on a free loopback port -------------
class RunningEngine:
    """An Engine running on its own event loop in a background thread."""

    def __init__(self, engine: Any, loop: Any, thread: Any) -> None:
        self.engine = engine
        self.loop = loop
        self.thread = thread

    @property
    def url(self) -> str:
        return str(self.engine.url)

    @property
    def base(self) -> str:
        return self.url.removesuffix("/v1")

    def call(self, coro: Any, timeout: float = 120) -> Any:
        """Run a coroutine on the engine's loop and wait for its result."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


def start_engine(home: Path, env: dict[str, str], events: Any = None) -> RunningEngine:
    """Start an Engine in a thread; returns once the endpoint is ready."""
    import asyncio
    import threading

    from clawrl_app.config import load_settings
    from clawrl_app.engine.orchestrator import Engine

    settings = load_settings(env=env).settings
    engine = Engine(settings, app_paths(home), events=events, progress=False)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            try:
                await engine.start()
            except BaseException as exc:
                failure.append(exc)
            finally:
                started.set()

        loop.run_until_complete(boot())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(300)
    if failure:
        raise failure[0]
    return RunningEngine(engine, loop, thread)


def stop_engine(running: RunningEngine) -> None:
    running.call(running.engine.stop())
    running.loop.call_soon_threadsafe(running.loop.stop)
    running.thread.join(10)


@pytest.fixture(scope="session")
def engine_events() -> list[Any]:
    """Every event the session-wide engine published."""
    return []


@pytest.fixture(scope="session")
def engine(
    embedded_model: ResolvedModel,
    tmp_path_factory: pytest.TempPathFactory,
    engine_events: list[Any],
) -> Any:
    """A real engine on the embedded model, endpoint on a free loopback port."""
    home = tmp_path_factory.mktemp("clawrl-home")
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "24",
    }
    running = start_engine(home, env, events=engine_events.append)
    yield running
    stop_engine(running)
