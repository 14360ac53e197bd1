"""Device discipline of the serving path, checked on a CPU (the GPU-only bug class).

On a GPU workstation the first chat request failed: `_prefill` built its input ids on the
CPU while the model sat on `cuda:0`. Here the backend's worker thread runs under
`DeviceGuard` (tests/device_guard.py), which fails any tensor or generator that our code
creates without naming the model's device: the same mistakes, caught without a GPU.
Covered: prefill, batched decode (incl. rows joining and leaving), seeded sampling,
scoring, top-k scoring, a LoRA version through peft and as merged weights, a forced
tool call (constrained decoding: the grammar mask is built on the logits' device), and the
prefix KV cache (a row's KV stored, then reused by a prompt that repeats it).
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.backends.base import Finished, GenerationRequest, SamplingParams, TokenOut
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.backends.pytorch.lora_merge import merged_copy
from clawrl_app.engine.backends.sampling import continuation_logprobs, sample_next
from clawrl_app.engine.chat.formatter import TOOL_CLOSE, ChatFormatter, parse_answer
from clawrl_app.engine.chat.tool_constraint import forced_call_schema
from tests.device_guard import DeviceGuard, device_guard, guarded_worker

pytestmark = pytest.mark.slow
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]


class GuardedBackend(TorchBackend):
    """The real backend, its worker thread running under a DeviceGuard."""

    def __init__(self, model: Any, *args: Any, **kw: Any) -> None:
        super().__init__(model, *args, **kw)
        self.guard = DeviceGuard(next(model.parameters()).device, raise_now=False)

    async def start(self) -> None:
        self._thread = threading.Thread(
            target=guarded_worker(self._run, self.guard), name="guarded-backend", daemon=True
        )
        self._thread.start()


@pytest.fixture(scope="module")
def adapter_dir(loaded_model: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain LoRA adapter with non-zero B on all linear layers (mergeable)."""
    from peft import LoraConfig, get_peft_model

    model, _ = loaded_model
    peft_model = get_peft_model(
        copy.deepcopy(model), LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS)
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    out = tmp_path_factory.mktemp("adapter") / "v1"
    peft_model.save_pretrained(str(out))
    return out


async def answer(be: TorchBackend, ids: list[int], n: int, **params: Any) -> list[TokenOut]:
    version = params.pop("version", None)
    toks: list[TokenOut] = []
    req = GenerationRequest("t", ids, SamplingParams(n, **params), version=version)
    async for ev in be.generate(req):
        if isinstance(ev, TokenOut):
            toks.append(ev)
        else:
            assert isinstance(ev, Finished)
    return toks


async def stored(be: TorchBackend, n: int) -> None:
    for _ in range(600):
        if be.prefix_cache_stats()["stored"] >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{n} prefix cache entries were never stored")


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "peft"])
def test_serving_path_creates_every_tensor_on_the_models_device(
    loaded_model: tuple[Any, Any], adapter_dir: Path, merge: bool
) -> None:
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    ps = [fmt.render([{"role": "user", "content": q}]) for q in ("Hi", "Name two seas.")]
    forced = fmt.render([{"role": "user", "content": "Weather in Oslo?"}], TOOLS, "required")
    schema = json.dumps(forced_call_schema(TOOLS, "required"))

    async def go() -> dict[str, Any]:
        be = GuardedBackend(
            copy.deepcopy(model), tok, model_name="m", context_length=8192, merge_lora=merge
        )
        await be.start()
        try:
            greedy, sampled_a, sampled_b, call = await asyncio.gather(
                answer(be, ps[0], 6, temperature=0.0),
                answer(be, ps[1], 9, temperature=1.0, seed=7, top_p=0.9, top_logprobs=2),
                answer(be, ps[1], 4, temperature=1.0, seed=7, top_p=0.9),
                answer(be, forced, 40, temperature=1.0, seed=5, top_logprobs=3, json_schema=schema),
            )
            scored = await be.score(ps[0], [t.token_id for t in greedy])
            top_ids, _ = await be.score_topk(ps[0], [t.token_id for t in greedy], 3)
            await be.load_adapter("v1", adapter_dir)
            pinned = await answer(be, ps[0], 5, temperature=0.0, version="v1")
            pinned_scores = await be.score(ps[0], [t.token_id for t in pinned], "v1")
            return dict(
                greedy=greedy,
                a=sampled_a,
                b=sampled_b,
                call=call,
                scored=scored,
                top=top_ids,
                pinned=pinned,
                pinned_scores=pinned_scores,
                merged="v1" in be._full,
                health=getattr(be, "health", lambda: None)(),
                violations=be.guard.violations,
            )
        finally:
            await be.stop()

    r = asyncio.run(go())
    assert r["violations"] == [], "\n".join(r["violations"])
    assert r["merged"] is merge
    assert len(r["greedy"]) == 6 and len(r["a"]) == 9 and len(r["pinned"]) == 5
    # same seed, same device: the shorter answer is a prefix of the longer one
    assert [t.token_id for t in r["b"]] == [t.token_id for t in r["a"]][:4]
    assert r["scored"] == pytest.approx([t.logprob for t in r["greedy"]], abs=1e-4)
    assert r["pinned_scores"] == pytest.approx([t.logprob for t in r["pinned"]], abs=1e-4)
    assert [row[0] for row in r["top"]] == [t.token_id for t in r["greedy"]]
    assert r["health"] is None
    # the forced call: complete JSON, then EOS, alternatives only among allowed tokens
    text = fmt.decode([t.token_id for t in r["call"]])
    (parsed,) = parse_answer(f"<tool_call>{text}{TOOL_CLOSE}", True).tool_calls
    assert parsed["function"]["name"] == "get_weather"
    assert all(lp > float("-inf") for t in r["call"] for _, lp in t.top_logprobs)


def test_prefix_cache_reuse_creates_every_tensor_on_the_models_device(
    loaded_model: tuple[Any, Any],
) -> None:
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    history = [{"role": "user", "content": "Name two seas and say why they are salty."}]
    first = fmt.render(history)

    async def go() -> dict[str, Any]:
        be = GuardedBackend(
            model, tok, model_name="m", context_length=8192, prefix_cache_bytes=2**26,
            prefix_min_tokens=8,
        )  # fmt: skip
        await be.start()
        try:
            answer1 = await answer(be, first, 6, temperature=0.0)
            text = fmt.decode([t.token_id for t in answer1])
            history2 = [*history, {"role": "assistant", "content": text}]
            second = fmt.render([*history2, {"role": "user", "content": "And a third?"}])
            await stored(be, 1)  # each answer's KV is stored just after it finished
            answer2 = await answer(be, second, 6, temperature=1.0, seed=3)
            await stored(be, 2)
            kv = [t for e in be._prefix._entries.values() for layer in e.layers for t in layer]
            return dict(
                a2=answer2, stats=be.prefix_cache_stats(), violations=be.guard.violations, stored=kv
            )
        finally:
            await be.stop()

    r = asyncio.run(go())
    assert r["violations"] == [], "\n".join(r["violations"])
    assert r["stats"]["hits"] == 1 and r["stats"]["failures"] == 0 and 1 <= len(r["a2"]) <= 6
    # the stored copies live where the model's KV does, in its dtype
    assert {(t.device, t.dtype) for t in r["stored"]} == {(model.device, model.dtype)}


def test_merging_an_adapter_creates_nothing_off_the_models_device(
    loaded_model: tuple[Any, Any], adapter_dir: Path
) -> None:
    model, _ = loaded_model
    with device_guard(model.device) as guard:
        merged = merged_copy(model, adapter_dir)
    assert merged is not None and guard.violations == []
    assert {p.device for p in merged.parameters()} == {model.device}


def test_the_guard_catches_what_a_gpu_would() -> None:
    """The checks themselves: the three mistakes seen on the H100, in the shape our code
    had them, each refused on a CPU-only machine."""
    logits_TV = torch.randn(3, 10, device="cpu")
    with device_guard("cpu") as guard:
        guard.raise_now = False
        continuation_logprobs(logits_TV, [1, 2, 3])  # fixed: index on the logits' device
        assert guard.violations == []
    # our own code without a device, as _prefill had it: flagged
    import clawrl_app.engine.backends.sampling as sampling

    with device_guard("cpu") as guard:
        guard.raise_now = False
        exec(  # noqa: S102 - compiled as if it were a line of the package
            compile("torch.tensor([[1, 2]], dtype=torch.long)", sampling.__file__, "exec"),
            {"torch": torch},
        )
        exec(
            compile("torch.Generator().manual_seed(1)", sampling.__file__, "exec"), {"torch": torch}
        )
        exec(compile("torch.zeros(2, device='meta')", sampling.__file__, "exec"), {"torch": torch})
    assert len(guard.violations) == 3, guard.violations
    assert "without device=" in guard.violations[0] and "torch.Generator" in guard.violations[1]
    assert "on meta" in guard.violations[2]


def test_seeded_sampling_refuses_a_generator_on_another_device() -> None:
    """CUDA logits with a CPU generator fail on a GPU; the check makes it fail everywhere."""
    logits = torch.randn(1, 8, device="meta")
    gen = torch.Generator(device="cpu").manual_seed(0)
    with pytest.raises(ValueError, match="torch.Generator\\(device=logits.device\\)"):
        sample_next(logits, [1.0], [1.0], [gen])
    ids, _, _ = sample_next(
        torch.randn(1, 8, device="cpu"), [1.0], [1.0], [gen]
    )  # same device: fine
    assert 0 <= ids[0] < 8
