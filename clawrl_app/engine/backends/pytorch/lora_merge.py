"""Serve a LoRA version as plain merged weights (small models on the CPU).

peft's LoRA layers add Python work to every linear layer of every decoding step: on the
embedded 135M model a token costs ~74 ms with an adapter active against ~50 ms without.
For a small model it is cheaper to give each served version its own copy of the base
weights with W' = W + (alpha / r) * B @ A folded in (only the adapted layers are copied:
0.4 GiB for the embedded 135M model in float32; embeddings and norms stay shared). Only
plain LoRA adapters qualify (no DoRA, rsLoRA, per-module ranks, extra trained modules);
anything else returns None and is served through peft as before.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

PREFIX = "base_model.model."


def plain_lora_scale(config: dict[str, Any]) -> float | None:
    """alpha / r for a plain LoRA adapter config; None when merging it here is unsupported."""
    unsupported = (
        config.get("peft_type") != "LORA"
        or config.get("use_dora")
        or config.get("use_rslora")
        or config.get("rank_pattern")
        or config.get("alpha_pattern")
        or config.get("modules_to_save")
        or config.get("fan_in_fan_out")
        or config.get("bias", "none") != "none"
    )
    if unsupported or not config.get("r"):
        return None
    return float(config["lora_alpha"]) / float(config["r"])


def lora_pairs(state: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Module name -> (A, B) from a saved adapter's state dict (peft key names)."""
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for key, a in state.items():
        if not key.endswith(".lora_A.weight"):
            continue
        name = key.removesuffix(".lora_A.weight").removeprefix(PREFIX)
        b = state[key.replace(".lora_A.", ".lora_B.")]
        pairs[name] = (a, b)
    return pairs


def merged_copy(base: torch.nn.Module, adapter_dir: Path) -> torch.nn.Module | None:
    """A copy of `base` with the adapter folded into its weights, or None if unsupported."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    scale = plain_lora_scale(config)
    if scale is None:
        return None
    pairs = lora_pairs(load_file(str(adapter_dir / "adapter_model.safetensors")))
    modules = dict(base.named_modules())
    if not pairs or any(name not in modules for name in pairs):
        return None
    # only the weights the adapter changes are copied; embeddings, norms and any layer
    # it leaves alone stay shared with the base (read-only while serving)
    changed = {id(modules[name].weight) for name in pairs}
    shared = {id(t): t for t in [*base.parameters(), *base.buffers()] if id(t) not in changed}
    model = copy.deepcopy(base, memo=shared)
    merged = dict(model.named_modules())
    with torch.no_grad():
        for name, (a, b) in pairs.items():
            weight = merged[name].weight  # (out, in); B (out, r) @ A (r, in)
            # the adapter file loads on the CPU: fold it in on the weight's own device,
            # in float32, then round once to the weight's dtype
            a_ri = a.to(device=weight.device, dtype=torch.float32)
            b_or = b.to(device=weight.device, dtype=torch.float32)
            weight.copy_((weight.float() + scale * (b_or @ a_ri)).to(weight.dtype))
    return model.eval()
