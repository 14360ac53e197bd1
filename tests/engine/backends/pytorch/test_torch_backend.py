"""The embedded torch backend: continuous batching, log-probs, scoring and adapter swaps."""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.backends.base import (
    BackendError,
    Finished,
    GenerationRequest,
    SamplingParams,
    TokenOut,
)
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.chat.formatter import ChatFormatter, eos_token_ids

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_copy(loaded_model: tuple[Any, Any]) -> tuple[Any, Any]:
    """A private copy: loading adapters wraps the model in place."""
    model, tok = loaded_model
    return copy.deepcopy(model), tok


@pytest.fixture(scope="module")
def adapter_dir(loaded_model: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter with random (non-zero) weights, saved in PEFT format."""
    from peft import LoraConfig, get_peft_model

    model, _ = loaded_model
    torch.manual_seed(0)
    cfg = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    out = tmp_path_factory.mktemp("adapter")
    peft_model.save_pretrained(str(out))
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def collect(
    backend: TorchBackend, ids: list[int], n: int, **kw: Any
) -> tuple[list[TokenOut], Finished]:
    toks: list[TokenOut] = []
    async for ev in backend.generate(
        GenerationRequest("t", ids, SamplingParams(n, temperature=0.0), **kw)
    ):
        if isinstance(ev, TokenOut):
            toks.append(ev)
        else:
            return toks, ev
    raise AssertionError("stream ended without Finished")


def prompts(tok: Any) -> list[list[int]]:
    fmt = ChatFormatter(tok)
    qs = [
        "What is 2+2?",
        "Write a long poem about the mountains and the sea.",
        "Hi",
        "Name three colors.",
    ]
    return [fmt.render([{"role": "user", "content": q}]) for q in qs]


def test_batched_greedy_equals_solo_and_late_joiners(model_copy: tuple[Any, Any]) -> None:
    model, tok = model_copy
    ps = prompts(tok)

    async def go() -> tuple[list[list[int]], list[list[int]]]:
        be = TorchBackend(model, tok, model_name="m", context_length=8192, max_batch=8)
        await be.start()
        solo = [[t.token_id for t in (await collect(be, p, 12))[0]] for p in ps]

        async def late(p: list[int], delay: float) -> list[int]:
            await asyncio.sleep(delay)  # joins a batch that is already decoding
            return [t.token_id for t in (await collect(be, p, 12))[0]]

        batched = await asyncio.gather(*[late(p, 0.3 * i) for i, p in enumerate(ps)])
        await be.stop()
        return solo, list(batched)

    solo, batched = run(go())
    assert batched == solo


def test_score_reproduces_behaviour_logprobs(model_copy: tuple[Any, Any]) -> None:
    model, tok = model_copy
    p = prompts(tok)[0]

    async def go() -> tuple[list[TokenOut], list[float]]:
        be = TorchBackend(model, tok, model_name="m", context_length=8192)
        await be.start()
        toks, _ = await collect(be, p, 10)
        scored = await be.score(p, [t.token_id for t in toks])
        await be.stop()
        return toks, scored

    toks, scored = run(go())
    assert scored == pytest.approx([t.logprob for t in toks], abs=1e-4)


def test_finish_reasons_and_eos_included(model_copy: tuple[Any, Any]) -> None:
    model, tok = model_copy
    p = prompts(tok)[2]

    async def go() -> tuple[Any, Any]:
        be = TorchBackend(model, tok, model_name="m", context_length=8192)
        await be.start()
        short = await collect(be, p, 2)
        full = await collect(be, p, 200)
        await be.stop()
        return short, full

    (short_toks, short_fin), (full_toks, full_fin) = run(go())
    assert short_fin.reason == "length" and len(short_toks) == 2
    assert full_fin.reason == "stop" and full_toks[-1].token_id in eos_token_ids(tok)
    assert full_fin.completion_tokens == len(full_toks) and full_fin.policy_version == "base"


def test_adapter_publish_swaps_without_dropping_inflight(
    model_copy: tuple[Any, Any], adapter_dir: Path
) -> None:
    model, tok = model_copy
    ps = prompts(tok)

    async def go() -> dict[str, Any]:
        be = TorchBackend(model, tok, model_name="m", context_length=8192)
        await be.start()
        base_toks, _ = await collect(be, ps[0], 8)
        # a long answer on base is in flight while v1 is loaded and activated
        long_task = asyncio.create_task(collect(be, ps[1], 40))
        await asyncio.sleep(0.5)
        await be.load_adapter("v1", adapter_dir)
        await be.activate("v1")
        new_toks, new_fin = await collect(be, ps[0], 8)
        long_toks, long_fin = await long_task
        base_score = await be.score(ps[0], [t.token_id for t in new_toks])  # adapter off
        v1_score = await be.score(ps[0], [t.token_id for t in new_toks], version="v1")
        with pytest.raises(BackendError):
            await be.load_adapter("v1", adapter_dir)  # never reuse a version name
        with pytest.raises(BackendError):
            await be.unload_adapter("v1")  # it is being served
        await be.activate("base")
        await be.unload_adapter("v1")
        after, after_fin = await collect(be, ps[0], 8)
        await be.stop()
        return dict(
            base=base_toks,
            new=new_toks,
            new_fin=new_fin,
            long_fin=long_fin,
            long=long_toks,
            base_score=base_score,
            v1_score=v1_score,
            after=after,
            after_fin=after_fin,
            versions=be.info().versions,
        )

    r = run(go())
    assert r["long_fin"].policy_version == "base" and len(r["long"]) > 0
    assert r["new_fin"].policy_version == "v1"
    assert [t.logprob for t in r["new"]] == pytest.approx(r["v1_score"], abs=1e-4)
    assert r["base_score"] != pytest.approx(r["v1_score"], abs=1e-3), (
        "the adapter changes the policy"
    )
    assert r["after_fin"].policy_version == "base"
    assert [t.token_id for t in r["after"]] == [t.token_id for t in r["base"]]
    assert r["versions"] == ["base"]


def test_background_scoring_is_not_starved_by_continuous_user_traffic(
    model_copy: tuple[Any, Any],
) -> None:
    """Teacher/canary scoring keeps making progress while users chat without pause."""
    model, tok = model_copy
    ps = prompts(tok)

    async def go() -> tuple[float, bool]:
        be = TorchBackend(model, tok, model_name="m", context_length=8192)
        await be.start()
        stop = asyncio.Event()

        async def user() -> None:
            while not stop.is_set():  # back-to-back answers: a user batch is always decoding
                await collect(be, ps[1], 40)

        traffic = [asyncio.create_task(user()) for _ in range(2)]
        await asyncio.sleep(1.0)
        t0 = time.monotonic()
        await be.score(ps[0], ps[2][:20])
        waited = time.monotonic() - t0
        still_busy = not all(t.done() for t in traffic)
        stop.set()
        await asyncio.gather(*traffic)
        await be.stop()
        return waited, still_busy

    waited, still_busy = run(go())
    assert still_busy, "the traffic must still be running when the score returns"
    assert waited < 10.0


def test_urgent_canary_scoring_runs_before_queued_judge_work(
    model_copy: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publishing's canary check (urgent) runs at the next loop round under user traffic;
    judge scoring waits for its background slot (made very rare here)."""
    import clawrl_app.engine.backends.worker_backend as tb

    monkeypatch.setattr(tb, "BACKGROUND_EVERY_S", 3600.0)
    model, tok = model_copy
    ps = prompts(tok)

    async def go() -> tuple[bool, bool, bool]:
        be = TorchBackend(model, tok, model_name="m", context_length=8192)
        await be.start()
        stop = asyncio.Event()

        async def user(k: int) -> None:
            # different prompts and lengths: the users never finish in the same step, so
            # a user batch is decoding at every moment (no gap for the judge lane)
            while not stop.is_set():
                await collect(be, ps[1 + k], 30 + 11 * k)

        traffic = [asyncio.create_task(user(k)) for k in range(3)]
        await asyncio.sleep(1.0)
        judge = asyncio.create_task(be.score(ps[0], ps[2][:20]))
        await be.score(ps[0], ps[2][:20], urgent=True)
        urgent_first = not judge.done()
        still_busy = not all(t.done() for t in traffic)
        stop.set()
        await asyncio.gather(*traffic)
        scores = await judge  # runs once the traffic stops
        await be.stop()
        return urgent_first, still_busy, len(scores) == 20

    urgent_first, still_busy, judged = run(go())
    assert still_busy and urgent_first and judged
