"""SGLang generation, scoring, adapters, aborts, auth and errors.

Contract tests: SGLang needs a GPU, so these run against a stand-in that implements SGLang
0.5.23's routes and payloads (tests/sglang_standin.py).
"""

# ruff: noqa: F403, F405
from __future__ import annotations

import json

from tests.sglang_helpers import *


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
        tokens, finished = await collect(prepend(first, stream))
    ids, logprobs, reason = expected(8)
    assert [t.token_id for t in tokens] == ids
    assert [t.logprob for t in tokens] == pytest.approx(logprobs)
    assert finished == Finished(
        reason=reason, policy_version="base", prompt_tokens=len(PROMPT), completion_tokens=len(ids)
    )


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
    state.deterministic = True  # launched with --enable-deterministic-inference
    async with started(standin, seeded=True) as backend:
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


async def test_a_seed_is_sent_only_where_sglang_uses_it(
    standin: StandinThread, state: StandinState
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Without --enable-deterministic-inference SGLang ignores `sampling_seed`: the backend then
    sends none and says so in its info (the endpoint tells the client: X-Clawrl-Seed)."""
    async with started(standin) as backend:
        assert backend.info().seeded is False
        await collect(backend.generate(request("r-seed", 3, temperature=0.7, seed=5)))
    assert "sampling_seed" not in state.bodies("/generate")[-1]["sampling_params"]
    assert state.ignored_seeds == []  # nothing was sent to be ignored
    state.deterministic = True
    async with started(standin, seeded=True) as backend:
        assert backend.info().seeded is True
        await collect(backend.generate(request("r-seed2", 3, temperature=0.7, seed=5)))
    assert state.bodies("/generate")[-1]["sampling_params"]["sampling_seed"] == 5
    assert state.ignored_seeds == []


async def test_a_forced_tool_call_sends_its_json_schema(
    standin: StandinThread, state: StandinState
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A constrained answer (a forced tool call) carries its schema as SGLang's documented
    `sampling_params.json_schema`: the schema as JSON text, exactly as the endpoint built
    it. Only a GPU run can show SGLang's grammar backend enforcing it."""
    schema = json.dumps(
        {
            "type": "object",
            "properties": {"name": {"const": "f"}, "arguments": {"type": "object"}},
            "required": ["name", "arguments"],
        }
    )
    async with started(standin) as backend:
        await collect(backend.generate(request("r-schema", 4, json_schema=schema)))
        await collect(backend.generate(request("r-free", 4)))
    constrained, free = state.bodies("/generate")[-2:]
    assert constrained["sampling_params"]["json_schema"] == schema
    assert json.loads(constrained["sampling_params"]["json_schema"])["required"] == [
        "name",
        "arguments",
    ]
    assert "json_schema" not in free["sampling_params"]


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
        tokens, finished = await collect(prepend(first, stream))
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
        tokens, finished = await collect(prepend(first, stream))
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


async def test_a_loop_is_cut_off_as_length_and_aborted_on_the_server(
    standin: StandinThread, state: StandinState
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    With `stop_on_repetition` (server.stop_repetition) a looping answer ends as `length` once
    the loop is certain, as on the torch backend, and SGLang is told to drop the request;
    without it the loop runs to max_new_tokens."""
    from clawrl_app.engine.chat.repetition import MIN_SPAN

    state.loop_period = 5
    async with started(standin) as backend:
        tokens, finished = await collect(
            backend.generate(request("r-loop", 400, stop_on_repetition=True))
        )
        assert finished.reason == "length" and finished.completion_tokens == len(tokens)
        assert MIN_SPAN <= len(tokens) < MIN_SPAN + 10
        assert "r-loop" in state.aborted
        tokens, finished = await collect(backend.generate(request("r-free", 120)))
    assert finished.reason == "length" and len(tokens) == 120
    assert "r-free" not in state.aborted


async def test_an_adapter_sglang_evicted_reloads_on_use_and_unloads_cleanly(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Past --max-loaded-loras SGLang evicts the least recently used adapter without telling
    anyone; a request naming it reloads it from its folder; an unload of an evicted adapter
    answers "not loaded". The app counts it and goes on (nothing is left loaded); and the
    limit it launches with covers every adapter it holds at once, so this stays rare.
    """
    from clawrl_app.engine.backends.sglang.factory import ADAPTERS_HELD, MAX_LOADED_LORAS

    assert MAX_LOADED_LORAS == sum(ADAPTERS_HELD.values()) >= 5  # served, draining, ...
    state.max_loaded_loras = 2
    async with started(standin) as backend:
        for v in ("v1", "v2"):
            await backend.load_adapter(v, adapter_dir(tmp_path, v))
        await collect(backend.generate(request("r1", version="v1")))  # v1 used: v2 is LRU
        await backend.load_adapter("v3", adapter_dir(tmp_path, "v3"))
        assert state.evictions == ["v2"] and set(state.adapters) == {"v1", "v3"}
        tokens, done = await collect(backend.generate(request("r2", version="v2")))
        assert state.reloads == ["v2"] and done.policy_version == "v2"  # reloaded from disk
        assert [t.token_id for t in tokens] == expected(6, adapter="v2")[0]
        assert state.evictions == ["v2", "v1"]  # ... which evicted v1 in turn
        await backend.unload_adapter("v1")  # gone already: counted, not an error
        assert backend.adapters_evicted == 1 and "v1" not in backend.info().versions
        await backend.unload_adapter("v3")  # a loaded one unloads as before
        assert backend.adapters_evicted == 1 and set(state.adapters) == {"v2"}


async def test_a_load_never_waits_behind_a_draining_unload(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    SGLang loads and unloads under one lock, and an unload holds it while its adapter's
    requests finish. The app waits for those requests itself before it sends the unload, so
    the next publish's load goes through while the old version still answers.
    """
    assert EOS not in expected(60, adapter="v1")[0]
    state.token_delay_s = 0.05
    async with started(standin) as backend:
        await backend.load_adapter("v1", adapter_dir(tmp_path, "v1"))
        await backend.activate("v1")
        stream = backend.generate(request("r-long", 60))  # ~3 s of answer
        first = await stream.__anext__()
        await backend.load_adapter("v2", adapter_dir(tmp_path, "v2"))
        await backend.activate("v2")
        unload = asyncio.create_task(backend.unload_adapter("v1"))
        await asyncio.sleep(0.05)
        await backend.load_adapter("v3", adapter_dir(tmp_path, "v3"))  # the next publish
        # loaded while v1 still answers: it did not wait behind the drain
        assert not unload.done() and backend.inflight("v1") == 1
        assert state.bodies("/unload_lora_adapter") == []
        tokens, _ = await collect(prepend(first, stream))
        await asyncio.wait_for(unload, 10)
        assert len(tokens) == 60 and set(state.adapters) == {"v2", "v3"}
