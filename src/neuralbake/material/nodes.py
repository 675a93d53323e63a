"""Small value nodes that turn noise, textures and geometry into material masks and colours:
colour ramps, mix (lerp), the usual math nodes and an up-facing mask, as batched differentiable
tensor ops. With :mod:`~neuralbake.material.noise` and :mod:`~neuralbake.material.texture` they
express the copper tray without image files, e.g. a cavity mask ``smoothstep(0.1, 0.6, -fbm(8 uv))``
for patina, scratch lines ``1 - smoothstep(0, 0.04, |perlin(uv * (2, 60))|)`` and dust
``up_facing(n)``.

Values are tensors ``[N]`` (scalars) or ``[N, C]`` (colours); parameters broadcast as in torch.
Math nodes exist as named functions too (:data:`MATH_NODES`, :func:`math_node`) so a graph read
from a config file can name them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from neuralbake.errors import ConfigError, InputError

__all__ = [
    "MATH_NODES",
    "clamp",
    "invert",
    "lerp",
    "math_node",
    "power",
    "ramp",
    "remap",
    "smoothstep",
    "up_facing",
]

Value = torch.Tensor | float


def lerp(a: Value, b: Value, t: Value) -> torch.Tensor:
    """Mix node: ``a + t (b - a)`` (``t = 0`` gives ``a``), broadcast shape of the inputs."""
    a, b, t = (torch.as_tensor(x) for x in (a, b, t))
    return a + t * (b - a)


def clamp(x: torch.Tensor, lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    """``min(max(x, lo), hi)``, same shape (gradient 0 where clamped)."""
    return torch.clamp(x, lo, hi)


def invert(x: torch.Tensor) -> torch.Tensor:
    """``1 - x``, same shape (turns a cavity mask into an exposure mask and back)."""
    return 1.0 - x


def power(x: torch.Tensor, exponent: Value) -> torch.Tensor:
    """``max(x, 0)^exponent``, same shape; the clamp avoids NaN for negative bases and fractional exponents."""
    return torch.clamp(x, min=0.0) ** exponent


def smoothstep(edge0: Value, edge1: Value, x: torch.Tensor) -> torch.Tensor:
    """Hermite step ``3t^2 - 2t^3`` with ``t = clamp((x - edge0) / (edge1 - edge0), 0, 1)``, same shape.

    ``edge0 < edge1`` rises from 0 to 1; swapped edges fall.
    """
    t = torch.clamp((x - edge0) / (torch.as_tensor(edge1) - edge0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def remap(x: torch.Tensor, in_lo: Value, in_hi: Value, out_lo: Value = 0.0, out_hi: Value = 1.0) -> torch.Tensor:
    """Linear map of ``[in_lo, in_hi]`` onto ``[out_lo, out_hi]`` (not clamped), same shape."""
    return out_lo + (x - in_lo) * ((torch.as_tensor(out_hi) - out_lo) / (torch.as_tensor(in_hi) - in_lo))


def ramp(x: torch.Tensor, positions: torch.Tensor | list[float], colours: torch.Tensor | list) -> torch.Tensor:
    """Piecewise-linear colour ramp: ``[N]`` values to ``[N, C]`` colours.

    Parameters
    ----------
    x:
        ``[N]`` values to look up.
    positions:
        ``[K]`` stop positions, strictly increasing, ``K >= 1`` (gradients flow to them).
    colours:
        ``[K, C]`` colours at the stops (or ``[K]`` for a scalar ramp, giving ``[N]``).

    Values before the first stop take its colour, after the last stop the last colour.
    """
    pos = torch.as_tensor(positions, dtype=x.dtype, device=x.device)
    col = torch.as_tensor(colours, dtype=x.dtype, device=x.device)
    scalar = col.dim() == 1
    col = col[:, None] if scalar else col
    if pos.dim() != 1 or col.shape[0] != pos.shape[0] or pos.shape[0] < 1:
        raise InputError(
            f"a ramp needs K positions [K] and K colours [K, C]; got {tuple(pos.shape)} and {tuple(col.shape)}.",
            field="positions",
            fix="give one colour per stop.",
        )
    if pos.shape[0] > 1 and not bool((pos[1:] > pos[:-1]).all()):
        raise InputError("ramp positions must be strictly increasing.", field="positions", fix="sort the stops and remove duplicates.")
    if pos.shape[0] == 1:
        out = col[0].expand(x.shape[0], -1)
        return out[:, 0] if scalar else out
    k = torch.clamp(torch.searchsorted(pos.detach(), x.detach().contiguous(), right=True), 1, pos.shape[0] - 1)
    lo, hi = pos[k - 1], pos[k]
    t = torch.clamp((x - lo) / (hi - lo), 0.0, 1.0)[:, None]
    out = col[k - 1] + t * (col[k] - col[k - 1])
    return out[:, 0] if scalar else out


def up_facing(normal: torch.Tensor, *, threshold: Value = 0.5, softness: Value = 0.2, up: int = 2) -> torch.Tensor:
    """Mask ``[N]`` of surfaces facing up, for dust: ``smoothstep(threshold - softness, threshold + softness, n[up])``.

    ``normal``: ``[N, 3]`` unit normals in the object/world frame (not the tangent frame, where
    every normal is ``+z``); ``up`` is the index of the up axis (2: z-up, 1: y-up).
    """
    return smoothstep(threshold - softness, threshold + softness, normal[:, up])


MATH_NODES: dict[str, Callable[..., torch.Tensor]] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "clamp": clamp,
    "invert": invert,
    "power": power,
    "smoothstep": smoothstep,
    "remap": remap,
    "lerp": lerp,
}
"""Math nodes by name; :func:`math_node` calls them with positional inputs."""


def math_node(op: str, *inputs: torch.Tensor | float) -> torch.Tensor:
    """Apply the math node named ``op`` (a key of :data:`MATH_NODES`) to ``inputs``."""
    if op not in MATH_NODES:
        raise ConfigError(f"unknown math node {op!r}.", field="op", fix=f"use one of {', '.join(MATH_NODES)}.")
    return MATH_NODES[op](*inputs)
