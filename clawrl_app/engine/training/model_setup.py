"""Loading the trainer's model: LoRA's target layers, gradient checkpointing, QLoRA's 4-bit
base (torch-heavy helpers kept out of the training loop's module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# Non-reentrant checkpointing: works with inputs that need no grad and with hooks (pause points).
CHECKPOINT_KWARGS = {"use_reentrant": False}


def enable_checkpointing(model: Any, *, adapter: bool) -> None:
    """Gradient checkpointing on a HF model (before peft wraps it). For an adapter the frozen
    embeddings' output is made to require grad, as peft documents for checkpointing (needed
    by the reentrant variant; a no-op for correctness with ours, at a negligible cost)."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x's name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=CHECKPOINT_KWARGS)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=CHECKPOINT_KWARGS)
    if adapter:
        model.enable_input_require_grads()


def load_4bit(
    path: Path,
    device: str = "cuda",
    checkpointing: bool = False,
    dtype: torch.dtype | None = None,
) -> tuple[Any, Any]:
    """QLoRA: the base model in 4-bit NF4 (bitsandbytes), ready for LoRA training, with
    gradient checkpointing only when the plan chose it (peft's default is always on). The
    serving side serves exactly these weights, dequantized (engine/backends/pytorch/nf4_base.py).

    `dtype` is the compute dtype (default: bf16 on a GPU, fp32 on a CPU). Every weight that is
    not 4-bit (embeddings, norms, the LM head) stays in it: peft's
    `prepare_model_for_kbit_training` casts them to fp32, which carries the whole residual
    stream in fp32 while the server computes in bf16, so the publisher's canary saw the two
    0.11 apart on an H200 (tolerance 0.05) and refused every QLoRA checkpoint."""
    from transformers import AutoTokenizer

    from clawrl_app.engine.backends.pytorch.nf4_base import load_nf4

    on_gpu = device.startswith("cuda")
    if dtype is None:
        dtype = torch.bfloat16 if on_gpu else torch.float32
    model = load_nf4(path, "cuda:0" if device == "cuda" else device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    for param in model.parameters():
        param.requires_grad_(False)
    if checkpointing:
        enable_checkpointing(model, adapter=True)
    return model, tokenizer
