"""Which backend serves on a machine without a GPU: llama.cpp when it can, else torch.

`with_cpu_backend` refines the hardware plan (pure, like `hardware.plan`): llama.cpp serves
a GGUF model (the embedded default is one) several times faster than transformers on a CPU
(bench/serve.py), so `hardware.backend = auto` takes it when `llama-cpp-python` is
installed (`make run` installs it) and the model came from a GGUF file; `torch` keeps the
transformers backend; `llamacpp` insists and says what is missing. Training is unchanged:
the trainer is always torch.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

from clawrl_app.hardware import Plan, PlanError

INSTALL = "pip install llama-cpp-python (`make run` builds it)"
TORCH_LINE = "No GPU in use: the torch backend serves and trains on the CPU."
MERGED_LINE = "LoRA versions are served as merged weights"


def llamacpp_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def with_cpu_backend(plan: Plan, asked: str, installed: bool, gguf: Path | None) -> Plan:
    """The plan with backend `llamacpp` where it applies (see the module doc)."""
    if plan.serve_devices:
        if asked == "llamacpp":
            raise PlanError(
                "hardware.backend = llamacpp serves on the CPU only; with a GPU use auto, "
                "sglang or torch."
            )
        return plan
    if asked == "torch":
        return plan
    if asked == "llamacpp" and not installed:
        raise PlanError(f"hardware.backend = llamacpp but llama-cpp-python is missing: {INSTALL}.")
    if asked == "llamacpp" and gguf is None:
        raise PlanError(
            "hardware.backend = llamacpp serves GGUF models: set model.path to a .gguf file "
            "(or use the embedded default), or use hardware.backend = torch."
        )
    if not installed or gguf is None:
        why = f"for ~6x faster CPU serving {INSTALL}" if not installed else "the model is no GGUF"
        return replace(plan, reasons=(*plan.reasons, f"llama.cpp backend not used: {why}."))
    line = (
        f"No GPU in use: llama.cpp serves {gguf.name} on the CPU (hardware.backend = torch "
        "for transformers); the torch trainer trains."
    )
    reasons = tuple(
        line if r == TORCH_LINE else r
        for r in plan.reasons
        if not r.startswith(MERGED_LINE)  # merged copies are a torch-backend choice
    )
    memory = tuple(m for m in plan.memory if not (plan.merge_lora and m.role == "versions"))
    return replace(plan, backend="llamacpp", merge_lora=False, reasons=reasons, memory=memory)
