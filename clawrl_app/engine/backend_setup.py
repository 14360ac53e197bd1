"""Building the serving backend the plan chose: SGLang, or the torch backend on the
weights serving starts from (the model itself, or under QLoRA its dequantized NF4 copy)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from clawrl_app.config import Settings
from clawrl_app.engine.backends.base import Backend
from clawrl_app.hardware import Plan, prefix_cache_mib
from clawrl_app.memory_model import MIB
from clawrl_app.models import ResolvedModel
from clawrl_app.paths import AppPaths

log = logging.getLogger("clawrl.engine")


def served_model(model: ResolvedModel, plan: Plan, paths: AppPaths) -> ResolvedModel:
    """The weights serving starts from: the model itself, or under QLoRA the dequantized NF4
    copy that equals what the 4-bit trainer computes with."""
    if plan.train_mode != "qlora":
        return model
    import torch

    from clawrl_app.engine.backends.nf4_base import export_nf4_base

    devices = plan.serve_devices or plan.train_devices
    device = f"cuda:{devices[0]}" if devices else "cpu"
    dtype = torch.bfloat16 if devices else torch.float32
    dest = paths.models_dir / f"{model.name}-nf4-base"
    path = export_nf4_base(model.path, dest, device=device, dtype=dtype, progress=log.info)
    return replace(model, path=path)


def build_backend(
    settings: Settings, plan: Plan, model: ResolvedModel, paths: AppPaths
) -> tuple[Backend, Any]:
    """The backend and the tokenizer (blocking: loads the weights)."""
    served = served_model(model, plan, paths)
    if plan.backend == "sglang":
        from clawrl_app.engine.backends.sglang_factory import build_sglang_backend

        return build_sglang_backend(settings, plan, served, paths)
    from clawrl_app.engine.backends.torch_backend import TorchBackend
    from clawrl_app.models import load_model

    device = f"cuda:{plan.serve_devices[0]}" if plan.serve_devices else "cpu"
    weights, tokenizer = load_model(served, dtype=settings.model.dtype, device=device)
    backend = TorchBackend(
        weights,
        tokenizer,
        model_name=model.name,
        context_length=model.context_length,
        max_batch=settings.model.max_batch,
        max_queue=settings.server.max_queue,
        # merged copies per LoRA version when memory allows (the plan's choice)
        merge_lora=plan.merge_lora,
        prefix_cache_bytes=prefix_cache_mib(settings, plan) * MIB,
    )
    return backend, tokenizer
