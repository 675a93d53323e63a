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

The result is linear HDR radiance plus coverage; :func:`render` adds a tone-mapped image with
:func:`~neuralbake.render.tonemap_ops.tone_map_image`. Everything runs on the scene's device and
dtype (CPU or CUDA, float32 or float64).

Geometry gradients: interior ones flow through positions -> barycentrics -> attributes and
shading. Silhouette ones come from :func:`~neuralbake.render.antialias.antialias` (``render(...,
antialias=True)``), which blends pixels across occlusion edges by the edges' projected positions
using :attr:`GBuffer.visibility` (triangle ids and depth). Move vertices with
:meth:`RenderScene.set_positions` so that the next visibility buffer sees them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from neuralbake.errors import InputError
from neuralbake.io.gltf import Scene
from neuralbake.material.gltf import gltf_eval, gltf_pdf, gltf_sample
from neuralbake.material.texture import decode_normal_map
from neuralbake.render.antialias import antialias as antialias_edges
from neuralbake.render.camera import Camera
from neuralbake.render.envmap import EnvironmentLight
from neuralbake.render.mip import sample_trilinear
from neuralbake.render.scene import RenderScene, TextureSlot, prepare_scene
from neuralbake.render.tonemap_ops import tone_map_image
from neuralbake.render.visibility import VisibilityBuffer, ray_triangle_barycentrics, visibility_buffer

__all__ = [
    "DirectionalLight",
    "GBuffer",
    "Lighting",
    "RenderResult",
    "ShadeResult",
    "SurfaceParameters",
    "evaluate_materials",
    "interpolate",
    "render",
    "render_gbuffer",
    "shade",
    "shading_frame",
]


# --- interpolation and the G-buffer ------------------------------------------------------------------


def interpolate(attributes: torch.Tensor, faces: torch.Tensor, triangle_id: torch.Tensor, barycentrics: torch.Tensor) -> torch.Tensor:
    """Vertex attributes ``[V, C]`` at points ``(triangle_id [N], barycentrics [N, 2])``: ``[N, C]``.

    ``(1 - b1 - b2) a0 + b1 a1 + b2 a2`` of the triangle's vertices ``faces[triangle_id]``
    (``faces``: int ``[F, 3]``; ``triangle_id`` must be >= 0). Differentiable in ``attributes``
    (gradients scatter back to the three vertices) and in ``barycentrics``.
    """
    if attributes.dim() != 2 or barycentrics.dim() != 2 or barycentrics.shape[1] != 2 or triangle_id.shape[0] != barycentrics.shape[0]:
        raise InputError(
            f"interpolate needs attributes [V, C], triangle_id [N], barycentrics [N, 2]; got {tuple(attributes.shape)}, "
            f"{tuple(triangle_id.shape)}, {tuple(barycentrics.shape)}.",
            field="attributes",
            fix="flatten the hit pixels first.",
        )
    f = faces[triangle_id]
    b = barycentrics.to(attributes.dtype)
    b1, b2 = b[:, 0:1], b[:, 1:2]
    return (1.0 - b1 - b2) * attributes[f[:, 0]] + b1 * attributes[f[:, 1]] + b2 * attributes[f[:, 2]]


def _normalize(v: torch.Tensor) -> torch.Tensor:
    return v * torch.rsqrt(torch.clamp((v * v).sum(-1, keepdim=True), min=torch.finfo(v.dtype).tiny))


@dataclass(eq=False)
class GBuffer:
    """Surface attributes at the ``N`` pixels that hit the mesh (compact, row-major pixel order)."""

    visibility: VisibilityBuffer
    """The non-differentiable visibility buffer it was built from."""
    pixel: torch.Tensor
    """int64 ``[N]`` flat pixel index ``row * width + col`` of each hit."""
    triangle: torch.Tensor
    """int64 ``[N]``."""
    material_id: torch.Tensor
    """int64 ``[N]``."""
    barycentrics: torch.Tensor
    """``[N, 2]`` recomputed from the positions (differentiable)."""
    position: torch.Tensor
    """``[N, 3]`` world hit points."""
    geometric_normal: torch.Tensor
    """``[N, 3]`` unit face normals (counter-clockwise winding, not flipped)."""
    normal: torch.Tensor
    """``[N, 3]`` unit interpolated vertex normals (not flipped)."""
    tangent: torch.Tensor
    """``[N, 4]`` interpolated tangents (xyz not normalised) and handedness (w)."""
    uv: tuple[torch.Tensor, torch.Tensor]
    """``(uv0, uv1)``, each ``[N, 2]``."""
    uv_dx: tuple[torch.Tensor, torch.Tensor]
    """Change of ``(uv0, uv1)`` one pixel to the right, each ``[N, 2]``."""
    uv_dy: tuple[torch.Tensor, torch.Tensor]
    """Change of ``(uv0, uv1)`` one pixel down, each ``[N, 2]``."""
    color: torch.Tensor
    """``[N, 4]`` interpolated vertex colours."""
    view: torch.Tensor
    """``[N, 3]`` unit direction from the hit towards the camera (``wo``)."""
    width: int
    """Image width."""
    height: int
    """Image height."""

    def image(self, values: torch.Tensor, background: torch.Tensor | float = 0.0) -> torch.Tensor:
        """Scatter per-hit ``values`` ``[N, C]`` into an ``[H, W, C]`` image over ``background``
        (a float, ``[C]`` or ``[H, W, C]``); differentiable in both."""
        c = values.shape[1]
        bg = torch.as_tensor(background, dtype=values.dtype, device=values.device)
        flat = bg.expand(self.height, self.width, c).reshape(-1, c)
        return flat.index_put((self.pixel,), values).reshape(self.height, self.width, c)


def _as_render_scene(scene: Scene | RenderScene) -> RenderScene:
    if isinstance(scene, RenderScene):
        return scene
    if isinstance(scene, Scene):
        return prepare_scene(scene)
    raise InputError(
        f"cannot render a {type(scene).__name__}.", field="scene", fix="pass a RenderScene (prepare_scene) or a loaded glTF Scene."
    )


def render_gbuffer(scene: Scene | RenderScene, camera: Camera, width: int, height: int) -> GBuffer:
    """Visibility buffer and interpolated surface attributes of ``scene`` seen by ``camera``.

    ``scene``: a :class:`~neuralbake.render.scene.RenderScene` (build it once with
    :func:`~neuralbake.render.scene.prepare_scene`; a plain glTF ``Scene`` is prepared on the CPU
    on every call). Tensors follow the scene's device and dtype.
    """
    rs = _as_render_scene(scene)
    vis = visibility_buffer(rs.caster, camera, width, height, material_ids=rs.material_ids, dtype=rs.dtype)
    mask = vis.mask.reshape(-1)
    pixel = torch.nonzero(mask).reshape(-1)
    tri = vis.triangle_id.reshape(-1)[pixel]
    origin = vis.ray_origin.reshape(-1, 3)[pixel]
    direction = vis.ray_direction.reshape(-1, 3)[pixel]
    bary, _ = ray_triangle_barycentrics(rs.positions, rs.faces, tri, origin, direction)
    position = interpolate(rs.positions, rs.faces, tri, bary)
    f = rs.faces[tri]
    p0, p1, p2 = rs.positions[f[:, 0]], rs.positions[f[:, 1]], rs.positions[f[:, 2]]
    geometric = _normalize(torch.cross(p1 - p0, p2 - p0, dim=-1))
    uvs = (interpolate(rs.uv0, rs.faces, tri, bary), interpolate(rs.uv1, rs.faces, tri, bary))
    uv_dx, uv_dy = [], []
    for offset, out in (((1.5, 0.5), uv_dx), ((0.5, 1.5), uv_dy)):
        o, d = camera.generate_rays(width, height, offset=offset, device=rs.device, dtype=rs.dtype)
        b, _ = ray_triangle_barycentrics(rs.positions, rs.faces, tri, o.reshape(-1, 3)[pixel], d.reshape(-1, 3)[pixel])
        for k, attr in enumerate((rs.uv0, rs.uv1)):
            out.append(torch.nan_to_num(interpolate(attr, rs.faces, tri, b) - uvs[k], nan=0.0, posinf=1e6, neginf=-1e6))
    return GBuffer(
        visibility=vis,
        pixel=pixel,
        triangle=tri,
        material_id=rs.material_ids[tri],
        barycentrics=bary,
        position=position,
        geometric_normal=geometric,
        normal=_normalize(interpolate(rs.normals, rs.faces, tri, bary)),
        tangent=interpolate(rs.tangents, rs.faces, tri, bary),
        uv=uvs,
        uv_dx=(uv_dx[0], uv_dx[1]),
        uv_dy=(uv_dy[0], uv_dy[1]),
        color=interpolate(rs.colors, rs.faces, tri, bary),
        view=-direction.to(rs.dtype),
        width=width,
        height=height,
    )


# --- materials -------------------------------------------------------------------------------------------


@dataclass(eq=False)
class SurfaceParameters:
    """Per-hit glTF material inputs after texturing, and the shading frame (world space)."""

    base_color: torch.Tensor
    """``[N, 3]`` linear base colour (factor x texture x vertex colour)."""
    alpha: torch.Tensor
    """``[N]`` base colour alpha (not used for shading: every surface is opaque)."""
    metallic: torch.Tensor
    """``[N]``."""
    roughness: torch.Tensor
    """``[N]`` perceptual roughness."""
    occlusion: torch.Tensor
    """``[N]`` ambient occlusion factor applied to the environment light."""
    emissive: torch.Tensor
    """``[N, 3]`` emitted radiance."""
    unlit: torch.Tensor
    """bool ``[N]``: ``KHR_materials_unlit`` pixels."""
    tangent: torch.Tensor
    """``[N, 3]`` unit, perpendicular to :attr:`normal`."""
    bitangent: torch.Tensor
    """``[N, 3]`` ``normal x tangent``."""
    normal: torch.Tensor
    """``[N, 3]`` unit shading normal (normal mapped), on the viewer's side of the surface."""
    geometric_normal: torch.Tensor
    """``[N, 3]`` unit face normal flipped to the viewer's side."""

    def to_local(self, w: torch.Tensor) -> torch.Tensor:
        """World directions ``[N, 3]`` in the shading frame (tangent, bitangent, normal) = (x, y, z)."""
        return torch.stack(((w * self.tangent).sum(-1), (w * self.bitangent).sum(-1), (w * self.normal).sum(-1)), dim=-1)

    def to_world(self, w: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`to_local`."""
        return w[:, 0:1] * self.tangent + w[:, 1:2] * self.bitangent + w[:, 2:3] * self.normal


def _any_perpendicular(n: torch.Tensor) -> torch.Tensor:
    axis = torch.zeros_like(n)
    axis.scatter_(1, torch.argmin(n.detach().abs(), dim=1, keepdim=True), 1.0)
    return _normalize(torch.cross(n, axis, dim=-1))


def _orthogonal_tangent(t: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    t = t - n * (t * n).sum(-1, keepdim=True)
    weak = (t * t).sum(-1, keepdim=True) < 1e-12
    return torch.where(weak, _any_perpendicular(n), _normalize(t))


def shading_frame(gbuffer: GBuffer, tangent_normal: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """``(tangent, bitangent, normal, geometric_normal)`` ``[N, 3]`` each, oriented to the viewer.

    Back-facing hits flip the face normal, the vertex normal and the tangent frame (as glTF
    viewers do for double-sided materials). ``tangent_normal`` ``[N, 3]``: unit normal-map normals
    in the vertex tangent frame (``T``, ``B = w n x t``, ``N``); ``None`` keeps the vertex normal.
    """
    flip = torch.where((gbuffer.geometric_normal * gbuffer.view).sum(-1, keepdim=True) < 0.0, -1.0, 1.0).to(gbuffer.view.dtype)
    geo = gbuffer.geometric_normal * flip
    n0 = gbuffer.normal * flip
    t0 = _orthogonal_tangent(gbuffer.tangent[:, :3] * flip, n0)
    handed = torch.where(gbuffer.tangent[:, 3:4] < 0.0, -1.0, 1.0).to(flip.dtype)
    b0 = torch.cross(n0, t0, dim=-1) * handed
    n = (
        n0
        if tangent_normal is None
        else _normalize(tangent_normal[:, 0:1] * t0 + tangent_normal[:, 1:2] * b0 + tangent_normal[:, 2:3] * n0)
    )
    t = _orthogonal_tangent(t0, n)
    return t, torch.cross(n, t, dim=-1), n, geo


def _sample_slot(tex: TextureSlot | None, gbuffer: GBuffer, rows: torch.Tensor) -> torch.Tensor | None:
    """Trilinear texels ``[len(rows), C]`` of a bound slot at the G-buffer rows ``rows`` (``None`` if unbound)."""
    if tex is None:
        return None
    k = tex.texcoord
    uv, dx, dy = gbuffer.uv[k][rows], gbuffer.uv_dx[k][rows], gbuffer.uv_dy[k][rows]
    return sample_trilinear(tex.pyramid(), uv, dx, dy, wrap_s=tex.wrap_s, wrap_t=tex.wrap_t)


def _rgba(t: torch.Tensor) -> torch.Tensor:
    """Grey, grey + alpha, RGB or RGBA texels ``[N, C]`` as RGBA ``[N, 4]`` (alpha 1 when absent)."""
    c = t.shape[1]
    rgb = t[:, :3] if c >= 3 else t[:, :1].expand(-1, 3)
    alpha = t[:, c - 1 :] if c in (2, 4) else torch.ones_like(t[:, :1])
    return torch.cat((rgb, alpha), dim=-1)


def evaluate_materials(scene: RenderScene, gbuffer: GBuffer) -> SurfaceParameters:
    """Per-pixel material inputs: each material samples its textures on the hits whose material id
    selects it (trilinear, mip level from the G-buffer's uv derivatives), in one pass."""
    n, dtype, device = gbuffer.pixel.shape[0], scene.dtype, scene.device
    base = torch.ones(n, 4, dtype=dtype, device=device)
    rough_metal = torch.ones(n, 2, dtype=dtype, device=device)
    tangent_normal = torch.tensor([0.0, 0.0, 1.0], dtype=dtype, device=device).repeat(n, 1)
    occlusion = torch.ones(n, dtype=dtype, device=device)
    emissive = torch.zeros(n, 3, dtype=dtype, device=device)
    unlit = torch.zeros(n, dtype=torch.bool, device=device)
    for index, mat in enumerate(scene.materials):
        rows = torch.nonzero(gbuffer.material_id == index).reshape(-1)
        if rows.numel() == 0:
            continue

        bc = mat.base_color_factor.to(dtype).expand(rows.numel(), 4) * gbuffer.color[rows]
        t = _sample_slot(mat.textures.get("base_color"), gbuffer, rows)
        if t is not None:
            bc = bc * _rgba(t)
        base = base.index_put((rows,), bc)
        rm = torch.stack((mat.roughness_factor, mat.metallic_factor)).to(dtype).expand(rows.numel(), 2)
        t = _sample_slot(mat.textures.get("metallic_roughness"), gbuffer, rows)
        if t is not None:
            rm = rm * (t[:, 1:3] if t.shape[1] >= 3 else t[:, :1].expand(-1, 2))
        rough_metal = rough_metal.index_put((rows,), rm)
        t = _sample_slot(mat.textures.get("normal"), gbuffer, rows)
        if t is not None:
            tangent_normal = tangent_normal.index_put((rows,), decode_normal_map(t[:, :3], strength=mat.normal_scale.to(dtype)))
        t = _sample_slot(mat.textures.get("occlusion"), gbuffer, rows)
        if t is not None:
            occlusion = occlusion.index_put((rows,), 1.0 + mat.occlusion_strength.to(dtype) * (t[:, 0] - 1.0))
        e = mat.emissive_factor.to(dtype).expand(rows.numel(), 3)
        t = _sample_slot(mat.textures.get("emissive"), gbuffer, rows)
        if t is not None:
            e = e * (t[:, :3] if t.shape[1] >= 3 else t[:, :1].expand(-1, 3))
        emissive = emissive.index_put((rows,), e)
        if mat.unlit:
            unlit[rows] = True
    tangent, bitangent, normal, geometric = shading_frame(gbuffer, tangent_normal)
    return SurfaceParameters(
        base_color=base[:, :3],
        alpha=base[:, 3],
        metallic=torch.clamp(rough_metal[:, 1], 0.0, 1.0),
        roughness=torch.clamp(rough_metal[:, 0], 0.0, 1.0),
        occlusion=occlusion,
        emissive=emissive,
        unlit=unlit,
        tangent=tangent,
        bitangent=bitangent,
        normal=normal,
        geometric_normal=geometric,
    )


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
            d = torch.as_tensor(light.direction, dtype=torch.float64).reshape(-1)
            e = torch.as_tensor(light.irradiance, dtype=torch.float64).reshape(-1)
            if d.numel() != 3 or float(d.norm()) == 0.0 or not bool(torch.isfinite(d).all()):
                raise InputError(
                    f"light direction {light.direction!r} is not a non-zero 3-vector.",
                    field=f"directional[{i}].direction",
                    fix="pass e.g. (-0.45, 0.75, 0.5).",
                )
            if e.numel() not in (1, 3) or bool((e < 0).any()) or not bool(torch.isfinite(e).all()):
                raise InputError(
                    f"irradiance {light.irradiance!r} must be 1 or 3 finite values >= 0.",
                    field=f"directional[{i}].irradiance",
                    fix="pass e.g. 1.5.",
                )


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


def _power(p: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    p2, o2 = p * p, other * other
    return torch.where(p > 0.0, p2 / torch.clamp(p2 + o2, min=torch.finfo(p.dtype).tiny), torch.zeros_like(p))


def _over_pdf(value: torch.Tensor, pdf: torch.Tensor) -> torch.Tensor:
    ok = pdf > 0.0
    return torch.where(ok[:, None], value / torch.where(ok, pdf, torch.ones_like(pdf))[:, None], torch.zeros_like(value))


def _environment(scene: RenderScene, g: GBuffer, s: SurfaceParameters, lighting: Lighting, wo: torch.Tensor) -> torch.Tensor:
    env = lighting.environment
    dtype, device = scene.dtype, scene.device
    if env.radiance.device != device:
        env = EnvironmentLight.from_map(env.radiance.to(device))
    spp = lighting.environment_samples
    sobol = torch.quasirandom.SobolEngine(4, scramble=True, seed=lighting.seed).draw(spp).to(torch.float64)
    gen = torch.Generator(device="cpu").manual_seed(lighting.seed)
    shift = torch.rand(g.width * g.height, 4, generator=gen, dtype=torch.float64)[g.pixel.cpu()]
    metallic, roughness = s.metallic.detach(), s.roughness.detach()
    params = {"base_color": s.base_color, "metallic": s.metallic, "roughness": s.roughness}
    origin = g.position.detach() + s.geometric_normal.detach() * (1e-4 * scene.extent)
    total = torch.zeros_like(s.base_color)
    for k in range(spp):
        u = torch.remainder(sobol[k] + shift, 1.0).to(device=device, dtype=env.pmf.dtype)
        for strategy in ("light", "bsdf"):
            if strategy == "light":
                wi_world, p_light = env.sample(u[:, 0:2])
                wi_world, p_light = wi_world.to(dtype), p_light.to(dtype)
                wi = s.to_local(wi_world).detach()
                p_bsdf = gltf_pdf(wi, wo.detach(), metallic=metallic, roughness=roughness)
                weight, pdf = _power(p_light, p_bsdf), p_light
            else:
                wi, p_bsdf = gltf_sample(wo.detach(), u[:, 2:4].to(dtype), metallic=metallic, roughness=roughness)
                wi_world = s.to_world(wi).detach()
                p_light = env.pdf(wi_world.to(env.pmf.dtype)).to(dtype)
                weight, pdf = _power(p_bsdf, p_light), p_bsdf
            above = ((wi_world * s.geometric_normal.detach()).sum(-1) > 0.0).to(dtype)
            if lighting.environment_shadows:
                above = above * (~scene.caster.occluded(origin, wi_world)).to(dtype)
            radiance = env.eval(wi_world.to(env.pmf.dtype)).to(dtype)
            f = gltf_eval(wi, wo, **params)
            total = total + _over_pdf(f * radiance, pdf) * (weight * above)[:, None]
    return total * (s.occlusion[:, None] / spp)


def shade(scene: RenderScene, gbuffer: GBuffer, lighting: Lighting | None = None) -> ShadeResult:
    """Shade a G-buffer of ``scene`` (see the module docstring); differentiable in the material
    tensors, vertex attributes and positions the G-buffer was built from."""
    lighting = Lighting() if lighting is None else lighting
    lighting.validate()
    s = evaluate_materials(scene, gbuffer)
    dtype, device = scene.dtype, scene.device
    wo = s.to_local(gbuffer.view)
    radiance = s.emissive
    origin = gbuffer.position.detach() + s.geometric_normal.detach() * (1e-4 * scene.extent)
    for light in lighting.directional:
        l_world = _normalize(torch.as_tensor(light.direction, dtype=dtype, device=device).reshape(1, 3)).expand_as(wo)
        e = torch.as_tensor(light.irradiance, dtype=dtype, device=device).reshape(-1).expand(3)
        lit = ((l_world * s.geometric_normal).sum(-1) > 0.0).to(dtype)
        if lighting.shadows and wo.shape[0]:
            lit = lit * (~scene.caster.occluded(origin, l_world)).to(dtype)
        f = gltf_eval(s.to_local(l_world), wo, base_color=s.base_color, metallic=s.metallic, roughness=s.roughness)
        radiance = radiance + f * e * lit[:, None]
    if lighting.environment is not None and wo.shape[0]:
        radiance = radiance + _environment(scene, gbuffer, s, lighting, wo)
    radiance = torch.where(s.unlit[:, None], s.base_color, radiance)
    vis = gbuffer.visibility
    if isinstance(lighting.background, str):
        if lighting.environment is not None:
            env = lighting.environment
            background = env.eval(vis.ray_direction.reshape(-1, 3).to(device=env.radiance.device, dtype=env.pmf.dtype))
            background = background.to(device=device, dtype=dtype).reshape(gbuffer.height, gbuffer.width, 3)
        else:
            background = torch.zeros(3, dtype=dtype, device=device)
    else:
        background = torch.as_tensor(lighting.background, dtype=dtype, device=device)
    hdr = gbuffer.image(radiance, background)
    return ShadeResult(hdr=hdr, alpha=vis.mask.to(dtype), radiance=radiance, surface=s)


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
    """The G-buffer (for losses on attributes, masks, debugging)."""


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
    :func:`~neuralbake.render.tonemap_ops.tone_map_image` (``tone_map``, ``exposure``, ``white``).

    ``antialias``: blend HDR, display image and coverage across silhouettes
    (:func:`~neuralbake.render.antialias.antialias`), which makes them differentiable in the
    vertex positions."""
    rs = _as_render_scene(scene)
    g = render_gbuffer(rs, camera, width, height)
    shaded = shade(rs, g, lighting)
    hdr, alpha = shaded.hdr, shaded.alpha
    ldr = tone_map_image(hdr, operator=tone_map, exposure=exposure, white=white)
    if antialias:
        vis = g.visibility
        stacked = torch.cat((hdr, ldr, alpha[..., None].to(hdr.dtype)), dim=-1)
        blended = antialias_edges(stacked, vis.triangle_id, vis.depth, rs.positions, rs.faces, camera, neighbours=rs.edge_neighbours())
        hdr, ldr, alpha = blended[..., :3], blended[..., 3:6], blended[..., 6]
    return RenderResult(hdr=hdr, ldr=ldr, alpha=alpha, gbuffer=g)
