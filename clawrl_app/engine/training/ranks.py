"""Which rank this trainer process is, and how rank 0 decides for every rank.

With several trainer GPUs the trainer runs as one process per GPU (`rank_launch.py`). Only
rank 0 touches the world outside the model: the trainer lock, the store, the checkpoint
folder, the control, owner and serving-flag files, and stdout's events. Every decision
that changes control flow (train now, wait, stop, the resume point, the batch) is made on
rank 0 and broadcast, so all ranks always enter the same collectives in the same order.
With one process every helper here is the identity: no process group is needed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place among the trainer's processes (torchrun's environment names)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0: the one that owns the store, the disk and the events."""
        return self.rank == 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Ranks:
        """From RANK, WORLD_SIZE and LOCAL_RANK (set by our launcher, torchrun or
        accelerate); one process when they are absent."""
        e = os.environ if env is None else env
        rank, world = int(e.get("RANK", "0")), int(e.get("WORLD_SIZE", "1"))
        local = int(e.get("LOCAL_RANK", str(rank)))
        if world < 1 or not 0 <= rank < world or local < 0:
            raise SystemExit(f"bad rank environment: RANK={rank} WORLD_SIZE={world}")
        return cls(rank, world, local)


def rank_share(items: Sequence[T], rank: int, world: int) -> list[T]:
    """This rank's part of the global batch: every `world`-th item from `rank` on, so the
    parts differ by at most one item and together are the batch, each item exactly once."""
    return list(items[rank::world])


def loss_scale(micro_batch: int, global_batch: int, world: int) -> float:
    """The factor of a micro-batch's mean loss so that the gradient, once DDP or FSDP has
    averaged it over `world` ranks, equals one process's over the whole global batch:
    (micro_batch / global_batch) x world. The objectives average per sample, so a sum of
    sample-weighted micro-batch means over all ranks is the global batch's mean."""
    if global_batch <= 0 or micro_batch < 0 or world < 1:
        raise ValueError(f"bad batch sizes: {micro_batch}/{global_batch} on {world} ranks")
    return micro_batch / global_batch * world


def _distributed(ranks: Ranks) -> bool:
    return (
        ranks.world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()
    )


def broadcast(value: T, ranks: Ranks) -> T:
    """Rank 0's `value` on every rank (other ranks' arguments are ignored); any picklable
    object. Every rank must call it at the same point."""
    if not _distributed(ranks):
        return value
    box: list[Any] = [value if ranks.main else None]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[no-any-return]


def sum_over_ranks(values: Mapping[str, float], ranks: Ranks, device: Any) -> dict[str, float]:
    """Each key's sum over all ranks (a key missing on a rank counts 0); one host read."""
    if not _distributed(ranks):
        return dict(values)
    keys: list[Any] = [None] * ranks.world
    torch.distributed.all_gather_object(keys, sorted(values))
    names = sorted({k for ks in keys for k in ks})
    t = torch.tensor([float(values.get(k, 0.0)) for k in names], device=device, dtype=torch.float64)
    torch.distributed.all_reduce(t)
    return dict(zip(names, t.tolist(), strict=True))


def barrier(ranks: Ranks) -> None:
    """Wait until every rank is here (a no-op with one process)."""
    if _distributed(ranks):
        torch.distributed.barrier()


def end_rank(code: int) -> int:
    """End this rank's process with `code`: `code` itself with one process; in a process
    group, leave it and exit at once, without the interpreter's shutdown (`os._exit`, after
    flushing the logs and stdio). Call it last, once every rank is past its last collective.

    Why not a plain exit: gloo's worker threads drop a finished collective (and a barrier
    the collectives it waited for) a moment after the caller has seen it finish. When that
    happens while Python shuts down, the tensor they free needs the GIL of a finalizing
    interpreter, the thread is unwound inside a noexcept destructor and the rank dies on
    SIGABRT ("terminate called without an active exception"; core dump 2026-11-28:
    `~AsyncBarrierWork -> ~AsyncAllgatherCoalescedWork -> decref_pyobject -> take_gil`
    in `ProcessGroupGloo::runLoop`, beside `Py_FinalizeEx`). Without the shutdown there is
    no such moment."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return code
    torch.distributed.destroy_process_group()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
            stream.flush()
    os._exit(code)
