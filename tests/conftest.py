"""Shared pytest fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.engine.store import Store  # none of these three imports torch or llama.cpp
from clawrl_app.models import ResolvedModel, load_model, resolve_model
from clawrl_app.paths import app_paths


def _pin_xdist_worker() -> None:
    """Under pytest-xdist (`make test` runs two workers), each worker and every process it
    starts keep to their own share of the cores: two workers whose llama.cpp threads spin
    and whose torch pools span every core starve each other (both run slower than one).
    Runs at import, before torch or llama.cpp start a thread; `CLAWRL_TEST_PIN=0` turns it off."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or count < 2 or os.environ.get("CLAWRL_TEST_PIN") == "0":
        return
    if not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // count
    if share < 1:
        return
    index = int(worker[2:]) % count  # a replaced worker (gw2, ...) takes over a share
    mine = cpus[index * share : (index + 1) * share]
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = str(len(mine))


_pin_xdist_worker()


_FAULT_LOG = pytest.StashKey[Any]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker that dies in native code (an abort, a segfault) leaves no traceback:
    the test's captured stderr dies with it and xdist says only "node down". Each worker
    dumps every thread's Python stack to `.pytest-faults/<worker>.log` instead (after
    pytest's own faulthandler setup); `make test` prints the non-empty ones when it fails.
    An empty or missing log after a "node down" means a kill, not a fault."""
    import faulthandler

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    folder = config.rootpath / ".pytest-faults"
    folder.mkdir(exist_ok=True)
    log = open(folder / f"{worker}.log", "w")  # noqa: SIM115 (open until the process ends)
    config.stash[_FAULT_LOG] = log
    faulthandler.enable(file=log, all_threads=True)


# --- embedded model fixtures (clawrl_app.models) -------------------------------------------
# Converted once per session; with CLAWRL_TEST_CACHE=<dir> the conversion is reused across
# runs (once per machine). Treat the loaded model as read-only: tests that train copy it.
@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a test's store file goes (its folder does not exist yet)."""
    return tmp_path / "data" / "clawrl.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """A real SQLite store at `db_path`, closed afterwards (modules may define their own)."""
    with Store(db_path) as s:
        yield s


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


def wait_for(predicate: Any, timeout: float = 60.0, interval: float = 0.1) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not reached within {timeout} s")


# --- a real engine (endpoint + torch backend + store) on a free loopback port -------------
def start_engine(home: Path, env: dict[str, str], events: Any = None) -> Any:
    """Start an Engine in a background thread; returns once the endpoint is ready."""
    from clawrl_app.config import load_settings
    from clawrl_app.engine.engine_thread import EngineThread

    # The regression guard answers the general set before each checkpoint is served (a
    # minute on a CPU) and holds out a share of turns: only the tests about it turn it on.
    # The torch backend serves unless a test asks for another: these tests reach into its
    # model; llama.cpp (the default where installed) has its own end-to-end tests
    # (tests/engine/backends/llamacpp/test_llamacpp_backend.py, test_smoke.py).
    # The trainer's anchor (the base's answers to 32 prompts, generated when the trainer
    # starts, and a KL on 8 of them each step) likewise: tests/engine/training/test_training.py
    # and test_anchor.py turn it on.
    defaults = {"CLAWRL_GUARD__ENABLED": "false", "CLAWRL_HARDWARE__BACKEND": "torch",
                "CLAWRL_TRAIN__ANCHOR_COEF": "0"}  # fmt: skip
    settings = load_settings(env={**defaults, **env}).settings
    return EngineThread(settings, app_paths(home), events=events).start()


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
        "CLAWRL_TRAIN__ENABLED": "false",  # training has its own engines (test_training.py)
        # incognito rules for tests/privacy/test_privacy.py (no other test sends these)
        "CLAWRL_PRIVACY__INCOGNITO_PATTERNS": '["^#off-the-record"]',
        "CLAWRL_PRIVACY__INCOGNITO_SOURCES": '["^scratch-tool/"]',
    }
    running = start_engine(home, env, events=engine_events.append)
    yield running
    running.stop()
