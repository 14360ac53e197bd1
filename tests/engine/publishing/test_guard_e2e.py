"""The regression guard with real parts: the embedded model in the torch backend, a real
SQLite store holding held-out turns, real PEFT adapters in checkpoint folders, the publisher.

A deliberately damaged adapter (large random LoRA weights) is refused before it is served,
on both the general and the personal score, and the trainer is sent back to the served
version; a harmless adapter (LoRA B = 0: the base model's outputs) passes and is served.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.config import GuardSettings
from clawrl_app.engine.backends.base import GenerationRequest, SamplingParams, TokenOut
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.core.checkpoints import MANIFEST
from clawrl_app.engine.core.events import Event, GuardChecked, PublishRefused
from clawrl_app.engine.publishing.guard import DEGENERATION, GENERAL, PERSONAL, RegressionGuard
from clawrl_app.engine.publishing.publisher import Publisher
from clawrl_app.engine.store import NewTurn, Store
from clawrl_app.engine.store.samples import HOLDOUT_REASON
from clawrl_app.general_eval import load_general_set

pytestmark = pytest.mark.slow
QUESTIONS = ["What is the capital of France?", "Name a primary color.", "What is 3 + 4?",
             "Say hello.", "What do bees make?", "What color is the sky?"]  # fmt: skip


def adapter(loaded_model: tuple[Any, Any], out: Path, damaged: bool) -> Path:
    """A LoRA checkpoint folder: `damaged` with large random weights, else B = 0 (no-op)."""
    from peft import LoraConfig, get_peft_model

    model, _ = loaded_model
    torch.manual_seed(0)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"],
                     init_lora_weights=not damaged)  # fmt: skip
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    if damaged:
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_" in name:
                    p.mul_(40.0)
    peft_model.save_pretrained(str(out))
    manifest = {"version": out.name, "step": 1, "parent": None, "mode": "lora",
                "method": "combine", "metrics": {}, "sessions": [], "samples": [],
                "canary": []}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest))
    return out


async def greedy(be: TorchBackend, ids: list[int], n: int = 16) -> list[int]:
    req = GenerationRequest("h", ids, SamplingParams(n, temperature=0.0))
    return [ev.token_id async for ev in be.generate(req) if isinstance(ev, TokenOut)]


async def hold_out_base_answers(be: TorchBackend, fmt: ChatFormatter, store: Store) -> None:
    """Held-out turns with the base model's own answers, each rated +1 by the user."""
    for k, q in enumerate(QUESTIONS):
        prompt = fmt.render([{"role": "user", "content": q}])
        ids = await greedy(be, prompt)
        store.ensure_session(f"s{k}", "test")
        row = store.record_turn(
            NewTurn(f"s{k}", "main", {"messages": [{"role": "user", "content": q}]},
                    fmt.decode(ids), prompt, ids, [0.0] * len(ids), "base", holdout=True)
        )  # fmt: skip
        store.set_user_rating(row.id, 1, None, eligible_at=0.0)


def test_a_damaged_adapter_is_refused_and_a_harmless_one_is_served(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    store = Store(tmp_path / "store.db")
    settings = GuardSettings(general_items=8, max_tokens=16, min_personal_items=4,
                             open_prompts=2, open_max_tokens=32, budget_prompts=0)  # fmt: skip
    events: list[Event] = []
    sent_back: list[str] = []

    async def trainer_back_to(version: str) -> None:
        sent_back.append(version)

    async def go() -> tuple[bool, bool, str]:
        be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
        await be.start()
        try:
            await hold_out_base_answers(be, fmt, store)
            guard = RegressionGuard(store, be, fmt, settings, load_general_set())
            pub = Publisher(store, be, events=events.append, guard=guard,
                            on_guard_refused=trainer_back_to)  # fmt: skip
            for name, damaged in (("v1", True), ("v2", False)):
                path = adapter(loaded_model, tmp_path / name, damaged)
                store.register_checkpoint(name, path, None, 1, {}, [], [])
            bad = await pub.publish(store.get_checkpoint("v1"))  # type: ignore[arg-type]
            after_bad = be.active_version
            good = await pub.publish(store.get_checkpoint("v2"))  # type: ignore[arg-type]
            return bad, good, after_bad
        finally:
            await be.stop()

    bad, good, after_bad = asyncio.run(go())
    # the held-out turns were judged (rated) but never become training data
    samples = [s for k in range(len(QUESTIONS)) for s in store.samples_for_session(f"s{k}")]
    assert [s.state for s in samples] == ["skipped"] * len(QUESTIONS)
    assert {s.skip_reason for s in samples} == {HOLDOUT_REASON}
    assert store.trainable_samples(100, now=1e12) == []
    # the damaged adapter: refused on both scores, never served, trainer sent back to base
    assert bad is False and after_bad == "base"
    assert store.get_checkpoint("v1").status == "refused"  # type: ignore[union-attr]
    checked = [e for e in events if isinstance(e, GuardChecked)]
    assert [c.version for c in checked] == ["v1", "v2"]
    v1 = checked[0]
    assert not v1.passed and v1.served == "base" and sent_back == ["base"]
    assert v1.personal == 0.0 and v1.served_personal == 0.5  # liked answers made less likely
    assert v1.general is not None and v1.served_general is not None
    assert v1.general < v1.served_general - settings.max_general_drop
    assert any("personal score" in r for r in v1.reasons)
    assert any("general score" in r for r in v1.reasons)
    refused = [e for e in events if isinstance(e, PublishRefused)]
    assert len(refused) == 1 and "regression guard" in refused[0].reason
    # the harmless adapter: the base model's scores, served
    v2 = checked[1]
    assert good is True and v2.passed and v2.reasons == []
    assert v2.general == v2.served_general and v2.personal == v2.served_personal == 0.5
    assert store.get_checkpoint("v2").status == "published"  # type: ignore[union-attr]
    # per-version figures are stored for the Dashboard's curves
    general = {m.version: m.value for m in store.metrics(GENERAL)}
    personal = {m.version: m.value for m in store.metrics(PERSONAL)}
    assert set(general) == {"base", "v1", "v2"} and general["v1"] < general["base"]
    assert personal["v1"] == 0.0 and personal["base"] == 0.5
    store.close()


def test_the_endpoint_holds_out_a_share_of_main_turns_when_recording(
    embedded_model: Any, tmp_path: Path
) -> None:
    """Through the real endpoint and the official client: with `guard.holdout_share` 0.5,
    some of 20 one-turn conversations are recorded as held out, the others are not."""
    from openai import OpenAI

    from tests.conftest import start_engine

    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__ENABLED": "false",
        "CLAWRL_GUARD__ENABLED": "true",
        "CLAWRL_GUARD__HOLDOUT_SHARE": "0.5",
    }
    running = start_engine(tmp_path / "home", env)
    try:
        client = OpenAI(base_url=running.url, api_key="unused")
        for k in range(20):
            client.chat.completions.create(
                model="clawrl", max_tokens=2,
                messages=[{"role": "user", "content": f"Question number {k}?"}],
            )  # fmt: skip
        store = running.engine.store
        turns = [t for s in store.list_sessions(limit=50) for t in store.turns_for_session(s.id)]
        assert len(turns) == 20
        held = sum(t.holdout for t in turns)
        assert 0 < held < 20
        assert store.held_out_count() == held
    finally:
        running.stop()


def test_compare_loads_an_older_checkpoint_for_the_comparison_and_shows_guard_scores(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    from clawrl_app.engine.publishing.compare import CompareError, run_compare

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    store = Store(tmp_path / "store.db")
    path = adapter(loaded_model, tmp_path / "v1", damaged=False)
    store.register_checkpoint("v1", path, None, 1, {}, [], [])
    store.mark_published("v1")
    store.register_checkpoint("v2", path, "v1", 2, {}, [], [])
    store.set_checkpoint_status("v2", "refused")  # what the guard refused can be looked at
    store.add_metrics(0, {GENERAL: 0.55, PERSONAL: 0.5}, "base")
    store.add_metrics(1, {GENERAL: 0.6, DEGENERATION: 0.25}, "v1")
    prompts = [[{"role": "user", "content": "Name a fruit."}]]

    async def go() -> tuple[dict[str, Any], list[str]]:
        be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
        await be.start()
        try:
            result = await run_compare(be, fmt, prompts, "base", "v1", 6, store=store)
            refused = await run_compare(be, fmt, prompts, "base", "v2", 6, store=store)
            assert refused["loaded_for_compare"] == ["v2"] and refused["summary"]["identical"] == 1
            with pytest.raises(CompareError, match="no checkpoint 'v9' that can answer"):
                await run_compare(be, fmt, prompts, "base", "v9", 6, store=store)
            return result, be.info().versions
        finally:
            await be.stop()

    result, versions_after = asyncio.run(go())
    assert result["loaded_for_compare"] == ["v1"] and "v1" not in versions_after
    assert "v2" not in versions_after  # loaded for the comparison only, never served
    assert result["summary"]["identical"] == 1  # LoRA B = 0 answers as the base model
    assert result["guard"] == {"a": {"personal": 0.5, "general": 0.55, "degeneration": None},
                               "b": {"personal": None, "general": 0.6,
                                     "degeneration": 0.25}}  # fmt: skip
    from clawrl_app.tui.compare_views import summary_line

    assert (
        "general score 0.55 vs 0.60 · personal score 0.50 vs - · degeneration rate - vs 0.25"
        in (summary_line(result))
    )
    store.close()


def test_a_rollback_during_the_check_neither_waits_for_it_nor_is_overridden(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    """The guard scores without the publish lock: serving another version meanwhile returns
    at once, and the checked candidate is then not published over the user's choice."""
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    store = Store(tmp_path / "store.db")
    settings = GuardSettings(general_items=4, max_tokens=12, open_prompts=0, budget_prompts=0)

    async def go() -> tuple[bool, bool, str, list[str]]:
        be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
        await be.start()
        try:
            guard = RegressionGuard(store, be, fmt, settings, load_general_set())
            pub = Publisher(store, be, guard=guard)
            for name in ("v1", "v2"):
                store.register_checkpoint(name, adapter(loaded_model, tmp_path / name, False),
                                          None, 1, {}, [], [])  # fmt: skip
            assert await pub.publish(store.get_checkpoint("v1"))  # type: ignore[arg-type]
            task = asyncio.create_task(pub.publish(store.get_checkpoint("v2")))  # type: ignore[arg-type]
            while guard.checked < 1 or "v2" not in be.info().versions:
                await asyncio.sleep(0.05)  # v1's check is done; v2 is loaded and being checked
            await pub.serve_version("base")  # the user rolls back meanwhile
            rolled_back_first = not task.done()
            published = await task
            return rolled_back_first, published, be.active_version, be.info().versions
        finally:
            await be.stop()

    rolled_back_first, published, active, versions = asyncio.run(go())
    assert rolled_back_first and not published
    assert active == "base" and "v2" not in versions
    assert store.get_checkpoint("v2").status == "ready"  # type: ignore[union-attr]
    store.close()
