"""PBR-to-LOD fitting (``neuralbake fit``): the view-dependent look of a glTF PBR asset fitted into
cheap unlit storage -- one texture in a non-overlapping uv1 atlas, per-vertex colours, or
luminance in uv0 times chrominance in uv1 -- by gradient descent through the deferred renderer.

How a fit runs (the Mythal approach of the GDC talk in the seeds):

* **Reference.** A fixed, deterministic light scene (one directional light, optionally the
  procedural sky as an importance-sampled environment with a fixed Sobol seed) renders the PBR
  asset from a pool of training views (a Fibonacci orbit) and from held-out views (a seeded random
  orbit). Images are compared in *display space*: ``tone_map(hdr, display_tone_map,
  exposure)`` -- tone-mapped, sRGB encoded -- which is what a player sees.
* **LOD image.** The stored values (texels or vertex colours) are read through the *same*
  G-buffer (visibility is not differentiable; gradients flow to texels and vertex colours only),
  exactly as a glTF viewer would: sRGB texels are decoded to linear, filtered (trilinear mips,
  clamp-to-edge), the unlit output written to an sRGB framebuffer; vertex colours (``COLOR_0``,
  linear) are interpolated. With ``tonemap="fit"`` the stored values are LDR codes that a shader
  decodes with a fitted *inverse tone map* (the seed's first- or second-order rational forms) into
  HDR radiance, which is then display-tone-mapped like the reference.
* **Optimisation.** Adam over the stored values (projected back to [0, 1] after each step) and
  the tone-map parameters; each step renders one random training view (``views_per_step``);
  an **epoch is one pass over the training-view pool** in a fresh random order. The stored values
  are initialised by splatting the reference pixels onto their nearest texel / vertex (the
  "brute-force bake" of the seed), so the gradient steps only have to add the view dependence.
* **Quantisation.** ``quantize=8`` trains through 8-bit rounding of the stored values, either
  with the straight-through estimator (forward rounds, backward is the identity) or with a soft
  quantiser (a tanh staircase whose sharpness is annealed to hard rounding); the written values
  are exact 8-bit codes in both cases.
* **Artist weights.** ``weights`` is a greyscale mask in the asset's **uv0 texture space** (so a
  painted region stays put as the camera moves; a screen-space mask would not survive random
  views): each pixel's loss weight is ``1 + (weight_max - 1) * mask(uv0)``.

Written by hand rather than on :class:`~neuralbake.nn.trainer.Trainer`: the "batch" is a whole
view with a variable pixel count, parameters are projected onto [0, 1] after every step and the
soft quantiser's temperature follows the step -- none of which the trainer's fixed-shape,
mixed-precision loop is for. SSIM is our own differentiable torch implementation (Gaussian window
11, sigma 1.5, constants of Wang et al. 2004) because no SSIM library is a project dependency.

Outputs in ``out_dir``: ``lod.gltf`` (+ ``.bin``, PNGs; ``KHR_materials_unlit``, uv1 and/or
``COLOR_0``), ``triptych.png`` (reference | LOD | error heat map, held-out views),
``loss.png``, ``report.json``, ``config.json``, ``events.jsonl``; luma-chroma also writes
``luma_uv0.png`` and ``chroma_uv1.png`` (glTF core cannot multiply two textures, so ``lod.gltf``
carries their product baked into uv1 for standard viewers); a tone-map fit writes ``codes*.png``
(the LDR codes a custom shader decodes) and ``tonemap.json`` (the fitted curve).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from neuralbake.core.config import save_config
from neuralbake.core.device import resolve_device, seed_everything
from neuralbake.core.events import EventSink, EventWriter, JsonlSink, ProgressSink
from neuralbake.core.metrics import psnr, ssim
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.files import atomic_path, atomic_write_json, prepare_output_dir
from neuralbake.io.gltf import DEFAULT_MAX_TRIANGLES, Material, Scene, TextureRef, load_gltf, write_gltf
from neuralbake.io.images import load_image, save_png
from neuralbake.io.limits import check_memory
from neuralbake.material.texture import linear_to_srgb, srgb_to_linear
from neuralbake.nn.quantize import quantize_hard, quantize_soft, quantize_ste
from neuralbake.render.camera import Camera, fibonacci_orbit, framing_radius, random_orbit
from neuralbake.render.deferred import DirectionalLight, Lighting, render
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import GBuffer, interpolate
from neuralbake.render.mip import build_mip_pyramid, sample_bilinear, sample_trilinear
from neuralbake.render.pictures import comparison_row, panel_grid
from neuralbake.render.scene import prepare_scene
from neuralbake.render.tonemap import TONE_MAP_OPERATORS, InverseToneMap, tone_map

__all__ = [
    "FIT_TARGETS",
    "FitConfig",
    "fit_lod",
    "generate_uv1_atlas",
    "rasterize_uv",
]

FIT_TARGETS = ("unlit", "vertex-color", "luma-chroma")
MAX_TEXTURE_SIZE = 8192
MAX_RENDER_SIZE = 8192
MAX_VIEWS = 1024
"""Most training views, and most held-out views (each keeps its reference and G-buffer rows)."""
VIEW_BYTES_PER_PIXEL = 104
"""What a training view keeps per hit pixel: pixel and triangle (int64), barycentrics, uv/uv_dx/uv_dy
for two UV sets, reference and HDR (float32 x 3) and the loss weight."""
HELD_OUT_BYTES_PER_PIXEL = VIEW_BYTES_PER_PIXEL + 16
"""A held-out view also keeps its full display image and alpha."""
RENDER_BYTES_PER_PIXEL = 1024
"""Transient memory of rendering one view (G-buffer and shading), freed before the next."""


# --- configuration ------------------------------------------------------------------------------------


@dataclass
class FitConfig:
    """Everything that determines a PBR-to-LOD fit."""

    model: str = ""
    """Path of the PBR asset (.gltf or .glb)."""
    target: Literal["unlit", "vertex-color", "luma-chroma"] = "unlit"
    """unlit (one texture in uv1), vertex-color (COLOR_0) or luma-chroma (luminance in uv0, chrominance in uv1)."""
    texture_size: int = 1024
    """Side of the fitted texture (unlit) or of the luminance texture (luma-chroma), in texels."""
    chroma_size: int = 0
    """Side of the chrominance texture for luma-chroma; 0 means texture_size // 2."""
    render_size: int = 1024
    """Side of the square fitting renders (the loss resolution)."""
    views: int = 32
    """Training views (a Fibonacci orbit around the asset)."""
    held_out_views: int = 4
    """Held-out views (a seeded random orbit) for PSNR/SSIM and the triptych."""
    epochs: int = 50
    """Passes over the training views."""
    views_per_step: int = 1
    """Views whose losses are averaged in one Adam step."""
    learning_rate: float = 0.01
    """Adam learning rate of the stored values (they live in [0, 1]); cosine-decayed to 10 %."""
    tonemap_learning_rate: float = 0.01
    """Adam learning rate of the inverse tone map's raw parameters."""
    quantize: int = 0
    """Bits of the stored values during the fit and in the output: 0 (float; 16-bit PNGs) or 8."""
    quantizer: Literal["ste", "soft"] = "ste"
    """How 8-bit rounding is made differentiable: straight-through estimator or soft (annealed tanh staircase)."""
    soft_temperature: tuple[float, float] = (2.0, 60.0)
    """Sharpness of the soft quantiser at the first and the last step (geometric schedule)."""
    tonemap: Literal["none", "fit"] = "none"
    """none: stored values are display colours; fit: LDR codes decoded by a fitted inverse tone map."""
    tonemap_order: int = 1
    """Order of the fitted curve: 1 (cH = cL / (beta + alpha cL)) or 2 (inverse of (cH^2 + a cH) / (b cH^2 + c cH + d))."""
    display_tone_map: str = "aces"
    """Display transform applied to HDR before comparing: aces, reinhard, modified_reinhard or linear."""
    exposure: float = 0.0
    """Exposure in stops before the display transform."""
    weights: str | None = None
    """Optional greyscale mask in the asset's uv0 space (white = important) that up-weights the loss."""
    weight_max: float = 4.0
    """Loss weight where the mask is white (1 where it is black)."""
    init: Literal["splat", "constant"] = "splat"
    """Starting values: splat (reference pixels averaged onto their nearest texel/vertex) or constant mid-grey."""
    uv1: Literal["auto", "generate"] = "auto"
    """auto: keep the asset's uv1 if every mesh has one, else unwrap with xatlas; generate: always unwrap."""
    atlas_padding: int = 2
    """Texels between xatlas charts (at texture_size)."""
    environment: bool = True
    """Light with the procedural sky as well as the directional light."""
    environment_samples: int = 8
    """Environment light + BRDF samples per pixel for the reference renders."""
    shadows: bool = True
    """Shadow rays for the directional light in the reference renders (needs warp-lang's BVH)."""
    light_direction: tuple[float, float, float] = (-0.45, 0.75, 0.5)
    """Direction towards the directional light (world space)."""
    light_irradiance: float = 2.0
    """Irradiance of the directional light."""
    fov_y_deg: float = 40.0
    """Vertical field of view of every view."""
    max_triangles: int = DEFAULT_MAX_TRIANGLES
    """Triangle budget: larger assets are refused before their attributes are decoded."""
    seed: int = 0
    """Seeds the view order, the held-out views and the environment sampling."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N."""

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""

        def bad(name: str, problem: str, fix: str) -> ConfigError:
            return ConfigError(problem, field=name, fix=fix)

        if not self.model:
            raise bad("model", "no asset given.", "pass the PBR glTF to fit.")
        if self.target not in FIT_TARGETS:
            raise bad("target", f"unknown target {self.target!r}.", f"use one of {', '.join(FIT_TARGETS)}.")
        for name, top in (("texture_size", MAX_TEXTURE_SIZE), ("render_size", MAX_RENDER_SIZE)):
            v = getattr(self, name)
            if not isinstance(v, int) or not 4 <= v <= top:
                raise bad(name, f"{name} must be an integer in [4, {top}], got {v!r}.", "pass e.g. 1024.")
        if not isinstance(self.chroma_size, int) or not (self.chroma_size == 0 or 2 <= self.chroma_size <= MAX_TEXTURE_SIZE):
            raise bad("chroma_size", f"chroma_size must be 0 or in [2, {MAX_TEXTURE_SIZE}], got {self.chroma_size!r}.", "pass 0 (half of texture_size) or e.g. 512.")
        for name, low in (("views", 1), ("held_out_views", 1), ("epochs", 1), ("views_per_step", 1), ("environment_samples", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise bad(name, f"{name} must be an integer >= {low}, got {v!r}.", f"pass e.g. {max(low, 4)}.")
        for name in ("views", "held_out_views"):
            v = getattr(self, name)
            if v > MAX_VIEWS:
                raise bad(
                    name,
                    f"{name} must be at most {MAX_VIEWS}, got {v}; every view keeps its reference render in memory.",
                    f"pass e.g. {32 if name == 'views' else 4} (a few dozen views cover an asset; more epochs revisit them).",
                )
        if self.views_per_step > self.views:
            raise bad("views_per_step", f"views_per_step ({self.views_per_step}) exceeds views ({self.views}).", "lower it or add views.")
        for name in ("learning_rate", "tonemap_learning_rate"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise bad(name, f"{name} must be a positive number, got {v!r}.", "pass e.g. 0.01.")
        if self.quantize not in (0, 8):
            raise bad("quantize", f"quantize must be 0 (off) or 8 bits, got {self.quantize!r}.", "pass --quantize 8 or leave it off.")
        if self.quantizer not in ("ste", "soft"):
            raise bad("quantizer", f"unknown quantizer {self.quantizer!r}.", "use ste or soft.")
        t0, t1 = self.soft_temperature
        if not (0 < t0 <= t1 and math.isfinite(t1)):
            raise bad("soft_temperature", f"soft_temperature must be (start, end) with 0 < start <= end, got {self.soft_temperature!r}.", "pass e.g. (2, 60).")
        if self.tonemap not in ("none", "fit"):
            raise bad("tonemap", f"unknown tonemap {self.tonemap!r}.", "use none or fit.")
        if self.tonemap_order not in (1, 2):
            raise bad("tonemap_order", f"tonemap_order must be 1 or 2, got {self.tonemap_order!r}.", "pass 1 or 2.")
        if self.display_tone_map not in TONE_MAP_OPERATORS:
            raise bad("display_tone_map", f"unknown display tone map {self.display_tone_map!r}.", f"use one of {', '.join(TONE_MAP_OPERATORS)}.")
        if not (math.isfinite(self.weight_max) and self.weight_max >= 1.0):
            raise bad("weight_max", f"weight_max must be >= 1, got {self.weight_max!r}.", "pass e.g. 4.")
        if self.init not in ("splat", "constant"):
            raise bad("init", f"unknown init {self.init!r}.", "use splat or constant.")
        if self.uv1 not in ("auto", "generate"):
            raise bad("uv1", f"unknown uv1 mode {self.uv1!r}.", "use auto or generate.")
        if not isinstance(self.atlas_padding, int) or not 0 <= self.atlas_padding <= 64:
            raise bad("atlas_padding", f"atlas_padding must be in [0, 64], got {self.atlas_padding!r}.", "pass e.g. 2.")
        if not (math.isfinite(self.light_irradiance) and self.light_irradiance >= 0):
            raise bad("light_irradiance", f"light_irradiance must be >= 0, got {self.light_irradiance!r}.", "pass e.g. 2.")
        if not 1.0 <= self.fov_y_deg <= 150.0:
            raise bad("fov_y_deg", f"fov_y_deg must be in [1, 150], got {self.fov_y_deg!r}.", "pass e.g. 40.")
        if not isinstance(self.max_triangles, int) or self.max_triangles < 1:
            raise bad("max_triangles", f"max_triangles must be a positive integer, got {self.max_triangles!r}.", "pass e.g. 2000000.")

    @property
    def chroma_side(self) -> int:
        """The chrominance texture side in use."""
        return self.chroma_size or max(self.texture_size // 2, 2)


# --- uv atlas and texture-space rasterisation --------------------------------------------------------------


def generate_uv1_atlas(scene: Scene, *, resolution: int, padding: int = 2) -> Scene:
    """A copy of ``scene`` with a non-overlapping uv1 atlas over all meshes (xatlas), vertices split
    along chart seams. Triangle order is kept, so triangle ids (and barycentrics) of the input and
    the output agree."""
    import xatlas

    atlas = xatlas.Atlas()
    for mesh in scene.meshes:
        atlas.add_mesh(np.ascontiguousarray(mesh.positions, np.float32), np.ascontiguousarray(mesh.indices, np.uint32))
    pack = xatlas.PackOptions()
    pack.resolution = int(resolution)
    pack.padding = int(padding)
    pack.bilinear = True
    atlas.generate(xatlas.ChartOptions(), pack)
    meshes = []
    for k, mesh in enumerate(scene.meshes):
        vmap, indices, uvs = atlas[k]
        pick = lambda a: None if a is None else np.ascontiguousarray(a[vmap])
        meshes.append(
            replace(
                mesh,
                positions=pick(mesh.positions),
                indices=indices.astype(np.int64),
                normals=pick(mesh.normals),
                tangents=pick(mesh.tangents),
                uv0=pick(mesh.uv0),
                uv1=np.ascontiguousarray(uvs, np.float32),
                colors=pick(mesh.colors),
            )
        )
    return Scene(meshes=meshes, materials=scene.materials, source=scene.source)


def rasterize_uv(uv: torch.Tensor, faces: torch.Tensor, size: int, *, dilate: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Triangles rasterised into a ``size`` x ``size`` texture at texel centres in uv space.

    Returns ``(triangle [S, S] int64, -1 where empty; barycentrics [S, S, 2])``. Texels within
    ``dilate`` texels of a chart copy their nearest covered neighbour (a gutter, so bilinear
    filtering and mips do not pull in empty texels). Not differentiable (a baking utility).
    """
    device = uv.device
    p = uv.detach().to(torch.float64)[faces] * size - 0.5  # [F, 3, 2] in texel-centre coordinates
    lo = torch.clamp(torch.ceil(p.amin(1)), 0, size - 1).long()
    hi = torch.clamp(torch.floor(p.amax(1)), 0, size - 1).long()
    span = torch.clamp(hi - lo + 1, min=0)
    counts = span[:, 0] * span[:, 1]
    tri_all = torch.repeat_interleave(torch.arange(len(faces), device=device), counts)
    start = torch.cumsum(counts, 0) - counts
    local = torch.arange(int(counts.sum()), device=device) - start[tri_all]
    x = lo[tri_all, 0] + local % span[tri_all, 0]
    y = lo[tri_all, 1] + local // span[tri_all, 0]
    q = p[tri_all]
    e1, e2, d = q[:, 1] - q[:, 0], q[:, 2] - q[:, 0], torch.stack((x, y), 1).double() - q[:, 0]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    ok = det.abs() > 1e-12
    det = torch.where(ok, det, torch.ones_like(det))
    b1 = (d[:, 0] * e2[:, 1] - d[:, 1] * e2[:, 0]) / det
    b2 = (e1[:, 0] * d[:, 1] - e1[:, 1] * d[:, 0]) / det
    eps = 1e-7
    inside = ok & (b1 >= -eps) & (b2 >= -eps) & (b1 + b2 <= 1 + eps)
    flat = (y * size + x)[inside]
    triangle = torch.full((size * size,), -1, dtype=torch.long, device=device)
    bary = torch.zeros(size * size, 2, dtype=torch.float64, device=device)
    triangle[flat] = tri_all[inside]
    bary[flat] = torch.stack((b1, b2), 1)[inside]
    triangle, bary = triangle.reshape(size, size), bary.reshape(size, size, 2)
    for _ in range(dilate):
        empty = triangle < 0
        if not bool(empty.any()):
            break
        for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
            src_t = torch.roll(triangle, (dy, dx), (0, 1))
            src_b = torch.roll(bary, (dy, dx), (0, 1))
            take = empty & (src_t >= 0) & (triangle < 0)
            triangle = torch.where(take, src_t, triangle)
            bary = torch.where(take[..., None], src_b, bary)
    return triangle, bary.to(uv.dtype)


# --- views ------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _View:
    """What one fitting view keeps: hit pixels, their G-buffer rows and the reference."""

    pixel: torch.Tensor
    triangle: torch.Tensor
    barycentrics: torch.Tensor
    uv: tuple[torch.Tensor, torch.Tensor]
    uv_dx: tuple[torch.Tensor, torch.Tensor]
    uv_dy: tuple[torch.Tensor, torch.Tensor]
    reference: torch.Tensor
    """``[N, 3]`` display values of the PBR render at the hits."""
    weight: torch.Tensor | None
    hdr: torch.Tensor
    """``[N, 3]`` linear HDR radiance of the reference (tone-map initialisation)."""
    image: torch.Tensor | None = None
    """``[H, W, 3]`` full reference display image (held-out views only)."""
    alpha: torch.Tensor | None = None


def _lighting(config: FitConfig, device: torch.device) -> Lighting:
    env = EnvironmentLight.from_map(default_environment(128, 64, device=device)) if config.environment else None
    return Lighting(
        directional=[DirectionalLight(direction=tuple(config.light_direction), irradiance=float(config.light_irradiance))],
        environment=env,
        environment_samples=config.environment_samples,
        shadows=config.shadows,
        seed=config.seed,
        background=(0.18, 0.18, 0.18),
    )


def _cameras(scene: Scene, config: FitConfig) -> tuple[list[Camera], list[Camera]]:
    """Training (Fibonacci) and held-out (random) orbits framing the asset's bounding sphere
    (centred on the box centre, radius = farthest vertex: tighter than the half box diagonal)."""
    lo, hi = scene.bounds()
    mid = (lo + hi) / 2
    centre = tuple(float(v) for v in mid)
    extent = max(float(np.sqrt(((m.positions - mid) ** 2).sum(-1)).max()) for m in scene.meshes)
    radius = framing_radius(extent, config.fov_y_deg)
    train = fibonacci_orbit(config.views, radius, target=centre, fov_y_deg=config.fov_y_deg)
    held = random_orbit(config.held_out_views, radius, seed=config.seed + 7919, target=centre, fov_y_deg=config.fov_y_deg)
    return train, held


def _load_weights(config: FitConfig, device: torch.device) -> torch.Tensor | None:
    if config.weights is None:
        return None
    image, _ = load_image(config.weights)
    grey = image[..., :3].mean(-1, keepdims=True) if image.shape[2] >= 3 else image[..., :1]
    return torch.from_numpy(np.ascontiguousarray(grey, np.float32)).to(device)


def estimated_view_bytes(config: FitConfig) -> int:
    """A rough upper estimate of the memory the reference views keep, plus one view's render.

    Every view's hits at most fill the disc that the framed bounding sphere projects to (pi/4 of
    the frame); each hit keeps :data:`VIEW_BYTES_PER_PIXEL` (held-out views
    :data:`HELD_OUT_BYTES_PER_PIXEL`, and their full images).
    """
    pixels = config.render_size * config.render_size
    kept = math.pi / 4 * pixels * (config.views * VIEW_BYTES_PER_PIXEL + config.held_out_views * HELD_OUT_BYTES_PER_PIXEL)
    return int(kept + pixels * RENDER_BYTES_PER_PIXEL)


def _check_view_memory(config: FitConfig, device: torch.device) -> None:
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


def _render_views(rs: Any, cameras: list[Camera], config: FitConfig, lighting: Lighting, mask: torch.Tensor | None, keep_image: bool) -> list[_View]:
    views = []
    size = config.render_size
    for cam in cameras:
        with torch.no_grad():
            out = render(rs, cam, size, size, lighting, tone_map=config.display_tone_map, exposure=config.exposure)
        g: GBuffer = out.gbuffer
        rows = g.pixel
        weight = None
        if mask is not None:
            m = sample_bilinear(mask, g.uv[0], wrap_s="repeat", wrap_t="repeat")[:, 0]
            weight = 1.0 + (config.weight_max - 1.0) * m
        detach = lambda t: t.detach()
        views.append(
            _View(
                pixel=rows,
                triangle=g.triangle,
                barycentrics=detach(g.barycentrics),
                uv=(detach(g.uv[0]), detach(g.uv[1])),
                uv_dx=(detach(g.uv_dx[0]), detach(g.uv_dx[1])),
                uv_dy=(detach(g.uv_dy[0]), detach(g.uv_dy[1])),
                reference=out.ldr.reshape(-1, 3)[rows].detach(),
                weight=weight,
                hdr=out.hdr.reshape(-1, 3)[rows].detach(),
                image=out.ldr.detach() if keep_image else None,
                alpha=out.alpha.detach() if keep_image else None,
            )
        )
    return views


# --- the LOD appearance --------------------------------------------------------------------------------------


class LodAppearance(torch.nn.Module):
    """The stored values of a LOD (texels or vertex colours, in [0, 1]) and how a view reads them."""

    def __init__(self, config: FitConfig, faces: torch.Tensor, num_vertices: int, device: torch.device) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("faces", faces)
        n = config.texture_size
        if config.target == "unlit":
            self.texture = torch.nn.Parameter(torch.full((n, n, 3), 0.5, device=device))
        elif config.target == "vertex-color":
            self.vertex = torch.nn.Parameter(torch.full((num_vertices, 3), 0.5, device=device))
        else:
            m = config.chroma_side
            self.luma = torch.nn.Parameter(torch.full((n, n, 1), 0.5, device=device))
            self.chroma = torch.nn.Parameter(torch.full((m, m, 3), 1.0, device=device))
        self.tonemap = InverseToneMap(config.tonemap_order).to(device) if config.tonemap == "fit" else None
        self.temperature = float(config.soft_temperature[0])

    def stored_parameters(self) -> list[torch.nn.Parameter]:
        """The [0, 1] stored values (projected after every step)."""
        return [p for name, p in self.named_parameters() if not name.startswith("tonemap")]

    def store(self, x: torch.Tensor, *, hard: bool = False) -> torch.Tensor:
        """What the file holds for raw values ``x``: quantised (hard, STE or soft) when asked."""
        bits = self.config.quantize
        if not bits:
            return torch.clamp(x, 0.0, 1.0)
        if hard:
            return quantize_hard(x, bits)
        if self.config.quantizer == "ste":
            return quantize_ste(x, bits)
        return quantize_soft(x, bits, self.temperature)

    def _decode(self, x: torch.Tensor) -> torch.Tensor:
        """Stored value -> value the GPU filters: sRGB decode for display-colour textures."""
        return x if self.tonemap is not None else srgb_to_linear(x)

    def _display(self, filtered: torch.Tensor) -> torch.Tensor:
        """Filtered value -> display colour compared with the reference."""
        if self.tonemap is None:
            return torch.clamp(linear_to_srgb(torch.clamp(filtered, 0.0, 1.0)), 0.0, 1.0)
        return tone_map(self.tonemap(filtered), operator=self.config.display_tone_map, exposure=self.config.exposure)

    def forward(self, view: _View, *, hard: bool = False) -> torch.Tensor:
        """Display colours ``[N, 3]`` at the view's hits."""
        target = self.config.target
        if target == "vertex-color":
            stored = self.store(self.vertex, hard=hard)
            lin = interpolate(stored, self.faces, view.triangle, view.barycentrics.to(stored.dtype))
            if self.tonemap is None:
                return torch.clamp(linear_to_srgb(torch.clamp(lin, 0.0, 1.0)), 0.0, 1.0)
            return self._display(lin)
        sample = lambda tex, k: sample_trilinear(build_mip_pyramid(tex), view.uv[k], view.uv_dx[k], view.uv_dy[k], wrap_s="clamp", wrap_t="clamp")
        if target == "unlit":
            return self._display(sample(self._decode(self.store(self.texture, hard=hard)), 1))
        luma = sample(self._decode(self.store(self.luma, hard=hard)), 0)
        chroma = sample(self._decode(self.store(self.chroma, hard=hard)), 1)
        return self._display(luma * chroma)

    @torch.no_grad()
    def project(self) -> None:
        """Keep the stored values in [0, 1] (the range the file can hold)."""
        for p in self.stored_parameters():
            p.clamp_(0.0, 1.0)


def _splat(values: torch.Tensor, uv: torch.Tensor, size: int, out: torch.Tensor, count: torch.Tensor) -> None:
    """Accumulate per-pixel ``values`` onto their nearest texel of a ``size``-square texture."""
    xy = torch.clamp((uv * size).long(), 0, size - 1)
    index = xy[:, 1] * size + xy[:, 0]
    out.index_add_(0, index, values)
    count.index_add_(0, index, torch.ones_like(values[:, :1]))


def _average(total: torch.Tensor, count: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    seen = count[:, 0] > 0
    out = fallback.expand_as(total).clone()
    out[seen] = total[seen] / count[seen]
    return out


@torch.no_grad()
def _initialise(model: LodAppearance, views: list[_View], num_vertices: int) -> None:
    """Brute-force bake as the starting point: each reference pixel's stored-space value
    averaged onto its nearest texel (uv) or the nearest vertex of its triangle."""
    cfg = model.config
    tm = model.tonemap
    if tm is not None and tm.order == 1:
        hdr_all = torch.cat([v.hdr for v in views]).flatten()
        hdr_max = float(torch.quantile(hdr_all[:: max(1, hdr_all.numel() // 100000)], 0.999).clamp(min=1.0))
        tm.set_hdr_max(hdr_max)

    def stored_of(v: _View) -> torch.Tensor:
        if tm is not None:
            return tm.encode(v.hdr * (2.0**cfg.exposure))
        lin = srgb_to_linear(v.reference)
        return lin if cfg.target == "vertex-color" else v.reference

    def lin_of(v: _View) -> torch.Tensor:
        return tm.encode(v.hdr * (2.0**cfg.exposure)) if tm is not None else srgb_to_linear(v.reference)

    dev, dt = model.faces.device, torch.float32
    if cfg.target == "vertex-color":
        total = torch.zeros(num_vertices, 3, device=dev, dtype=dt)
        count = torch.zeros(num_vertices, 1, device=dev, dtype=dt)
        for v in views:
            b = v.barycentrics
            corner = torch.argmax(torch.stack((1 - b[:, 0] - b[:, 1], b[:, 0], b[:, 1]), 1), 1)
            vert = model.faces[v.triangle, corner]
            total.index_add_(0, vert, stored_of(v).to(dt))
            count.index_add_(0, vert, torch.ones_like(total[vert, :1]))
        model.vertex.copy_(_average(total, count, total.sum(0) / count.sum().clamp(min=1)))
        return
    if cfg.target == "unlit":
        n = cfg.texture_size
        total = torch.zeros(n * n, 3, device=dev, dtype=dt)
        count = torch.zeros(n * n, 1, device=dev, dtype=dt)
        for v in views:
            _splat(stored_of(v).to(dt), v.uv[1], n, total, count)
        model.texture.copy_(_average(total, count, total.sum(0) / count.sum().clamp(min=1)).reshape(n, n, 3))
        return
    n, m = cfg.texture_size, cfg.chroma_side
    lt, lc = torch.zeros(n * n, 1, device=dev, dtype=dt), torch.zeros(n * n, 1, device=dev, dtype=dt)
    ct, cc = torch.zeros(m * m, 3, device=dev, dtype=dt), torch.zeros(m * m, 1, device=dev, dtype=dt)
    for v in views:
        lin = lin_of(v).to(dt)
        y = torch.clamp(lin.amax(1, keepdim=True), min=1e-4)
        _splat(y, v.uv[0], n, lt, lc)
        _splat(lin / y, v.uv[1], m, ct, cc)
    luma = _average(lt, lc, lt.sum(0) / lc.sum().clamp(min=1))
    chroma = _average(ct, cc, ct.sum(0) / cc.sum().clamp(min=1))
    enc = (lambda t: t) if tm is not None else (lambda t: linear_to_srgb(torch.clamp(t, 0.0, 1.0)))
    model.luma.copy_(enc(luma).reshape(n, n, 1))
    model.chroma.copy_(enc(chroma).reshape(m, m, 3))


# --- loss, evaluation, pictures ----------------------------------------------------------------------------


def _view_loss(model: LodAppearance, view: _View) -> torch.Tensor:
    diff = model(view) - view.reference
    se = (diff * diff).mean(1)
    if view.weight is None:
        return se.mean()
    return (se * view.weight).sum() / view.weight.sum()


@torch.no_grad()
def _evaluate(model: LodAppearance, views: list[_View], *, with_ssim: bool) -> dict[str, float]:
    preds, refs, ssims = [], [], []
    for v in views:
        pred = model(v, hard=True)
        preds.append(pred)
        refs.append(v.reference)
        if with_ssim and v.image is not None:
            image = v.image.clone().reshape(-1, 3)
            image[v.pixel] = pred
            image = image.reshape(v.image.shape)
            ssims.append(float(ssim(image, v.image, v.alpha > 0)))
    out = {"psnr_db": psnr(torch.cat(preds), torch.cat(refs))}
    if ssims:
        out["ssim"] = float(np.mean(ssims))
    if all(v.image is not None for v in views):
        # whole frames: background pixels are the same in both images, so only hits add error
        squared = sum(float(((p.double() - r.double()) ** 2).sum()) for p, r in zip(preds, refs))
        values = sum(v.image.numel() for v in views)
        out["psnr_frame_db"] = 10.0 * math.log10(values / squared) if squared > 0 else math.inf
    return out


def _lod_image(model: LodAppearance, v: _View) -> torch.Tensor:
    image = v.image.clone().reshape(-1, 3)
    image[v.pixel] = model(v, hard=True)
    return image.reshape(v.image.shape)


@torch.no_grad()
def _write_triptych(path: Path, model: LodAppearance, views: list[_View], max_rows: int = 3, error_scale: float = 0.25) -> None:
    rows = []
    for v in views[:max_rows]:
        rows += comparison_row(v.image, _lod_image(model, v), error="heat", heat_scale=error_scale, colormap="inferno")
    save_png(path, panel_grid(rows, gap=0))


# --- the fit ----------------------------------------------------------------------------------------------------


def _load_asset(config: FitConfig) -> Scene:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # generated normals/tangents are reported by load_gltf's warnings; not fatal here
        scene = load_gltf(config.model, max_triangles=config.max_triangles)
    if config.weights is not None and any(m.uv0 is None for m in scene.meshes):
        raise InputError(
            "the weights mask lives in uv0 space, but a mesh has no TEXCOORD_0.",
            path=config.model,
            field="weights",
            fix="drop --weights or give the asset a uv0 unwrap.",
        )
    if config.target == "luma-chroma" and any(m.uv0 is None for m in scene.meshes):
        raise InputError(
            "luma-chroma stores luminance in uv0, but a mesh has no TEXCOORD_0.",
            path=config.model,
            field="target",
            fix="use --target unlit (uv1 is generated) or unwrap uv0 first.",
        )
    if config.target != "vertex-color" and (config.uv1 == "generate" or any(m.uv1 is None for m in scene.meshes)):
        scene = generate_uv1_atlas(scene, resolution=config.texture_size if config.target == "unlit" else config.chroma_side, padding=config.atlas_padding)
    return scene


@torch.no_grad()
def _baked_uv1_texture(model: LodAppearance, rs: Any, config: FitConfig) -> np.ndarray:
    """Luma-chroma combined into one uv1 texture (what a standard glTF viewer can show)."""
    n = config.texture_size
    tri, bary = rasterize_uv(rs.uv1, rs.faces, n)
    covered = tri >= 0
    t = torch.where(covered, tri, torch.zeros_like(tri)).reshape(-1)
    uv0 = interpolate(rs.uv0, rs.faces, t, bary.reshape(-1, 2))
    ys, xs = torch.meshgrid(torch.arange(n, device=rs.device), torch.arange(n, device=rs.device), indexing="ij")
    uv1 = torch.stack(((xs.reshape(-1) + 0.5) / n, (ys.reshape(-1) + 0.5) / n), 1).to(rs.dtype)
    luma = sample_bilinear(model._decode(model.store(model.luma, hard=True)), uv0)
    chroma = sample_bilinear(model._decode(model.store(model.chroma, hard=True)), uv1, wrap_s="clamp", wrap_t="clamp")
    display = model._display(luma * chroma).reshape(n, n, 3)
    return display.float().cpu().numpy()


@torch.no_grad()
def _write_outputs(out: Path, model: LodAppearance, rs: Any, config: FitConfig) -> dict[str, Any]:
    """lod.gltf and the stored textures; returns the payload sizes."""
    bits = config.quantize or 16
    material = Material(name="lod_unlit", metallic_factor=0.0, roughness_factor=1.0, unlit=True, double_sided=True)
    cpu = lambda t: t.detach().float().cpu().numpy()
    info: dict[str, Any] = {}
    codes: dict[str, np.ndarray] = {}
    colours = None
    if config.target == "vertex-color":
        stored = model.store(model.vertex, hard=True)
        lin = stored
        if model.tonemap is not None:  # a standard viewer shows COLOR_0 directly: store the display colour (linearised)
            lin = srgb_to_linear(tone_map(model.tonemap(stored), operator=config.display_tone_map, exposure=config.exposure))
            codes["codes_vertex"] = cpu(stored)
        colours = torch.cat((lin, torch.ones_like(lin[:, :1])), 1)
    # One mesh per source material (the vertices it uses), all on the LOD material.
    attributes = ("normals", "uv0", "colors") if config.target == "vertex-color" else ("normals", "uv0", "uv1")
    meshes = rs.gltf_meshes(attributes=attributes, colors=colours, material=0, name_prefix="lod_")
    if config.target == "vertex-color":
        info["bytes"] = int(model.vertex.shape[0] * 3 * (1 if config.quantize else 4))
    elif config.target == "unlit":
        stored = model.store(model.texture, hard=True)
        if model.tonemap is None:
            shown = cpu(stored)
        else:
            shown = cpu(model._display(stored))
            codes["codes_uv1"] = cpu(stored)
        material.base_color_texture = TextureRef(shown, texcoord=1, wrap_s="clamp", wrap_t="clamp", name="lod_uv1")
        info["bytes"] = int(stored.numel() * (1 if config.quantize else 2))
    else:
        shown = _baked_uv1_texture(model, rs, config)
        material.base_color_texture = TextureRef(shown, texcoord=1, wrap_s="clamp", wrap_t="clamp", name="lod_combined_uv1")
        save_png(out / "luma_uv0.png", cpu(model.store(model.luma, hard=True))[..., 0], bits=bits)
        save_png(out / "chroma_uv1.png", cpu(model.store(model.chroma, hard=True)), bits=bits)
        info["bytes"] = int((model.luma.numel() + model.chroma.numel()) * (1 if config.quantize else 2))
        info["combined_texture_bytes"] = int(shown.size * (1 if config.quantize else 2))
    for name, array in codes.items():
        if array.ndim == 3:
            save_png(out / f"{name}.png", array, bits=bits)
        else:
            with atomic_path(out / f"{name}.npy") as tmp:
                np.save(tmp, array)
    if model.tonemap is not None:
        atomic_write_json(out / "tonemap.json", {"order": model.tonemap.order, **model.tonemap.parameters_named(), "display_tone_map": config.display_tone_map, "exposure": config.exposure})
    write_gltf(out / "lod.gltf", Scene(meshes=meshes, materials=[material], source=None), texture_bits=8 if config.quantize else 16)
    return info


def fit_lod(config: FitConfig, out_dir: str | Path, *, progress: bool = True, sinks: list[EventSink] | None = None) -> dict[str, Any]:
    """Run a fit (see the module docstring) and write its outputs into ``out_dir``; returns the report."""
    config.validate()
    started = time.perf_counter()
    device = resolve_device(config.device)
    _check_view_memory(config, device)
    out = prepare_output_dir(out_dir)
    seed_everything(config.seed)
    if config.weights is not None and not Path(config.weights).is_file():
        raise InputError("the weights mask does not exist.", path=config.weights, field="weights", fix="pass a greyscale PNG in the asset's uv0 space.")
    if config.shadows:
        from neuralbake.render.visibility import warp_available

        if not warp_available():
            raise ConfigError(
                "shadows need warp-lang's BVH ray casts, and warp-lang cannot be imported here.",
                field="shadows",
                fix="pip install warp-lang==1.19.0, or fit without shadows (--no-shadows).",
            )
    scene = _load_asset(config)
    rs = prepare_scene(scene, device=device)
    lighting = _lighting(config, device)
    mask = _load_weights(config, device)
    train_cams, held_cams = _cameras(scene, config)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    train_views = _render_views(rs, train_cams, config, lighting, mask, keep_image=False)
    held_views = _render_views(rs, held_cams, config, lighting, None, keep_image=True)
    if sum(v.pixel.numel() for v in train_views) == 0:
        raise InputError("no training view sees the asset.", path=config.model, field="views", fix="check the asset's scale and position.")
    precompute_seconds = time.perf_counter() - started

    model = LodAppearance(config, rs.faces, rs.positions.shape[0], device)
    if config.init == "splat":
        _initialise(model, train_views, rs.positions.shape[0])
    groups = [{"params": model.stored_parameters(), "lr": config.learning_rate}]
    if model.tonemap is not None:
        groups.append({"params": list(model.tonemap.parameters()), "lr": config.tonemap_learning_rate})
    optimiser = torch.optim.Adam(groups)
    steps_per_epoch = math.ceil(config.views / config.views_per_step)
    total_steps = steps_per_epoch * config.epochs
    sinks = list(sinks or []) + [JsonlSink(out / "events.jsonl")]
    if progress:
        sinks.append(ProgressSink(f"fit {config.target}"))
    events = EventWriter(sinks)
    generator = torch.Generator().manual_seed(config.seed)
    initial = _evaluate(model, held_views, with_ssim=False)
    history: list[dict[str, Any]] = [{"event": "eval", "step": 0, "epoch": 0, **initial}]
    events.emit("start", total_steps=total_steps, step=0)
    events.emit("eval", step=0, epoch=0, **initial)
    train_seconds, step = 0.0, 0
    t_start, t_end = config.soft_temperature
    curve: list[tuple[int, float, float]] = []  # (epoch, psnr, train seconds so far)
    try:
        for epoch in range(1, config.epochs + 1):
            tick = time.perf_counter()
            order = torch.randperm(config.views, generator=generator).tolist()
            epoch_loss = 0.0
            for k in range(0, config.views, config.views_per_step):
                progress_fraction = step / max(total_steps - 1, 1)
                model.temperature = t_start * (t_end / t_start) ** progress_fraction
                lr_scale = 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress_fraction))
                for g, base in zip(optimiser.param_groups, (config.learning_rate, config.tonemap_learning_rate)):
                    g["lr"] = base * lr_scale
                chunk = order[k : k + config.views_per_step]
                loss = sum(_view_loss(model, train_views[i]) for i in chunk) / len(chunk)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                model.project()
                step += 1
                epoch_loss += float(loss.detach())
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            train_seconds += time.perf_counter() - tick
            mean_loss = epoch_loss / steps_per_epoch
            if not math.isfinite(mean_loss):
                from neuralbake.errors import TrainingError

                raise TrainingError(f"the loss became {mean_loss} at epoch {epoch}.", field="learning_rate", fix="lower --lr.")
            metrics = _evaluate(model, held_views, with_ssim=False)
            curve.append((epoch, metrics["psnr_db"], train_seconds))
            history.append({"event": "train", "step": step, "epoch": epoch, "loss": mean_loss})
            history.append({"event": "eval", "step": step, "epoch": epoch, **metrics})
            events.emit("train", step=step, epoch=epoch, loss=mean_loss)
            events.emit("eval", step=step, epoch=epoch, **metrics)
        events.emit("end", step=step)
    finally:
        events.close()

    final = _evaluate(model, held_views, with_ssim=True)
    best_final = final["psnr_db"]
    converged = next((c for c in curve if c[1] >= best_final - 0.1), curve[-1])
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    files = _write_outputs(out, model, rs, config)
    _write_triptych(out / "triptych.png", model, held_views)
    plot_loss_curve(out / "loss.png", history, title=f"LOD fit ({config.target})", quality_key="psnr_db")
    save_config(out / "config.json", config)
    written = sum(p.stat().st_size for p in out.iterdir() if p.is_file() and (p.name.startswith("lod") or p.suffix in (".png", ".bin")) and p.name not in ("triptych.png", "loss.png"))
    report = write_report(
        out / "report.json",
        bake="fit",
        device=device,
        metrics={"psnr_db": final["psnr_db"], "ssim": final["ssim"], "initial_psnr_db": initial["psnr_db"], "psnr_frame_db": final["psnr_frame_db"]},
        target=config.target,
        views=config.views,
        held_out_views=config.held_out_views,
        epochs=config.epochs,
        steps=step,
        seconds=time.perf_counter() - started,
        train_seconds=train_seconds,
        precompute_seconds=precompute_seconds,
        ms_per_epoch=1000.0 * train_seconds / config.epochs,
        epoch_definition="one pass over the training views, views_per_step views per Adam step; held-out evaluation excluded",
        epochs_to_converge=converged[0],
        seconds_to_converge=converged[2],
        convergence_definition="first epoch whose held-out PSNR is within 0.1 dB of the final",
        texture_size=config.texture_size if config.target != "vertex-color" else None,
        chroma_size=config.chroma_side if config.target == "luma-chroma" else None,
        render_size=config.render_size,
        vertices=int(rs.positions.shape[0]),
        triangles=int(rs.faces.shape[0]),
        quantize=config.quantize,
        quantizer=config.quantizer if config.quantize else None,
        tonemap=model.tonemap.parameters_named() if model.tonemap is not None else None,
        bytes=files["bytes"],
        bytes_definition="raw stored payload: texels (or vertices) x channels x bytes per value (1 for 8-bit, 2 for 16-bit PNG, 4 for float COLOR_0)",
        file_bytes=int(written),
        peak_gpu_memory_bytes=peak,
        metrics_definition=(
            "psnr_db: PSNR over the hit pixels of the held-out views (display space; the asset only); psnr_frame_db: over "
            "whole held-out frames, background included (identical in both, so it only dilutes the error); SSIM averaged "
            "over windows centred on hit pixels"
        ),
        psnr_curve=[{"epoch": e, "psnr_db": p} for e, p, _ in curve],
        **{k: v for k, v in files.items() if k != "bytes"},
    )
    return report
