"""Building the serving backend the plan chose: SGLang, llama.cpp (CPU, a GGUF model), or
the torch backend on the weights serving starts from (the model itself, or under QLoRA its
dequantized NF4 copy)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from clawrl_app.config import Settings
from clawrl_app.engine.backends.base import Backend
from clawrl_app.hardware import Plan, prefix_cache_mib
from clawrl_app.memory_model import MIB
from clawrl_app.models import ModelError, ResolvedModel, gguf_source
from clawrl_app.paths import AppPaths

log = logging.getLogger("clawrl.engine")
# Largest canary log-prob gap (trainer vs served) that still means "the same policy":
# float32 in-process; bf16 kernels on a GPU; llama.cpp on F16 weights (measured max gap
# 0.03 on chat prompts) or on the quantized GGUF as shipped (activations quantized in the
# matrix products: measured max gaps up to ~0.6). See README "Serving on a CPU".
CANARY_TOLERANCE = {"cpu": 1e-3, "gpu": 5e-2, "llamacpp-f16": 0.1, "llamacpp-gguf": 1.5}


def canary_tolerance(plan: Plan, settings: Settings) -> float:
    if plan.backend == "llamacpp":
        return CANARY_TOLERANCE[f"llamacpp-{settings.hardware.llamacpp_weights}"]
    return CANARY_TOLERANCE["gpu" if plan.serve_devices else "cpu"]


def served_model(model: ResolvedModel, plan: Plan, paths: AppPaths) -> ResolvedModel:
    """The weights serving starts from: the model itself, or under QLoRA the dequantized NF4
    copy that equals what the 4-bit trainer computes with."""
    if plan.train_mode != "qlora":
        return model
    import torch

    from clawrl_app.engine.backends.pytorch.nf4_base import export_nf4_base

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
        from clawrl_app.engine.backends.sglang.factory import build_sglang_backend

        return build_sglang_backend(settings, plan, served, paths)
    if plan.backend == "llamacpp":
        return build_llamacpp_backend(settings, plan, served, paths)
    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
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
        qlora=plan.train_mode == "qlora",
        prefix_cache_bytes=prefix_cache_mib(settings, plan) * MIB,
    )
    return backend, tokenizer


def build_llamacpp_backend(
    settings: Settings, plan: Plan, model: ResolvedModel, paths: AppPaths
) -> tuple[Backend, Any]:
    """llama.cpp on the model's GGUF (or its F16 copy), the tokenizer of its converted folder."""
    from transformers import AutoTokenizer

    from clawrl_app.engine.backends.llamacpp.backend import LlamaCppBackend
    from clawrl_app.engine.backends.llamacpp.weights import f16_copy

    gguf = gguf_source(model)
    if gguf is None:
        raise ModelError(f"{model.name} has no GGUF file: set hardware.backend = torch")
    if settings.hardware.llamacpp_weights == "f16":
        gguf = f16_copy(gguf, paths.models_dir / f"{model.name}.f16.gguf", progress=log.info)
    tokenizer = AutoTokenizer.from_pretrained(str(model.path), local_files_only=True)
    backend = LlamaCppBackend(
        gguf,
        tokenizer,
        model_name=model.name,
        context_length=model.context_length,
        work_dir=paths.models_dir / "llamacpp-versions",
        max_batch=settings.model.max_batch,
        max_queue=settings.server.max_queue,
        threads=settings.hardware.cpu_threads,
        prefix_cache_bytes=prefix_cache_mib(settings, plan) * MIB,
    )
    return backend, tokenizer
