"""Serve plain LoRA versions on 16-bit weights exactly, without peft: one forward hook per layer.

Folding an adapter into bf16 weights (lora_merge.py) rounds W + s * B @ A back to bf16, and a
freshly trained adapter's update is mostly below bf16's resolution of W: on an H100 (random
1.5B Llama, bench/canary_gap.py) the merged copy's canary log-probs were 0.0585 from the
trainer's (the base's 0.0701) while peft's were 0.0000, so every version was refused and a
merged version would have served nearly the base. peft computes exactly but adds Python work
to every layer of every step (~3x per token on a GPU).

Here each adapted Linear of the served model gets one forward hook. While a hooked version is
selected, the hook adds s * (x A^T) B^T to the layer's output the way peft does: in the
adapter's dtype (float32 over a 16-bit base), then rounded once to the output dtype. With no
version selected the hooks return at once (the base and peft versions are untouched).

Over a QLoRA trainer's served base (`round_delta`) the hook adds the way peft's 4-bit LoRA
layer does instead: the adapter's output rounded to the output dtype first, then added in it
(on an H200 the float32 add left the canary 0.057 from the trainer's, tolerance 0.05).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from clawrl_app.engine.backends.pytorch.lora_merge import lora_pairs, plain_lora_scale

Pair = tuple[torch.Tensor, torch.Tensor]  # A (r, in), s * B (out, r), on the layer's device


def hookable(adapter_dir: Path) -> bool:
    """A plain LoRA adapter (what the app's trainer writes): served through hooks."""
    config_file = adapter_dir / "adapter_config.json"
    if not config_file.exists():
        return False
    return plain_lora_scale(json.loads(config_file.read_text())) is not None


class LoraHooks:
    """The hooked LoRA versions of one model; `select` picks the one the next forward uses."""

    def __init__(self, model: torch.nn.Module, *, round_delta: bool = False) -> None:
        # the layers by name, taken before peft may wrap them (its LoRA layers keep the same
        # Linear objects as `base_layer`, so the hooks fire inside peft too)
        self._layers = {
            name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
        }
        self._versions: dict[str, dict[torch.nn.Module, Pair]] = {}
        self._active: dict[torch.nn.Module, Pair] | None = None
        self._handles: dict[torch.nn.Module, Any] = {}  # hooked layers: those adapters touch
        self._round_delta = round_delta  # peft's 4-bit layers' order (QLoRA); else its plain one

    def __contains__(self, version: object) -> bool:
        return version in self._versions

    def add(self, version: str, adapter_dir: Path) -> None:
        """Load a plain LoRA adapter (see `hookable`) as `version`."""
        config = json.loads((adapter_dir / "adapter_config.json").read_text())
        scale = plain_lora_scale(config)
        if scale is None:
            raise ValueError(f"{adapter_dir} is not a plain LoRA adapter")
        pairs = lora_pairs(load_file(str(adapter_dir / "adapter_model.safetensors")))
        missing = sorted(set(pairs) - set(self._layers))
        if missing:
            raise ValueError(f"{adapter_dir}: the model has no linear layer {missing[0]!r}")
        loaded: dict[torch.nn.Module, Pair] = {}
        for name, (a, b) in pairs.items():
            layer = self._layers[name]
            weight = layer.weight
            # peft keeps adapters over a 16-bit base in float32 (autocast_adapter_dtype)
            dtype = (
                torch.float32 if weight.dtype in (torch.bfloat16, torch.float16) else weight.dtype
            )
            loaded[layer] = (
                a.to(device=weight.device, dtype=dtype),
                (b.to(device=weight.device, dtype=torch.float32) * scale).to(dtype),
            )
        for hooked in loaded:
            if hooked not in self._handles:
                self._handles[hooked] = hooked.register_forward_hook(self._hook)
        self._versions[version] = loaded

    def remove(self, version: str) -> None:
        if self._active is self._versions.get(version):
            self._active = None
        self._versions.pop(version, None)
        if not self._versions:
            for handle in self._handles.values():
                handle.remove()
            self._handles = {}

    def select(self, version: str | None) -> None:
        """Hooked `version` for the next forward passes; None (base, or a peft or full
        version) leaves every layer alone."""
        self._active = self._versions[version] if version is not None else None

    def _hook(self, layer: torch.nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> Any:
        active = self._active
        if active is None:
            return None
        pair = active.get(layer)
        if pair is None:
            return None
        a_ri, b_or = pair
        # F.linear takes the (out, in) layouts as stored: no transposes; the add promotes the
        # 16-bit output to the adapter's dtype, rounded once on the way back (5 kernels)
        delta = F.linear(F.linear(args[0].to(a_ri.dtype), a_ri), b_or)
        if self._round_delta:
            return out + delta.to(out.dtype)
        return (out + delta).to(out.dtype)
