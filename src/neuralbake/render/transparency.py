"""Alpha in the renderer: glTF ``MASK`` cut-outs and ``BLEND`` layers, peeled along each camera ray and composited.

The visibility buffer keeps one hit per pixel. A pixel whose surface lets light through (a ``MASK`` texel under its
cutoff, a ``BLEND`` texel under 1) is cast again from just past that hit (:func:`next_layer`, depth peeling with the
ray caster's BVH), up to a few layers; each layer is shaded on its own and the layers are composited front to back
over the background (:func:`composite_layers`). ``OPAQUE`` materials end the ray, as before.

The ``MASK`` test is differentiable where it matters, at the cut-out's edge, in the spirit of the silhouette
antialiasing (:mod:`~neuralbake.render.antialias`): instead of a step at the cutoff, a surface's coverage ramps
linearly from 0 to 1 over :data:`MASK_EDGE` of alpha around it (:func:`coverage`). Away from the edge it is exactly
the alpha test (0 or 1), so a texel well inside or outside the cut-out renders as a hard test does; on the ramp the
image depends continuously on the alpha texels, the layer's colour and the colour behind, and gradients reach all
three. ``BLEND`` is the glTF "over" operator: the surface covers ``alpha`` of what is behind it.

Shadow rays still treat every surface as opaque (a cut-out casts a solid shadow). Written here rather than taken from a
library: the peeling follows the project's own ray caster and G-buffer, which no renderer package exposes.
"""

from __future__ import annotations

import torch

from neuralbake.render.visibility import RayCaster, VisibilityBuffer

__all__ = ["ALPHA_MODES", "MASK_EDGE", "MAX_LAYERS", "composite_layers", "coverage", "next_layer"]

ALPHA_MODES = {"OPAQUE": 0, "MASK": 1, "BLEND": 2}
"""glTF ``alphaMode`` names -> the codes :func:`coverage` takes."""
MASK_EDGE = 0.1
"""Width in alpha of the ``MASK`` test's ramp: coverage goes from 0 at ``cutoff - MASK_EDGE / 2`` to 1 at
``cutoff + MASK_EDGE / 2`` (an 8-bit alpha texture has about 25 codes on it)."""
MAX_LAYERS = 4
"""Surfaces a camera ray passes through at most; what lies behind the last one shows as background."""


def coverage(alpha: torch.Tensor, mode: torch.Tensor, cutoff: torch.Tensor, edge: float = MASK_EDGE) -> torch.Tensor:
    """How much of what lies behind each hit its surface covers, in [0, 1]: 1 for ``OPAQUE`` (mode 0), the alpha test
    ramped over ``edge`` around ``cutoff`` for ``MASK`` (1), ``alpha`` for ``BLEND`` (2). All ``[N]``; differentiable
    in ``alpha`` (on the ramp for ``MASK``)."""
    masked = torch.clamp((alpha - cutoff) / edge + 0.5, 0.0, 1.0)
    blended = torch.clamp(alpha, 0.0, 1.0)
    return torch.where(mode == 0, torch.ones_like(alpha), torch.where(mode == 1, masked, blended))


def composite_layers(colours: list[torch.Tensor], covers: list[torch.Tensor], background: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Front-to-back "over": layer ``k``'s colour ``[H, W, 3]`` weighs its coverage ``[H, W]`` times what the layers
    before it let through; the background (``[H, W, 3]`` or ``[3]``) what all of them let through. Returns the image
    ``[H, W, 3]`` and its alpha ``[H, W]`` (1 minus what reaches the background)."""
    through = torch.ones_like(covers[0])
    image = torch.zeros_like(colours[0])
    for colour, cover in zip(colours, covers, strict=True):
        image = image + (through * cover)[..., None] * colour
        through = through * (1.0 - cover)
    return image + through[..., None] * background, 1.0 - through


def next_layer(caster: RayCaster, visibility: VisibilityBuffer, go_on: torch.Tensor, material_ids: torch.Tensor, *, offset: float) -> VisibilityBuffer:
    """The hits behind ``visibility``'s where ``go_on`` (bool ``[H, W]``): each of those camera rays cast again from
    ``offset`` past its hit (:meth:`RayCaster.closest_hit`). Other pixels miss; depths stay distances along the camera
    ray, and the rays stay the camera's (the G-buffer recomputes barycentrics from them)."""
    rows = torch.nonzero(go_on.reshape(-1)).reshape(-1)
    h, w = go_on.shape
    triangle = torch.full((h * w,), -1, dtype=torch.int64, device=go_on.device)
    bary = torch.zeros(h * w, 2, dtype=torch.float32, device=go_on.device)
    depth = torch.full((h * w,), float("inf"), dtype=torch.float32, device=go_on.device)
    if rows.numel():
        start = visibility.depth.reshape(-1)[rows] + offset
        direction = visibility.ray_direction.reshape(-1, 3)[rows]
        origin = visibility.ray_origin.reshape(-1, 3)[rows] + start[:, None].to(direction.dtype) * direction
        tri, b, t = caster.closest_hit(origin, direction)
        triangle[rows], bary[rows], depth[rows] = tri, b, torch.where(tri >= 0, start + t, t)
    triangle = triangle.reshape(h, w)
    material = torch.where(triangle >= 0, material_ids.to(triangle.device)[triangle.clamp(min=0)], -1)
    return VisibilityBuffer(triangle, bary.reshape(h, w, 2), depth.reshape(h, w), material, visibility.ray_origin, visibility.ray_direction)
