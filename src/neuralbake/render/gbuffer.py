"""The G-buffer of the deferred renderer: interpolated vertex attributes at the visibility buffer's
hits, and the per-pixel glTF PBR material parameters selected by material id.

:func:`render_gbuffer` finds each pixel's triangle with
:func:`~neuralbake.render.visibility.visibility_buffer` (not differentiable), recomputes the
barycentrics with :func:`~neuralbake.render.visibility.ray_triangle_barycentrics` (differentiable
in vertex positions) and :func:`interpolate` s the vertex attributes (differentiable in the
attributes and barycentrics); uv derivatives for mip selection are ray differentials.
:func:`evaluate_materials` samples every material's textures (trilinear over mip pyramids,
differentiable in the texels) on the pixels whose material id selects it and returns the
:class:`SurfaceParameters` with the shading frame. Shading them is :mod:`neuralbake.render.deferred`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from neuralbake.errors import InputError
from neuralbake.io.gltf import Scene
from neuralbake.material.frame import normalize
from neuralbake.material.gltf import DIELECTRIC_F0, BrdfExtensions, dielectric_reflectance
from neuralbake.material.texture import decode_normal_map
from neuralbake.render.camera import Camera
from neuralbake.render.mip import PackedPyramid, pack_pyramid, sample_trilinear
from neuralbake.render.scene import RenderScene, TextureSlot, prepare_scene
from neuralbake.render.visibility import VisibilityBuffer, plane_barycentrics, visibility_buffer

__all__ = ["GBuffer", "GBufferRows", "SurfaceParameters", "as_render_scene", "evaluate_materials", "interpolate", "render_gbuffer", "shading_frame"]


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
    corners = attributes.index_select(0, faces.index_select(0, triangle_id).reshape(-1)).reshape(triangle_id.shape[0], 3, attributes.shape[1])
    b = barycentrics.to(attributes.dtype)
    b1, b2 = b[:, 0:1], b[:, 1:2]
    return (1.0 - b1 - b2) * corners[:, 0] + b1 * corners[:, 1] + b2 * corners[:, 2]



@dataclass(eq=False)
class GBufferRows:
    """The rows of a G-buffer that locate each hit on the mesh and in its uv sets: enough to
    interpolate vertex attributes and to sample textures there (trilinear, by the uv footprint).
    A fit keeps only these of each view (:meth:`rows`), not the whole :class:`GBuffer`."""

    pixel: torch.Tensor
    """int64 ``[N]`` flat pixel index ``row * width + col`` of each hit."""
    triangle: torch.Tensor
    """int64 ``[N]``."""
    barycentrics: torch.Tensor
    """``[N, 2]`` recomputed from the positions (differentiable)."""
    uv: tuple[torch.Tensor, torch.Tensor]
    """``(uv0, uv1)``, each ``[N, 2]``."""
    uv_dx: tuple[torch.Tensor, torch.Tensor]
    """Change of ``(uv0, uv1)`` one pixel to the right, each ``[N, 2]``."""
    uv_dy: tuple[torch.Tensor, torch.Tensor]
    """Change of ``(uv0, uv1)`` one pixel down, each ``[N, 2]``."""

    def rows(self, *, detach: bool = False) -> dict[str, Any]:
        """The :class:`GBufferRows` fields as keywords (``detach``: cut from the autograd graph),
        for building a :class:`GBufferRows` or a subclass of it from a :class:`GBuffer`."""
        out = {}
        for f in fields(GBufferRows):
            value = getattr(self, f.name)
            if detach:
                value = tuple(v.detach() for v in value) if isinstance(value, tuple) else value.detach()
            out[f.name] = value
        return out


@dataclass(eq=False)
class GBuffer(GBufferRows):
    """Surface attributes at the ``N`` pixels that hit the mesh (compact, row-major pixel order):
    the :class:`GBufferRows` and the attributes interpolated there."""

    visibility: VisibilityBuffer
    """The non-differentiable visibility buffer it was built from."""
    material_id: torch.Tensor
    """int64 ``[N]``."""
    position: torch.Tensor
    """``[N, 3]`` world hit points."""
    geometric_normal: torch.Tensor
    """``[N, 3]`` unit face normals (counter-clockwise winding, not flipped)."""
    normal: torch.Tensor
    """``[N, 3]`` unit interpolated vertex normals (not flipped)."""
    tangent: torch.Tensor
    """``[N, 4]`` interpolated tangents (xyz not normalised) and handedness (w)."""
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


def as_render_scene(scene: Scene | RenderScene) -> RenderScene:
    """``scene`` itself if it is a RenderScene, else a glTF ``Scene`` prepared with :func:`~neuralbake.render.scene.prepare_scene`."""
    if isinstance(scene, RenderScene):
        return scene
    if isinstance(scene, Scene):
        return prepare_scene(scene)
    raise InputError(
        f"cannot render a {type(scene).__name__}.", field="scene", fix="pass a RenderScene (prepare_scene) or a loaded glTF Scene."
    )


def render_gbuffer(scene: Scene | RenderScene, camera: Camera, width: int, height: int, visibility: VisibilityBuffer | None = None) -> GBuffer:
    """Visibility buffer and interpolated surface attributes of ``scene`` seen by ``camera``.

    ``scene``: a :class:`~neuralbake.render.scene.RenderScene` (build it once with
    :func:`~neuralbake.render.scene.prepare_scene`; a plain glTF ``Scene`` is prepared on the CPU
    on every call). Tensors follow the scene's device and dtype. ``visibility``: the hits to build it on (a layer
    behind the first, :mod:`~neuralbake.render.transparency`); by default the camera rays' first hits.
    """
    rs = as_render_scene(scene)
    vis = visibility if visibility is not None else visibility_buffer(rs.caster, camera, width, height, material_ids=rs.material_ids, dtype=rs.dtype)
    dtype = rs.dtype
    mask = vis.mask.reshape(-1)
    pixel = torch.nonzero(mask).reshape(-1)
    n = pixel.shape[0]
    tri = vis.triangle_id.reshape(-1)[pixel]
    origin = vis.ray_origin.reshape(-1, 3)[pixel].to(dtype)
    direction = vis.ray_direction.reshape(-1, 3)[pixel].to(dtype)
    # the pixel's own ray and its neighbours' to the right and below (ray differentials), met in one batch with the
    # triangle's plane, and every vertex attribute interpolated with one gather of the triangles' corners
    rays = torch.stack((direction, *camera.pixel_directions(pixel, width, height, ((1.5, 0.5), (0.5, 1.5)), dtype=dtype)))
    f = rs.faces.index_select(0, tri)
    attributes = torch.cat((rs.positions, rs.uv0, rs.uv1, rs.normals, rs.tangents, rs.colors), 1).to(dtype)
    corners = attributes.index_select(0, f.reshape(-1)).reshape(n, 3, attributes.shape[1])
    p0, p1, p2 = corners[:, 0, 0:3], corners[:, 1, 0:3], corners[:, 2, 0:3]
    eye = camera.frame_tensor(dtype, origin.device)[3].expand_as(origin)
    barycentrics, _ = plane_barycentrics(p0, p1 - p0, p2 - p0, torch.stack((origin, eye, eye)), rays)
    weights = torch.cat((1.0 - barycentrics.sum(-1, keepdim=True), barycentrics), -1)  # [3, N, 3]
    own = (weights[0, :, :, None] * corners).sum(1)  # [N, 18]
    uvs = (own[:, 3:5], own[:, 5:7])
    beside = (weights[1:, :, :, None] * corners[None, :, :, 3:7]).sum(2) - own[None, :, 3:7]  # [2, N, 4]: the uvs only
    beside = torch.nan_to_num(beside, nan=0.0, posinf=1e6, neginf=-1e6)
    bary = barycentrics[0]
    position = own[:, 0:3]
    geometric = normalize(torch.cross(p1 - p0, p2 - p0, dim=-1))
    uv_dx, uv_dy = (beside[0, :, 0:2], beside[0, :, 2:4]), (beside[1, :, 0:2], beside[1, :, 2:4])
    return GBuffer(
        visibility=vis,
        pixel=pixel,
        triangle=tri,
        material_id=rs.material_ids[tri],
        barycentrics=bary,
        position=position,
        geometric_normal=geometric,
        normal=normalize(own[:, 7:10]),
        tangent=own[:, 10:14],
        uv=uvs,
        uv_dx=uv_dx,
        uv_dy=uv_dy,
        color=own[:, 14:18],
        view=-direction,
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
    """``[N]`` base colour alpha: how much of what is behind a ``MASK`` or ``BLEND`` surface it covers
    (:mod:`~neuralbake.render.transparency`)."""
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
    extensions: BrdfExtensions = field(default_factory=BrdfExtensions)
    """The BRDF's ``KHR_materials_*`` inputs (ior, specular, iridescence, clearcoat, sheen), per hit or one value each."""
    clearcoat_normal: torch.Tensor | None = None
    """``[N, 3]`` the coat's normal in the shading frame: the vertex normal, which no normal map reaches (None: no coat)."""

    def brdf_extensions(self) -> dict[str, torch.Tensor | float | None]:
        """The keywords of :func:`~neuralbake.material.gltf.gltf_eval` beyond the core material inputs."""
        return {**self.extensions.keywords(), "clearcoat_normal": self.clearcoat_normal}

    def sampling_extensions(self) -> dict[str, torch.Tensor | float | None]:
        """What :func:`~neuralbake.material.gltf.gltf_sample` and ``gltf_pdf`` read beyond metallic and roughness: the coat."""
        return {**self.extensions.coat(), "clearcoat_normal": self.clearcoat_normal}

    def to_local(self, w: torch.Tensor) -> torch.Tensor:
        """World directions ``[N, 3]`` in the shading frame (tangent, bitangent, normal) = (x, y, z)."""
        return torch.stack(((w * self.tangent).sum(-1), (w * self.bitangent).sum(-1), (w * self.normal).sum(-1)), dim=-1)

    def to_world(self, w: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`to_local`."""
        return w[:, 0:1] * self.tangent + w[:, 1:2] * self.bitangent + w[:, 2:3] * self.normal


def _any_perpendicular(n: torch.Tensor) -> torch.Tensor:
    axis = torch.zeros_like(n)
    axis.scatter_(1, torch.argmin(n.detach().abs(), dim=1, keepdim=True), 1.0)
    return normalize(torch.cross(n, axis, dim=-1))


def _orthogonal_tangent(t: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    t = t - n * (t * n).sum(-1, keepdim=True)
    weak = (t * t).sum(-1, keepdim=True) < 1e-12
    return torch.where(weak, _any_perpendicular(n), normalize(t))


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
        else normalize(tangent_normal[:, 0:1] * t0 + tangent_normal[:, 1:2] * b0 + tangent_normal[:, 2:3] * n0)
    )
    t = _orthogonal_tangent(t0, n)
    return t, torch.cross(n, t, dim=-1), n, geo


SAMPLED_SLOTS = ("base_color", "metallic_roughness", "normal", "occlusion", "emissive")
"""The texture slots :func:`evaluate_materials` samples, in the order their channels are packed."""

_GROUPS: weakref.WeakKeyDictionary[TextureSlot, tuple[tuple[Any, ...], PackedPyramid]] = weakref.WeakKeyDictionary()
"""Packed pyramids of slots sampled together, keyed by the group's first slot (with what they were built from)."""


def _packed_group(slots: list[TextureSlot]) -> PackedPyramid:
    """Slots with the same uv set, addressing, size and dtype as one packed pyramid, their channels side by
    side (box filtering works per channel, so each slot's channels are its own pyramid). Cached while no
    texel changes or needs gradients; each slot's own cached pyramid then becomes a view into the packed
    texels, so the mip levels are held once (the slots' level-0 texels stay as they are, besides)."""
    fixed = not any(s.texels.requires_grad for s in slots)
    if fixed:
        hit = _GROUPS.get(slots[0])
        if hit is not None and len(hit[0]) == len(slots) and all(s.cache_valid(k) for s, k in zip(slots, hit[0], strict=True)):
            return hit[1]
    key = tuple(s.cache_key() for s in slots)
    pyramids = [s.pyramid() for s in slots]
    levels = [parts[0] if len(parts) == 1 else torch.cat(parts, -1) for parts in zip(*pyramids, strict=True)]
    if not fixed:
        return pack_pyramid(levels)
    with torch.no_grad():
        packed = pack_pyramid(levels)
        start = 0
        for slot, pyramid in zip(slots, pyramids, strict=True):
            c = pyramid[0].shape[2]
            views = [
                packed.texels[offset : offset + level.shape[0] * level.shape[1], start : start + c].view(level.shape[0], level.shape[1], c)
                for offset, level in zip(packed.offsets.tolist(), pyramid, strict=True)
            ]
            slot.adopt_pyramid(views)
            start += c
    _GROUPS[slots[0]] = (key, packed)
    return packed


def _sample_material(textures: dict[str, TextureSlot], gbuffer: GBuffer, rows: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Trilinear texels of every bound slot at the G-buffer rows ``rows`` (``None``: all), by slot name. Slots that
    share a uv set, addressing and size are looked up together, one lookup for all their channels."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name in SAMPLED_SLOTS:
        tex = textures.get(name)
        if tex is not None:
            t = tex.texels
            groups.setdefault((tex.texcoord, tex.wrap_s, tex.wrap_t, tuple(t.shape[:2]), t.dtype, t.device), []).append(name)
    out = {}
    for (k, wrap_s, wrap_t, *_), names in groups.items():
        slots = [textures[name] for name in names]
        uv, dx, dy = gbuffer.uv[k], gbuffer.uv_dx[k], gbuffer.uv_dy[k]
        if rows is not None:
            uv, dx, dy = uv.index_select(0, rows), dx.index_select(0, rows), dy.index_select(0, rows)
        taps = sample_trilinear(_packed_group(slots), uv, dx, dy, wrap_s=wrap_s, wrap_t=wrap_t)
        start = 0
        for name, slot in zip(names, slots, strict=True):
            c = slot.texels.shape[2]
            out[name] = taps[:, start : start + c]
            start += c
    return out


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
    f0 = torch.full((n, 3), DIELECTRIC_F0, dtype=dtype, device=device)
    f90 = torch.ones(n, dtype=dtype, device=device)
    film: torch.Tensor | None = None  # [N, 3]: factor, index, thickness; only where a material has a film
    varnish: torch.Tensor | None = None  # [N, 2]: clear coat factor and roughness; only where a material has one
    fuzz: torch.Tensor | None = None  # [N, 4]: sheen colour and roughness; only where a material has a sheen
    single = len(scene.materials) == 1  # every hit is the one material's: no split, no host sync
    for index, mat in enumerate(scene.materials):
        rows = None if single else torch.nonzero(gbuffer.material_id == index).reshape(-1)
        count = n if rows is None else int(rows.numel())
        if count == 0:
            continue

        def put(into: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
            return values if rows is None else into.index_put((rows,), values)

        taps = _sample_material(mat.textures, gbuffer, rows)
        color = gbuffer.color if rows is None else gbuffer.color.index_select(0, rows)
        bc = mat.base_color_factor.to(dtype).expand(count, 4) * color
        if "base_color" in taps:
            bc = bc * _rgba(taps["base_color"])
        base = put(base, bc)
        rm = torch.stack((mat.roughness_factor, mat.metallic_factor)).to(dtype).expand(count, 2)
        t = taps.get("metallic_roughness")
        if t is not None:
            rm = rm * (t[:, 1:3] if t.shape[1] >= 3 else t[:, :1].expand(-1, 2))
        rough_metal = put(rough_metal, rm)
        t = taps.get("normal")
        if t is not None:
            tangent_normal = put(tangent_normal, decode_normal_map(t[:, :3], strength=mat.normal_scale.to(dtype)))
        t = taps.get("occlusion")
        if t is not None:
            occlusion = put(occlusion, 1.0 + mat.occlusion_strength.to(dtype) * (t[:, 0] - 1.0))
        e = mat.emissive_factor.to(dtype).expand(count, 3)
        t = taps.get("emissive")
        if t is not None:
            e = e * (t[:, :3] if t.shape[1] >= 3 else t[:, :1].expand(-1, 3))
        emissive = put(emissive, e)
        everywhere = slice(None) if rows is None else rows
        if mat.unlit:
            unlit[everywhere] = True
        if mat.ior != 1.5 or mat.specular != 1.0 or tuple(mat.specular_color) != (1.0, 1.0, 1.0):
            rgb, grazing = dielectric_reflectance(float(mat.ior), float(mat.specular), tuple(mat.specular_color))
            f0[everywhere] = torch.tensor(rgb, dtype=dtype, device=device)
            f90[everywhere] = grazing
        if mat.iridescence > 0.0:
            if film is None:
                film = torch.tensor([0.0, 1.3, 400.0], dtype=dtype, device=device).repeat(n, 1)
            film[everywhere] = torch.tensor([mat.iridescence, mat.iridescence_ior, mat.iridescence_thickness[1]], dtype=dtype, device=device)
        if mat.clearcoat > 0.0:
            if varnish is None:
                varnish = torch.zeros(n, 2, dtype=dtype, device=device)
            varnish[everywhere] = torch.tensor([mat.clearcoat, mat.clearcoat_roughness], dtype=dtype, device=device)
        if any(c > 0.0 for c in mat.sheen_color):
            if fuzz is None:
                fuzz = torch.zeros(n, 4, dtype=dtype, device=device)
            fuzz[everywhere] = torch.tensor([*mat.sheen_color, mat.sheen_roughness], dtype=dtype, device=device)
    tangent, bitangent, normal, geometric = shading_frame(gbuffer, tangent_normal)
    coat_normal = None
    if varnish is not None:  # the vertex normal (facing the viewer) in the shading frame: the coat is not normal-mapped
        flip = torch.where((gbuffer.geometric_normal * gbuffer.view).sum(-1, keepdim=True) < 0.0, -1.0, 1.0).to(dtype)
        vertex = gbuffer.normal * flip
        coat_normal = normalize(torch.stack(((vertex * tangent).sum(-1), (vertex * bitangent).sum(-1), (vertex * normal).sum(-1)), dim=-1))
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
        extensions=BrdfExtensions(
            f0=f0,
            f90=f90,
            **({} if film is None else {"iridescence": film[:, 0], "iridescence_ior": film[:, 1], "iridescence_thickness": film[:, 2]}),
            **({} if varnish is None else {"clearcoat": varnish[:, 0], "clearcoat_roughness": varnish[:, 1]}),
            **({} if fuzz is None else {"sheen_color": fuzz[:, :3], "sheen_roughness": fuzz[:, 3]}),
        ),
        clearcoat_normal=coat_normal,
    )
