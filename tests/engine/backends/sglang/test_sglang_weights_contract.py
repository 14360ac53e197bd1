"""SGLang full-weight publishing: pause, update from disk, continue.

Contract tests: SGLang needs a GPU, so these run against a stand-in that implements SGLang
0.5.23's routes and payloads (tests/sglang_standin.py).
"""

# ruff: noqa: F403, F405
from __future__ import annotations

from tests.sglang_helpers import *


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


async def test_an_update_that_swapped_but_failed_to_flush_labels_the_new_weights(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    SGLang 0.5.23 can load the new weights and still answer the update with a failure (its
    cache flush failed). The backend reads the served weight_version back: it is the new
    version, so answers are labelled with it (not with the old one, which no longer
    serves), and the reported failure is kept in the status.
    """
    ckpt = full_dir(tmp_path, "v1")
    state.flush_failure = "Cache not flushed: requests still running"
    async with started(standin) as backend:
        await backend.load_adapter("v1", ckpt)
        await backend.activate("v1")
        assert state.weights == str(ckpt) and state.weight_version == "v1"
        status = backend.status()
        assert backend.active_version == "v1" and status["served_weights"] == "v1"
        assert status["weight_updates"] == 1
        assert "Cache not flushed" in status["last_weight_update_error"]
        assert not state.paused
        tokens, finished = await collect(backend.generate(request("r-new")))
        assert [t.token_id for t in tokens] == expected(6, weights=str(ckpt))[0]
        assert finished.policy_version == "v1"


async def test_a_failed_update_whose_outcome_cannot_be_read_leaves_weights_unknown(
    standin: StandinThread, state: StandinState, tmp_path: Path
) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A failed update after which /model_info cannot be read: nothing is labelled as served
    (requests are refused as "unknown") until a version is activated again.
    """
    ckpt = full_dir(tmp_path, "v1")
    state.flush_failure = "Cache not flushed"
    async with started(standin) as backend:
        await backend.load_adapter("v1", ckpt)
        state.model_info_fails = True
        with pytest.raises(BackendError, match="Cache not flushed"):
            await backend.activate("v1")
        assert backend.status()["served_weights"] is None and not state.paused
        with pytest.raises(BackendError, match="unknown"):
            backend.generate(request("r-unknown"))
        state.model_info_fails, state.flush_failure = False, None
        await backend.activate("v1")
        assert backend.status()["served_weights"] == "v1"


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
        tokens, finished = await collect(prepend(first, stream))
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
