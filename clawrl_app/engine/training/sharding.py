"""How the trainer's model is spread over its ranks: one process ("none"), replicated with
averaged gradients ("ddp", LoRA on several GPUs), or sharded ("fsdp", full fine-tuning on
several GPUs: each rank keeps 1/world of the weights, gradients and AdamW state).

FSDP is torch's FSDP2 (`fully_shard`, torch >= 2.4; the project pins that) applied here,
not through accelerate: accelerate 1.x silently ignores its `FullyShardedDataParallelPlugin`
on the CPU (the state stays MULTI_CPU and `prepare` wraps the model in DDP), so that path
could never be tested without GPUs, while `fully_shard` runs the same code on gloo and NCCL.
The Accelerator still owns the process group, the device and `backward`.

Checkpoints stay what the publisher serves: rank 0 writes a HF model folder from the full
state dict gathered to it, and `optimizer.pt` holds the full optimizer state keyed by
parameter name (`torch.distributed.checkpoint.state_dict`'s format), so a checkpoint of 2
ranks resumes on 1 and back. Every function taking a model or an optimizer here is a
collective when the model is sharded: all ranks call it, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

if TYPE_CHECKING:
    from accelerate import Accelerator
    from torch.distributed.tensor import DTensor

Sharding = Literal["none", "ddp", "fsdp"]
SHARDINGS: tuple[Sharding, ...] = ("none", "ddp", "fsdp")
MakeOptimizer = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


def choose_sharding(mode: str, world: int) -> Sharding:
    """FSDP for full fine-tuning on several ranks (a full copy per GPU is what it avoids),
    DDP for adapters on several ranks (their few weights are cheap to replicate), none for one."""
    if world <= 1:
        return "none"
    return "fsdp" if mode == "full" else "ddp"


def resolve_sharding(asked: str, mode: str, world: int) -> Sharding:
    """The layout to run: `choose_sharding` for "auto", else the one asked (the plan's),
    refused with what to do when it cannot hold this mode on `world` ranks. FSDP with one
    rank is allowed (it runs the sharded save and resume paths on a single GPU)."""
    if asked == "auto":
        return choose_sharding(mode, world)
    if asked not in SHARDINGS:
        raise SystemExit(f"train sharding {asked!r}: use auto, none, ddp or fsdp")
    if asked == "fsdp" and mode != "full":
        raise SystemExit("FSDP shards full fine-tuning only; LoRA and QLoRA train with ddp")
    if asked == "none" and world > 1:
        raise SystemExit(f"sharding none with {world} ranks; use ddp or fsdp (or auto)")
    return asked  # type: ignore[return-value]


def make_accelerator(sharding: Sharding, cpu: bool) -> Accelerator:
    """The Accelerator for `sharding`: it starts the process group (gloo on the CPU, NCCL on
    GPUs) and picks this rank's device. No FSDP plugin even for "fsdp": `prepare_model`
    shards the model itself (see the module docstring)."""
    from accelerate import Accelerator

    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r}: use one of {', '.join(SHARDINGS)}")
    return Accelerator(cpu=cpu)


def _fsdp_api() -> tuple[Any, Any]:
    """`fully_shard` and `FSDPModule`: public from torch 2.6, under `_composable` in 2.4-2.5."""
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError:  # torch 2.4 / 2.5
        from torch.distributed._composable.fsdp import (  # type: ignore[no-redef]
            FSDPModule,
            fully_shard,
        )
    return fully_shard, FSDPModule


def _dtensor() -> type[DTensor]:
    """DTensor's class: public from torch 2.5, under `_tensor` in 2.4."""
    try:
        from torch.distributed.tensor import DTensor as cls
    except ImportError:  # torch 2.4
        from torch.distributed._tensor import DTensor as cls  # type: ignore[no-redef]
    return cls


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model` was sharded by `prepare_model` (its parameters are DTensor shards)."""
    return isinstance(model, _fsdp_api()[1])


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _rank() -> int:
    return torch.distributed.get_rank() if _distributed() else 0


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules FSDP wraps one by one: those whose class HF marks as never to be split
    across devices (`_no_split_modules`, e.g. LlamaDecoderLayer), in model order."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names and m is not model]


@torch.no_grad()
def sync_from_rank0(model: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank (what DDP does when it wraps a
    model): only rank 0 loads a checkpoint's weights, the others start from the base."""
    if not _distributed():
        return
    seen: set[int] = set()
    for t in [*model.parameters(), *model.buffers()]:
        if t.data_ptr() in seen:  # tied weights: one broadcast
            continue
        seen.add(t.data_ptr())
        torch.distributed.broadcast(t.data, src=0)


def prepare_model(
    accelerator: Accelerator,
    sharding: Sharding,
    model: torch.nn.Module,
    make_optimizer: MakeOptimizer,
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and optimizer ready to train. "none"/"ddp": `accelerator.prepare`. "fsdp":
    rank 0's weights on every rank, then each decoder layer and the root sharded over all
    ranks (FSDP2, ZeRO-3: parameters re-sharded after forward, no CPU offload), and the
    optimizer built on the shards. `make_optimizer(params)` gets the trainable parameters
    (after sharding: the optimizer must hold the DTensor shards, not the old tensors)."""
    if sharding != "fsdp":
        optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad])
        prepared, optimizer = accelerator.prepare(model, optimizer)
        return prepared, optimizer
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard, _ = _fsdp_api()
    sync_from_rank0(model)
    mesh = init_device_mesh(accelerator.device.type, (accelerator.num_processes,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, make_optimizer([p for p in model.parameters() if p.requires_grad])


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip the gradients to a global norm of `max_norm` and return the norm before clipping,
    as a plain tensor on every rank (of sharded gradients: the norm of the full gradient)."""
    norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)  # sharded: a DTensor
    return norm.full_tensor() if isinstance(norm, _dtensor()) else norm


def full_state_dict(model: torch.nn.Module) -> dict[str, Any] | None:
    """The model's complete weights (CPU tensors, HF names) on rank 0, None on the others.
    Sharded: gathered from all ranks, so every rank must call it."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(model, options=options)  # {} off rank 0
        return state if _rank() == 0 else None
    if _rank() != 0:
        return None
    own = unwrapped(model).state_dict()
    return {k: v.detach().to("cpu", copy=True) for k, v in own.items()}


def save_full_model(model: torch.nn.Module, state: dict[str, Any], folder: str) -> None:
    """Rank 0: write the HF model folder (config + safetensors) of `state`, the dict that
    `full_state_dict` returned; `model` (prepared or not) only supplies the config and HF's
    save logic, never its own (sharded) tensors."""
    unwrapped(model).save_pretrained(folder, state_dict=state)  # type: ignore[operator]


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP's (or torch.compile's) wrapper; a sharded model is its own."""
    from accelerate.utils import extract_model_from_parallel

    return extract_model_from_parallel(model)  # type: ignore[no-any-return]


def optimizer_state_for_save(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any] | None:
    """The full optimizer state keyed by parameter name (for `optimizer.pt`) on rank 0,
    None on the others. Sharded: gathered from all ranks, so every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
    if is_sharded(model):
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_optimizer_state_dict(model, inner, options=options)
        return state if _rank() == 0 else None
    if _rank() != 0:
        return None
    # replicated: rank 0's state is everyone's; names instead of positions, on the CPU
    state = get_optimizer_state_dict(unwrapped(model), inner)
    return _to_cpu(state)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    return obj


def _by_name(state: dict[str, Any], model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """An optimizer state dict keyed by positions (`optimizer.state_dict()`, older
    checkpoints) keyed by parameter names instead, the format of `optimizer_state_for_save`."""
    names = {id(p): n for n, p in unwrapped(model).named_parameters()}
    order = [names[id(p)] for g in optimizer.param_groups for p in g["params"]]
    groups = [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {order[i]: s for i, s in state["state"].items()}, "param_groups": groups}


def load_optimizer_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any] | None,
) -> None:
    """Load `optimizer.pt`'s state, which only rank 0 read (`state` is None elsewhere):
    broadcast from rank 0 and, sharded, cut into each rank's shards. Accepts both names
    and positions as keys. Every rank must call it, after `prepare_model`."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    inner: Any = getattr(optimizer, "optimizer", optimizer)
    plain = unwrapped(model)
    if state is not None and any(isinstance(k, int) for k in state.get("state", {})):
        state = _by_name(state, plain, inner)
    if _distributed() and torch.distributed.get_world_size() > 1:
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        mine = state if _rank() == 0 and state is not None else {}
        set_optimizer_state_dict(plain, inner, optim_state_dict=mine, options=options)
        return
    if state is None:
        raise ValueError("load_optimizer_state: a single process needs the state")
    set_optimizer_state_dict(plain, inner, optim_state_dict=state)


@dataclass(frozen=True)
class ShardBytes:
    """Bytes this rank holds of the trainable state (local shards only)."""

    params: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        """Parameters + gradients + optimizer state."""
        return self.params + self.grads + self.optimizer


def _local_bytes(t: Any) -> int:
    local = t.to_local() if isinstance(t, _dtensor()) else t
    return int(local.numel() * local.element_size())


def shard_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> ShardBytes:
    """What this rank's parameters, gradients and optimizer state occupy (for FSDP: the
    local shards, about 1/world of a full copy; a local measurement, not a collective)."""
    params = list(model.parameters())
    inner: Any = getattr(optimizer, "optimizer", optimizer)
    states = [v for s in inner.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return ShardBytes(
        params=sum(_local_bytes(p) for p in params),
        grads=sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        optimizer=sum(_local_bytes(v) for v in states),
    )
