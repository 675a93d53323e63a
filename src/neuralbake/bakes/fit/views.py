"""The fit's views: the light scene, the training and held-out orbits, the reference renders and
what each view keeps (hit pixels, their G-buffer rows, the reference), and the memory they need."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.fit.config import FitConfig
from neuralbake.errors import InputError
from neuralbake.io.gltf import Scene
from neuralbake.io.images import load_image
from neuralbake.io.limits import check_memory
from neuralbake.render.camera import Camera, fibonacci_orbit, framing_radius, random_orbit
from neuralbake.render.deferred import DirectionalLight, Lighting, render
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import GBuffer, GBufferRows, render_gbuffer
from neuralbake.render.mip import sample_bilinear
from neuralbake.render.tonemap import tone_map

__all__ = [
    "View",
    "check_view_memory",
    "display_background",
    "estimated_view_bytes",
    "fit_cameras",
    "fit_lighting",
    "load_weights",
    "render_views",
]

VIEW_BYTES_PER_PIXEL = 104
"""What a training view keeps per hit pixel: pixel and triangle (int64), barycentrics, uv/uv_dx/uv_dy
for two UV sets, reference and HDR (float32 x 3) and the loss weight."""
HELD_OUT_BYTES_PER_PIXEL = VIEW_BYTES_PER_PIXEL + 16
"""A held-out view also keeps its full display image and alpha."""
RENDER_BYTES_PER_PIXEL = 1024
"""Transient memory of rendering one view (G-buffer and shading), freed before the next."""


@dataclass(eq=False)
class View(GBufferRows):
    """What one fitting view keeps: its hits' G-buffer rows (:class:`~neuralbake.render.gbuffer.GBufferRows`)
    and the reference there."""

    reference: torch.Tensor
    """``[N, 3]`` display values of the PBR render at the hits."""
    weight: torch.Tensor | None
    hdr: torch.Tensor
    """``[N, 3]`` linear HDR radiance of the reference (tone-map initialisation)."""
    image: torch.Tensor | None = None
    """``[H, W, 3]`` full reference display image (held-out views only)."""
    alpha: torch.Tensor | None = None
    background: torch.Tensor | None = None
    """``[3]`` display colour where nothing is hit (held-out views): what a LOD frame shows where the
    LOD misses, so a LOD that covers less than its reference is scored for it."""


def fit_lighting(config: FitConfig, device: torch.device) -> Lighting:
    """The fixed light scene of every reference render: a sun, optionally the procedural sky."""
    env = EnvironmentLight.from_map(default_environment(128, 64, device=device)) if config.environment else None
    return Lighting(
        directional=[DirectionalLight(direction=tuple(config.light_direction), irradiance=float(config.light_irradiance))],
        environment=env,
        environment_samples=config.environment_samples,
        shadows=config.shadows,
        seed=config.train.seed,
        background=(0.18, 0.18, 0.18),
    )


def fit_cameras(scene: Scene, config: FitConfig) -> tuple[list[Camera], list[Camera]]:
    """Training (Fibonacci) and held-out (random) orbits framing the asset's bounding sphere
    (centred on the box centre, radius = farthest vertex: tighter than the half box diagonal)."""
    lo, hi = scene.bounds()
    mid = (lo + hi) / 2
    centre = tuple(float(v) for v in mid)
    extent = max(float(np.sqrt(((m.positions - mid) ** 2).sum(-1)).max()) for m in scene.meshes)
    radius = framing_radius(extent, config.fov_y_deg)
    train = fibonacci_orbit(config.views, radius, target=centre, fov_y_deg=config.fov_y_deg)
    held = random_orbit(config.held_out_views, radius, seed=config.train.seed + 7919, target=centre, fov_y_deg=config.fov_y_deg)
    return train, held


def display_background(config: FitConfig, lighting: Lighting, device: torch.device) -> torch.Tensor:
    """``[3]`` display colour of the lighting's constant background (what a frame shows where nothing is hit)."""
    hdr = torch.as_tensor(lighting.background, dtype=torch.float32, device=device).reshape(1, 1, 3)
    return tone_map(hdr, operator=config.display_tone_map, exposure=config.exposure).reshape(3)


def load_weights(config: FitConfig, device: torch.device) -> torch.Tensor | None:
    """The artist's mask in uv0 space as ``[H, W, 1]`` float32 (``None`` without one)."""
    if config.weights is None:
        return None
    image, _ = load_image(config.weights)
    grey = image[..., :3].mean(-1, keepdims=True) if image.shape[2] >= 3 else image[..., :1]
    return torch.from_numpy(np.ascontiguousarray(grey, np.float32)).to(device)


def estimated_view_bytes(config: FitConfig) -> int:
    """A rough upper estimate of the memory the reference views keep, plus one view's render.

    Every view's hits at most fill the disc that the framed bounding sphere projects to (pi/4 of
    the frame); each hit keeps :data:`VIEW_BYTES_PER_PIXEL` (held-out views
    :data:`HELD_OUT_BYTES_PER_PIXEL`, and their full images; with ``shape`` every training view
    keeps its whole frame and each step's differentiable renders are counted too).
    """
    pixels = config.render_size * config.render_size
    kept = math.pi / 4 * pixels * (config.views * VIEW_BYTES_PER_PIXEL + config.held_out_views * HELD_OUT_BYTES_PER_PIXEL)
    if config.shape:  # every training view keeps its whole frame; a step renders and differentiates one more
        kept += pixels * (16 * config.views + RENDER_BYTES_PER_PIXEL * config.views_per_step)
    return int(kept + pixels * RENDER_BYTES_PER_PIXEL)


def check_view_memory(config: FitConfig, device: torch.device) -> None:
    """Refuse, before any render, views that cannot fit in the memory of ``device`` (host RAM for cpu)."""
    needed = estimated_view_bytes(config)
    what = f"the reference views ({config.views} training + {config.held_out_views} held-out, {config.render_size}x{config.render_size})"
    fix = "lower --views / --held-out or --render-size."
    if device.type == "cuda":
        try:
            free, _ = torch.cuda.mem_get_info(device)
        except RuntimeError:
            return
        if needed > 0.8 * free:
            raise InputError(
                f"{what} needs about {needed / 2**30:.1f} GiB of GPU memory; {device} has {free / 2**30:.1f} GiB free.",
                field="views",
                fix=fix,
            )
        return
    check_memory(needed, what=what, field="views", fix=fix)


def render_views(
    rs: Any,
    cameras: list[Camera],
    config: FitConfig,
    lighting: Lighting,
    mask: torch.Tensor | None,
    keep_image: bool,
    advance: Callable[[int], None] | None = None,
    reference: Any = None,
    background: torch.Tensor | None = None,
) -> list[View]:
    """Render the PBR reference from ``cameras`` and keep each view's hit pixels (see :class:`View`).

    ``reference``: another prepared scene to render the reference images from (the original of a
    simplified ``rs``); the hit pixels and G-buffer rows are still ``rs``'s. ``background``: the
    display colour where nothing is hit (:func:`display_background`), kept by held-out views.
    """
    views = []
    size = config.render_size
    for cam in cameras:
        with torch.no_grad():
            out = render(rs if reference is None else reference, cam, size, size, lighting, tone_map=config.display_tone_map, exposure=config.exposure)
            g: GBuffer = out.gbuffer if reference is None else render_gbuffer(rs, cam, size, size)
        rows = g.pixel
        weight = None
        if mask is not None:
            m = sample_bilinear(mask, g.uv[0], wrap_s="repeat", wrap_t="repeat")[:, 0]
            weight = 1.0 + (config.weight_max - 1.0) * m
        views.append(
            View(
                **g.rows(detach=True),
                reference=out.ldr.reshape(-1, 3)[rows].detach(),
                weight=weight,
                hdr=out.hdr.reshape(-1, 3)[rows].detach(),
                image=out.ldr.detach() if keep_image else None,
                alpha=out.alpha.detach() if keep_image else None,
                background=background if keep_image else None,
            )
        )
        if advance is not None:
            advance(1)
    return views
