"""Deferred rendering of glTF scenes for fitting: G-buffer (interpolated vertex attributes at the
visibility buffer's hits), per-pixel glTF PBR material parameters selected by material id, and
shading under directional lights and an HDR environment map.

Pipeline, with what carries gradients:

1. :func:`~neuralbake.render.visibility.visibility_buffer` (Warp BVH; not differentiable) picks
   each pixel's triangle.
2. :func:`render_gbuffer` recomputes the barycentrics with
   :func:`~neuralbake.render.visibility.ray_triangle_barycentrics` (differentiable in vertex
   positions) and :func:`interpolate` s the vertex attributes (differentiable in the attributes and
   barycentrics). uv derivatives for mip selection are ray differentials: the next pixel's ray
   right and down meets the same triangle's plane, and the uv difference is the footprint.
3. :func:`evaluate_materials` samples every material's textures (trilinear over mip pyramids,
   differentiable in the texels) on the pixels whose material id selects it, in one pass that
   writes per-pixel base colour, metallic, roughness, shading normal (normal mapping with the
   vertex tangent frame), occlusion and emission.
4. :func:`shade` evaluates :func:`~neuralbake.material.gltf.gltf_eval` (the glTF 2.0 Appendix B
   BRDF) per pixel: exactly for each directional light (optionally shadowed by a BVH ray), and
   for the environment with ``environment_samples`` light samples and as many BRDF samples per pixel
   combined by the power heuristic (as :mod:`neuralbake.render.preview`). The samples come from
   one scrambled Sobol sequence shifted per pixel with a seeded generator, so a seed gives the
   same image; sample directions are drawn with detached parameters, which keeps the gradient
   estimate unbiased (the sampling density does not depend on the parameters). The occlusion
   texture scales the environment term only, as glTF specifies; back faces are shaded with
   flipped frames (no culling); unlit materials output base colour.

Steps 2 and 3 (the G-buffer and the per-pixel material inputs) are
:mod:`neuralbake.render.gbuffer`; this module lights and shades them. The result is linear HDR
radiance plus coverage; :func:`render` adds a tone-mapped image with
:func:`~neuralbake.render.tonemap.tone_map`. Everything runs on the scene's device and
dtype (CPU or CUDA, float32 or float64).

Geometry gradients: interior ones flow through positions -> barycentrics -> attributes and
shading. Silhouette ones come from :func:`~neuralbake.render.antialias.antialias` (``render(...,
antialias=True)``), which blends pixels across occlusion edges by the edges' projected positions
using :attr:`GBuffer.visibility` (triangle ids and depth). Move vertices with
:meth:`RenderScene.set_positions` so that the next visibility buffer sees them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from neuralbake.errors import InputError
from neuralbake.io.gltf import Scene
from neuralbake.material.frame import normalize
from neuralbake.material.gltf import gltf_eval, gltf_pdf, gltf_sample
from neuralbake.render import tonemap
from neuralbake.render.antialias import antialias as antialias_edges
from neuralbake.render.camera import Camera
from neuralbake.render.envmap import EnvironmentLight
from neuralbake.render.gbuffer import GBuffer, SurfaceParameters, as_render_scene, evaluate_materials, render_gbuffer
from neuralbake.render.scene import RenderScene
from neuralbake.render.transparency import ALPHA_MODES, MAX_LAYERS, composite_layers, coverage, next_layer

__all__ = ["DirectionalLight", "Lighting", "RenderResult", "ShadeResult", "background_radiance", "over_pdf", "peel_layers", "power_heuristic", "render", "see_through", "shade", "shade_direct", "with_environment"]


# --- lights and shading ------------------------------------------------------------------------------


@dataclass
class DirectionalLight:
    """A light at infinity: ``L = f(wi, wo) cos_i E`` for ``wi`` towards the light."""

    direction: tuple[float, float, float] = (-0.45, 0.75, 0.5)
    """World direction *towards* the light (normalised when used)."""
    irradiance: tuple[float, float, float] | float = 1.5
    """Linear RGB irradiance at normal incidence (a float is grey)."""


@dataclass
class Lighting:
    """How :func:`shade` lights the scene."""

    directional: list[DirectionalLight] = field(default_factory=lambda: [DirectionalLight()])
    """Directional lights (may be empty)."""
    environment: EnvironmentLight | None = None
    """An HDR environment (``EnvironmentLight.from_map(...)``), or ``None`` for none."""
    environment_samples: int = 16
    """Light samples and BRDF samples per pixel for the environment (each; MIS combined)."""
    shadows: bool = True
    """Cast a shadow ray per pixel and directional light."""
    environment_shadows: bool = False
    """Also cast a shadow ray per environment sample (costly; the occlusion texture covers most of it)."""
    seed: int = 0
    """Fixes the Sobol scrambling and per-pixel shifts: same seed, same image."""
    background: tuple[float, float, float] | str = "environment"
    """``"environment"`` (the map seen along the ray; black without one) or a linear RGB colour."""

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.InputError` for unusable settings."""
        if not isinstance(self.environment_samples, int) or self.environment_samples < 1:
            raise InputError(
                f"environment_samples must be an integer >= 1, got {self.environment_samples!r}.",
                field="environment_samples",
                fix="pass e.g. 16.",
            )
        if self.environment is not None and not isinstance(self.environment, EnvironmentLight):
            raise InputError(
                f"environment must be an EnvironmentLight, got {type(self.environment).__name__}.",
                field="environment",
                fix="wrap the map: EnvironmentLight.from_map(load_environment(path)).",
            )
        if isinstance(self.background, str) and self.background != "environment":
            raise InputError(f"unknown background {self.background!r}.", field="background", fix="use 'environment' or an RGB tuple.")
        for i, light in enumerate(self.directional):
            # numpy, not torch: this runs on every render, and as tensor ops it was 42 of a skin step's operations
            d = _host_values(light.direction)
            e = _host_values(light.irradiance)
            if d.size != 3 or float(np.linalg.norm(d)) == 0.0 or not np.isfinite(d).all():
                raise InputError(
                    f"light direction {light.direction!r} is not a non-zero 3-vector.",
                    field=f"directional[{i}].direction",
                    fix="pass e.g. (-0.45, 0.75, 0.5).",
                )
            if e.size not in (1, 3) or (e < 0).any() or not np.isfinite(e).all():
                raise InputError(
                    f"irradiance {light.irradiance!r} must be 1 or 3 finite values >= 0.",
                    field=f"directional[{i}].irradiance",
                    fix="pass e.g. 1.5.",
                )


def _host_values(value: Any) -> np.ndarray:
    """A light's direction or irradiance (numbers or a tensor) as a flat float64 array."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64).reshape(-1)


@dataclass(eq=False)
class ShadeResult:
    """Output of :func:`shade`."""

    hdr: torch.Tensor
    """``[H, W, 3]`` linear radiance (background where nothing was hit)."""
    alpha: torch.Tensor
    """``[H, W]`` 1 where the mesh was hit, else 0."""
    radiance: torch.Tensor
    """``[N, 3]`` radiance of the hit pixels only (``gbuffer.pixel`` order)."""
    surface: SurfaceParameters
    """The per-pixel material inputs used."""


def power_heuristic(p: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """The power heuristic's MIS weight of a sample drawn with pdf ``p`` against the other strategy's ``other`` (0 where ``p`` is)."""
    p2, o2 = p * p, other * other
    return torch.where(p > 0.0, p2 / torch.clamp(p2 + o2, min=torch.finfo(p.dtype).tiny), torch.zeros_like(p))


def over_pdf(value: torch.Tensor, pdf: torch.Tensor) -> torch.Tensor:
    """``value / pdf`` per row, 0 where the pdf is 0 (a sample that strategy cannot draw)."""
    ok = pdf > 0.0
    return torch.where(ok[:, None], value / torch.where(ok, pdf, torch.ones_like(pdf))[:, None], torch.zeros_like(value))


ENVIRONMENT_BATCH_ROWS = 1 << 21
"""Rows (pixels x samples) the environment estimator evaluates per batch: all of a view's samples at once
where they fit (one BRDF evaluation for every sample and both strategies), else a few batches."""


def _environment(scene: RenderScene, g: GBuffer, s: SurfaceParameters, lighting: Lighting, wo: torch.Tensor) -> torch.Tensor:
    env = lighting.environment
    dtype, device = scene.dtype, scene.device
    if env.radiance.device != device:
        env = EnvironmentLight.from_map(env.radiance.to(device))
    spp, n = lighting.environment_samples, wo.shape[0]
    sobol = torch.quasirandom.SobolEngine(4, scramble=True, seed=lighting.seed).draw(spp).to(torch.float64)
    gen = torch.Generator(device="cpu").manual_seed(lighting.seed)
    shift = torch.rand(g.width * g.height, 4, generator=gen, dtype=torch.float64)[g.pixel.cpu()]
    sobol, shift = sobol.to(device), shift.to(device)
    frame = (s.tangent.detach(), s.bitangent.detach(), s.normal.detach())
    geometric = s.geometric_normal.detach()
    metallic, roughness = s.metallic.detach(), s.roughness.detach()
    origin = g.position.detach() + geometric * (1e-4 * scene.extent)

    def local(w: torch.Tensor) -> torch.Tensor:  # [K, N, 3] world -> shading frame
        return torch.stack([(w * axis).sum(-1) for axis in frame], dim=-1)

    def world(w: torch.Tensor) -> torch.Tensor:
        return w[..., 0:1] * frame[0] + w[..., 1:2] * frame[1] + w[..., 2:3] * frame[2]

    def rows(t: torch.Tensor | float, k: int) -> torch.Tensor | float:  # per-pixel values for k samples each
        return t.repeat(k, *([1] * (t.dim() - 1))) if isinstance(t, torch.Tensor) else t

    total = torch.zeros_like(s.base_color)
    step = max(1, ENVIRONMENT_BATCH_ROWS // max(2 * n, 1))
    for k0 in range(0, spp, step):
        k = min(step, spp - k0)
        u = torch.remainder(sobol[k0 : k0 + k, None, :] + shift[None], 1.0).to(env.pmf.dtype)  # [K, N, 4]
        # light samples, then BRDF samples: [K, N, 3] each
        light_world, p_light_l = env.sample(u[..., 0:2].reshape(-1, 2))
        light_world = light_world.to(dtype).reshape(k, n, 3)
        light_local = local(light_world)
        coat = {key: None if value is None else rows(value.detach() if isinstance(value, torch.Tensor) else value, k)
                for key, value in s.sampling_extensions().items()}
        bsdf_local, p_bsdf_b = gltf_sample(rows(wo.detach(), k), u[..., 2:4].reshape(-1, 2).to(dtype), metallic=rows(metallic, k), roughness=rows(roughness, k),
                                           **coat)
        bsdf_local = bsdf_local.reshape(k, n, 3)
        bsdf_world = world(bsdf_local)
        p_bsdf_l = gltf_pdf(light_local.reshape(-1, 3), rows(wo.detach(), k), metallic=rows(metallic, k), roughness=rows(roughness, k), **coat)
        p_light_b = env.pdf(bsdf_world.reshape(-1, 3).to(env.pmf.dtype)).to(dtype)
        p_light_l = p_light_l.to(dtype)
        weight = torch.cat((power_heuristic(p_light_l, p_bsdf_l), power_heuristic(p_bsdf_b, p_light_b)))
        pdf = torch.cat((p_light_l, p_bsdf_b))
        wi_world = torch.cat((light_world, bsdf_world)).reshape(-1, 3)  # [2 K N, 3]: both strategies
        wi = torch.cat((light_local, bsdf_local)).reshape(-1, 3).detach()
        above = ((wi_world.reshape(2 * k, n, 3) * geometric).sum(-1) > 0.0).to(dtype).reshape(-1)
        if lighting.environment_shadows:
            above = above * (~scene.caster.occluded(rows(origin, 2 * k), wi_world)).to(dtype)
        radiance = env.eval(wi_world.to(env.pmf.dtype)).to(dtype)
        f = gltf_eval(wi, rows(wo, 2 * k), base_color=rows(s.base_color, 2 * k), metallic=rows(s.metallic, 2 * k), roughness=rows(s.roughness, 2 * k),
                      **{key: None if value is None else rows(value, 2 * k) for key, value in s.brdf_extensions().items()})
        total = total + (over_pdf(f * radiance, pdf) * (weight * above)[:, None]).reshape(2 * k, n, 3).sum(0)
    return total * (s.occlusion[:, None] / spp)


def shade(scene: RenderScene, gbuffer: GBuffer, lighting: Lighting | None = None) -> ShadeResult:
    """Shade a G-buffer of ``scene`` (see the module docstring); differentiable in the material
    tensors, vertex attributes and positions the G-buffer was built from."""
    lighting = Lighting() if lighting is None else lighting
    lighting.validate()
    return _composite(scene, gbuffer, lighting, *_hit_radiance(scene, gbuffer, lighting))


def _hit_radiance(scene: RenderScene, gbuffer: GBuffer, lighting: Lighting, surface: SurfaceParameters | None = None) -> tuple[SurfaceParameters, torch.Tensor]:
    """:func:`shade`'s material inputs and radiance at the hits (emission, the lights, the environment), before the
    background is filled in. ``surface``: the G-buffer's material inputs when already evaluated."""
    s, radiance = _direct_radiance(scene, gbuffer, lighting, surface)
    if lighting.environment is not None and radiance.shape[0]:
        radiance = radiance + _environment(scene, gbuffer, s, lighting, s.to_local(gbuffer.view))
    return s, torch.where(s.unlit[:, None], s.base_color, radiance)


def shade_direct(scene: RenderScene, gbuffer: GBuffer, lighting: Lighting) -> ShadeResult:
    """The deterministic part of :func:`shade`: emission and the directional lights, without the
    environment (whose Monte Carlo passes :func:`with_environment` adds, once per seed)."""
    lighting.validate()
    return _composite(scene, gbuffer, lighting, *_direct_radiance(scene, gbuffer, lighting))


def _direct_radiance(scene: RenderScene, gbuffer: GBuffer, lighting: Lighting, surface: SurfaceParameters | None = None) -> tuple[SurfaceParameters, torch.Tensor]:
    """The per-pixel material inputs (``surface``, or evaluated here) and the hits' radiance from emission and the directional lights."""
    s = evaluate_materials(scene, gbuffer) if surface is None else surface
    dtype, device = scene.dtype, scene.device
    wo = s.to_local(gbuffer.view)
    radiance = s.emissive
    origin = gbuffer.position.detach() + s.geometric_normal.detach() * (1e-4 * scene.extent)
    lights = lighting.directional
    if not lights:
        return s, radiance
    # every light in one batch of rows (light-major), so the BRDF is evaluated once however many lights there are
    count, n = len(lights), wo.shape[0]
    table = torch.stack([
        torch.cat((torch.as_tensor(light.direction, dtype=torch.float64).reshape(3),
                   torch.as_tensor(light.irradiance, dtype=torch.float64).reshape(-1).expand(3)))
        for light in lights
    ]).to(device=device, dtype=dtype)  # [L, 6]: direction towards the light, irradiance
    l_world = normalize(table[:, None, :3]).expand(count, n, 3)
    lit = ((l_world * s.geometric_normal).sum(-1) > 0.0).to(dtype)
    if lighting.shadows and n:
        lit = lit * torch.stack([~scene.caster.occluded(origin, l_world[k]) for k in range(count)]).to(dtype)
    repeat = (lambda t: t) if count == 1 else (lambda t: t.repeat(count, *([1] * (t.dim() - 1))) if isinstance(t, torch.Tensor) else t)
    f = gltf_eval(
        s.to_local(l_world).reshape(count * n, 3), repeat(wo), base_color=repeat(s.base_color), metallic=repeat(s.metallic),
        roughness=repeat(s.roughness), **{k: None if v is None else repeat(v) for k, v in s.brdf_extensions().items()},
    )
    return s, radiance + (f.reshape(count, n, 3) * table[:, None, 3:] * lit[..., None]).sum(0)


def with_environment(scene: RenderScene, gbuffer: GBuffer, direct: ShadeResult, lighting: Lighting) -> ShadeResult:
    """``direct`` (:func:`shade_direct` of the same scene and G-buffer) plus the environment term drawn
    with ``lighting``'s seed and samples: what :func:`shade` gives, without redoing the materials,
    the lights and their shadow rays for every seed of a converging reference."""
    s = direct.surface
    if lighting.environment is None or not direct.radiance.shape[0]:
        return direct
    # direct.radiance is already the base colour on unlit pixels; _composite sets them back after the sum
    radiance = direct.radiance + _environment(scene, gbuffer, s, lighting, s.to_local(gbuffer.view))
    return _composite(scene, gbuffer, lighting, s, radiance)


def background_radiance(scene: RenderScene, gbuffer: GBuffer, lighting: Lighting) -> torch.Tensor:
    """What the camera rays see where they miss: the environment along each ray (``[H, W, 3]``), or the background
    colour (``[3]``)."""
    dtype, device = scene.dtype, scene.device
    vis = gbuffer.visibility
    if isinstance(lighting.background, str):
        if lighting.environment is not None:
            env = lighting.environment
            background = env.eval(vis.ray_direction.reshape(-1, 3).to(device=env.radiance.device, dtype=env.pmf.dtype))
            return background.to(device=device, dtype=dtype).reshape(gbuffer.height, gbuffer.width, 3)
        return torch.zeros(3, dtype=dtype, device=device)
    return torch.as_tensor(lighting.background, dtype=dtype, device=device)


def _composite(scene: RenderScene, gbuffer: GBuffer, lighting: Lighting, s: SurfaceParameters, radiance: torch.Tensor) -> ShadeResult:
    radiance = torch.where(s.unlit[:, None], s.base_color, radiance)  # idempotent: _hit_radiance did it already
    hdr = gbuffer.image(radiance, background_radiance(scene, gbuffer, lighting))
    return ShadeResult(hdr=hdr, alpha=gbuffer.visibility.mask.to(scene.dtype), radiance=radiance, surface=s)


@dataclass(eq=False)
class RenderResult:
    """Output of :func:`render`."""

    hdr: torch.Tensor
    """``[H, W, 3]`` linear radiance."""
    ldr: torch.Tensor
    """``[H, W, 3]`` tone-mapped, sRGB-encoded display values in ``[0, 1]``."""
    alpha: torch.Tensor
    """``[H, W]`` coverage."""
    gbuffer: GBuffer
    """The G-buffer of the camera rays' first hits (for losses on attributes, masks, debugging)."""
    layers: list[tuple[GBuffer, torch.Tensor]] | None = None
    """With ``MASK`` or ``BLEND`` materials: every layer along the camera rays, front to back, with how much of what lies
    behind it each pixel's surface covers (``[H, W]``; :mod:`~neuralbake.render.transparency`); None for opaque scenes."""


def render(
    scene: Scene | RenderScene,
    camera: Camera,
    width: int,
    height: int,
    lighting: Lighting | None = None,
    *,
    tone_map: str = "aces",
    exposure: float | torch.Tensor = 0.0,
    white: float | torch.Tensor = 4.0,
    antialias: bool = False,
) -> RenderResult:
    """G-buffer, shading and tone mapping in one call; see :func:`render_gbuffer`, :func:`shade` and
    :func:`~neuralbake.render.tonemap.tone_map` (``tone_map`` is its ``operator``, ``exposure``, ``white``).

    ``antialias``: blend HDR, display image and coverage across silhouettes
    (:func:`~neuralbake.render.antialias.antialias`), which makes them differentiable in the
    vertex positions."""
    rs = as_render_scene(scene)
    g = render_gbuffer(rs, camera, width, height)
    layers = None
    if see_through(rs):
        hdr, alpha, layers = _layers(rs, camera, g, lighting)
    else:
        shaded = shade(rs, g, lighting)
        hdr, alpha = shaded.hdr, shaded.alpha
    ldr = tonemap.tone_map(hdr, operator=tone_map, exposure=exposure, white=white)
    if antialias:
        vis = g.visibility
        stacked = torch.cat((hdr, ldr, alpha[..., None].to(hdr.dtype)), dim=-1)
        blended = antialias_edges(stacked, vis.triangle_id, vis.depth, rs.positions, rs.faces, camera, neighbours=rs.edge_neighbours())
        hdr, ldr, alpha = blended[..., :3], blended[..., 3:6], blended[..., 6]
    return RenderResult(hdr=hdr, ldr=ldr, alpha=alpha, gbuffer=g, layers=layers)


def see_through(scene: RenderScene) -> bool:
    """Whether any of the scene's materials is ``MASK`` or ``BLEND`` (its renders peel layers)."""
    return any(m.alpha_mode != "OPAQUE" for m in scene.materials)


def peel_layers(scene: RenderScene, camera: Camera, first: GBuffer) -> list[tuple[GBuffer, torch.Tensor]]:
    """Every layer along the camera rays of ``first`` (the G-buffer of their first hits), front to back, each with the
    coverage of its hits (``[N]``, :func:`~neuralbake.render.transparency.coverage`, differentiable in the alpha
    texels): a pixel whose surface lets light through is cast again past it, up to
    :data:`~neuralbake.render.transparency.MAX_LAYERS` surfaces."""
    return [(g, cover) for g, cover, _ in _peel(scene, camera, first)]


def _peel(scene: RenderScene, camera: Camera, first: GBuffer) -> list[tuple[GBuffer, torch.Tensor, SurfaceParameters]]:
    """:func:`peel_layers` with each layer's material inputs (so shading it does not evaluate them again)."""
    if scene.caster.mesh is None:
        raise InputError(
            "see-through materials (alphaMode MASK or BLEND) need NVIDIA Warp's ray caster to look past a surface.",
            field="alphaMode", fix="pip install warp-lang, or set the materials' alphaMode to OPAQUE.",
        )
    modes = torch.tensor([ALPHA_MODES.get(m.alpha_mode, 0) for m in scene.materials], device=scene.device)
    cutoffs = torch.tensor([m.alpha_cutoff for m in scene.materials], dtype=scene.dtype, device=scene.device)
    layers, g = [], first
    for layer in range(MAX_LAYERS):
        surface = evaluate_materials(scene, g)
        cover = coverage(surface.alpha, modes[g.material_id], cutoffs[g.material_id])
        layers.append((g, cover, surface))
        go_on = g.visibility.mask & (g.image(cover.detach()[:, None], 1.0)[..., 0] < 1.0)
        if layer == MAX_LAYERS - 1 or not bool(go_on.any()):
            break
        behind = next_layer(scene.caster, g.visibility, go_on, scene.material_ids, offset=1e-4 * scene.extent)
        g = render_gbuffer(scene, camera, g.width, g.height, visibility=behind)
    return layers


def _layers(scene: RenderScene, camera: Camera, first: GBuffer, lighting: Lighting | None) -> tuple[torch.Tensor, torch.Tensor, list[tuple[GBuffer, torch.Tensor]]]:
    """``render``'s image and alpha for a scene with ``MASK`` or ``BLEND`` materials: each layer along the camera rays
    shaded, then composited front to back (:mod:`~neuralbake.render.transparency`); and the layers with their coverage."""
    lighting = Lighting() if lighting is None else lighting
    lighting.validate()
    colours, covers, gbuffers = [], [], []
    for g, cover, surface in _peel(scene, camera, first):
        _, radiance = _hit_radiance(scene, g, lighting, surface)  # the background is composited once, below
        colours.append(g.image(radiance, 0.0))
        covers.append(g.image(cover[:, None], 0.0)[..., 0])
        gbuffers.append(g)
    hdr, alpha = composite_layers(colours, covers, background_radiance(scene, first, lighting))
    return hdr, alpha, list(zip(gbuffers, covers, strict=True))
