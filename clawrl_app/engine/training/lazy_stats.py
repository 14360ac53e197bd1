"""Loss statistics that stay on the device until someone reads them.

Reading a number off a GPU tensor (`float(t)`, `.item()`) waits for every queued kernel: a
loss that turned each statistic into a float would stall the step before `backward()` was
even queued. `LazyStats` keeps detached 0-d tensors and reads all of them back with one
transfer on first access, which the trainer does after the optimizer step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from torch import Tensor


class LazyStats(Mapping[str, float]):
    """A read-only mapping of names to plain floats, computed from tensors on first read."""

    def __init__(self, values: Mapping[str, Tensor | float]) -> None:
        self._values = {k: v.detach() if isinstance(v, Tensor) else v for k, v in values.items()}
        self._floats: dict[str, float] | None = None

    def raw(self) -> dict[str, Tensor | float]:
        """The unread values (tensors stay on their device), to build a larger set from."""
        return dict(self._values)

    def _read(self) -> dict[str, float]:
        if self._floats is None:
            tensors = {k: v for k, v in self._values.items() if isinstance(v, Tensor)}
            read: dict[str, float] = {}
            if tensors:
                wide = any(t.dtype == torch.float64 for t in tensors.values())
                dtype = torch.float64 if wide else torch.float32
                stacked = torch.stack([t.reshape(()).to(dtype) for t in tensors.values()])
                read = dict(zip(tensors, stacked.tolist(), strict=True))  # the one sync
            self._floats = {k: read[k] if k in read else float(v) for k, v in self._values.items()}
        return self._floats

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)  # keys need no read-back

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"LazyStats({self._read()!r})"
