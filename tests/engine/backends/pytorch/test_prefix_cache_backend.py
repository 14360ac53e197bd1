"""Prefix KV-cache reuse in the torch backend, on the real embedded model: a session's next
turn (its prompt repeats the previous prompt + answer) answers exactly as without the cache,
with the same behaviour log-probs; entries are keyed by version, bounded, and a failure while
using them costs only the reuse."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.backends import prefix_cache
from clawrl_app.engine.backends.base import Finished, GenerationRequest, SamplingParams, TokenOut
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.chat.formatter import ChatFormatter
from tests.conftest import wait_for

pytestmark = pytest.mark.slow
MB = 2**20
# ~250 tokens: an agent's system prompt in miniature, well over the 64-token minimum
SYSTEM = "You are a careful assistant. " + " ".join(
    f"Rule {i}: answer question {i} briefly and politely." for i in range(20)
)


@pytest.fixture(scope="module")
def model_copy(loaded_model: tuple[Any, Any]) -> tuple[Any, Any]:
    """A private copy: loading an adapter wraps the model in place."""
    model, tok = loaded_model
    return copy.deepcopy(model), tok


@pytest.fixture(scope="module")
def adapter_dir(loaded_model: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter with random (non-zero) weights: a version that answers differently."""
    from peft import LoraConfig, get_peft_model

    model, _ = loaded_model
    torch.manual_seed(0)
    cfg = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    out = tmp_path_factory.mktemp("adapter")
    get_peft_model(copy.deepcopy(model), cfg).save_pretrained(str(out))
    return out


async def collect(
    be: TorchBackend, ids: list[int], n: int = 8, version: str | None = None
) -> list[TokenOut]:
    toks: list[TokenOut] = []
    req = GenerationRequest("t", ids, SamplingParams(n, temperature=0.0), version=version)
    async for ev in be.generate(req):
        if isinstance(ev, TokenOut):
            toks.append(ev)
        else:
            assert isinstance(ev, Finished)
    return toks


def session(tok: Any, topic: str = "the sea", system: str = SYSTEM) -> tuple[list[int], Any]:
    """Turn 1's prompt, and a function that renders turn 2 from turn 1's answer (what a
    client re-sends: the whole history plus the answer plus a new question)."""
    fmt = ChatFormatter(tok)
    history = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Tell me one fact about {topic}."},
    ]

    def turn2(answer: list[TokenOut]) -> list[int]:
        text = tok.decode([t.token_id for t in answer], skip_special_tokens=True)
        return fmt.render(
            [*history, {"role": "assistant", "content": text}, {"role": "user", "content": "More?"}]
        )

    return fmt.render(history), turn2


def backend(model_tok: tuple[Any, Any], cache_mb: float, **kw: Any) -> TorchBackend:
    model, tok = model_tok
    return TorchBackend(
        model, tok, model_name="m", context_length=8192, prefix_cache_bytes=int(cache_mb * MB), **kw
    )


def stored(be: TorchBackend, n: int) -> dict[str, int]:
    """The stats once `n` entries were stored (rows are stored after their client heard)."""
    return wait_for(lambda: (s := be.prefix_cache_stats())["stored"] >= n and s, timeout=30)  # type: ignore[no-any-return]


def test_turn_two_answers_as_without_the_cache(model_copy: tuple[Any, Any]) -> None:
    """Greedy tokens identical, behaviour log-probs within 1e-4 (the trainer's importance
    ratios rely on them), and scoring the answer (itself reusing the prefix) agrees too."""
    _, tok = model_copy
    p1, turn2 = session(tok)

    async def go(cache_mb: float) -> dict[str, Any]:
        be = backend(model_copy, cache_mb)
        await be.start()
        try:
            t1 = await collect(be, p1)
            if cache_mb:
                stored(be, 1)
            p2 = turn2(t1)
            t2 = await collect(be, p2)
            scored = await be.score(p2, [t.token_id for t in t2])
            return dict(t1=t1, t2=t2, p2=p2, scored=scored, stats=be.prefix_cache_stats())
        finally:
            await be.stop()

    off, on = asyncio.run(go(0)), asyncio.run(go(64))
    assert off["p2"] == on["p2"]
    assert [t.token_id for t in on["t2"]] == [t.token_id for t in off["t2"]]
    assert [t.logprob for t in on["t2"]] == pytest.approx([t.logprob for t in off["t2"]], abs=1e-4)
    # scoring (teacher log-probs, canaries) reuses stored prefixes too, with the same numbers
    assert on["scored"] == pytest.approx([t.logprob for t in on["t2"]], abs=1e-4)
    assert on["scored"] == pytest.approx(off["scored"], abs=1e-4)
    s = on["stats"]
    assert (s["hits"], s["misses"], s["failures"]) == (2, 1, 0)  # turn 1 missed; turn 2, score hit
    # turn 2 and its scoring each reused at least turn 1's whole prompt (and the answer, as
    # far as it re-renders), never all of the prompt
    assert 2 * len(p1) <= s["tokens_reused"] < 2 * len(on["p2"])
    assert off["stats"] == dict.fromkeys(off["stats"], 0)  # 0 = off: nothing counted


def test_eviction_under_a_tiny_bound(model_copy: tuple[Any, Any]) -> None:
    """Room for one session's KV: a second, unrelated session evicts the first (LRU by
    bytes)."""
    _, tok = model_copy
    sea, _ = session(tok, "the sea")
    pirate = "Speak like a pirate. " + " ".join(f"Tale {i}: sail far." for i in range(30))
    moon, _ = session(tok, "the moon", system=pirate)
    kv_per_token = 2 * 30 * 3 * 64 * 4  # K and V x 30 layers x 3 KV heads x 64 dims x fp32

    async def go() -> tuple[dict[str, int], dict[str, int]]:
        be = backend(model_copy, 1.5 * len(sea) * kv_per_token / MB)
        await be.start()
        try:
            await collect(be, sea)
            first = stored(be, 1)
            await collect(be, moon)
            return first, stored(be, 2)
        finally:
            await be.stop()

    first, second = asyncio.run(go())
    assert first["entries"] == 1 and first["evictions"] == 0
    assert second["entries"] == 1 and second["evictions"] == 1
    assert second["bytes"] <= second["max_bytes"]
    assert (second["hits"], second["misses"]) == (0, 2)


def test_a_new_version_never_reuses_another_versions_kv(
    model_copy: tuple[Any, Any], adapter_dir: Path
) -> None:
    """After a publish (adapter v1 activated), turn 2 of a base session is answered by v1
    from a full prefill, exactly as a cache-less backend's v1 would; unloading v1 drops
    its entries."""
    _, tok = model_copy
    p1, turn2 = session(tok)

    async def go(cache_mb: float) -> dict[str, Any]:
        be = backend(model_copy, cache_mb)
        await be.start()
        try:
            t1 = await collect(be, p1)  # on base
            if cache_mb:
                stored(be, 1)
            await be.load_adapter("v1", adapter_dir)
            await be.activate("v1")
            p2 = turn2(t1)
            t2 = await collect(be, p2)  # on v1: base's entry must not be used
            after_switch = dict(stored(be, 2)) if cache_mb else be.prefix_cache_stats()
            t3 = await collect(be, turn2(t2), version="v1")  # v1's own entry: reused
            await be.activate("base")
            await be.unload_adapter("v1")
            entries = [e.version for e in be._prefix._entries.values()]
            return dict(
                t2=t2,
                after_switch=after_switch,
                t3=t3,
                entries=entries,
                end=be.prefix_cache_stats(),
            )
        finally:
            await be.stop()

    off, on = asyncio.run(go(0)), asyncio.run(go(64))
    assert [t.token_id for t in on["t2"]] == [t.token_id for t in off["t2"]]
    assert [t.logprob for t in on["t2"]] == pytest.approx([t.logprob for t in off["t2"]], abs=1e-4)
    assert on["after_switch"]["hits"] == 0 and on["after_switch"]["misses"] == 2
    assert [t.token_id for t in on["t3"]] == [t.token_id for t in off["t3"]]
    assert on["end"]["hits"] == 1  # turn 3 on v1 reused v1's turn 2 (their shared history)
    assert on["entries"] == ["base"]  # base's entry stays; v1's went with v1


def test_a_failure_while_reusing_falls_back_to_a_full_prefill(
    model_copy: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored entry that cannot be used (here: building its cache raises) costs the reuse,
    not the answer; nothing stays in flight."""
    _, tok = model_copy
    p1, turn2 = session(tok)

    def broken(self: Any) -> Any:
        raise RuntimeError("simulated: the stored KV cannot be copied")

    async def go() -> tuple[list[TokenOut], list[TokenOut], dict[str, int], int, Any]:
        be = backend(model_copy, 64)
        await be.start()
        try:
            t1 = await collect(be, p1)
            stored(be, 1)
            monkeypatch.setattr(prefix_cache.PrefixHit, "cache", broken)
            p2 = turn2(t1)
            t2 = await collect(be, p2)
            monkeypatch.undo()
            clean = await collect(be, p2)  # the same prompt again, reusing for real
            return t2, clean, be.prefix_cache_stats(), be.inflight("base"), be.health()
        finally:
            await be.stop()

    t2, clean, s, inflight, health = asyncio.run(go())
    assert len(t2) == 8 and [t.token_id for t in t2] == [t.token_id for t in clean]
    assert s["failures"] == 1 and s["hits"] == 2
    assert inflight == 0 and health is None


def test_a_header_less_session_reuses_its_previous_turn_through_the_endpoint(
    engine: Any,
) -> None:
    """The real engine with its default settings (the plan's bound), the official client, no
    session header, streaming: turn 2 reuses turn 1's prompt + answer; the stats are in the
    admin status and `doctor` shows them."""
    import httpx
    import openai

    from clawrl_app.config import load_settings
    from clawrl_app.doctor import prefix_cache_lines

    client = openai.OpenAI(base_url=engine.url, api_key="unused", max_retries=0)
    admin = f"{engine.base}/admin/status"

    def figures() -> dict[str, int]:
        out: dict[str, int] = httpx.get(admin, timeout=10).json()["serving"]["prefix_cache"]
        return out

    def ask(messages: list[dict[str, str]]) -> str:
        stream = client.chat.completions.create(
            model="clawrl", messages=messages, temperature=0, max_tokens=8, stream=True
        )  # type: ignore[call-overload]
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    before = figures()
    assert before["max_bytes"] > 0  # on by default
    turn1 = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Tell me one fact about rivers."},
    ]
    answer = ask(turn1)
    wait_for(lambda: figures()["stored"] > before["stored"], timeout=30)
    ask([*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "More?"}])
    after = figures()
    assert after["hits"] == before["hits"] + 1
    assert after["tokens_reused"] - before["tokens_reused"] > 200  # at least the system prompt
    port = engine.base.rsplit(":", 1)[1]
    settings = load_settings(env={"CLAWRL_SERVER__PORT": port}).settings
    lines = prefix_cache_lines(settings, engine.engine.plan, engine.engine.paths)
    assert lines[0].startswith(f"prefix cache: {engine.engine.plan.prefix_cache_mb} MiB")
    assert lines[1].startswith("running engine:") and f"{after['hits']} hits" in lines[1]
