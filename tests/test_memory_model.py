"""What each trainer launch holds per GPU: the pure memory functions, and the layouts the plan
launches for an 8B full fine-tune and a 70B LoRA on 8 x 80 GB, against figures derived by hand.

GiB = 2**30 bytes. "80 GB" cards as nvidia-smi reports them: 79.65 GiB.
"""

from __future__ import annotations

import pytest

from clawrl_app.hardware import ModelInfo, PlanError, format_plan, plan
from clawrl_app.memory_model import (
    GIB,
    dtype_name,
    fsdp_gathered_bytes,
    launch_name,
    lora_params,
    model_state_bytes,
    train_need,
    train_sharding,
)
from tests.test_hardware import SMOLLM2_135M, fake_inventory, settings

EIGHT_B = ModelInfo.estimate("8B", 8.0)  # Qwen3-8B's shape: 36 layers, hidden 4096, untied
SEVENTY_B = ModelInfo.estimate("70B", 70.0)  # Llama-3-70B's: 80 layers, hidden 8192


def test_train_sharding_follows_mode_and_device_count() -> None:
    assert train_sharding("full", 1) == train_sharding("lora", 1) == "none"
    assert train_sharding("qlora", 1) == "none"
    assert train_sharding("full", 2) == train_sharding("full", 8) == "fsdp"
    assert train_sharding("lora", 2) == train_sharding("qlora", 8) == "ddp"
    with pytest.raises(ValueError, match="needs a device"):
        train_sharding("lora", 0)


def test_model_state_bytes_per_launch() -> None:
    # Full fine-tuning of 8e9 params in bf16: weights, grads, m, v = 4 x 2 = 8 B/param.
    assert model_state_bytes(8e9, 8e9, 2, "none", 1) == 64e9
    # DDP: the same on every rank + buckets, the grads again (2 B/param): 10 B/param.
    assert model_state_bytes(8e9, 8e9, 2, "ddp", 4) == 80e9
    # FSDP over 4: 64e9 / 4.
    assert model_state_bytes(8e9, 8e9, 2, "fsdp", 4) == 16e9
    # fp32 on the CPU: 16 B/param (no master copy to add: the weights are the fp32 copy).
    assert model_state_bytes(8e9, 8e9, 4, "none", 1) == 128e9
    # LoRA: 8e9 frozen bf16 params (16e9 B) + a 20e6-param fp32 adapter x 16 B (0.32e9),
    # and under DDP its fp32 grads once more (0.08e9).
    total, adapter = 8e9 + 20e6, 20e6
    assert model_state_bytes(total, adapter, 2, "none", 1, 4) == pytest.approx(16.32e9)
    assert model_state_bytes(total, adapter, 2, "ddp", 2, 4) == pytest.approx(16.4e9)
    with pytest.raises(ValueError):
        model_state_bytes(8e9, 8e9, 2, "none", 2)
    with pytest.raises(ValueError):
        model_state_bytes(8e9, 8e9, 2, "fsdp", 0)


def test_model_info_counts_embeddings_and_layers() -> None:
    # 8B estimate, untied: embeddings + head 2 x 151936 x 4096 = 1,244,659,712;
    # one layer (8e9 - 1,244,659,712) / 36 = 187,648,341.3.
    assert EIGHT_B.embedding_params == 1_244_659_712
    assert EIGHT_B.layer_params == pytest.approx(187_648_341.3, abs=1)
    assert ModelInfo.estimate("4B", 4.0).tied_embeddings  # Qwen3-4B ties them
    smol = ModelInfo.from_hf_config("SmolLM2-135M", SMOLLM2_135M)
    assert smol.tied_embeddings and smol.embedding_params == 49152 * 576


def test_fsdp_gathers_the_root_unit_and_one_layer() -> None:
    # (1,244,659,712 + 187,648,341.3) params x 2 B (weights) x 2 (grads) = 5.336 GiB.
    assert fsdp_gathered_bytes(EIGHT_B, 2) / GIB == pytest.approx(5.336, abs=1e-3)


def test_lora_params_and_names() -> None:
    # 2% of the bf16 weights' bytes (0.32e9 for 8B) at 16 B per fp32 adapter param: 20e6.
    assert lora_params(8e9) == pytest.approx(20e6)
    assert (dtype_name(2), dtype_name(4)) == ("bf16", "fp32")
    assert launch_name("fsdp", 4) == "FSDP over 4 GPUs"
    assert launch_name("ddp", 2) == "DDP over 2 GPUs: a full copy per GPU"
    assert launch_name("none", 1) == "one device"


def test_train_need_prints_one_term_per_line_and_names_the_launch() -> None:
    need = train_need(EIGHT_B, "full", 4, 2, 2.0, False)
    assert need.launch == "FSDP over 4 GPUs, bf16"
    lines = need.parts.splitlines()
    assert [line.split(maxsplit=1)[1] for line in lines] == [
        "weights+grads+AdamW (8 B/param in bf16, sharded over 4)",
        "gathered units (embeddings+head and one layer, weights+grads)",
        "activations of one 4096-token micro-batch (not checkpointed)",
        "overhead",
    ]
    assert sum(float(line.split()[0]) for line in lines) == pytest.approx(need.gib, abs=0.2)
    cpu = train_need(ModelInfo.from_hf_config("smol", SMOLLM2_135M), "full", 1, 4, 0.0, False)
    assert cpu.launch == "one device, fp32" and "16 B/param in fp32" in cpu.parts
    lora = train_need(EIGHT_B, "lora", 2, 2, 2.0, True)
    assert lora.launch == "DDP over 2 GPUs: a full copy per GPU, bf16"
    assert "DDP gradient buckets (a second copy of the adapter's gradients)" in lora.parts


def test_eight_b_full_on_8x80_is_launched_with_fsdp_over_four() -> None:
    """8B full on 8 x 80 GB: upstream's 4 trainer / 2 serving / 2 judge, FSDP, no checkpointing.

    Per trainer GPU, by hand:
      weights+grads+AdamW  8e9 x 8 B / 4                                 = 16.000e9 B = 14.901 GiB
      gathered units       (1,244,659,712 + 187,648,341.3) x 2 B x 2      =  5.729e9 B =  5.336 GiB
      activations          4096 x (4096 x 36 x 24 x 2 + 151936 x 4)
                           = 4096 x 7,685,632                             = 31.480e9 B = 29.318 GiB
      overhead                                                                             2.000 GiB
      total                                                                               51.555 GiB
    """
    p = plan(fake_inventory(8), EIGHT_B, settings(CLAWRL_TRAIN__MODE="full"))
    assert (p.train_devices, p.serve_devices, p.judge_devices) == ((0, 1, 2, 3), (4, 5), (6, 7))
    assert p.train_mode == "full" and p.train_sharding == "fsdp"
    assert not p.gradient_checkpointing  # 51.6 fits 79.65 without it
    training = next(m for m in p.memory if m.role == "training")
    assert training.need_gib == pytest.approx(51.555, rel=0.01) and training.fits
    assert "(FSDP over 4 GPUs, bf16): fits." in format_plan(p)


def test_eight_b_full_with_ddp_would_not_fit_80_gb() -> None:
    """DDP keeps a full copy per GPU, by hand:
    weights+grads+AdamW  8e9 x 8 B        = 64e9 B = 59.605 GiB
    DDP buckets          8e9 x 2 B (grads) = 16e9 B = 14.901 GiB
    activations          29.318 GiB not checkpointed, 4.193 checkpointed:
                         4096 x (4096 x (36 + 24) x 2 + 151936 x 4) = 4,502,585,344 B
    overhead             2 GiB
    total                105.824 GiB (80.699 checkpointed): neither fits 79.65.
    """
    ddp = train_need(EIGHT_B, "full", 4, 2, 2.0, False, sharding="ddp")
    assert ddp.gib == pytest.approx(105.824, rel=0.01) and ddp.gib > 79.65
    assert ddp.launch == "DDP over 4 GPUs: a full copy per GPU, bf16"
    assert " 14.9 DDP gradient buckets (a second copy of the gradients)" in ddp.parts
    checkpointed = train_need(EIGHT_B, "full", 4, 2, 2.0, True, sharding="ddp")
    assert checkpointed.gib == pytest.approx(80.699, rel=0.01) and checkpointed.gib > 79.65


def test_seventy_b_lora_on_8x80_needs_a_4_bit_base() -> None:
    """70B LoRA on 8 x 80 GB. The trainer's 2 GPUs run DDP, a full copy of the base on each:

    bf16 LoRA, per GPU (checkpointed):
      base weights  70e9 x 2 B                                    = 140e9 B   = 130.385 GiB
      LoRA          70e9 x 2 B x 2% (fp32 adapter, grads, m, v)   = 2.8e9 B   =   2.608 GiB
      DDP buckets   70e9 x 0.0025 adapter params x 4 B            = 0.7e9 B   =   0.652 GiB
      activations   4096 x (8192 x (80 + 24) x 2 + 128256 x 4)    = 9.081e9 B =   8.457 GiB
      overhead                                                                    2.000 GiB
      total                                                                     144.102 GiB > 79.65
    so train.mode = lora is refused, naming QLoRA as a way out; auto takes QLoRA:
      NF4 base      70e9 x 0.55 B                                 = 38.5e9 B  =  35.856 GiB
      + LoRA 2.608 + buckets 0.652 + activations 8.457 + overhead 2 =            49.573 GiB
    which fits with checkpointing only: without it the activations are
      4096 x (8192 x 80 x 24 x 2 + 128256 x 4) = 130.95e9 B = 121.958 GiB (total 163.07).
    Serving (TP2) and the judge (TP2) take 130.385 / 2 + KV 10.0 / 2 + 2 = 72.19 each.
    """
    with pytest.raises(PlanError, match=r"for lora\. Use .*train\.mode = qlora") as err:
        plan(fake_inventory(8), SEVENTY_B, settings(CLAWRL_TRAIN__MODE="lora"))
    assert "needs 144.1 GiB of 79.7 (DDP over 2 GPUs: a full copy per GPU, bf16)" in str(err.value)
    p = plan(fake_inventory(8), SEVENTY_B, settings())
    assert p.train_mode == "qlora" and p.train_sharding == "ddp" and p.gradient_checkpointing
    assert (p.train_devices, p.serve_devices, p.judge_devices) == ((0, 1), (2, 3), (4, 5))
    training = next(m for m in p.memory if m.role == "training")
    assert training.need_gib == pytest.approx(49.573, rel=0.01)
    serving = next(m for m in p.memory if m.role == "serving")
    assert serving.need_gib == pytest.approx(72.19, abs=0.02)
    why = next(r for r in p.reasons if r.startswith("Gradient checkpointing on"))
    assert "needs 163.1 GiB" in why
