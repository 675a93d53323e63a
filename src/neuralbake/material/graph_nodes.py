"""The node types of neuralbake's JSON material format (``docs/material-format.md``), each with its
inputs and the batched PyTorch op that evaluates it.

:data:`NODE_OPS` maps an ``op`` name to a :class:`NodeOp`: the inputs (name -> ``(kind, default)``,
kind one of ``value`` (a constant or an ``@node`` reference), ``int``, ``const``, ``bool``,
``str``; default :data:`REQUIRED` where the document must give it) and the function. Each function
takes the evaluation context first (``ctx.uv [N, 2]``, ``ctx.position [N, 3]``, ``ctx.normal
[N, 3]``, ``ctx.texture(file, srgb)``) and the resolved inputs by name. The compiler and
validator of documents is :mod:`~neuralbake.material.graph`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from neuralbake.material.nodes import clamp, invert, lerp, power, ramp, remap, smoothstep, up_facing
from neuralbake.material.noise import fbm, perlin_noise, value_noise, worley_noise
from neuralbake.material.texture import WRAP_MODES, sample_texture

__all__ = ["INT_RANGES", "NODE_OPS", "REQUIRED", "STR_CHOICES", "NodeOp", "match"]

REQUIRED = object()
"""Default of an input the document must give."""

INT_RANGES = {"seed": (0, 2**31 - 1), "octaves": (1, 16), "axis": (0, 2), "index": (0, 3)}
"""Whole-number inputs: allowed range (inclusive); beyond it a value is a typo, or would overflow."""


@dataclass(frozen=True)
class NodeOp:
    """One node type: its inputs (name -> (kind, default)) and the function that evaluates it."""

    inputs: Mapping[str, tuple[str, Any]]
    fn: Callable[..., torch.Tensor]


def _noise(
    ctx: Any, *, type: str, point: torch.Tensor, scale: torch.Tensor, seed: int, octaves: int, lacunarity: float, gain: torch.Tensor
) -> torch.Tensor:
    base = {"value": value_noise, "perlin": perlin_noise, "worley": worley_noise}[type]
    out = fbm(point * scale, octaves=octaves, lacunarity=lacunarity, gain=gain, seed=seed, noise=base)
    return 0.5 + 0.5 * out if type == "perlin" else out


def _texture(ctx: Any, *, file: str, srgb: bool, wrap: str, point: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return sample_texture(ctx.texture(file, srgb), point * scale, wrap=wrap)


NODE_OPS: dict[str, NodeOp] = {
    "uv": NodeOp({}, lambda ctx: ctx.uv),
    "position": NodeOp({}, lambda ctx: ctx.position),
    "normal": NodeOp({}, lambda ctx: ctx.normal),
    "noise": NodeOp(
        {
            "type": ("str", "perlin"),
            "point": ("value", "@uv"),
            "scale": ("value", 1.0),
            "seed": ("int", 0),
            "octaves": ("int", 1),
            "lacunarity": ("const", 2.0),
            "gain": ("value", 0.5),
        },
        _noise,
    ),
    "texture": NodeOp(
        {"file": ("str", REQUIRED), "srgb": ("bool", True), "wrap": ("str", "repeat"), "point": ("value", "@uv"), "scale": ("value", 1.0)},
        _texture,
    ),
    "ramp": NodeOp(
        {"x": ("value", REQUIRED), "positions": ("value", REQUIRED), "colors": ("value", REQUIRED)},
        lambda ctx, x, positions, colors: ramp(x, positions, colors),
    ),
    "mix": NodeOp(
        {"a": ("value", REQUIRED), "b": ("value", REQUIRED), "t": ("value", REQUIRED)}, lambda ctx, a, b, t: lerp(a, b, match(t, a, b))
    ),
    "add": NodeOp({"a": ("value", REQUIRED), "b": ("value", REQUIRED)}, lambda ctx, a, b: a + b),
    "subtract": NodeOp({"a": ("value", REQUIRED), "b": ("value", REQUIRED)}, lambda ctx, a, b: a - b),
    "multiply": NodeOp({"a": ("value", REQUIRED), "b": ("value", REQUIRED)}, lambda ctx, a, b: match(a, b) * match(b, a)),
    "maximum": NodeOp({"a": ("value", REQUIRED), "b": ("value", REQUIRED)}, lambda ctx, a, b: torch.maximum(a, b)),
    "minimum": NodeOp({"a": ("value", REQUIRED), "b": ("value", REQUIRED)}, lambda ctx, a, b: torch.minimum(a, b)),
    "power": NodeOp({"x": ("value", REQUIRED), "exponent": ("value", REQUIRED)}, lambda ctx, x, exponent: power(x, exponent)),
    "clamp": NodeOp({"x": ("value", REQUIRED), "min": ("const", 0.0), "max": ("const", 1.0)}, lambda ctx, x, min, max: clamp(x, min, max)),
    "invert": NodeOp({"x": ("value", REQUIRED)}, lambda ctx, x: invert(x)),
    "absolute": NodeOp({"x": ("value", REQUIRED)}, lambda ctx, x: torch.abs(x)),
    "smoothstep": NodeOp(
        {"edge0": ("value", REQUIRED), "edge1": ("value", REQUIRED), "x": ("value", REQUIRED)},
        lambda ctx, edge0, edge1, x: smoothstep(edge0, edge1, x),
    ),
    "remap": NodeOp(
        {
            "x": ("value", REQUIRED),
            "in_low": ("value", 0.0),
            "in_high": ("value", 1.0),
            "out_low": ("value", 0.0),
            "out_high": ("value", 1.0),
        },
        lambda ctx, x, in_low, in_high, out_low, out_high: remap(x, in_low, in_high, out_low, out_high),
    ),
    "up_facing": NodeOp(
        {"threshold": ("value", 0.5), "softness": ("value", 0.2), "axis": ("int", 1)},
        lambda ctx, threshold, softness, axis: up_facing(ctx.normal, threshold=threshold, softness=softness, up=axis),
    ),
    "component": NodeOp({"x": ("value", REQUIRED), "index": ("int", 0)}, lambda ctx, x, index: x[..., index]),
}
"""Every node type of the format by ``op`` name (see ``docs/material-format.md``)."""

STR_CHOICES = {("noise", "type"): ("value", "perlin", "worley"), ("texture", "wrap"): tuple(WRAP_MODES)}


def match(t: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """Give a per-point scalar ``[N]`` a trailing axis when it meets colours ``[N, C]``."""
    if t.dim() == 1 and any(o.dim() == 2 for o in others):
        return t[:, None]
    return t
