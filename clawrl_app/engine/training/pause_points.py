"""Pause points inside a training step (trainer process only; imports torch).

`install_pause_points` hooks every decoder layer so that a callable runs before the
layer's forward and when the gradient of its output arrives in the backward pass. The
trainer passes a callable that sleeps while the endpoint is answering (cpu_share.py), so a
step gives the cores back to serving within one layer's worth of compute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks of a (possibly peft-wrapped) causal LM."""
    return [m for m in model.modules() if type(m).__name__.endswith(("DecoderLayer", "Block"))]


def install_pause_points(model: torch.nn.Module, pause: Callable[[], Any]) -> int:
    """Hook `pause` into each decoder layer's forward and backward; returns the layer count."""
    layers = decoder_layers(model)

    def before_forward(module: torch.nn.Module, args: Any) -> None:
        pause()

    def on_grad(grad: torch.Tensor) -> None:
        pause()  # returns None: the gradient passes through unchanged

    def after_forward(module: torch.nn.Module, args: Any, output: Any) -> None:
        hidden = output[0] if isinstance(output, tuple) else output
        if isinstance(hidden, torch.Tensor) and hidden.requires_grad:
            hidden.register_hook(on_grad)

    for layer in layers:
        layer.register_forward_pre_hook(before_forward)
        layer.register_forward_hook(after_forward)
    return len(layers)
