"""LoRA versions on 16-bit weights: served through forward hooks, as exact as peft.

Caught on an H100 first (bench/gpu.py: every LoRA version refused, canary gap 0.0585-0.0736
against a tolerance of 0.05; bench/canary_gap.py: merged copy 0.0585, peft 0.0000): folding a
freshly trained adapter into bf16 weights rounds most of its update away. The same happens in
bf16 on the CPU, which is how these tests catch it without a GPU.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.backends.pytorch.lora_hooks import LoraHooks, hookable
from clawrl_app.engine.backends.pytorch.lora_merge import merged_copy
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.models import ResolvedModel, load_model

pytestmark = pytest.mark.slow
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RESPONSE = "Paris is the capital of France, and the sea is calm."


def bf16(embedded_model: ResolvedModel) -> tuple[Any, Any]:
    return load_model(embedded_model, dtype="bfloat16")


def save_adapter(embedded_model: ResolvedModel, out: Path, b_std: float, seed: int) -> Path:
    """A LoRA adapter like one a few training steps make: small B (update below bf16's
    resolution of most weights), the trainer's rank and alpha."""
    from peft import LoraConfig, get_peft_model

    base, _ = bf16(embedded_model)
    torch.manual_seed(seed)  # peft draws A at random: the same adapter every run
    cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS)
    peft_model = get_peft_model(base, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * b_std)
    peft_model.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def adapters(embedded_model: ResolvedModel, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("hooked")
    return [save_adapter(embedded_model, root / f"v{i}", 2e-4, seed=i - 1) for i in (1, 2)]


@pytest.fixture(scope="module")
def canary(embedded_model: ResolvedModel) -> tuple[list[int], list[int]]:
    _, tok = bf16(embedded_model)
    prompt = ChatFormatter(tok).render(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    return prompt, list(tok(RESPONSE, add_special_tokens=False)["input_ids"])


def logprobs(model: Any, prompt: list[int], response: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits, -1)[len(prompt) - 1 : len(prompt) - 1 + len(response)]
    return logp.gather(-1, torch.tensor(response)[:, None])[:, 0]


def peft_logprobs(embedded_model: ResolvedModel, adapter: Path, canary: Any) -> torch.Tensor:
    from peft import PeftModel

    base, _ = bf16(embedded_model)
    return logprobs(PeftModel.from_pretrained(base, str(adapter)).eval(), *canary)


def served(
    model: Any, tok: Any, merge: bool, load: list[tuple[str, Path]], asks: list[str], canary: Any
) -> list[torch.Tensor]:
    prompt, response = canary

    async def go() -> list[torch.Tensor]:
        be = TorchBackend(model, tok, model_name="t", context_length=8192, merge_lora=merge)
        await be.start()
        try:
            for version, path in load:
                await be.load_adapter(version, path)
            return [torch.tensor(await be.score(prompt, response, v)) for v in asks]
        finally:
            await be.stop()

    return asyncio.run(go())


def test_a_bf16_merge_loses_a_fresh_adapter_and_hooks_keep_it(
    embedded_model: ResolvedModel, adapters: list[Path], canary: Any
) -> None:
    ref = peft_logprobs(embedded_model, adapters[0], canary)
    base, tok = bf16(embedded_model)
    adapter_effect = float((logprobs(base, *canary) - ref).abs().max())
    # more than the canary tolerance (0.05) with room to spare: 0.097-0.2 measured (bf16 CPU
    # matmuls round differently with the thread count; 0.1 failed once at 0.097 under load)
    assert adapter_effect > 0.07, "the adapter must move the canary for this test to mean anything"
    merged = merged_copy(base, adapters[0])
    assert merged is not None
    merge_gap = float((logprobs(merged, *canary) - ref).abs().max())
    # a merged bf16 copy misses the adapter by more than the GPU canary tolerance (0.05): the
    # H100 refused every such version (0.0585-0.0736); over seeds 0-3 and B std 2e-4 / 3e-4
    # this gap was 0.10-0.22 here, 33-132 % of the adapter's own effect
    assert merge_gap > 0.05, "bf16 merging rounds most of the update away"
    # the backend asked to merge on 16-bit weights serves through hooks instead: exact
    (got,) = served(base, tok, True, [("v1", adapters[0])], ["v1"], canary)
    assert float((got - ref).abs().max()) < 1e-3


def test_hooked_versions_are_served_pinned_and_the_base_stays_intact(
    embedded_model: ResolvedModel, adapters: list[Path], canary: Any
) -> None:
    model, tok = bf16(embedded_model)
    base_ref = logprobs(model, *canary)
    refs = [peft_logprobs(embedded_model, a, canary) for a in adapters]
    loads = [("v1", adapters[0]), ("v2", adapters[1])]
    v1, base, v2, v1_again = served(model, tok, False, loads, ["v1", "base", "v2", "v1"], canary)
    assert float((v1 - refs[0]).abs().max()) < 1e-3
    assert float((v2 - refs[1]).abs().max()) < 1e-3
    assert torch.equal(v1, v1_again)
    assert float((base - base_ref).abs().max()) < 1e-3
    assert float((v1 - v2).abs().max()) > 0.05, "two adapters, two policies"


def test_hooks_leave_no_trace_once_the_last_version_is_removed(
    embedded_model: ResolvedModel, adapters: list[Path], canary: Any
) -> None:
    model, _ = bf16(embedded_model)
    before = logprobs(model, *canary)
    hooks = LoraHooks(model)
    hooks.add("v1", adapters[0])
    hooks.select("v1")
    assert not torch.equal(logprobs(model, *canary), before)
    hooks.select(None)
    assert torch.equal(logprobs(model, *canary), before)
    hooks.remove("v1")
    assert "v1" not in hooks
    assert all(not m._forward_hooks for m in model.modules())


def test_only_plain_lora_adapters_are_hooked(tmp_path: Path, adapters: list[Path]) -> None:
    assert hookable(adapters[0])
    assert not hookable(tmp_path)  # a full checkpoint: no adapter_config.json
    dora = tmp_path / "dora"
    dora.mkdir()
    (dora / "adapter_config.json").write_text(
        '{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "use_dora": true}'
    )
    assert not hookable(dora)
