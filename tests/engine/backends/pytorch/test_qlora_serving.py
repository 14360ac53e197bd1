"""QLoRA publishes: the server serves the base weights the 4-bit trainer computes with.

On an H100 every QLoRA checkpoint was refused: the trainer's canary log-probs (NF4 base +
adapter) and the server's (bf16 base + adapter) were 1.27 apart against a tolerance of
0.05. bitsandbytes 4-bit also runs on the CPU, so the same comparison runs here on the
embedded model: the served NF4-dequantized base + merged adapter reproduces the trainer's
log-probs (gap below the CPU canary tolerance 1e-3), the original base does not.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.backends.pytorch.nf4_base import STAMP, export_nf4_base
from clawrl_app.engine.backends.sampling import continuation_logprobs
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.publishing.publisher import canary_gap
from clawrl_app.engine.training.canary import CANARY_PROMPTS, CANARY_RESPONSE
from clawrl_app.engine.training.trainer import LORA_TARGETS, load_4bit
from clawrl_app.models import ResolvedModel, load_model

pytestmark = pytest.mark.slow
CPU_TOLERANCE = 1e-3  # the publisher's canary tolerance when serving on the CPU


@pytest.fixture(scope="module")
def export(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("nf4") / "SmolLM2-nf4-base"
    lines: list[str] = []
    export_nf4_base(
        embedded_model.path, dest, device="cpu", dtype=torch.float32, progress=lines.append
    )
    assert any("quantizing" in line for line in lines), "long work shows progress"
    return dest


def with_adapter(
    embedded_model: Any, tmp_path_factory: pytest.TempPathFactory, dtype: torch.dtype
) -> tuple[Any, Path]:
    """The trainer's side: the 4-bit base with a LoRA adapter (non-zero B, as after steps)."""
    from peft import LoraConfig, get_peft_model

    base, _ = load_4bit(embedded_model.path, "cpu", dtype=dtype)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS))
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen, device="cpu") * 0.02)
    out = tmp_path_factory.mktemp("qlora-adapter") / "v1"
    model.save_pretrained(str(out))
    return model.eval(), out


@pytest.fixture(scope="module")
def trained(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    return with_adapter(embedded_model, tmp_path_factory, torch.float32)


def canary(model: Any, tok: Any) -> list[dict[str, Any]]:
    """What Trainer.canary records: log-probs of a fixed answer to fixed prompts."""
    fmt = ChatFormatter(tok)
    resp = list(tok(CANARY_RESPONSE, add_special_tokens=False)["input_ids"])
    out = []
    with torch.no_grad():
        for q in CANARY_PROMPTS:
            prompt = fmt.render([{"role": "user", "content": q}])
            ids = torch.tensor([prompt + resp], device="cpu")
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(resp)]
            out.append({"prompt": prompt, "resp": resp, "lps": continuation_logprobs(logits, resp)})
    return out


def served_gap(
    model_dir: Path,
    adapter: Path,
    expected: list[dict[str, Any]],
    dtype: str = "auto",
    qlora: bool = False,
) -> float:
    model, tok = load_model(ResolvedModel(model_dir, "local", "m", 8192), dtype=dtype)

    async def go() -> float:
        be = TorchBackend(
            model, tok, model_name="m", context_length=8192, merge_lora=True, qlora=qlora
        )
        await be.start()
        try:
            await be.load_adapter("v1", adapter)
            gaps = [
                canary_gap(c["lps"], await be.score(c["prompt"], c["resp"], "v1", urgent=True))
                for c in expected
            ]
            return max(gaps)
        finally:
            await be.stop()

    return asyncio.run(go())


def test_serving_the_nf4_base_reproduces_the_qlora_trainers_canary(
    embedded_model: Any, export: Path, trained: tuple[Any, Path]
) -> None:
    model, adapter = trained
    _, tok = load_model(embedded_model)
    expected = canary(model, tok)
    like_with_like = served_gap(export, adapter, expected)
    original_base = served_gap(embedded_model.path, adapter, expected)
    print(f"canary gap: NF4 base served {like_with_like:.2e}, original base {original_base:.2e}")
    assert like_with_like <= CPU_TOLERANCE  # published
    assert original_base > 5e-2  # refused even at the GPU tolerance: what the H100 saw


def test_the_export_is_private_reused_and_rebuilt_when_the_model_changes(
    embedded_model: Any, export: Path, tmp_path: Path
) -> None:
    assert (export / STAMP).exists() and (export / "config.json").exists()
    for f in export.iterdir():
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f
    lines: list[str] = []
    again = export_nf4_base(
        embedded_model.path, export, device="cpu", dtype=torch.float32, progress=lines.append
    )
    assert again == export and lines == []  # reused: no second conversion
    stale = (export / STAMP).read_text().replace('"format": 1', '"format": 0')
    (export / STAMP).write_text(stale)
    export_nf4_base(
        embedded_model.path, export, device="cpu", dtype=torch.float32, progress=lines.append
    )
    assert any("quantizing" in line for line in lines)  # an old recipe is rebuilt


def test_the_bf16_trainer_keeps_its_unquantized_weights_in_bf16(embedded_model: Any) -> None:
    """On CUDA the QLoRA trainer computes in bf16. peft's prepare_model_for_kbit_training
    casts the embeddings, norms and LM head to fp32, so the residual stream ran in fp32
    against the server's bf16: an H200 refused every QLoRA checkpoint (canary gap 0.109,
    tolerance 0.05). The trainer's 4-bit model in bf16 must compute what the served
    dequantized base computes; the peft recipe (the old one) must not."""
    from peft import prepare_model_for_kbit_training

    from clawrl_app.engine.backends.pytorch.nf4_base import dequantize_linears, load_nf4

    ids = torch.arange(100, 164).unsqueeze(0)

    def lps(model: Any) -> torch.Tensor:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]

    trainer, _ = load_4bit(embedded_model.path, "cpu", dtype=torch.bfloat16)
    floats = {p.dtype for p in trainer.parameters() if p.is_floating_point()}
    assert floats == {torch.bfloat16}, floats
    assert not any(p.requires_grad for p in trainer.parameters())  # LoRA adds what trains
    served = load_nf4(embedded_model.path, "cpu", torch.bfloat16)
    dequantize_linears(served, torch.bfloat16)
    ours = (lps(trainer) - lps(served)).abs().max().item()
    peft_recipe = (lps(prepare_model_for_kbit_training(trainer)) - lps(served)).abs().max().item()
    print(f"bf16 log-prob gap: ours {ours:.2e}, peft's fp32 upcast {peft_recipe:.2e}")
    assert ours <= CPU_TOLERANCE
    assert peft_recipe > 5e-2  # what the H200's canary refused


def test_a_bf16_qlora_version_is_served_with_the_trainers_numerics(
    embedded_model: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """peft's 4-bit LoRA layer rounds the adapter's output to bf16 before adding it (its plain
    layers add in float32 and round once): the server's hooks must do the same for a QLoRA
    version, or the canary drifts (0.057 on an H200, tolerance 0.05: refused)."""
    model, adapter = with_adapter(embedded_model, tmp_path_factory, torch.bfloat16)
    _, tok = load_model(embedded_model)
    expected = canary(model, tok)
    dest = tmp_path_factory.mktemp("nf4-bf16") / "SmolLM2-nf4-base"
    export_nf4_base(embedded_model.path, dest, device="cpu", dtype=torch.bfloat16)
    ours = served_gap(dest, adapter, expected, dtype="bfloat16", qlora=True)
    plain = served_gap(dest, adapter, expected, dtype="bfloat16", qlora=False)
    print(f"bf16 QLoRA canary gap: peft's 4-bit order {ours:.2e}, float32 add {plain:.2e}")
    assert ours <= CPU_TOLERANCE
    assert plain > ours


def test_a_qlora_plan_builds_a_backend_on_the_nf4_base_in_the_4bit_order(
    embedded_model: Any, tmp_path: Path
) -> None:
    """The wiring the GPU depends on: under `train_mode = qlora` the torch backend serves the
    NF4 export and adds LoRA versions in peft's 4-bit order (float32 on a CPU hides both, so
    no other CPU test would notice either going missing)."""
    from clawrl_app.config import Settings
    from clawrl_app.engine.backends.setup import build_backend
    from clawrl_app.hardware import Plan
    from clawrl_app.paths import app_paths

    plan = Plan(
        backend="torch", serve_devices=(), judge_devices=(), train_devices=(),
        train_mode="qlora", judge_backend="heuristic", judge_shares_serving=True,
        colocated=True, sglang_mem_fraction=None, default_batch_size=4, memory=(), reasons=(),
    )  # fmt: skip
    paths = app_paths(tmp_path / "home")
    backend, _ = build_backend(Settings(), plan, embedded_model, paths)
    assert isinstance(backend, TorchBackend)
    assert backend._hooks._round_delta  # QLoRA versions: rounded, then added
    assert (paths.models_dir / f"{embedded_model.name}-nf4-base" / STAMP).exists()
    lora_plan = replace(plan, train_mode="lora")
    plain, _ = build_backend(Settings(), lora_plan, embedded_model, paths)
    assert isinstance(plain, TorchBackend) and not plain._hooks._round_delta
