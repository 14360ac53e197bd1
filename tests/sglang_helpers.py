"""Shared fixtures and helpers of the SGLang contract tests.

Contract tests of the SGLang backend against a stand-in of SGLang 0.5.23's HTTP server.

SGLang needs a GPU, so these run against `tests/sglang_standin.py`, a real uvicorn server
on a free loopback port that implements the routes and payload shapes the backend uses.
What only a GPU run can confirm is listed in the backend's module docstring and report.
"""

# ruff: noqa: F401  (names re-exported to the contract test modules)
from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawrl_app.engine.backends.base import (
    Backend,
    BackendError,
    BackendOverloaded,
    Finished,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    SamplingParams,
    TokenOut,
    UnknownVersion,
)
from clawrl_app.engine.backends.sglang.backend import SGLangBackend
from clawrl_app.engine.backends.sglang.launch import (
    DEFAULT_LORA_TARGETS,
    SGLangServer,
    build_launch_command,
)

sys.path.insert(0, str(Path(__file__).parent))
from sglang_standin import (  # noqa: E402
    SAMPLING_KEYS,
    StandinState,
    StandinThread,
    next_token,
    parse_args,
    token_logprob,
)

STANDIN = str(Path(__file__).with_name("sglang_standin.py"))
KEY = "sk-contract"
EOS = 2
PROMPT = [11, 12, 13, 14]


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinThread]:
    server = StandinThread(StandinState(api_key=KEY)).start()
    yield server
    server.stop()


@pytest.fixture
def state(standin: StandinThread) -> StandinState:
    standin.state.reset()
    return standin.state


@asynccontextmanager
async def started(standin: StandinThread, **kwargs: Any) -> AsyncIterator[SGLangBackend]:
    options: dict[str, Any] = {"api_key": KEY, "timeout_s": 10.0, **kwargs}
    backend = SGLangBackend(
        standin.base_url,
        model_name="clawrl",
        context_length=4096,
        eos_token_ids=(EOS,),
        **options,
    )
    await backend.start()
    try:
        yield backend
    finally:
        await backend.stop()


def request(rid: str, max_new_tokens: int = 6, **params: Any) -> GenerationRequest:
    version = params.pop("version", None)
    sampling = SamplingParams(max_new_tokens=max_new_tokens, **params)
    return GenerationRequest(
        request_id=rid, prompt_ids=list(PROMPT), params=sampling, version=version
    )


def expected(
    n: int, adapter: str | None = None, stop: tuple[int, ...] = (EOS,), weights: str | None = None
) -> tuple[list[int], list[float], FinishReason]:
    """The stand-in's answer to PROMPT: ids, log-probs and finish reason (`weights` = the
    full checkpoint served in place of the launch weights)."""
    ids: list[int] = []
    logprobs: list[float] = []
    while len(ids) < n:
        context = PROMPT + ids
        token = next_token(context, adapter, weights)
        ids.append(token)
        logprobs.append(token_logprob(context, token, adapter, weights))
        if token in stop:
            return ids, logprobs, "stop"
    return ids, logprobs, "length"


async def collect(stream: AsyncIterator[GenerationEvent]) -> tuple[list[TokenOut], Finished]:
    events = [event async for event in stream]
    assert isinstance(events[-1], Finished)
    tokens = [e for e in events[:-1] if isinstance(e, TokenOut)]
    assert len(tokens) == len(events) - 1
    return tokens, events[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def adapter_dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def full_dir(tmp_path: Path, name: str, weights: bool = True) -> Path:
    """A full fine-tuning checkpoint: config.json + safetensors, no adapter_config.json."""
    path = adapter_dir(tmp_path, name)
    (path / "config.json").write_text("{}")
    if weights:
        (path / "model.safetensors").write_bytes(b"")
    return path


WEIGHT_ROUTES = ("/pause_generation", "/update_weights_from_disk", "/continue_generation")


def weight_calls(state: StandinState) -> list[tuple[str, Any]]:
    """The pause / update / continue calls the stand-in received, in order."""
    return [(route, body) for route, body in state.received if route in WEIGHT_ROUTES]


def swap_calls(folder: str, version: str) -> list[tuple[str, Any]]:
    """The exact calls that publish full weights (SGLANG.md, publishing a new policy)."""
    update = {"model_path": folder, "weight_version": version, "flush_cache": True}
    return [
        ("/pause_generation", {"mode": "retract"}),
        ("/update_weights_from_disk", update),
        ("/continue_generation", {}),
    ]


# -- launch -----------------------------------------------------------------------------


async def prepend(
    first: GenerationEvent, rest: AsyncIterator[GenerationEvent]
) -> AsyncIterator[GenerationEvent]:
    yield first
    async for event in rest:
        yield event
