"""Contract tests of the SGLang backend against a stand-in of SGLang 0.5.23's HTTP server.

SGLang needs a GPU, so these run against `tests/sglang_standin.py`, a real uvicorn server
on a free loopback port that implements the routes and payload shapes the backend uses.
What only a GPU run can confirm is listed in the backend's module docstring and report.
"""

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
from clawrl_app.engine.backends.sglang_backend import SGLangBackend
from clawrl_app.engine.backends.sglang_launch import (
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
def test_launch_command_spells_every_flag_in_full() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    The argv names `python -m sglang.launch_server` and every flag in full; the env pins the GPUs.
    """
    argv, env = build_launch_command(
        "/opt/sglang/bin/python", "/models/qwen", "clawrl", 31000,
        gpus=(2, 3), mem_fraction=0.55, context_length=32768, lora_rank=16,
        lora_targets=DEFAULT_LORA_TARGETS, max_loras_per_batch=4, api_key=KEY,
        colocated=False, nccl_port=31001, tool_call_parser="qwen",
        base_env={"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    )  # fmt: skip
    assert argv[:3] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
    assert {a for a in argv if a.startswith("-")} == {
        "-m", "--model-path", "--served-model-name", "--host", "--port", "--tp-size",
        "--dp-size", "--nccl-port", "--skip-server-warmup", "--enable-lora",
        "--max-lora-rank", "--lora-target-modules", "--max-loras-per-batch",
        "--max-loaded-loras", "--mem-fraction-static", "--context-length", "--api-key",
        "--tool-call-parser",
    }  # fmt: skip

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--model-path") == "/models/qwen"
    assert value("--served-model-name") == "clawrl"
    assert value("--host") == "127.0.0.1"
    assert value("--port") == "31000"
    assert value("--tp-size") == "2"
    assert value("--dp-size") == "1"
    assert value("--nccl-port") == "31001"
    assert value("--mem-fraction-static") == "0.55"
    assert value("--context-length") == "32768"
    assert value("--max-lora-rank") == "16"
    assert value("--max-loras-per-batch") == "4"
    assert int(value("--max-loaded-loras")) >= 4
    assert value("--api-key") == KEY
    assert value("--tool-call-parser") == "qwen"
    start = argv.index("--lora-target-modules") + 1
    assert argv[start : start + 7] == list(DEFAULT_LORA_TARGETS)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # allow_abbrev=False: the stand-in's parser accepts only full spellings, as SGLang does.
    args = parse_args(argv[3:])
    assert args.lora_target_modules == list(DEFAULT_LORA_TARGETS)


def test_launch_command_colocated_and_optional_flags() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Colocated adds the memory saver and drops PYTORCH_CUDA_ALLOC_CONF; unset options add no flag.
    """
    argv, env = build_launch_command(
        "python", "m", "clawrl", 30001, gpus=(0,), mem_fraction=None, context_length=None,
        lora_rank=8, lora_targets=("q_proj", "v_proj"), max_loras_per_batch=3, api_key=None,
        colocated=True, nccl_port=30002,
        base_env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HOME": "/h"},
    )  # fmt: skip
    assert "--enable-memory-saver" in argv and "--enable-weights-cpu-backup" in argv
    for flag in ("--mem-fraction-static", "--context-length", "--api-key", "--tool-call-parser"):
        assert flag not in argv
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["HOME"] == "/h"
    with pytest.raises(ValueError):
        build_launch_command(
            "python", "m", "c", 1, gpus=(), mem_fraction=None, context_length=None,
            lora_rank=8, lora_targets=("q_proj",), max_loras_per_batch=2, api_key=None,
            colocated=False, nccl_port=2,
        )  # fmt: skip


async def test_server_launches_waits_and_stops(caplog: pytest.LogCaptureFixture) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    SGLangServer runs the stand-in as its child, forwards its log, waits for
    /health_generate, and stop() ends the child.
    """
    port = free_port()
    argv, env = build_launch_command(
        sys.executable, "standin/model", "clawrl", port, gpus=(0,), mem_fraction=0.5,
        context_length=4096, lora_rank=8, lora_targets=DEFAULT_LORA_TARGETS,
        max_loras_per_batch=3, api_key=KEY, colocated=False, nccl_port=free_port(),
        base_env=os.environ,
    )  # fmt: skip
    argv = [sys.executable, STANDIN, *argv[3:], "--startup-delay", "0.5"]
    url = f"http://127.0.0.1:{port}"
    server = SGLangServer(argv, env, base_url=url, ready_timeout_s=20, poll_interval_s=0.2)
    backend = SGLangBackend(
        url, api_key=KEY, model_name="clawrl", context_length=4096, eos_token_ids=(EOS,),
        server=server,
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="clawrl.sglang"):
        await backend.start()
        pid = server.pid
        assert pid is not None
        assert backend.model_info["model_path"] == "standin/model"
        tokens, finished = await collect(backend.generate(request("r-child", 3)))
        assert [t.token_id for t in tokens] == expected(3)[0]
        await backend.stop()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    messages = [r.getMessage() for r in caplog.records if r.name == "clawrl.sglang"]
    assert any("stand-in SGLang loading standin/model" in m for m in messages)
    assert not any(KEY in m for m in messages), "the API key must not reach the log"


async def test_readiness_timeout_names_the_last_log_lines() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A child that never answers /health_generate fails start() with its last lines.
    """
    code = "import time; print('Loading safetensors shards 1/2', flush=True); time.sleep(60)"
    server = SGLangServer(
        [sys.executable, "-c", code], base_url=f"http://127.0.0.1:{free_port()}",
        ready_timeout_s=1.0, poll_interval_s=0.1, stop_grace_s=2,
    )  # fmt: skip
    with pytest.raises(BackendError) as caught:
        await server.start()
    assert str(caught.value).startswith("SGLang did not become ready within 1 s; last log lines:")
    assert "Loading safetensors shards 1/2" in str(caught.value)
    assert server.pid is None


async def test_child_exit_aborts_the_wait_early() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A child that dies while loading fails start() at once, quoting its output.
    """
    code = (
        "import sys; print('torch.OutOfMemoryError: CUDA out of memory', flush=True); sys.exit(3)"
    )
    server = SGLangServer(
        [sys.executable, "-c", code], base_url=f"http://127.0.0.1:{free_port()}",
        ready_timeout_s=60, poll_interval_s=5,
    )  # fmt: skip
    began = time.monotonic()
    with pytest.raises(BackendError, match="exited with code 3 before it was ready") as caught:
        await server.start()
    assert "CUDA out of memory" in str(caught.value)
    assert time.monotonic() - began < 5


# -- generation -------------------------------------------------------------------------
async def test_generate_streams_tokens_one_by_one(
    standin: StandinThread, state: StandinState
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Each token arrives with its log-prob while the server is still generating; then Finished.
    """
    state.token_delay_s = 0.03
    async with started(standin) as backend:
        assert isinstance(backend, Backend)
        stream = backend.generate(request("r-stream", 8, temperature=0.7))
        first = await stream.__anext__()
        assert isinstance(first, TokenOut)
        assert state.produced["r-stream"] < 8, "the first token must not wait for the answer"
        tokens, finished = await collect(_prepend(first, stream))
    ids, logprobs, reason = expected(8)
    assert [t.token_id for t in tokens] == ids
    assert [t.logprob for t in tokens] == pytest.approx(logprobs)
    assert finished == Finished(
        reason=reason, policy_version="base", prompt_tokens=len(PROMPT), completion_tokens=len(ids)
    )


async def _prepend(
    first: GenerationEvent, rest: AsyncIterator[GenerationEvent]
) -> AsyncIterator[GenerationEvent]:
    yield first
    async for event in rest:
        yield event


async def test_cumulative_chunks_yield_each_token_once(
    standin: StandinThread, state: StandinState
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    SGLang's events are cumulative and may add several tokens at once: each token is yielded once.
    """
    state.tokens_per_chunk = 3
    async with started(standin) as backend:
        tokens, finished = await collect(backend.generate(request("r-cum", 10)))
    ids, logprobs, _ = expected(10)
    assert [t.token_id for t in tokens] == ids
    assert [t.logprob for t in tokens] == pytest.approx(logprobs)
    assert finished.completion_tokens == len(ids)


async def test_incremental_stream_is_refused(standin: StandinThread, state: StandinState) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A server started with --incremental-streaming-output is detected instead of misread.
    """
    state.incremental = True
    async with started(standin) as backend:
        with pytest.raises(BackendError, match="incremental-streaming-output"):
            await collect(backend.generate(request("r-inc", 6)))


async def test_payload_uses_sglang_names_only(standin: StandinThread, state: StandinState) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    /generate gets input_ids, SGLang's sampling names, rid, logprobs and stream; top-k alternatives come back.
    """
    async with started(standin) as backend:
        params = {
            "temperature": 0.6,
            "top_p": 0.9,
            "seed": 11,
            "top_logprobs": 2,
            "stop_token_ids": (999,),
        }
        tokens, _ = await collect(backend.generate(request("r-payload", 4, **params)))
    body = state.bodies("/generate")[-1]
    assert set(body) == {
        "input_ids",
        "sampling_params",
        "rid",
        "return_logprob",
        "stream",
        "top_logprobs_num",
    }
    assert body["input_ids"] == PROMPT
    assert body["rid"] == "r-payload"
    assert body["return_logprob"] is True and body["stream"] is True
    assert body["top_logprobs_num"] == 2
    sampling = body["sampling_params"]
    assert set(sampling) <= SAMPLING_KEYS
    assert sampling == {
        "max_new_tokens": 4, "temperature": 0.6, "top_p": 0.9,
        "stop_token_ids": [999, EOS], "sampling_seed": 11,
    }  # fmt: skip
    assert len(tokens[0].top_logprobs) == 2
    assert tokens[0].top_logprobs[0] == (tokens[0].token_id, pytest.approx(tokens[0].logprob))


async def test_stop_token_ends_the_answer_and_is_included(
    standin: StandinThread, state: StandinState
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A stop token id finishes with reason stop, and the stream includes that token.
    """
    ids, _, _ = expected(12)
    k = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i])
    async with started(standin) as backend:
        tokens, finished = await collect(
            backend.generate(request("r-stop", 12, stop_token_ids=(ids[k],)))
        )
    assert [t.token_id for t in tokens] == ids[: k + 1]
    assert finished.reason == "stop"


async def test_lora_path_follows_activate_and_is_absent_for_base(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Requests carry lora_path = the active adapter's name, and none for the base model.
    """
    async with started(standin) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        _, before = await collect(backend.generate(request("r-a")))
        await backend.activate("v1")
        tokens, after = await collect(backend.generate(request("r-b")))
        _, pinned = await collect(backend.generate(request("r-c", version="base")))
    first, second, third = state.bodies("/generate")
    assert "lora_path" not in first and "lora_path" not in third
    assert second["lora_path"] == "v1"
    assert (before.policy_version, after.policy_version, pinned.policy_version) == (
        "base",
        "v1",
        "base",
    )
    assert [t.token_id for t in tokens] == expected(6, adapter="v1")[0]
    assert state.bodies("/load_lora_adapter") == [
        {"lora_name": "v1", "lora_path": str(tmp_path / "v1")}
    ]


async def test_server_side_abort_finishes_with_abort(
    standin: StandinThread, state: StandinState
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    finish_reason {"type": "abort"} after some tokens becomes Finished(reason="abort").
    """
    state.token_delay_s = 0.03
    async with started(standin) as backend:
        stream = backend.generate(request("r-abort", 50))
        first = await stream.__anext__()
        state.aborted.append("r-abort")  # as if an admin aborted it
        tokens, finished = await collect(_prepend(first, stream))
    assert finished.reason == "abort"
    assert finished.completion_tokens == len(tokens) < 50


# -- scoring ----------------------------------------------------------------------------
async def test_score_returns_one_logprob_per_response_token(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    score() drops the leading null entry and returns len(response_ids) aligned log-probs.
    """
    async with started(standin) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        await backend.activate("v1")
        tokens, _ = await collect(backend.generate(request("r-gen", 7)))
        response = [t.token_id for t in tokens]
        on_policy = await backend.score(PROMPT, response, "v1")
        teacher = await backend.score(PROMPT, response)
        assert await backend.score(PROMPT, []) == []
    assert len(on_policy) == len(teacher) == len(response)
    assert on_policy == pytest.approx([t.logprob for t in tokens])
    context = PROMPT + response
    assert teacher == pytest.approx(
        [token_logprob(context[:p], context[p]) for p in range(len(PROMPT), len(context))]
    )
    scored_v1, scored_base = state.bodies("/generate")[1:]
    assert scored_v1["sampling_params"] == {"max_new_tokens": 0}
    assert scored_v1["logprob_start_len"] == len(PROMPT) - 1
    assert scored_v1["input_ids"] == PROMPT + response
    assert scored_v1["return_logprob"] is True and "stream" not in scored_v1
    assert scored_v1["lora_path"] == "v1" and "lora_path" not in scored_base


# -- versions ---------------------------------------------------------------------------
async def test_adapter_lifecycle_unload_waits_for_inflight(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    load -> activate -> load next -> activate next -> unload old waits for the old answer.
    """
    assert EOS not in expected(8, adapter="v1")[0]
    state.token_delay_s = 0.04
    async with started(standin) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        await backend.activate("v1")
        stream = backend.generate(request("r-old", 8))
        first = await stream.__anext__()
        await backend.load_adapter("v2", adapter_dir(tmp_path, "v2"))
        await backend.activate("v2")
        unload = asyncio.create_task(backend.unload_adapter("v1"))
        await asyncio.sleep(0.12)
        assert not unload.done() and state.bodies("/unload_lora_adapter") == []
        assert backend.inflight("v1") == 1
        with pytest.raises(UnknownVersion):
            backend.generate(request("r-late", version="v1"))
        tokens, finished = await collect(_prepend(first, stream))
        await asyncio.wait_for(unload, 5)
        assert finished.policy_version == "v1" and len(tokens) == 8
        assert state.bodies("/unload_lora_adapter") == [{"lora_name": "v1"}]
        assert set(state.adapters) == {"v2"}
        assert backend.info().versions == ["base", "v2"]
        _, fresh = await collect(backend.generate(request("r-new")))
        assert fresh.policy_version == "v2" and state.bodies("/generate")[-1]["lora_path"] == "v2"
        with pytest.raises(BackendError, match="activate another version"):
            await backend.unload_adapter("v2")
        with pytest.raises(UnknownVersion):
            await backend.activate("v1")


async def test_version_names_are_never_reused(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A name once loaded (or tried) is refused again; a failed load reports SGLang's message.
    """
    async with started(standin) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        await backend.unload_adapter("v1")
        with pytest.raises(BackendError, match="already used"):
            await backend.load_adapter("v1", adapter_dir(tmp_path, "v1-retrained"))
        with pytest.raises(BackendError, match="does not exist"):
            await backend.load_adapter("v2", tmp_path / "missing")
        with pytest.raises(BackendError, match="already used"):
            await backend.load_adapter("v2", adapter_dir(tmp_path, "v2"))
        with pytest.raises(BackendError, match="already used"):
            await backend.load_adapter("base", adapter_dir(tmp_path, "base"))
    assert len(state.bodies("/load_lora_adapter")) == 2


async def test_unload_timeout_is_a_warning(
    standin: StandinThread, state: StandinState, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    An unload SGLang does not confirm in time is logged as a warning, not raised.
    """
    state.unload_delay_s = 0.5
    async with started(standin, unload_timeout_s=0.15) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        with caplog.at_level(logging.WARNING, logger="clawrl.sglang"):
            await backend.unload_adapter("v1")
    assert any("did not confirm unloading v1" in r.getMessage() for r in caplog.records)
    while "v1" in state.adapters:  # let the stand-in finish before the next test resets it
        await asyncio.sleep(0.05)


async def test_unknown_versions_are_refused(standin: StandinThread, state: StandinState) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    activate/generate/score/unload of a version never loaded raise UnknownVersion.
    """
    async with started(standin) as backend:
        with pytest.raises(UnknownVersion):
            await backend.activate("v9")
        with pytest.raises(UnknownVersion):
            backend.generate(request("r-x", version="v9"))
        with pytest.raises(UnknownVersion):
            await backend.score(PROMPT, [1, 2], "v9")
        with pytest.raises(UnknownVersion):
            await backend.unload_adapter("v9")
    assert state.bodies("/generate") == []


# -- cancellation, auth, errors ----------------------------------------------------------
async def test_early_close_aborts_the_request(standin: StandinThread, state: StandinState) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Closing the iterator (or cancelling its reader) posts /abort_request with the rid.
    """
    state.token_delay_s = 0.03
    async with started(standin) as backend:
        stream = backend.generate(request("r-close", 50))
        await stream.__anext__()
        await stream.__anext__()
        await stream.aclose()  # type: ignore[attr-defined]
        assert state.bodies("/abort_request") == [{"rid": "r-close"}]
        assert backend.inflight("base") == 0

        async def read_all() -> None:
            async for _ in backend.generate(request("r-cancel", 50)):
                pass

        reader = asyncio.create_task(read_all())
        await asyncio.sleep(0.1)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        assert state.bodies("/abort_request")[-1] == {"rid": "r-cancel"}
        assert backend.inflight("base") == 0
        _, done = await collect(backend.generate(request("r-whole", 2)))
    assert done.reason in ("length", "stop")
    assert len(state.bodies("/abort_request")) == 2, "a finished answer needs no abort"


async def test_every_route_sends_the_api_key(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Authorization: Bearer <key> on every non-health route; a wrong key is a BackendError.
    """
    state.token_delay_s = 0.02
    async with started(standin) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        await collect(backend.generate(request("r-1", 2)))
        await backend.score(PROMPT, [5, 6])
        stream = backend.generate(request("r-2", 20))
        await stream.__anext__()
        await stream.aclose()  # type: ignore[attr-defined]
        await backend.unload_adapter("v1")
    routes = {route for route, _ in state.auth_headers}
    assert routes == {
        "/model_info",
        "/generate",
        "/load_lora_adapter",
        "/abort_request",
        "/unload_lora_adapter",
    }
    assert {header for _, header in state.auth_headers} == {f"Bearer {KEY}"}
    with pytest.raises(BackendError, match="401"):
        async with started(standin, api_key="wrong"):
            pass


async def test_503_becomes_backend_overloaded(standin: StandinThread, state: StandinState) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A 503 from SGLang (queue full) raises BackendOverloaded from generate and score.
    """
    async with started(standin) as backend:
        state.overloaded = True
        with pytest.raises(BackendOverloaded, match="503"):
            await collect(backend.generate(request("r-busy")))
        with pytest.raises(BackendOverloaded):
            await backend.score(PROMPT, [1, 2, 3])
        assert backend.inflight("base") == 0
        assert state.bodies("/abort_request") == []


async def test_error_event_in_stream_becomes_backend_error(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    SGLang reports request errors inside the stream as data: {"error": ...}; that raises BackendError.
    """
    async with started(standin) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        await backend.activate("v1")
        del state.adapters["v1"]  # SGLang lost it (e.g. restarted) behind our back
        with pytest.raises(BackendError, match="not loaded"):
            await collect(backend.generate(request("r-lost")))


async def test_standin_is_strict_like_sglang(standin: StandinThread, state: StandinState) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    The stand-in itself rejects OpenAI names in sampling_params, missing ids and missing keys.
    """
    auth = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=standin.base_url, timeout=5) as client:
        bad = {"input_ids": PROMPT, "sampling_params": {"max_tokens": 4}}
        reply = await client.post("/generate", json=bad, headers=auth)
        assert reply.status_code == 400 and "max_tokens" in reply.text
        reply = await client.post("/generate", json={"text": "hi"}, headers=auth)
        assert reply.status_code == 400
        reply = await client.post("/generate", json={"input_ids": PROMPT})
        assert reply.status_code == 401
        assert (await client.get("/health_generate")).status_code == 200
        plain = {
            "input_ids": PROMPT,
            "sampling_params": {"max_new_tokens": 3},
            "return_logprob": True,
        }
        reply = await client.post("/generate", json=plain, headers=auth)
        meta = reply.json()["meta_info"]
        assert meta["finish_reason"]["type"] in ("length", "stop")
        assert [e[1] for e in meta["output_token_logprobs"]] == reply.json()["output_ids"]


# -- full fine-tuning checkpoints ---------------------------------------------------------
async def test_full_checkpoint_is_remembered_then_swapped_in_at_activate(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    load_adapter only checks and remembers a full checkpoint; activate sends pause (retract)
    -> update_weights_from_disk -> continue, measures the stall, and later requests carry
    no lora_path; SGLang renames its model to the checkpoint path, our model_name stays.
    """
    ckpt = full_dir(tmp_path, "v1")
    state.update_delay_s = 0.05
    async with started(standin) as backend:
        await backend.load_adapter("v1", ckpt)
        with pytest.raises(BackendError, match="no \\*.safetensors"):
            await backend.load_adapter("v2", full_dir(tmp_path, "v2", weights=False))
        assert state.received == [], "loading a full checkpoint changes no weights"
        assert backend.info().versions == ["base", "v1"] and backend.active_version == "base"
        with pytest.raises(UnknownVersion, match="activate it first"):
            await backend.score(PROMPT, [5, 6], "v1")
        with pytest.raises(UnknownVersion, match="activate it first"):
            backend.generate(request("r-early", version="v1"))

        await backend.activate("v1")
        assert weight_calls(state) == swap_calls(str(ckpt), "v1")
        assert backend.active_version == "v1" and not state.paused
        assert backend.last_weight_update_s is not None
        assert 0.05 <= backend.last_weight_update_s < 5
        assert backend.status() == {
            "active_version": "v1", "served_weights": "v1", "weight_updates": 1,
            "last_weight_update_s": backend.last_weight_update_s,
            "last_weight_update_error": None, "retracted_requests": 0,
        }  # fmt: skip

        tokens, finished = await collect(backend.generate(request("r-full")))
        ids, logprobs, _ = expected(6, weights=str(ckpt))
        assert [t.token_id for t in tokens] == ids and ids != expected(6)[0]
        assert finished.policy_version == "v1"
        assert await backend.score(PROMPT, ids, "v1") == pytest.approx(logprobs)
        generated, scored = state.bodies("/generate")
        assert "lora_path" not in generated and "lora_path" not in scored

        info = (await backend._http().get("/model_info")).json()
        assert (info["model_path"], info["weight_version"]) == (str(ckpt), "v1")
        assert backend.info().model_name == "clawrl"
    routes = {route for route, _ in state.auth_headers}
    assert set(WEIGHT_ROUTES) <= routes
    assert {header for _, header in state.auth_headers} == {f"Bearer {KEY}"}


async def test_failed_update_still_continues_and_raises(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    An update SGLang answers with success false raises BackendError naming the route and
    SGLang's message, continue_generation is still sent, and the old weights keep serving.
    """
    ckpt = full_dir(tmp_path, "v1")
    state.update_failure = "Failed to update weights: shape mismatch in lm_head"
    async with started(standin) as backend:
        await backend.load_adapter("v1", ckpt)
        with pytest.raises(BackendError, match="/update_weights_from_disk.*shape mismatch"):
            await backend.activate("v1")
        assert weight_calls(state) == swap_calls(str(ckpt), "v1")
        assert not state.paused, "continue_generation must follow a failed update"
        assert backend.active_version == "base"
        status = backend.status()
        assert status["served_weights"] == "base" and status["weight_updates"] == 0
        assert "shape mismatch" in status["last_weight_update_error"]
        assert status["last_weight_update_s"] is not None
        tokens, finished = await collect(backend.generate(request("r-after")))
        assert [t.token_id for t in tokens] == expected(6)[0]
        assert finished.policy_version == "base"
        assert "lora_path" not in state.bodies("/generate")[-1]


async def test_update_timeout_leaves_weights_unknown_until_reactivated(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    An update that outlives its client timeout still gets continue_generation; the served
    weights are then unknown, so requests are refused until a version is activated again.
    """
    ckpt = full_dir(tmp_path, "v1")
    state.update_delay_s = 0.15
    async with started(standin, weight_update_timeout_s=0.05) as backend:
        await backend.load_adapter("v1", ckpt)
        with pytest.raises(BackendError, match="/update_weights_from_disk timed out"):
            await backend.activate("v1")
        assert [route for route, _ in weight_calls(state)] == list(WEIGHT_ROUTES)
        assert not state.paused and backend.status()["served_weights"] is None
        with pytest.raises(BackendError, match="unknown"):
            backend.generate(request("r-unknown"))
        with pytest.raises(BackendError, match="unknown"):
            await backend.score(PROMPT, [5, 6])
        while state.weights is None:  # SGLang finishes the update on its own
            await asyncio.sleep(0.02)
        state.update_delay_s = 0.0
        await backend.activate("base")  # reloads the launch weights: known again
        assert weight_calls(state)[-2:] == swap_calls("standin/model", "base")[1:]
        assert state.weights is None and backend.active_version == "base"
        tokens, _ = await collect(backend.generate(request("r-known")))
        assert [t.token_id for t in tokens] == expected(6)[0]


async def test_inflight_answer_is_retracted_and_finishes_on_the_new_weights(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    SGLang's retract mode re-queues running requests: an answer in flight at the pause
    finishes on the new weights under the version it was admitted with (documented), and
    a request that arrives during the swap waits and runs entirely on the new version.
    """
    ckpt = full_dir(tmp_path, "v1")
    state.token_delay_s = 0.02
    state.update_delay_s = 0.06
    async with started(standin) as backend:
        await backend.load_adapter("v1", ckpt)
        stream = backend.generate(request("r-old", 16))
        first = await stream.__anext__()
        swap = asyncio.create_task(backend.activate("v1"))
        while not state.paused:
            await asyncio.sleep(0.005)
        late = backend.generate(request("r-late", 4))  # admitted once the swap is over
        tokens, finished = await collect(_prepend(first, stream))
        await asyncio.wait_for(swap, 5)
        late_tokens, late_finished = await collect(late)
        assert backend.status()["retracted_requests"] == 1
    ids = [t.token_id for t in tokens]
    switch = next(i for i in range(len(ids)) if ids[i] != next_token(PROMPT + ids[:i]))
    assert 1 <= switch < len(ids)
    assert ids[switch:] == [
        next_token(PROMPT + ids[:i], weights=str(ckpt)) for i in range(switch, len(ids))
    ]
    assert finished.policy_version == "base" and finished.reason != "abort"
    assert [t.token_id for t in late_tokens] == expected(4, weights=str(ckpt))[0]
    assert late_finished.policy_version == "v1"
    assert "lora_path" not in state.bodies("/generate")[-1]


async def test_base_teacher_is_refused_while_full_weights_are_served(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A full update replaces the base weights: score(version=None) raises a BackendError
    that points at judge.teacher = "policy"; activate("base") reloads the launch weights
    the same way, after which the base teacher scores again.
    """
    response = expected(5)[0]
    async with started(standin) as backend:
        await backend.load_adapter("v1", full_dir(tmp_path, "v1"))
        await backend.activate("v1")
        with pytest.raises(BackendError, match='judge.teacher = "policy"'):
            await backend.score(PROMPT, response)
        with pytest.raises(UnknownVersion, match="base weights are not served"):
            backend.generate(request("r-base", version="base"))
        assert state.bodies("/generate") == []
        await backend.activate("base")
        assert weight_calls(state)[3:] == swap_calls("standin/model", "base")
        assert backend.status()["served_weights"] == "base"
        teacher = await backend.score(PROMPT, response)
    assert teacher == pytest.approx(expected(5)[1])


async def test_lora_adapters_follow_the_served_full_weights(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    An adapter applies to the weights served when it is loaded: one loaded after a full
    update runs over the new checkpoint; one loaded before is refused (its requests
    would change meaning) but can be unloaded; a full version not active is only
    forgotten by unload_adapter.
    """
    ckpt = full_dir(tmp_path, "v2")
    lora = adapter_dir(tmp_path, "a3")
    (lora / "adapter_config.json").write_text("{}")
    (lora / "config.json").write_text("{}")  # adapter_config.json decides: still a LoRA
    async with started(standin) as backend:
        await backend.load_adapter("a1", adapter_dir(tmp_path, "a1"))
        await backend.load_adapter("v2", ckpt)
        await backend.activate("v2")
        with pytest.raises(UnknownVersion, match="other weights"):
            backend.generate(request("r-a1", version="a1"))
        with pytest.raises(UnknownVersion):
            await backend.activate("a1")
        assert backend.info().versions == ["base", "v2"]

        await backend.load_adapter("a3", lora)
        await backend.activate("a3")
        tokens, finished = await collect(backend.generate(request("r-a3")))
        assert [t.token_id for t in tokens] == expected(6, adapter="a3", weights=str(ckpt))[0]
        assert finished.policy_version == "a3"
        assert state.bodies("/generate")[-1]["lora_path"] == "a3"

        await backend.unload_adapter("a1")
        await backend.unload_adapter("v2")
        assert state.bodies("/unload_lora_adapter") == [{"lora_name": "a1"}]
        assert len(state.bodies("/update_weights_from_disk")) == 1
        assert backend.info().versions == ["base", "a3"]
        with pytest.raises(UnknownVersion):
            await backend.activate("v2")
        with pytest.raises(BackendError, match="activate another version"):
            await backend.unload_adapter("a3")
        _, again = await collect(backend.generate(request("r-a3-again")))
        assert again.policy_version == "a3"
    assert [b["lora_name"] for b in state.bodies("/load_lora_adapter")] == ["a1", "a3"]


async def test_standin_pause_and_update_routes_are_strict_like_sglang(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Unknown keys and bad modes are a 400; pause and continue answer status ok without a
    success field; while paused /health is 503, /ping 200 and /generate waits.
    """
    auth = {"Authorization": f"Bearer {KEY}"}
    plain = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}}
    async with httpx.AsyncClient(base_url=standin.base_url, headers=auth, timeout=5) as client:
        for route, body in [
            ("/pause_generation", {"mode": "retract", "flush": True}),
            ("/pause_generation", {"mode": "later"}),
            ("/update_weights_from_disk", {"weight_version": "v1"}),
            ("/update_weights_from_disk", {"model_path": str(tmp_path), "reload": True}),
            ("/continue_generation", {"now": True}),
        ]:
            assert (await client.post(route, json=body)).status_code == 400, (route, body)
        assert not state.paused
        reply = await client.post("/pause_generation", json={"mode": "retract"})
        assert reply.json() == {"message": "Generation paused successfully.", "status": "ok"}
        assert (await client.get("/health_generate")).status_code == 503
        assert (await client.get("/ping")).status_code == 200
        waiting = asyncio.create_task(client.post("/generate", json=plain))
        await asyncio.sleep(0.05)
        assert not waiting.done(), "/generate waits while generation is paused"
        reply = await client.post("/update_weights_from_disk", json={"model_path": "/nope"})
        assert reply.status_code == 400 and reply.json()["success"] is False
        reply = await client.post("/continue_generation", json={})
        assert reply.json() == {"message": "Generation continued successfully.", "status": "ok"}
        assert (await asyncio.wait_for(waiting, 5)).status_code == 200
        assert (await client.get("/health_generate")).status_code == 200
