"""User hooks loaded from a file path: custom reward (and, later, custom loss / rollout).

A custom reward file defines `reward(turn, next_state, context)` returning a number in
[-1, 1], or `(reward, hint)`, or `{"reward": r, "hint": h}`. Errors in user code are
caught by the caller, logged with the traceback, and never crash a loop.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class PluginError(ValueError):
    """A plugin file is missing, does not import, or lacks the expected function."""


@dataclass(frozen=True)
class RewardResult:
    """What a custom reward function decided."""

    reward: float
    hint: str | None = None


def load_function(path: str | Path, name: str) -> Callable[..., Any]:
    """Import `path` as a module and return its function `name`."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise PluginError(f"plugin file {p} does not exist")
    spec = importlib.util.spec_from_file_location(f"clawrl_plugin_{p.stem}", p)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import {p}: not a Python file?")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise PluginError(f"importing {p} failed: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise PluginError(f"{p} must define a function `{name}`")
    return fn  # type: ignore[no-any-return]


def load_reward(path: str | Path) -> Callable[..., Any]:
    """The `reward(turn, next_state, context)` function of a custom reward file."""
    fn = load_function(path, "reward")
    params = inspect.signature(fn).parameters
    if len(params) != 3:
        raise PluginError(f"reward() in {path} must take (turn, next_state, context)")
    return fn


def coerce_reward(value: Any) -> RewardResult:
    """Normalise what a reward function returned; ValueError when it is not usable."""
    hint = None
    if isinstance(value, dict):
        value, hint = value.get("reward"), value.get("hint")
    elif isinstance(value, tuple) and len(value) == 2:
        value, hint = value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"reward must be a number in [-1, 1], got {value!r}")
    if not -1.0 <= float(value) <= 1.0:
        raise ValueError(f"reward must be in [-1, 1], got {value}")
    if hint is not None and not isinstance(hint, str):
        raise ValueError(f"hint must be a string or None, got {type(hint).__name__}")
    return RewardResult(float(value), hint or None)
