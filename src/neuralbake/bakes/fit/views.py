"""The fit's views: the light scene, the training and held-out orbits, the reference renders and
what each view keeps (hit pixels, their G-buffer rows, the reference), and the memory they need.

Converged references. The environment term of a render is a Monte Carlo estimate (light and BRDF
samples per pixel); one render at a few samples is grainy, and a fit trained on it learns the
grain into the shipped texture, and is scored against it. So each reference view is rendered as
two independent halves (other seeds), with more samples each round, until the halves agree: their
PSNR in display space, plus 6.02 dB (their average has a quarter of their squared difference),
estimates the reference's own noise floor, its PSNR against its expectation
(:func:`converged_render`). Held-out views are rendered to ``FitConfig.reference_noise_db``,
training views to the lower ``training_noise_db`` (the fit averages a texel over every view that
sees it, and the views' grain is independent), both within ``max_environment_samples``. The HDR
halves are averaged before the display transform, so a target is the tone-mapped expectation, not
the expectation of tone-mapped noise (which a fit on fresh noisy samples each epoch would learn).

See-through assets (glTF ``MASK`` or ``BLEND``). A reference pixel may show several surfaces, composited
front to back over the background (:mod:`~neuralbake.render.transparency`). Each layer is shaded and
converged like a whole render and the layers are composited per round. A view then keeps every
layer's hits as its rows (fragments) and, in :class:`Composite`, how they make up its pixels: the
LOD composites its own colours there with the alpha it ships (:class:`~.model.LodAppearance`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.fit.config import FitConfig
from neuralbake.core.metrics import psnr
from neuralbake.errors import InputError
from neuralbake.io.gltf import Scene
from neuralbake.io.images import load_image
from neuralbake.io.limits import check_memory
from neuralbake.render.camera import Camera, fibonacci_orbit, framing_radius, random_orbit
from neuralbake.render.deferred import DirectionalLight, Lighting, background_radiance, peel_layers, see_through, shade_direct, with_environment
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import GBuffer, GBufferRows, as_render_scene, render_gbuffer
from neuralbake.render.mip import sample_bilinear
from neuralbake.render.tonemap import tone_map
from neuralbake.render.transparency import composite_layers

__all__ = [
    "HALVES_TO_FLOOR_DB",
    "Composite",
    "ReferenceRender",
    "View",
    "converged_render",
    "check_view_memory",
    "display_background",
    "estimated_view_bytes",
    "fit_cameras",
    "fit_lighting",
    "load_weights",
    "reference_record",
    "render_views",
]

VIEW_BYTES_PER_PIXEL = 104
"""What a training view keeps per hit pixel: pixel and triangle (int64), barycentrics, uv/uv_dx/uv_dy
for two UV sets, reference and HDR (float32 x 3) and the loss weight."""
HELD_OUT_BYTES_PER_PIXEL = VIEW_BYTES_PER_PIXEL + 16
"""A held-out view also keeps its full display image and alpha."""
RENDER_BYTES_PER_PIXEL = 1024
"""Transient memory of rendering one view (G-buffer and shading), freed before the next."""


HALVES_TO_FLOOR_DB = 10.0 * math.log10(4.0)
"""From the PSNR between two independent halves to the PSNR of their average against its
expectation: the halves' difference has twice a half's variance, the average half of it."""


@dataclass(eq=False)
class ReferenceRender:
    """A reference view rendered until its noise is below a floor (see the module docstring)."""

    hdr: torch.Tensor
    """``[H, W, 3]`` linear radiance: the average of the last round's two halves."""
    ldr: torch.Tensor
    """``[H, W, 3]`` display values of ``hdr``."""
    alpha: torch.Tensor
    gbuffer: GBuffer
    samples: int
    """Environment light samples per pixel (and as many BRDF samples) of the last round, both halves; 0 without an environment."""
    halves_psnr_db: float
    """PSNR between the two independent halves over the hit pixels (``inf``: noise-free)."""
    layers: list[tuple[GBuffer, torch.Tensor]] | None = None
    """A see-through scene's layers front to back, each with its hits' coverage (``None``: opaque)."""

    @property
    def noise_floor_db(self) -> float:
        """The estimated PSNR of this reference against its expectation."""
        return self.halves_psnr_db + HALVES_TO_FLOOR_DB


QMC_DB_PER_DOUBLING = 4.5
"""How much a render's PSNR against its expectation rises per doubling of its scrambled-Sobol
samples, measured on the crate and DamagedHelmet (8 -> 32 samples: +9.5 to +10.2 dB; plain
Monte Carlo gives 3 dB): what :func:`converged_render` plans its next pass by."""


def converged_render(scene: Any, camera: Camera, size: int, lighting: Lighting, config: FitConfig, seed: int, target_db: float) -> ReferenceRender:
    """Render ``scene`` from ``camera`` as two independent halves, with more environment samples each
    round, until the estimated noise floor reaches ``target_db`` or a half would pass
    ``config.max_environment_samples / 2`` samples.

    A round renders both halves afresh (seeds ``seed * 4096 + 2 round`` and ``+ 1``; ``seed``: distinct
    per view, so the views' grain is independent too) at a power of two of samples each, planned from
    the last round's shortfall by :data:`QMC_DB_PER_DOUBLING`: one scrambled Sobol pass of N samples
    is cleaner than an average of passes that add up to N, so earlier rounds are dropped, not averaged
    in. The first round takes ``lighting.environment_samples`` a half."""
    rs = as_render_scene(scene)
    g = render_gbuffer(rs, camera, size, size)
    display = lambda hdr: tone_map(hdr, operator=config.display_tone_map, exposure=config.exposure)  # noqa: E731
    layers = peel_layers(rs, camera, g) if see_through(rs) else [(g, None)]
    directs = [shade_direct(rs, layer, lighting) for layer, _ in layers]  # emission and the directional lights: exact, shaded once

    def composed(results: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        if len(layers) == 1 and layers[0][1] is None:
            return results[0].hdr, results[0].alpha
        colours = [layer.image(r.radiance, 0.0) for (layer, _), r in zip(layers, results, strict=True)]
        covers = [layer.image(cover[:, None], 0.0)[..., 0] for layer, cover in layers]
        return composite_layers(colours, covers, background_radiance(rs, g, lighting))

    peeled = None if layers[0][1] is None else [(layer, cover.detach()) for layer, cover in layers]
    hits = g.visibility.mask
    if lighting.environment is None:
        hdr, alpha = composed(directs)
        return ReferenceRender(hdr, display(hdr), alpha, g, 0, math.inf, peeled)
    largest = max(config.max_environment_samples // 2, lighting.environment_samples)
    spp, rounds = lighting.environment_samples, 0
    while True:
        a, b = (composed([with_environment(rs, layer, direct, replace(lighting, seed=seed * 4096 + 2 * rounds + half, environment_samples=spp))
                          for (layer, _), direct in zip(layers, directs, strict=True)]) for half in (0, 1))
        between = psnr(display(a[0])[hits], display(b[0])[hits]) if bool(hits.any()) else math.inf
        shortfall = target_db - (between + HALVES_TO_FLOOR_DB)
        planned = spp * 2 ** max(1, math.ceil(shortfall / QMC_DB_PER_DOUBLING)) if math.isfinite(shortfall) else spp
        if shortfall <= 0 or spp >= largest:
            break
        spp, rounds = min(planned, largest), rounds + 1
    hdr = 0.5 * (a[0] + b[0])
    return ReferenceRender(hdr, display(hdr), a[1], g, 2 * spp, between, peeled)


@dataclass(eq=False)
class Composite:
    """How a see-through view's pixels are made of its rows (fragments: every layer's hits, front layer first)."""

    pixel: torch.Tensor
    """int64 ``[P]`` flat image pixels the view scores: the first layer's hits (its first ``P`` rows, in this order)."""
    slot: torch.Tensor
    """int64 ``[F]`` each fragment's pixel, as an index into :attr:`pixel`."""
    layer_ends: tuple[int, ...]
    """End row of each layer's fragments (a pixel has at most one fragment per layer)."""
    behind: torch.Tensor
    """``[P, 3]`` display colour of what lies behind every layer (the background) at each pixel."""


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
    samples: int = 0
    """Environment samples per pixel of the reference (:class:`ReferenceRender`)."""
    halves_psnr_db: float = math.inf
    """PSNR between the reference's two independent halves (``inf``: noise-free)."""
    composite: Composite | None = None
    """A see-through view's layers (``None``: one opaque hit per pixel, the rows are the pixels)."""

    @property
    def targets(self) -> torch.Tensor:
        """int64 ``[P]`` flat image pixels of :attr:`reference`'s rows."""
        return self.pixel if self.composite is None else self.composite.pixel


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


def estimated_view_bytes(config: FitConfig, layers: int = 1) -> int:
    """A rough upper estimate of the memory the reference views keep, plus one view's render.

    Every view's hits at most fill the disc that the framed bounding sphere projects to (pi/4 of
    the frame); each hit keeps :data:`VIEW_BYTES_PER_PIXEL` (held-out views
    :data:`HELD_OUT_BYTES_PER_PIXEL`, and their full images; with ``shape`` every training view
    keeps its whole frame and each step's differentiable renders are counted too). ``layers``: rows a hit pixel keeps
    at most (a see-through LOD keeps every layer along the ray, up to ``MAX_LAYERS``).
    """
    pixels = config.render_size * config.render_size
    kept = math.pi / 4 * pixels * layers * (config.views * VIEW_BYTES_PER_PIXEL + config.held_out_views * HELD_OUT_BYTES_PER_PIXEL)
    if config.shape:  # every training view keeps its whole frame; a step renders and differentiates one more
        kept += pixels * (16 * config.views + RENDER_BYTES_PER_PIXEL * config.views_per_step)
    return int(kept + pixels * RENDER_BYTES_PER_PIXEL)


def check_view_memory(config: FitConfig, device: torch.device, layers: int = 1) -> None:
    """Refuse, before any render, views that cannot fit in the memory of ``device`` (host RAM for cpu)."""
    needed = estimated_view_bytes(config, layers)
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
    first_seed: int = 0,
    target_db: float = math.inf,
    layered: bool = False,
) -> list[View]:
    """Render the converged PBR reference (:func:`converged_render`) from ``cameras`` and keep each
    view's hit pixels (see :class:`View`).

    ``reference``: another prepared scene to render the reference images from (the original of a
    simplified ``rs``); the hit pixels and G-buffer rows are still ``rs``'s. ``background``: the
    display colour where nothing is hit (:func:`display_background`), kept by held-out views.
    ``first_seed``: the first view's render seed (each view takes the next), so that two calls
    (training and held-out views) draw independent samples. ``target_db``: the noise floor each
    reference is rendered to (``config.training_noise_db`` or ``config.reference_noise_db``). ``layered``: the LOD
    lets light through (it ships alpha), so each view keeps every layer along its rays (:class:`Composite`); else one
    row per pixel, its first hit.
    """
    views = []
    size = config.render_size
    for k, cam in enumerate(cameras):
        with torch.no_grad():
            out = converged_render(rs if reference is None else reference, cam, size, lighting, config, seed=lighting.seed + first_seed + k, target_db=target_db)
            g: GBuffer = out.gbuffer if reference is None else render_gbuffer(rs, cam, size, size)
            layers = out.layers if layered else None
            if reference is not None and layered:  # the rows are the LOD's: its own layers along the camera rays
                layers = [(layer, cover.detach()) for layer, cover in peel_layers(rs, cam, g)]
        rows = g.pixel
        weight = None
        if mask is not None:
            m = sample_bilinear(mask, g.uv[0], wrap_s="repeat", wrap_t="repeat")[:, 0]
            weight = 1.0 + (config.weight_max - 1.0) * m
        kept, composite = g.rows(detach=True), None
        if layers is not None:
            kept, composite = _fragments(layers, background if background is not None else display_background(config, lighting, g.pixel.device))
        views.append(
            View(
                **kept,
                reference=out.ldr.reshape(-1, 3)[rows].detach(),
                weight=weight,
                hdr=out.hdr.reshape(-1, 3)[rows].detach(),
                image=out.ldr.detach() if keep_image else None,
                alpha=out.alpha.detach() if keep_image else None,
                background=background if keep_image else None,
                samples=out.samples,
                halves_psnr_db=out.halves_psnr_db,
                composite=composite,
            )
        )
        if advance is not None:
            advance(1)
    return views


def _fragments(layers: list[tuple[GBuffer, torch.Tensor]], background: torch.Tensor) -> tuple[dict[str, Any], Composite]:
    """See-through layers (front to back) as one view's rows (every layer's hits, front layer first) and their
    :class:`Composite`. ``background``: the display colour behind every layer (a constant background)."""
    first = layers[0][0]
    slot_of = torch.full((first.height * first.width,), -1, dtype=torch.int64, device=first.pixel.device)
    slot_of[first.pixel] = torch.arange(first.pixel.numel(), device=first.pixel.device)
    parts = [layer.rows(detach=True) for layer, _ in layers]
    rows = {}
    for name, value in parts[0].items():
        if isinstance(value, tuple):
            rows[name] = tuple(torch.cat([p[name][k] for p in parts]) for k in range(len(value)))
        else:
            rows[name] = torch.cat([p[name] for p in parts])
    ends = tuple(int(e) for e in np.cumsum([layer.pixel.numel() for layer, _ in layers]))
    behind = background.to(first.pixel.device).reshape(1, 3).expand(first.pixel.numel(), 3)
    return rows, Composite(pixel=first.pixel, slot=slot_of[rows["pixel"]], layer_ends=ends, behind=behind)


def reference_record(config: FitConfig, train_views: list[View], held_views: list[View]) -> dict[str, Any]:
    """The report's ``reference_renders`` block: how converged the reference renders are."""

    def summary(views: list[View]) -> dict[str, Any]:
        floors = [v.halves_psnr_db + HALVES_TO_FLOOR_DB for v in views]
        return {
            "samples_per_pixel": [v.samples for v in views],
            "halves_psnr_db": [round(v.halves_psnr_db, 2) for v in views],
            "noise_floor_db": round(min(floors), 2) if floors else None,
        }

    return {
        "what": (
            "each view's PBR render, two independent halves with more environment samples each round until the estimated "
            "noise floor (PSNR against its own expectation: the PSNR between the halves + 6.02 dB) reached the target or the "
            "samples the cap; samples_per_pixel counts both halves; noise_floor_db is the worst view's. A fit scored near "
            "the held-out floor is limited by the reference, not by the LOD."
        ),
        "environment": bool(config.environment),
        "target_noise_db": {"held_out": config.reference_noise_db, "training": config.training_noise_db},
        "max_samples_per_pixel": config.max_environment_samples,
        "training": summary(train_views),
        "held_out": summary(held_views),
    }
