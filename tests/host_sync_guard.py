"""A CPU-side check that code reads nothing back from its tensors (a GPU sync).

On a GPU, `float(t)`, `int(t)`, `bool(t)`, `.item()`, `.tolist()`, `nonzero` and boolean-mask
indexing all wait for every queued kernel; inside a training step such a read stalls the
host before it can queue the backward pass. On a CPU they cost nothing, so a CPU test only
sees them with this mode, which records each one made by clawrl_app code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tests.device_guard import app_caller

READS = {
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.nonzero,
    torch.nonzero,
    torch.Tensor.cpu,
    torch.masked_select,
}


def _bool_index(args: tuple[Any, ...]) -> bool:
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


class HostSyncGuard(TorchFunctionMode):
    """Records `file:line: what` for each host read-back that clawrl_app code makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        getitem = func is torch.Tensor.__getitem__ and _bool_index(args)
        if func in READS or getitem:
            where = app_caller(1)
            if where is not None:
                self.reads.append(f"{where}: {getattr(func, '__name__', func)}")
        return func(*args, **(kwargs or {}))
