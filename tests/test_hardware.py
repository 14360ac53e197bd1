"""Hardware plan: fake inventories, expectations derived from the memory model by hand.

Memory model (clawrl_app.memory_model), in GiB (2**30 bytes), for `ModelInfo.estimate`; the
trainer holds bf16 on a GPU (fp32 on the CPU) and AdamW's m and v in the same dtype:

                      0.1B    4B      8B      32B
  bf16 weights W      0.19    7.45    14.90   59.60     params x 2 B
  KV, one 32k ctx     0.52    4.50    4.50    8.00      2 x layers x kv_heads x head_dim x 2 B
  activations, ckpt   0.95    3.49    4.19    5.76      4096 tok x (hidden x (layers+24) x 2 + vocab x 4)
  activations, none   3.07    19.19   29.32   62.32     4096 tok x (hidden x layers x 24 x 2 + vocab x 4)
  serving / card      2.7     13.9    21.4    69.6      W + KV + 2 overhead (32B: TP2 35.8, TP4 18.9)
  LoRA trainer        3.1     13.1    21.4    68.6      W + 2% W + activations + 2 (checkpointed)
    not checkpointed  5.3     28.8    46.5    125.1
  QLoRA trainer       -       7.7     10.6    25.3      0.55 B/param + 2% W + activations + 2
    not checkpointed  -       23.4    35.7    81.9
  full, one GPU       0.75    29.80   59.60   238.4     weights+grads+AdamW: params x 8 B (bf16)
  FSDP gathered       -       -       5.34    7.57      (embeddings+head + one layer) x 2 B x 2

With 2 LoRA/QLoRA trainer GPUs (DDP) each holds the single-GPU figure plus DDP's buckets, a
second copy of the adapter's fp32 grads (a quarter of the 2%: 8B 0.07, 32B 0.30); full
fine-tuning over n GPUs is FSDP: weights+grads+AdamW / n + the gathered units.

The plan checkpoints only where a layout does not fit without (train.gradient_checkpointing
= auto); the grid's modes and layouts are the same either way, since a layout that fits with
checkpointing is tried with it before the next layout or mode.

Cards as nvidia-smi reports them: "24 GB" = 23.99 GiB, "48 GB" = 47.99, "80 GB" = 79.65.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from itertools import combinations

import pytest

from clawrl_app import gpu_inventory
from clawrl_app.config import Settings, load_settings
from clawrl_app.hardware import (
    GPU,
    Inventory,
    ModelInfo,
    Plan,
    PlanError,
    checkpointing_choices,
    default_lr,
    effective_batch_size,
    effective_lr,
    format_plan,
    inventory,
    parse_nvidia_smi,
    plan,
    visible_gpus,
)

CARD_GIB = {24: 23.99, 48: 47.99, 80: 79.65}
SIZES = {"0.1B": 0.1, "0.5B": 0.5, "1.5B": 1.5, "4B": 4.0, "8B": 8.0, "32B": 32.0}


def fake_inventory(n: int, gb: int = 80, sglang: bool = True, ram: float = 64.0) -> Inventory:
    gpus = tuple(GPU(i, f"Fake {gb}GB", CARD_GIB[gb]) for i in range(n))
    return Inventory(gpus=gpus, sglang_available=sglang, cpu_count=16, ram_gib=ram)


def model(size: str) -> ModelInfo:
    return ModelInfo.estimate(size, SIZES[size])


def settings(**env: str) -> Settings:
    return load_settings(env=env).settings


# (gpus, card GB, model) -> (train_mode, #train, #serve, #judge) or None for PlanError.
# The 0.1B policy gets the heuristic judge, so it never takes a judge card.
GRID: list[tuple[int, int, str, tuple[str, int, int, int] | None]] = [
    # 0 GPUs, 64 GiB RAM (62 usable), fp32 on CPU: 4B serving 14.9+9.0, LoRA 14.9+0.15+4.7
    # = 43.6 fits; 8B serving 38.8 + LoRA 35.6 = 74.4 > 62.
    (0, 24, "0.1B", ("lora", 0, 0, 0)),
    (0, 24, "4B", ("lora", 0, 0, 0)),
    (0, 24, "8B", None),
    (0, 24, "32B", None),
    # 1 GPU, serving + trainer on one card. 4B: LoRA 13.9+13.1 = 27.0 > 24 -> QLoRA 13.9+7.7
    # = 21.6 fits. 8B: LoRA 42.8 fits 48; on 24 even QLoRA is 21.4+10.6 = 32.0. 32B: serving
    # alone is 69.6 > 48, and 69.6 + QLoRA 25.3 = 94.9 > 79.65.
    (1, 24, "0.1B", ("lora", 1, 1, 0)),
    (1, 24, "4B", ("qlora", 1, 1, 0)),
    (1, 24, "8B", None),
    (1, 24, "32B", None),
    (1, 48, "4B", ("lora", 1, 1, 0)),
    (1, 48, "8B", ("lora", 1, 1, 0)),
    (1, 48, "32B", None),
    (1, 80, "8B", ("lora", 1, 1, 0)),
    (1, 80, "32B", None),
    # 2 GPUs: 1 serving (judge shares it) / 1 trainer. 8B needs 21.4 per card: fits 24.
    # 32B serving needs 69.6 > 48 on one card; TP2 would leave no trainer card.
    (2, 24, "0.1B", ("lora", 1, 1, 0)),
    (2, 24, "8B", ("lora", 1, 1, 0)),
    (2, 24, "32B", None),
    (2, 48, "32B", None),
    (2, 80, "32B", ("lora", 1, 1, 0)),  # 69.6 and 68.6 each fit 79.65
    # 4 GPUs: 2 trainer / 1 serving / 1 judge.
    (4, 24, "0.1B", ("lora", 2, 1, 0)),
    (4, 24, "4B", ("lora", 2, 1, 1)),
    (4, 24, "8B", ("lora", 2, 1, 1)),
    (4, 24, "32B", None),  # TP2 35.8 > 24, TP4 leaves no trainer
    (4, 48, "8B", ("lora", 2, 1, 1)),
    # 32B on 48: TP1 69.6 no; TP2 35.8 fits but then judge TP2 leaves no trainer, so the judge
    # shares serving; LoRA 68.6 > 48 on the 2 trainer cards, QLoRA 25.3 fits.
    (4, 48, "32B", ("qlora", 2, 2, 0)),
    (4, 80, "32B", ("lora", 2, 1, 1)),
    # 8 GPUs, LoRA: upstream 2/1/1, the other 4 stay idle.
    (8, 24, "4B", ("lora", 2, 1, 1)),
    (8, 24, "8B", ("lora", 2, 1, 1)),
    # serving needs TP4 (18.9); QLoRA 25.3 > 23.99 on the trainer cards with 4096-token
    # micro-batches, 22.8 with 2048 (the plan's last resort: `lowered_budgets`)
    (8, 24, "32B", ("qlora", 2, 4, 0)),
    (8, 48, "0.1B", ("lora", 2, 1, 0)),
    (8, 48, "32B", ("qlora", 2, 2, 2)),  # TP2 serving, TP2 judge, QLoRA (LoRA 68.6 > 48)
    (8, 80, "8B", ("lora", 2, 1, 1)),
    (8, 80, "32B", ("lora", 2, 1, 1)),
]


@pytest.mark.parametrize(("n", "gb", "size", "expected"), GRID)
def test_plan_grid(n: int, gb: int, size: str, expected: tuple[str, int, int, int] | None) -> None:
    inv, info = fake_inventory(n, gb), model(size)
    if expected is None:
        with pytest.raises(PlanError, match=r"does not fit .*GiB.*smaller model"):
            plan(inv, info, settings())
        return
    p = plan(inv, info, settings())
    mode, n_train, n_serve, n_judge = expected
    got = (p.train_mode, len(p.train_devices), len(p.serve_devices), len(p.judge_devices))
    assert got == expected
    assert p.train_sharding == ("ddp" if n_train > 1 else "none")  # LoRA/QLoRA: never FSDP
    assert p.backend == ("sglang" if n else "torch")
    assert p.colocated == (n == 1)
    assert p.default_batch_size == (16 if n else 4)
    assert p.judge_backend == ("heuristic" if size == "0.1B" else "policy")
    assert p.judge_shares_serving == (p.judge_backend == "policy" and n_judge == 0)
    assert all(line.fits for line in p.memory)
    assert p.reasons and all(r.strip() for r in p.reasons)
    if n == 1:
        assert p.serve_devices == p.train_devices == (0,)
    if mode == "qlora":
        assert any("QLoRA" in r and "does NOT fit" in r for r in p.reasons)


def _all_plans() -> list[Plan]:
    out = []
    for n in (2, 3, 4, 8):
        for gb in CARD_GIB:
            for size in SIZES:
                for mode in ("auto", "full"):
                    try:
                        p = plan(
                            fake_inventory(n, gb), model(size), settings(CLAWRL_TRAIN__MODE=mode)
                        )
                    except PlanError:
                        continue
                    out.append(p)
    return out


def test_multi_gpu_roles_are_disjoint_and_real() -> None:
    plans = _all_plans()
    assert len(plans) > 30
    for p in plans:
        groups = [set(p.train_devices), set(p.serve_devices), set(p.judge_devices)]
        for a, b in combinations(groups, 2):
            assert not a & b, p
        assert p.train_devices and p.serve_devices and not p.colocated
        assert set().union(*groups) <= set(range(8))


def test_upstream_layouts() -> None:
    # 8 GPUs full: 4 trainer (FSDP) / 2 serving / 2 judge; 8B full per trainer GPU =
    # 8 B x 8e9 / 4 = 14.9 + gathered 5.3 + activations 29.3 (not checkpointed) + 2 = 51.6.
    p = plan(fake_inventory(8), model("8B"), settings(CLAWRL_TRAIN__MODE="full"))
    assert (p.train_devices, p.serve_devices, p.judge_devices) == ((0, 1, 2, 3), (4, 5), (6, 7))
    assert p.train_sharding == "fsdp" and not p.gradient_checkpointing
    # 3 GPUs: 1/1/1.
    p = plan(fake_inventory(3, 48), model("4B"), settings())
    assert (p.train_devices, p.serve_devices, p.judge_devices) == ((0,), (1,), (2,))
    # 8 GPUs LoRA uses 4 (2/1/1) and says why the rest idle.
    p = plan(fake_inventory(8), model("8B"), settings())
    assert (p.train_devices, p.serve_devices, p.judge_devices) == ((0, 1), (2,), (3,))
    assert any("cuda:4,5,6,7 stay idle" in r for r in p.reasons)


def test_full_fine_tuning_takes_more_cards_only_where_four_do_not_fit() -> None:
    # 32B: 8 B x 32e9 = 238.4 GiB; FSDP over 4: 59.6 + gathered 7.6 + activations 62.3 + 2
    # = 131.5 > 79.65 without checkpointing, 59.6 + 7.6 + 5.8 + 2 = 74.9 with: upstream 4/2/2.
    p = plan(fake_inventory(8), model("32B"), settings(CLAWRL_TRAIN__MODE="full"))
    assert (len(p.train_devices), len(p.serve_devices), len(p.judge_devices)) == (4, 2, 2)
    assert p.train_sharding == "fsdp" and p.gradient_checkpointing
    assert p.memory[-1].need_gib == pytest.approx(74.93, abs=0.02)
    # 36B (72 layers): over 4, 67.1 + 7.6 + 6.1 + 2 = 82.7 > 79.65 even checkpointed; the
    # next layout, 6 trainer / 2 serving with the judge sharing them, fits: 44.7 + 7.6 + 6.1 + 2.
    p = plan(
        fake_inventory(8), ModelInfo.estimate("36B", 36.0), settings(CLAWRL_TRAIN__MODE="full")
    )
    assert (len(p.train_devices), len(p.serve_devices), p.judge_shares_serving) == (6, 2, True)
    assert p.train_sharding == "fsdp" and p.gradient_checkpointing


def test_full_on_one_gpu_only_when_it_fits() -> None:
    # 0.1B: 8 B x 0.1e9 = 0.75 + 0.95 + 2 beside 2.7 of serving: fits, on one device.
    p = plan(fake_inventory(1, 24), model("0.1B"), settings(CLAWRL_TRAIN__MODE="full"))
    assert p.train_mode == "full" and p.colocated and p.train_sharding == "none"
    # 4B: 8 B x 4e9 = 29.8 GiB alone > 24 - 13.9; no silent fallback to LoRA.
    with pytest.raises(PlanError, match="full"):
        plan(fake_inventory(1, 24), model("4B"), settings(CLAWRL_TRAIN__MODE="full"))


def test_tight_colocated_fit_still_gets_a_mem_fraction() -> None:
    # Full 7.2B (32 layers) on 1x80: serving 13.41 + KV 4.0 + 2 = 19.41, trainer 8 B x 7.2e9
    # = 53.64 + 4.07 (checkpointed) + 2 = 59.71, together 79.12: 0.53 GiB spare, less than 1%
    # of the card: the fraction must be chosen finer than 0.01.
    info = ModelInfo.estimate("7.2B", 7.2)
    p = plan(fake_inventory(1), info, settings(CLAWRL_TRAIN__MODE="full"))
    assert p.memory[0].need_gib + p.memory[1].need_gib == pytest.approx(79.12, abs=0.02)
    assert p.sglang_mem_fraction is not None
    assert p.sglang_mem_fraction * 79.65 >= 17.41
    assert (1 - p.sglang_mem_fraction) * 79.65 - 2.0 >= p.memory[1].need_gib


def test_explicit_lora_does_not_fall_back_to_qlora() -> None:
    # auto picks QLoRA for 4B on 1x24 GB (LoRA 13.9 + 13.1 = 27.0 > 23.99); lora asked = refuse.
    with pytest.raises(PlanError, match=r"(?s)for lora\. .*does NOT fit"):
        plan(fake_inventory(1, 24), model("4B"), settings(CLAWRL_TRAIN__MODE="lora"))
    p = plan(fake_inventory(1, 24), model("4B"), settings(CLAWRL_TRAIN__MODE="qlora"))
    assert p.train_mode == "qlora" and "as set in train.mode" in " ".join(p.reasons)


def test_env_overrides_are_honoured() -> None:
    env = {"ACTOR_GPUS": "4", "ROLLOUT_GPUS": "2", "PRM_GPUS": "2"}
    p = plan(fake_inventory(8), model("8B"), settings(**env))
    assert (p.train_devices, p.serve_devices, p.judge_devices) == ((0, 1, 2, 3), (4, 5), (6, 7))
    p = plan(fake_inventory(4), model("8B"), settings(PRM_GPUS="0"))
    assert p.judge_devices == () and p.judge_shares_serving
    p = plan(fake_inventory(8), model("8B"), settings(NUM_GPUS="4", CLAWRL_TRAIN__MODE="full"))
    assert set(p.train_devices + p.serve_devices + p.judge_devices) == {0, 1, 2, 3}
    assert "NUM_GPUS=4" in p.reasons[0]
    p = plan(fake_inventory(8), model("8B"), settings(NUM_GPUS="1"))
    assert p.colocated and p.serve_devices == (0,)
    p = plan(fake_inventory(8), model("0.1B"), settings(NUM_GPUS="0"))
    assert p.backend == "torch" and p.train_devices == () and p.default_batch_size == 4


def test_default_learning_rate_by_mode_and_device() -> None:
    cpu = plan(fake_inventory(0), model("0.1B"), settings())
    assert cpu.train_mode == "lora" and cpu.default_lr == 5e-4
    assert any("5e-4" in r and "bench/learn.py" in r for r in cpu.reasons)
    gpu = plan(fake_inventory(2), model("8B"), settings())
    assert gpu.default_lr == 1e-4
    full = plan(fake_inventory(8), model("8B"), settings(CLAWRL_TRAIN__MODE="full"))
    assert full.train_mode == "full" and full.default_lr == 1e-5
    assert default_lr("full", False)[0] == 1e-5


def test_the_plan_shows_the_learning_rate_and_batch_size_the_trainer_uses() -> None:
    """train.lr / train.batch_size set by the user (CLAWRL_TRAIN__LR) are what the trainer
    uses, so the plan shows them, not the defaults it would have used."""
    default = plan(fake_inventory(0), model("0.1B"), settings())
    assert effective_lr(default) == 5e-4 and effective_batch_size(default) == 4
    assert "4 samples per step (default), lr 0.0005 (default)" in format_plan(default)
    assert any(r.startswith("Default learning rate 5e-4") for r in default.reasons)
    set_ = plan(fake_inventory(0), model("0.1B"),
                settings(CLAWRL_TRAIN__LR="1e-4", CLAWRL_TRAIN__BATCH_SIZE="8"))  # fmt: skip
    assert effective_lr(set_) == 1e-4 and set_.default_lr == 5e-4
    assert effective_batch_size(set_) == 8
    text = format_plan(set_)
    assert "8 samples per step (train.batch_size), lr 0.0001 (train.lr)" in text
    assert "Learning rate 0.0001, as set in train.lr (default 0.0005)." in text
    assert "Batch size 8, as set in train.batch_size (default 4)." in text


@pytest.mark.parametrize(
    ("n", "env", "message"),
    [
        (
            8,
            {"ACTOR_GPUS": "4", "ROLLOUT_GPUS": "4", "PRM_GPUS": "2"},
            "ACTOR_GPUS=4 + ROLLOUT_GPUS=4 + PRM_GPUS=2 = 10 > 8 GPUs available",
        ),
        (8, {"ACTOR_GPUS": "-1"}, "ACTOR_GPUS=-1 is negative"),
        (8, {"NUM_GPUS": "-2"}, "NUM_GPUS=-2 is negative"),
        (4, {"NUM_GPUS": "8"}, "NUM_GPUS=8 > 4 GPUs visible"),
        (8, {"ACTOR_GPUS": "8"}, "leave no GPU for serving"),
        (4, {"ROLLOUT_GPUS": "0"}, "leave no GPU for serving"),
        (1, {"PRM_GPUS": "1"}, "on 1 GPU"),
        (1, {"ACTOR_GPUS": "2"}, "on 1 GPU"),
        (0, {"ACTOR_GPUS": "1"}, "none is in use"),
    ],
)
def test_impossible_splits_are_refused(n: int, env: dict[str, str], message: str) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        plan(fake_inventory(n), model("8B"), settings(**env))


def test_prm_gpus_need_a_model_judge() -> None:
    with pytest.raises(PlanError, match="PRM_GPUS=1 .* heuristic"):
        plan(fake_inventory(4), model("0.1B"), settings(PRM_GPUS="1"))


def test_cpu_refuses_qlora_and_sglang() -> None:
    with pytest.raises(PlanError, match="qlora needs CUDA.*lora or full"):
        plan(fake_inventory(0), model("0.1B"), settings(CLAWRL_TRAIN__MODE="qlora"))
    with pytest.raises(PlanError, match="sglang needs a GPU"):
        plan(fake_inventory(0), model("0.1B"), settings(CLAWRL_HARDWARE__BACKEND="sglang"))


def test_cpu_full_and_too_big_for_ram() -> None:
    p = plan(fake_inventory(0, ram=16), model("0.1B"), settings(CLAWRL_TRAIN__MODE="full"))
    assert p.train_mode == "full" and p.backend == "torch" and p.sglang_mem_fraction is None
    # 4B in fp32: serving 14.9 + 9.0 alone nearly fills the 14 GiB left of 16.
    with pytest.raises(PlanError, match=r"4B.*16.0 GiB RAM.*SmolLM2-135M"):
        plan(fake_inventory(0, ram=16), model("4B"), settings())


def test_backend_choice() -> None:
    p = plan(fake_inventory(1, sglang=False), model("8B"), settings())
    assert p.backend == "torch" and p.sglang_mem_fraction is None
    assert any("`make run`" in r for r in p.reasons)  # installs it on NVIDIA machines
    with pytest.raises(PlanError, match=r"`make run`.*sglang_python"):
        plan(
            fake_inventory(1, sglang=False),
            model("8B"),
            settings(CLAWRL_HARDWARE__BACKEND="sglang"),
        )
    p = plan(
        fake_inventory(1, sglang=False),
        model("8B"),
        settings(CLAWRL_HARDWARE__SGLANG_PYTHON="/opt/sglang/bin/python"),
    )
    assert p.backend == "sglang"
    p = plan(fake_inventory(2), model("8B"), settings(CLAWRL_HARDWARE__BACKEND="torch"))
    assert p.backend == "torch" and p.sglang_mem_fraction is None


def test_colocated_mem_fraction_is_computed_and_leaves_trainer_room() -> None:
    fractions = []
    for gb in (48, 80):
        p = plan(fake_inventory(1, gb), model("8B"), settings())
        serving, training = p.memory
        assert p.sglang_mem_fraction is not None and 0.3 < p.sglang_mem_fraction < 0.6
        have = CARD_GIB[gb]
        assert p.sglang_mem_fraction * have >= serving.need_gib - 2.0  # weights + KV pool
        assert (1 - p.sglang_mem_fraction) * have - 2.0 >= training.need_gib
        fractions.append(p.sglang_mem_fraction)
    assert fractions[0] != fractions[1]
    # 4B QLoRA on 24 GB: pool 11.9 of 24 -> a larger share than on the roomy cards.
    p = plan(fake_inventory(1, 24), model("4B"), settings())
    assert p.sglang_mem_fraction is not None and p.sglang_mem_fraction > 0.5


def test_mem_fraction_override() -> None:
    p = plan(fake_inventory(1), model("8B"), settings(CLAWRL_HARDWARE__SGLANG_MEM_FRACTION="0.4"))
    assert p.sglang_mem_fraction == 0.4
    # 0.15 x 79.65 = 11.9 < 19.4 GiB of weights + KV.
    with pytest.raises(PlanError, match=r"--mem-fraction-static 0.15 .*must lie in"):
        plan(fake_inventory(1), model("8B"), settings(CLAWRL_HARDWARE__SGLANG_MEM_FRACTION="0.15"))
    p = plan(fake_inventory(2), model("8B"), settings(CLAWRL_HARDWARE__SGLANG_MEM_FRACTION="0.8"))
    assert p.sglang_mem_fraction == 0.8


def test_judge_backend_choice() -> None:
    assert plan(fake_inventory(0), model("0.1B"), settings()).judge_backend == "heuristic"
    assert plan(fake_inventory(2), model("4B"), settings()).judge_backend == "policy"
    env = {"CLAWRL_JUDGE__BACKEND": "openai", "CLAWRL_JUDGE__OPENAI_URL": "http://x/v1"}
    p = plan(fake_inventory(4), model("8B"), settings(**env))
    assert p.judge_backend == "openai" and p.judge_devices == () and not p.judge_shares_serving
    with pytest.raises(PlanError, match="openai_url"):
        plan(fake_inventory(4), model("8B"), settings(CLAWRL_JUDGE__BACKEND="openai"))
    p = plan(fake_inventory(2), model("0.1B"), settings(CLAWRL_JUDGE__BACKEND="policy"))
    assert p.judge_backend == "policy" and p.judge_shares_serving
    # upstream's PRM_MODEL_PATH is accepted but no separate judge model is loaded: the plan
    # says so instead of naming it as the judge, and chooses as it would without it
    p = plan(fake_inventory(0), model("0.1B"), settings(CLAWRL_JUDGE__MODEL_PATH="/models/prm"))
    assert p.judge_backend == "heuristic"
    assert any("judge.model_path (/models/prm) is not used" in r for r in p.reasons)


SMOLLM2_135M = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 576,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "tie_word_embeddings": True,
    "vocab_size": 49152,
}


def test_model_info_from_hf_config() -> None:
    info = ModelInfo.from_hf_config("SmolLM2-135M", SMOLLM2_135M)
    # 49152 x 576 embedding + 30 x (q,o 2x576x576 + k,v 2x576x192 + 3x576x1536 + 2x576) + 576
    assert info.params_b == pytest.approx(0.134515, abs=1e-5)
    assert (info.num_layers, info.num_kv_heads, info.head_dim) == (30, 3, 64)
    assert (info.context_length, info.vocab_size) == (8192, 49152)
    untied = ModelInfo.from_hf_config("x", {**SMOLLM2_135M, "tie_word_embeddings": False})
    assert (untied.params_b - info.params_b) * 1e9 == pytest.approx(49152 * 576)
    with pytest.raises(PlanError, match="hidden_size"):
        ModelInfo.from_hf_config("broken", {"num_hidden_layers": 2})


def test_model_info_estimate() -> None:
    eight = ModelInfo.estimate("8B", 8.0)
    assert (eight.num_layers, eight.hidden_size, eight.num_kv_heads, eight.head_dim) == (
        36,
        4096,
        8,
        128,
    )
    assert eight.kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2
    assert ModelInfo.estimate("32B", 32.0).num_layers == 64
    assert ModelInfo.estimate("4B", 4.0, context_length=4096).context_length == 4096
    layers = [ModelInfo.estimate(s, b).num_layers for s, b in SIZES.items()]
    assert layers == sorted(layers)
    with pytest.raises(PlanError):
        ModelInfo.estimate("none", 0)


def test_parse_nvidia_smi() -> None:
    text = (
        "0, NVIDIA H100 80GB HBM3, 81559\n"
        "1, NVIDIA GeForce RTX 4090, 24564\n"
        "\n"
        "2, Broken GPU, [N/A]\n"
        "No devices were found\n"
    )
    assert parse_nvidia_smi(text) == (
        GPU(0, "NVIDIA H100 80GB HBM3", 79.65),
        GPU(1, "NVIDIA GeForce RTX 4090", 23.99),
    )
    assert parse_nvidia_smi("") == ()


def test_visible_gpus_follows_cuda_rules() -> None:
    gpus = [GPU(i, "g", 80.0) for i in range(4)]
    assert visible_gpus(gpus, None) == tuple(gpus)
    assert [g.index for g in visible_gpus(gpus, "3,1") or ()] == [3, 1]
    assert visible_gpus(gpus, "") == ()
    assert [g.index for g in visible_gpus(gpus, "0,7,1") or ()] == [0]  # stops at unknown 7
    assert visible_gpus(gpus, "-1") == ()
    assert visible_gpus(gpus, "GPU-8f6c2b1e") is None


def test_inventory_uses_nvidia_smi_and_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert "--query-gpu=index,name,memory.total" in cmd and kwargs.get("timeout")
        return subprocess.CompletedProcess(cmd, 0, "0, A, 24564\n1, B, 81559\n", "")

    monkeypatch.setattr(gpu_inventory.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_inventory.subprocess, "run", fake_run)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    inv = inventory()
    assert inv.gpus == (GPU(1, "B", 79.65),)
    assert inv.cpu_count >= 1 and inv.ram_gib > 0


def test_inventory_without_nvidia_smi_has_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    def timeout(cmd: list[str], **kwargs: object) -> None:
        raise subprocess.TimeoutExpired(cmd, 10)

    monkeypatch.setattr(gpu_inventory.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_inventory.subprocess, "run", timeout)
    monkeypatch.setattr(gpu_inventory, "_torch_gpus", lambda _: ())  # importing torch is slow
    assert inventory().gpus == ()


def test_format_plan_mentions_devices_and_numbers() -> None:
    text = format_plan(plan(fake_inventory(8), model("8B"), settings(CLAWRL_TRAIN__MODE="full")))
    for needle in ("cuda:0,1,2,3", "cuda:4,5", "cuda:6,7", "full", "Memory", "Why:"):
        assert needle in text
    assert "Trainer:  full on cuda:0,1,2,3 (FSDP over 4 GPUs), gradient checkpointing off" in text
    # the trainer's terms, one per line, indented under their reason
    assert "(FSDP over 4 GPUs, bf16): fits.\n       14.9 weights+grads+AdamW" in text
    text = format_plan(plan(fake_inventory(1), model("8B"), settings()))
    assert "cuda:0" in text and "colocated" in text and "--mem-fraction-static 0." in text
    text = format_plan(plan(fake_inventory(0), model("0.1B"), settings()))
    assert "cpu" in text and "heuristic" in text and "19-70 s" in text


def test_checkpointing_choices_follow_the_setting() -> None:
    assert checkpointing_choices("auto") == (False, True)  # without first: it is faster
    assert checkpointing_choices("on") == (True,)
    assert checkpointing_choices("off") == (False,)
    with pytest.raises(PlanError, match="auto, on or off"):
        checkpointing_choices("sometimes")


@pytest.mark.parametrize(
    ("n", "gb", "size", "env", "expected"),
    [
        # CPU, 64 GiB RAM (62 usable), fp32: 0.1B needs little either way -> off (speed).
        (0, 24, "0.1B", {}, False),
        # CPU 4B fp32: serving 23.9 + LoRA 14.9 + 0.1 + 36.1 (fp32 activations) = 75 > 62 -> on.
        (0, 24, "4B", {}, True),
        # 1x80, 8B: serving 21.4 + LoRA 46.5 without = 67.9 <= 79.65 -> off.
        (1, 80, "8B", {}, False),
        # 1x48, 8B: 67.9 > 47.99 without; with it 21.4 + 21.4 = 42.8 fits -> on (still LoRA).
        (1, 48, "8B", {}, True),
        # ... unless micro-batches are 1024 tokens: activations 29.32 / 4 = 7.33, 45.9 fits.
        (1, 48, "8B", {"CLAWRL_TRAIN__TOKEN_BUDGET": "1024"}, False),
        # asked for: on even where it would fit without.
        (1, 80, "8B", {"CLAWRL_TRAIN__GRADIENT_CHECKPOINTING": "on"}, True),
        (0, 24, "0.1B", {"CLAWRL_TRAIN__GRADIENT_CHECKPOINTING": "on"}, True),
        # an asked SGLang pool of 0.4 x 79.65 = 31.9 leaves 45.8 - 2 < 46.5 without -> on.
        (1, 80, "8B", {"CLAWRL_HARDWARE__SGLANG_MEM_FRACTION": "0.4"}, True),
    ],
)
def test_plan_checkpoints_only_where_the_trainer_does_not_fit_without(
    n: int, gb: int, size: str, env: dict[str, str], expected: bool
) -> None:
    p = plan(fake_inventory(n, gb), model(size), settings(**env))
    assert p.gradient_checkpointing is expected
    assert p.train_mode == "lora"
    training = next(m for m in p.memory if m.role == "training")
    assert training.role == "training" and training.fits
    why = next(r for r in p.reasons if r.startswith("Gradient checkpointing"))
    assert why.startswith(f"Gradient checkpointing {'on' if expected else 'off'}")
    trainer_line = next(r for r in p.reasons if r.startswith("training on"))
    assert ("(checkpointed)" if expected else "(not checkpointed)") in trainer_line
    if expected and not env:
        assert "does NOT fit" in why  # names the numbers that ruled it out
    text = format_plan(p)
    assert f"gradient checkpointing {'on' if expected else 'off'}" in text


def test_trainer_need_follows_the_checkpointing_choice() -> None:
    # 8B LoRA on 1x80: W 14.90 + LoRA 0.30 + activations + 2; activations without
    # checkpointing 4096 x (4096 x 36 x 24 x 2 + 151936 x 4) B = 29.32 GiB, with 4.19 GiB.
    off = plan(fake_inventory(1), model("8B"), settings())
    on = plan(fake_inventory(1), model("8B"), settings(CLAWRL_TRAIN__GRADIENT_CHECKPOINTING="on"))
    assert off.memory[-1].need_gib == pytest.approx(14.90 + 0.30 + 29.32 + 2, abs=0.02)
    assert on.memory[-1].need_gib == pytest.approx(14.90 + 0.30 + 4.19 + 2, abs=0.02)
    # less trainer memory leaves SGLang a larger pool on the shared card
    assert on.sglang_mem_fraction is not None and off.sglang_mem_fraction is not None
    assert on.sglang_mem_fraction > off.sglang_mem_fraction


def test_importing_hardware_does_not_import_torch() -> None:
    code = "import sys, clawrl_app.hardware; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_torch_fallback_skipped_without_nvidia_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_inventory.os.path, "exists", lambda _: False)
    monkeypatch.setattr(gpu_inventory.os, "name", "posix")
    assert gpu_inventory._torch_gpus(None) == ()


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU")
def test_real_inventory_plans() -> None:
    inv = inventory()
    assert inv.gpus and all(g.memory_gib > 1 for g in inv.gpus)
    p = plan(inv, model("0.1B"), settings())
    assert p.serve_devices and p.train_devices
    assert set(p.serve_devices) <= {g.index for g in inv.gpus}
