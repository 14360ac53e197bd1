"""No stage of a request can strand it: injected backend faults, disconnects, limits.

Seen on a GPU: `_prefill` raised (tensors on the wrong device) after the request had left
the pending queue and before it joined a batch; the fail-all path missed it, the client
waited forever and the in-flight count never went down. Here the same failure is injected
into the real embedded model (a forward pre-hook that raises, at prefill or at decode) and
the tests check that every request ends with an error at once, releases what it held, and
that repeated failures make /readyz say why.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from clawrl_app.engine.backends import worker_backend
from clawrl_app.engine.backends.base import (
    BackendError,
    Finished,
    GenerationRequest,
    SamplingParams,
    TokenOut,
)
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.chat.formatter import ChatFormatter
from tests.conftest import start_engine, wait_for

pytestmark = pytest.mark.slow
PREFILL = "prefill"
DECODE = "decode"
UNHEALTHY_AFTER: int = worker_backend.UNHEALTHY_AFTER
DEVICE_ERROR = "Expected all tensors to be on the same device, but got index is on cpu"


@contextmanager
def fault(model: torch.nn.Module, stage: str) -> Iterator[list[int]]:
    """Make the model's forward raise at `stage` (prefill = several input tokens, decode =
    one per row), like the device mismatch a GPU showed; yields the count of raises."""
    raised: list[int] = []

    def hook(_: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        is_decode = ids is not None and ids.shape[1] == 1
        if (stage == DECODE) == is_decode:
            raised.append(1)
            raise RuntimeError(DEVICE_ERROR)

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield raised
    finally:
        handle.remove()


def held(be: TorchBackend) -> int:
    """Base-version requests the backend counts as in flight."""
    return be._inflight.get("base", 0)


async def answer(be: TorchBackend, ids: list[int], n: int) -> list[int]:
    out = []
    async for ev in be.generate(GenerationRequest("t", ids, SamplingParams(n, temperature=0.0))):
        if isinstance(ev, TokenOut):
            out.append(ev.token_id)
        else:
            assert isinstance(ev, Finished)
    return out


@pytest.fixture(scope="module")
def backend_parts(loaded_model: tuple[Any, Any]) -> tuple[Any, Any, list[list[int]]]:
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    prompts = [
        fmt.render([{"role": "user", "content": q}])
        for q in ("Hi", "Name a sea.", "Write a long story about the sea.")
    ]
    return copy.deepcopy(model), tok, prompts


def with_backend(parts: tuple[Any, Any, list[list[int]]], body: Callable[..., Any]) -> Any:
    model, tok, prompts = parts

    async def go() -> Any:
        be = TorchBackend(model, tok, model_name="m", context_length=8192)
        await be.start()
        try:
            return await body(be, model, prompts)
        finally:
            await be.stop()

    return asyncio.run(go())


def test_a_prefill_failure_answers_the_request_and_releases_it(backend_parts: Any) -> None:
    async def body(be: TorchBackend, model: Any, prompts: list[list[int]]) -> None:
        with fault(model, PREFILL) as raised:
            t0 = time.monotonic()
            with pytest.raises(BackendError, match="prefill failed.*same device"):
                await asyncio.wait_for(answer(be, prompts[0], 8), 20)
            assert time.monotonic() - t0 < 10 and raised
        assert held(be) == 0
        assert len(await asyncio.wait_for(answer(be, prompts[0], 4), 60)) == 4  # serves on

    with_backend(backend_parts, body)


def test_a_decode_failure_fails_its_batch_only_and_releases_every_row(backend_parts: Any) -> None:
    async def body(be: TorchBackend, model: Any, prompts: list[list[int]]) -> None:
        with fault(model, DECODE):
            results = await asyncio.wait_for(
                asyncio.gather(*(answer(be, p, 12) for p in prompts[:2]), return_exceptions=True),
                30,
            )
        assert all(isinstance(r, BackendError) for r in results), results
        assert "decode failed" in str(results[0])
        assert held(be) == 0
        assert len(await asyncio.wait_for(answer(be, prompts[1], 3), 60)) == 3

    with_backend(backend_parts, body)


def test_repeated_failures_make_the_backend_unhealthy_until_a_success(backend_parts: Any) -> None:
    async def body(be: TorchBackend, model: Any, prompts: list[list[int]]) -> None:
        with fault(model, PREFILL):
            for _ in range(UNHEALTHY_AFTER):
                with pytest.raises(BackendError):
                    await asyncio.wait_for(answer(be, prompts[0], 4), 20)
            with pytest.raises(BackendError, match="scoring failed"):
                await asyncio.wait_for(be.score(prompts[0], prompts[1][:3]), 20)
        reason = be.health()
        assert reason is not None and "in a row" in reason and DEVICE_ERROR in reason
        await asyncio.wait_for(answer(be, prompts[0], 2), 60)
        assert be.health() is None

    with_backend(backend_parts, body)


def test_closing_a_stream_before_reading_it_cancels_the_request(backend_parts: Any) -> None:
    """A client gone before its first token must not keep a row decoding 2,000 tokens."""

    async def body(be: TorchBackend, model: Any, prompts: list[list[int]]) -> None:
        long = prompts[2]  # its greedy answer runs for hundreds of tokens
        stream = be.generate(GenerationRequest("t", long, SamplingParams(2000, 0.0)))
        await asyncio.sleep(0.5)
        assert held(be) == 1, "admitted and decoding"
        await stream.aclose()  # type: ignore[attr-defined]
        t0 = time.monotonic()
        while held(be) and time.monotonic() - t0 < 10:
            await asyncio.sleep(0.02)
        assert held(be) == 0 and time.monotonic() - t0 < 1.0

    with_backend(backend_parts, body)


def test_a_queued_request_keeps_its_version_loaded_until_it_is_answered(
    backend_parts: Any, tmp_path: Path
) -> None:
    """The alias resolves to a version when the request arrives; if the publisher moved on
    and unloaded that version before the worker admitted the request, the client got a 503
    (seen under load in the serve-while-training test). Queued rows now count as in flight."""
    from peft import LoraConfig, get_peft_model

    model, tok, prompts = backend_parts
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules=["q_proj"]))
    lora.save_pretrained(str(tmp_path / "v1"))

    async def body(be: TorchBackend, model: Any, prompts: list[list[int]]) -> None:
        await be.load_adapter("v1", tmp_path / "v1")
        await be.activate("v1")
        busy = asyncio.ensure_future(be._submit(be._commands, lambda: time.sleep(1.0)))
        await asyncio.sleep(0.1)  # the worker is busy: the next request waits in the queue
        stream = be.generate(GenerationRequest("t", prompts[0], SamplingParams(4, 0.0), "v1"))
        await be.activate("base")
        unload = asyncio.create_task(be.unload_adapter("v1"))  # what the publisher does
        events = [ev async for ev in stream]
        await asyncio.wait_for(unload, 30)
        await busy
        assert isinstance(events[-1], Finished) and events[-1].policy_version == "v1"
        assert be.info().versions == ["base"]

    with_backend((model, tok, prompts), body)


# --- through the real endpoint --------------------------------------------------------
@pytest.fixture(scope="module")
def own_engine(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An engine of its own: these tests break its model on purpose."""
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "16",
        "CLAWRL_SERVER__MAX_CONCURRENT": "1",
        "CLAWRL_TRAIN__ENABLED": "false",
    }
    running = start_engine(Path(tmp_path_factory.mktemp("stranded-home")), env)
    yield running
    running.stop()


def client(engine: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=engine.url, api_key="x", max_retries=0, timeout=60)


def ask(engine: Any, text: str = "Hi", **kw: Any) -> Any:
    return client(engine).chat.completions.create(
        model="clawrl", messages=[{"role": "user", "content": text}], **kw
    )


def test_a_failing_model_answers_503_at_once_and_readyz_says_why(own_engine: Any) -> None:
    model = own_engine.engine.service.backend._model
    readyz = f"{own_engine.base}/readyz"
    with fault(model, PREFILL):
        for _ in range(UNHEALTHY_AFTER):
            t0 = time.monotonic()
            with pytest.raises(openai.APIStatusError) as err:
                ask(own_engine)
            assert err.value.status_code == 503 and time.monotonic() - t0 < 10
            assert DEVICE_ERROR in err.value.message
        not_ready = httpx.get(readyz)
        assert not_ready.status_code == 503
        assert DEVICE_ERROR in not_ready.json()["reason"]
    assert ask(own_engine).choices[0].message.content  # the fault is gone: it serves
    assert httpx.get(readyz).status_code == 200
    assert own_engine.engine.service.active == 0


def test_a_client_that_disconnects_mid_stream_frees_its_slot_at_once(own_engine: Any) -> None:
    service = own_engine.engine.service
    backend = service.backend
    stream = ask(own_engine, "Write a long story about the sea.", stream=True, max_tokens=1500)
    next(iter(stream))  # the answer has started
    assert service.active == 1
    stream.close()
    wait_for(lambda: service.active == 0 and held(backend) == 0, timeout=5, interval=0.02)
    assert ask(own_engine).choices[0].message.content  # the single slot is free again


def test_past_max_concurrent_a_request_gets_429_with_retry_after(own_engine: Any) -> None:
    stream = ask(own_engine, "Write a long story about the sea.", stream=True, max_tokens=400)
    try:
        next(iter(stream))
        busy = httpx.post(
            f"{own_engine.url}/chat/completions",
            json={"model": "clawrl", "messages": [{"role": "user", "content": "Hi"}]},
            timeout=30,
        )
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert "server.max_concurrent" in busy.json()["error"]["message"]
    finally:
        stream.close()
    wait_for(lambda: own_engine.engine.service.active == 0, timeout=5, interval=0.02)


def test_an_answer_past_the_wall_clock_limit_fails_with_504(own_engine: Any) -> None:
    service = own_engine.engine.service
    service.request_timeout_s = 0.5
    try:
        t0 = time.monotonic()
        with pytest.raises(openai.APIStatusError) as err:
            ask(own_engine, "Write a long story about the sea.", max_tokens=1500)
        assert err.value.status_code == 504 and time.monotonic() - t0 < 5
        assert "server.request_timeout_s" in err.value.message
    finally:
        service.request_timeout_s = 600.0
    wait_for(lambda: service.active == 0 and held(service.backend) == 0, timeout=5)
