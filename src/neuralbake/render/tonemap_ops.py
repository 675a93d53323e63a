"""Differentiable tone mapping for fitting: Reinhard, ACES (Narkowicz's fit) and the parametrised
modified Reinhard ``x (1 + x / w^2) / (1 + x)`` whose white point ``w`` can itself be learned.

:mod:`neuralbake.render.tonemap` holds the display transform of the preview renderer (it casts to
float32 and is meant for PNGs); the operators here keep the input's dtype and device and carry
gradients to the radiance and to ``w``, so a loss can be taken on tone-mapped images and
``torch.autograd.gradcheck`` can check them in float64. All curves work per channel.
"""

from __future__ import annotations

import torch

from neuralbake.errors import InputError
from neuralbake.material.texture import linear_to_srgb
from neuralbake.render.tonemap import tone_map_aces_fitted, tone_map_reinhard

__all__ = ["TONE_MAP_OPERATORS", "tone_map_image", "tone_map_modified_reinhard"]

TONE_MAP_OPERATORS = ("aces", "reinhard", "modified_reinhard", "linear")
"""Names accepted by :func:`tone_map_image`; ``linear`` only clamps to ``[0, 1]``."""


def tone_map_modified_reinhard(x: torch.Tensor, white: torch.Tensor | float = 4.0) -> torch.Tensor:
    """Reinhard's curve with a white point: ``x (1 + x / w^2) / (1 + x)``, clamped to ``[0, 1]``.

    Radiance ``w`` (and above) maps to 1; as ``w`` grows the curve tends to plain Reinhard.
    ``white``: a float or a tensor broadcastable to ``x`` (gradients flow to it below the clamp).
    """
    w = torch.as_tensor(white, dtype=x.dtype, device=x.device)
    x = torch.clamp(x, min=0.0)
    return torch.clamp(x * (1.0 + x / (w * w)) / (1.0 + x), 0.0, 1.0)


def tone_map_image(
    hdr: torch.Tensor,
    *,
    operator: str = "aces",
    exposure: float | torch.Tensor = 0.0,
    white: float | torch.Tensor = 4.0,
    encode_srgb: bool = True,
) -> torch.Tensor:
    """Display values in ``[0, 1]`` of linear radiance ``hdr`` (any shape, e.g. ``[H, W, 3]``).

    ``exposure`` in stops scales by ``2^exposure`` first; ``operator`` is one of
    :data:`TONE_MAP_OPERATORS`; ``white`` is the modified Reinhard white point; ``encode_srgb``
    applies the sRGB transfer function last (turn it off to compare in linear display space).
    Keeps dtype and device, differentiable in ``hdr``, ``exposure`` and ``white``.
    """
    if operator not in TONE_MAP_OPERATORS:
        raise InputError(f"unknown tone-map operator {operator!r}.", field="operator", fix=f"use one of {', '.join(TONE_MAP_OPERATORS)}.")
    scale = torch.pow(
        torch.as_tensor(2.0, dtype=hdr.dtype, device=hdr.device), torch.as_tensor(exposure, dtype=hdr.dtype, device=hdr.device)
    )
    x = hdr * scale
    if operator == "aces":
        mapped = tone_map_aces_fitted(x)
    elif operator == "reinhard":
        mapped = tone_map_reinhard(x)
    elif operator == "modified_reinhard":
        mapped = tone_map_modified_reinhard(x, white)
    else:
        mapped = torch.clamp(x, 0.0, 1.0)
    return torch.clamp(linear_to_srgb(mapped), 0.0, 1.0) if encode_srgb else mapped
