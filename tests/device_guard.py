"""A CPU-side check for device discipline: the class of bug only a GPU shows.

On a GPU machine, a tensor built without `device=` lands on the CPU while the model sits on
`cuda:0`, and the first op that mixes them fails. On a CPU-only machine (CI) the same code
runs fine, because the default device *is* the model's device. `DeviceGuard` makes the bug
visible anyway: while it is active, every tensor that clawrl_app code creates with a
factory function (`torch.tensor`, `zeros`, `arange`, ...) or a `torch.Generator` must name
its device explicitly, and that device must be the expected one (the model's). Calls made
inside torch, transformers or peft are not checked: only our own lines are.

Torch function modes are thread-local: enter the guard in the thread that does the work
(see `guarded_worker` for the torch backend's worker thread).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import clawrl_app

APP_DIR = str(Path(clawrl_app.__file__).resolve().parent)
TORCH_DIR = str(Path(torch.__file__).resolve().parent)
FACTORIES = {
    torch.tensor,
    torch.as_tensor,
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.linspace,
    torch.eye,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.scalar_tensor,
}


def app_caller(depth: int) -> str | None:
    """`file:line` of the first caller outside torch, when that caller is clawrl_app code."""
    frame: Any = sys._getframe(depth + 1)
    while frame is not None and frame.f_code.co_filename.startswith(TORCH_DIR):
        frame = frame.f_back
    if frame is None:
        return None
    path = str(Path(frame.f_code.co_filename).resolve())
    if not path.startswith(APP_DIR):
        return None
    return f"{Path(path).relative_to(Path(APP_DIR).parent)}:{frame.f_lineno}"


class DeviceGuard(TorchFunctionMode):
    """Flags tensors that clawrl_app code creates without the expected device."""

    def __init__(self, expected: torch.device | str, *, raise_now: bool = True) -> None:
        super().__init__()
        self.expected = torch.device(expected)
        self.raise_now = raise_now
        self.violations: list[str] = []
        self._real_generator = torch.Generator

    def _check(self, what: str, device: Any, where: str) -> None:
        if device is None:
            problem = f"{where}: {what} without device= (lands on the default device)"
        elif _same(torch.device(device), self.expected):
            return
        else:
            problem = f"{where}: {what} on {device}, the model is on {self.expected}"
        self.violations.append(problem)
        if self.raise_now:
            raise AssertionError(problem)

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in FACTORIES:
            where = app_caller(1)
            if where is not None:
                self._check(f"torch.{func.__name__}", kwargs.get("device"), where)
        return func(*args, **kwargs)

    def __enter__(self) -> DeviceGuard:
        guard = self
        real = self._real_generator

        class CheckedGenerator(real):  # type: ignore[misc,valid-type]
            """A real generator (isinstance and sampling work) whose creation is checked."""

            def __new__(cls, device: Any = None) -> Any:
                where = app_caller(1)
                if where is not None:
                    guard._check("torch.Generator", device, where)
                return real.__new__(cls, device) if device is not None else real.__new__(cls)

        torch.Generator = CheckedGenerator  # type: ignore[misc]
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.Generator = self._real_generator  # type: ignore[misc]
        super().__exit__(*exc)


def _same(a: torch.device, b: torch.device) -> bool:
    """cuda and cuda:0 name the same card when only one is meant."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


@contextmanager
def device_guard(expected: torch.device | str = "cpu") -> Iterator[DeviceGuard]:
    """`with device_guard(model.device) as g:` ... fails at the first violation."""
    with DeviceGuard(expected) as guard:
        yield guard


def guarded_worker(run: Callable[[], None], guard: DeviceGuard) -> Callable[[], None]:
    """Wrap a worker thread's body so that it runs under `guard` (modes are thread-local)."""

    def body() -> None:
        with guard:
            run()

    return body
