"""The plan's serving choices for the torch backend: LoRA versions merged or hooked, the
prefix KV cache's size (hardware.plan; helpers from test_hardware)."""

from __future__ import annotations

import pytest

from clawrl_app.hardware import ModelInfo, plan
from tests.test_hardware import fake_inventory, model, settings


def test_lora_versions_on_16bit_gpu_weights_are_hooked_not_merged() -> None:
    """Merging a fresh adapter into bf16 weights rounds it away (an H100 refused every
    merged version: canary gap 0.0585-0.0736 vs 0.05): GPU versions go through hooks."""
    roomy = plan(fake_inventory(1, 80), model("1.5B"), settings(CLAWRL_HARDWARE__BACKEND="torch"))
    assert roomy.backend == "torch" and not roomy.merge_lora
    assert all(m.role != "versions" for m in roomy.memory)  # hooks need no weight copies
    assert any("forward hooks" in r and "16-bit" in r for r in roomy.reasons)


def test_float32_lora_versions_are_merged_when_the_copies_fit() -> None:
    cpu = plan(fake_inventory(0), model("0.5B"), settings(CLAWRL_HARDWARE__BACKEND="torch"))
    assert cpu.merge_lora
    copies = next(m for m in cpu.memory if m.role == "versions")
    # 3 copies of float32 weights: 3 * params * 4 bytes
    assert copies.need_gib == pytest.approx(3 * model("0.5B").params_b * 4e9 / 2**30, abs=0.01)
    assert any("merged weights (base speed)" in r for r in cpu.reasons)


def test_lora_versions_go_through_hooks_when_the_copies_do_not_fit() -> None:
    tight = plan(
        fake_inventory(0, ram=12.0), model("0.5B"), settings(CLAWRL_HARDWARE__BACKEND="torch")
    )
    assert not tight.merge_lora
    assert all(m.role != "versions" for m in tight.memory)
    assert any("forward hooks" in r and "GiB" in r for r in tight.reasons)


def test_merging_is_the_torch_backends_concern_only() -> None:
    sglang = plan(fake_inventory(1, 80, sglang=True), model("1.5B"), settings())
    full = plan(
        fake_inventory(1, 80), model("0.5B"),
        settings(CLAWRL_HARDWARE__BACKEND="torch", CLAWRL_TRAIN__MODE="full"),
    )  # fmt: skip
    assert sglang.backend == "sglang" and not sglang.merge_lora
    assert full.train_mode == "full" and not full.merge_lora
    cpu = plan(fake_inventory(0), model("0.1B"), settings())
    assert cpu.merge_lora  # the embedded default: 3 x 0.4 GiB of RAM


def test_prefix_cache_default_comes_from_the_plan() -> None:
    """The torch backend's prefix KV cache holds 4 full contexts of KV, at most a quarter of
    the memory the plan leaves spare; SGLang has its own; the setting overrides, 0 = off."""
    from clawrl_app.hardware import prefix_cache_mib
    from clawrl_app.memory_model import spare_gib

    embedded = ModelInfo.estimate("SmolLM2-135M-Instruct", 0.135, 8192)
    roomy = plan(fake_inventory(0, ram=64.0), embedded, settings())
    # fp32 KV of SmolLM2-135M: 2 x 30 layers x 3 heads x 64 dims x 4 B = 46080 B per token;
    # 4 x 8192 tokens = 1440 MiB, well under a quarter of what 64 GiB of RAM leaves
    assert roomy.backend == "torch" and roomy.prefix_cache_mb == 1440
    assert any(
        r.startswith("Prefix KV cache (server.prefix_cache_mb): 1440 MiB") for r in roomy.reasons
    )
    small = plan(fake_inventory(0, ram=12.0), embedded, settings())
    assert small.prefix_cache_mb == int(spare_gib(small.memory) / 4 * 1024)
    assert 0 < small.prefix_cache_mb < 1440
    assert plan(fake_inventory(1, 80, sglang=True), model("1.5B"), settings()).prefix_cache_mb == 0
    assert prefix_cache_mib(settings(), roomy) == 1440
    assert prefix_cache_mib(settings(CLAWRL_SERVER__PREFIX_CACHE_MB="0"), roomy) == 0
    assert prefix_cache_mib(settings(CLAWRL_SERVER__PREFIX_CACHE_MB="64"), roomy) == 64
