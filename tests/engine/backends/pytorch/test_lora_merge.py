"""Serving LoRA versions as merged weights: same outputs as peft's unmerged adapter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.backends.pytorch.lora_merge import merged_copy, plain_lora_scale
from clawrl_app.models import load_model

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_scale_is_alpha_over_r_for_plain_lora_only() -> None:
    plain = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "bias": "none"}
    assert plain_lora_scale(plain) == 2.0
    for extra in ({"use_dora": True}, {"use_rslora": True}, {"rank_pattern": {"q": 4}},
                  {"modules_to_save": ["lm_head"]}, {"bias": "all"}, {"r": 0}):  # fmt: skip
        assert plain_lora_scale({**plain, **extra}) is None
    assert plain_lora_scale({**plain, "peft_type": "IA3"}) is None


@pytest.fixture(scope="module")
def adapter_dir(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved LoRA adapter with non-zero B (a fresh one would be a no-op)."""
    from peft import LoraConfig, get_peft_model

    base, _ = load_model(embedded_model)
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS)
    peft_model = get_peft_model(base, cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    out = tmp_path_factory.mktemp("adapter") / "v1"
    peft_model.save_pretrained(str(out))
    return out


def test_merged_copy_matches_peft_and_leaves_the_base_alone(
    embedded_model: Any, adapter_dir: Path
) -> None:
    from peft import PeftModel

    base, _ = load_model(embedded_model)
    before = base.model.layers[0].self_attn.q_proj.weight.clone()
    merged = merged_copy(base, adapter_dir)
    assert merged is not None
    assert torch.equal(base.model.layers[0].self_attn.q_proj.weight, before)  # a copy
    # only adapted weights are copied: the embeddings (tied to lm_head) and norms are shared
    assert merged.model.embed_tokens.weight is base.model.embed_tokens.weight
    assert merged.lm_head.weight is merged.model.embed_tokens.weight
    assert merged.model.norm.weight is base.model.norm.weight
    q = merged.model.layers[0].self_attn.q_proj.weight
    assert q is not base.model.layers[0].self_attn.q_proj.weight and not torch.equal(q, before)
    ids = torch.tensor([[1, 504, 3258, 314, 260, 2723, 30]])
    with torch.no_grad():
        want = PeftModel.from_pretrained(base, str(adapter_dir)).eval()(ids).logits
        got = merged(ids).logits
    assert torch.allclose(got, want, atol=1e-4)
    assert (
        (got - want).abs().max()
        < 1e-4
        < (want - load_model(embedded_model)[0](ids).logits).abs().max()
    )


def test_unsupported_adapter_is_not_merged(
    embedded_model: Any, adapter_dir: Path, tmp_path: Path
) -> None:
    dora = tmp_path / "dora"
    dora.mkdir()
    for f in adapter_dir.iterdir():
        (dora / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    base, _ = load_model(embedded_model)
    assert merged_copy(base, dora) is None


def test_backend_serves_a_merged_version_with_peft_log_probs(
    embedded_model: Any, adapter_dir: Path
) -> None:
    """merge_lora=True: the version gets its own merged weights; scoring it gives the same
    log-probs as the unmerged peft path (the publisher's canary check relies on that)."""
    prompt, response = [1, 504, 3258, 314], [260, 2723, 30, 2]

    async def scores(merge: bool) -> tuple[list[float], list[float], bool]:
        model, tok = load_model(embedded_model)
        be = TorchBackend(model, tok, model_name="m", context_length=8192, merge_lora=merge)
        await be.start()
        try:
            await be.load_adapter("v1", adapter_dir)
            await be.activate("v1")
            own_weights = "v1" in be._full
            return (
                await be.score(prompt, response, "v1"),
                await be.score(prompt, response),
                own_weights,
            )
        finally:
            await be.stop()

    merged, merged_base, own = asyncio.run(scores(True))
    peft_lps, peft_base, peft_own = asyncio.run(scores(False))
    assert own and not peft_own
    assert max(abs(a - b) for a, b in zip(merged, peft_lps, strict=True)) < 1e-3
    assert merged_base == pytest.approx(peft_base, abs=1e-5)  # the base stays untouched
    assert max(abs(a - b) for a, b in zip(merged, merged_base, strict=True)) > 1e-3
