"""Build the SGLang backend from the settings and the hardware plan (GPU machines only)."""

from __future__ import annotations

import secrets
import socket
import sys
from typing import Any

from clawrl_app.config import Settings
from clawrl_app.engine.backends.sglang.backend import SGLangBackend
from clawrl_app.engine.backends.sglang.launch import (
    DEFAULT_LORA_TARGETS,
    SGLangServer,
    build_launch_command,
)
from clawrl_app.gpu_inventory import installed_sglang
from clawrl_app.hardware import Plan
from clawrl_app.models import ResolvedModel
from clawrl_app.paths import AppPaths

# base + the old adapter + the new one can share a batch while a version is published
MAX_LORAS_PER_BATCH = 3
# what the app can hold loaded at once: the served adapter, the one it replaced (draining
# its in-flight answers), the candidate the guard checks, and the Compare screen's pair.
# SGLang evicts the least recently used adapter past --max-loaded-loras and reloads it from
# disk on its next request (failing once retention removed the folder), and the app's later
# unload of it gets a 400: the limit must cover everything the app holds.
ADAPTERS_HELD = {"served": 1, "draining": 1, "candidate": 1, "compare pair": 2}
MAX_LOADED_LORAS = sum(ADAPTERS_HELD.values())


def free_port() -> int:
    """A free loopback TCP port for the child server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_sglang_backend(
    settings: Settings, plan: Plan, model: ResolvedModel, paths: AppPaths
) -> tuple[SGLangBackend, Any]:
    """An SGLang server on the plan's serving GPUs plus our tokenizer for the chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model.path), local_files_only=True)
    port = free_port()
    key = secrets.token_urlsafe(24)  # the child is ours alone: a fresh key per launch
    argv, env = build_launch_command(
        settings.hardware.sglang_python or installed_sglang() or sys.executable,
        str(model.path),
        model.name,
        port,
        gpus=plan.serve_devices,
        mem_fraction=settings.hardware.sglang_mem_fraction or plan.sglang_mem_fraction,
        context_length=model.context_length,
        lora_rank=settings.train.lora_rank,
        lora_targets=DEFAULT_LORA_TARGETS,
        max_loras_per_batch=MAX_LORAS_PER_BATCH,
        max_loaded_loras=MAX_LOADED_LORAS,
        api_key=key,
        colocated=plan.colocated,
        nccl_port=free_port(),
        deterministic=settings.hardware.sglang_deterministic,
    )
    base_url = f"http://127.0.0.1:{port}"
    server = SGLangServer(argv, env, base_url=base_url)
    eos = tuple(
        sorted({int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set())
    )
    backend = SGLangBackend(
        base_url,
        api_key=key,
        model_name=model.name,
        context_length=model.context_length,
        eos_token_ids=eos,
        server=server,
        seeded=settings.hardware.sglang_deterministic,
    )
    return backend, tokenizer
