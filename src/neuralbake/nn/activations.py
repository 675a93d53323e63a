"""Activation functions for small shading networks, by name.

The names here are the ones configs, bundle manifests and generated shader code use. The clamped
GELU is the hardware-friendly GELU of NVIDIA's neural texture compression,
``min(x, 3) * clamp(x / 3 + 0.5, 0, 1)``: a cubic-free GELU whose output range ``[-3/16, 3]`` is
bounded, so it quantises to int8 without outliers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["ACTIVATIONS", "DEFAULT_LEAK", "activation_fn", "clamped_gelu"]

DEFAULT_LEAK = 0.01
"""Negative slope of LeakyReLU (the RTX Neural Shaders samples' RELU_LEAK)."""

CLAMPED_GELU_MAX = 3.0


def clamped_gelu(x: torch.Tensor) -> torch.Tensor:
    """Hard GELU with its output clamped above at 3: ``min(x, 3) * clamp(x/3 + 1/2, 0, 1)``."""
    return torch.clamp(x, max=CLAMPED_GELU_MAX) * torch.clamp(x / 3.0 + 0.5, 0.0, 1.0)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


ACTIVATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "none": _identity,
    "relu": F.relu,
    "leaky_relu": F.leaky_relu,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "sigmoid": torch.sigmoid,
    "clamped_gelu": clamped_gelu,
}


def activation_fn(name: str, leak: float = DEFAULT_LEAK) -> Callable[[torch.Tensor], torch.Tensor]:
    """Look an activation up by name; ``leak`` sets LeakyReLU's negative slope."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    if name == "leaky_relu":
        return lambda x: F.leaky_relu(x, negative_slope=leak)
    return ACTIVATIONS[name]
