"""Neural materials of glTF assets: a textured metal/rough material as the bake's reference, and the
bake scored on renders of the asset itself.

``neuralbake material bake MODEL.gltf [--material NAME]`` bakes one material of a glTF asset:

- :class:`AssetMaterial` is the reference. Per texel it reads the material's base colour,
  metallic-roughness and normal maps (level 0, bilinear, the slots' own wrap modes) times their
  factors; its layer (:class:`GltfLayer`) is the renderer's glTF BRDF
  (:func:`~neuralbake.material.gltf.gltf_eval`) in the normal-mapped shading frame, expressed in the
  mesh's vertex tangent frame. So the decoder learns the normal map too: it takes directions in the
  vertex frame (normal +z, tangent +x), as a renderer has them without the maps. The encoder reads
  the eight texel values (base colour, metallic, roughness, tangent-space normal). Training uv are
  drawn uniformly over the uv0 area the material's triangles cover, so no sample is spent on empty
  atlas space.
- Occlusion and emission are not reflectance: the occlusion map scales only the environment light
  and the emissive map adds radiance whatever the directions, so the decoder (``f cos`` of a light
  and a view) cannot carry them. They stay textures; the size comparison counts them (as BC1 and
  BC7) on the neural side, and the neural renders use them block-compressed.
- :func:`asset_comparison` scores the bake on held-out views of the asset (the deferred renderer's
  G-buffer and per-pixel material inputs; a sun with BVH shadows and the procedural sky with MIS),
  the reference and the neural material lit with the same samples so that their difference is the
  material's: PSNR and FLIP over the asset's pixels, per view, and the same for the source textures
  block-compressed (BC7 colour, BC5 normal, BC1 occlusion). The neural material filters its latents
  over each pixel's footprint (ray differentials), as the reference's textures are filtered
  trilinearly. The report's ``asset.bytes`` compares the latents + decoder (+ the kept occlusion and
  emission) with the textures as stored (JPEG/PNG) and as the BC set.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.core.metrics import psnr
from neuralbake.errors import InputError
from neuralbake.io.bcn import BLOCK, bc_roundtrip
from neuralbake.io.gltf import Scene, load_bake_input
from neuralbake.material.frame import cosine_hemisphere_pdf, normalize, orthonormal_basis, square_to_cosine_hemisphere
from neuralbake.material.gltf import gltf_eval, gltf_pdf, gltf_sample
from neuralbake.material.texture import decode_normal_map
from neuralbake.render.camera import Camera, framing_radius, random_orbit
from neuralbake.render.deferred import _over_pdf, _power  # the deferred renderer's MIS weight and estimator, shared
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import GBuffer, SurfaceParameters, evaluate_materials, render_gbuffer, shading_frame
from neuralbake.render.mip import sample_bilinear
from neuralbake.render.scene import RenderScene, prepare_scene
from neuralbake.render.skinning import pose_scene
from neuralbake.render.tonemap import tone_map
from neuralbake.render.visibility import warp_available

__all__ = [
    "ASSET_SUFFIXES",
    "AssetMaterial",
    "AssetSurface",
    "GltfLayer",
    "PlacedMaterial",
    "asset_comparison",
    "asset_framing",
    "asset_views",
    "is_asset",
    "load_asset_bundle",
    "load_asset_material",
    "place_material",
    "shade_layer",
]

ASSET_SUFFIXES = (".gltf", ".glb")
"""Files :func:`load_asset_material` reads (a material bake's input is an asset when it has one of these)."""

BAKED_SLOTS = ("base_color", "metallic_roughness", "normal")
"""The glTF slots that go into the latent texture and decoder (occlusion and emission stay textures)."""

SUN = ((-0.45, 0.75, 0.5), 3.0)
"""The comparison renders' sun: world direction towards it, irradiance."""

_SLOT_FORMATS = {"base_color": "bc7", "metallic_roughness": "bc7", "normal": "bc5", "occlusion": "bc1", "emissive": "bc7"}
"""The block-compressed texture set the bake is compared with: the usual format per glTF slot (BC1
stands in for BC4 for the single-channel occlusion: both are 4 bits per texel)."""


def is_asset(path: str | Path) -> bool:
    return Path(path).suffix.lower() in ASSET_SUFFIXES


# -- the reference: the glTF BRDF with its maps ----------------------------------------------------------


@dataclass(eq=False)
class GltfLayer:
    """The glTF metal/rough BRDF with a normal map, in the vertex tangent frame (the material
    :class:`~neuralbake.material.layering.Layer` interface: ``eval``, ``sample``, ``pdf``).

    ``shading_normal`` ``[N, 3]``: the normal-mapped normal in that frame. Directions are rotated
    into the shading frame for :func:`~neuralbake.material.gltf.gltf_eval`; the value is zero
    unless both directions are above the vertex frame's hemisphere as well (what a renderer
    without the map, and the decoder, see).
    """

    base_color: torch.Tensor
    metallic: torch.Tensor
    roughness: torch.Tensor
    shading_normal: torch.Tensor

    def __post_init__(self) -> None:
        self.normal = normalize(self.shading_normal)
        self.tangent, self.bitangent = orthonormal_basis(self.normal)  # the BRDF is isotropic: any frame about the normal

    def _to_shading(self, w: torch.Tensor) -> torch.Tensor:
        return torch.stack(((w * self.tangent).sum(-1), (w * self.bitangent).sum(-1), (w * self.normal).sum(-1)), dim=-1)

    def _params(self) -> dict[str, torch.Tensor]:
        return {"metallic": self.metallic, "roughness": self.roughness}

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        above = ((wi[:, 2] > 0) & (wo[:, 2] > 0)).to(wi.dtype)[:, None]
        return gltf_eval(self._to_shading(wi), self._to_shading(wo), base_color=self.base_color, **self._params()) * above

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        above = ((wi[:, 2] > 0) & (wo[:, 2] > 0)).to(wi.dtype)
        return gltf_pdf(self._to_shading(wi), self._to_shading(wo), **self._params()) * above

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wo_s = self._to_shading(wo)
        wi_s, pdf = gltf_sample(wo_s, u, **self._params())
        wi = wi_s[:, 0:1] * self.tangent + wi_s[:, 1:2] * self.bitangent + wi_s[:, 2:3] * self.normal
        ok = (wi[:, 2] > 0) & (wo[:, 2] > 0) & (wo_s[:, 2] > 0) & torch.isfinite(pdf)
        return wi, torch.where(ok, pdf, torch.zeros_like(pdf))

    def rows(self, rows: torch.Tensor) -> GltfLayer:
        """The layer of the points ``rows`` only."""
        return GltfLayer(self.base_color[rows], self.metallic[rows], self.roughness[rows], self.shading_normal[rows])


class AssetSurface:
    """Where a material lives on an asset: the triangles of one glTF material slot and their uv0.

    :meth:`sample_uv` draws training uv uniformly over the uv0 area those triangles cover.
    """

    def __init__(self, scene: Scene, render_scene: RenderScene, index: int, path: Path) -> None:
        self.scene, self.render_scene, self.index, self.path = scene, render_scene, index, path
        self.name = render_scene.materials[index].name
        self.faces = render_scene.faces[render_scene.material_ids == index]
        corners = render_scene.uv0[self.faces].double()  # [F, 3, 2]
        e1, e2 = corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]
        area = 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).abs()
        if not bool(torch.isfinite(area).all()) or float(area.sum()) <= 0.0:
            raise InputError(
                f"the triangles of material {self.name!r} cover no uv0 area.",
                path=path,
                field="meshes[].attributes.TEXCOORD_0",
                fix="unwrap the mesh (uv0) before baking its material.",
            )
        self._corners, self._area = corners.float(), area.float()
        self.uv_coverage = float(area.sum())
        """uv0 area the material's triangles cover (1 = the whole unit square, more where they overlap or repeat)."""
        self.uv_outside = bool(((corners < -1e-4) | (corners > 1 + 1e-4)).any())
        """Whether some uv0 leave the unit square (the latent texture repeats)."""

    @property
    def device(self) -> torch.device:
        return self.render_scene.device

    def sample_uv(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` uv0 points uniform over the area the material's triangles cover, wrapped into [0, 1)."""
        device = self.device
        tri = torch.multinomial(self._area.to(generator.device), n, replacement=True, generator=generator).to(device)
        u = torch.rand(n, 2, generator=generator, device=generator.device).to(device)
        r = torch.sqrt(u[:, :1])
        b0, b1 = 1.0 - r, r * (1.0 - u[:, 1:2])
        c = self._corners[tri]
        uv = b0 * c[:, 0] + b1 * c[:, 1] + (1.0 - b0 - b1) * c[:, 2]
        return torch.remainder(uv, 1.0)


class AssetMaterial(AssetSurface):
    """One material of a glTF asset as a neural material bake's reference (see the module docstring).

    ``material(uv, normal) -> GltfLayer`` and ``material.layer_and_inputs(uv, normal)``: ``normal``
    is ignored (the asset's own frames orient it).
    """

    def __init__(self, scene: Scene, render_scene: RenderScene, index: int, path: Path) -> None:
        super().__init__(scene, render_scene, index, path)
        self.material = render_scene.materials[index]
        sides = [max(t.texels.shape[:2]) for t in self.material.textures.values()]
        self.texture_side = max(sides, default=1)
        """The largest side of the material's textures (a bake's latent texture is no larger)."""
        colours = render_scene.colors[self.faces.reshape(-1)]
        if bool(((colours[:, :3] - 1.0).abs() > 1.0 / 255.0).any()):
            raise InputError(
                f"the triangles of material {self.name!r} have vertex colours (COLOR_0), which multiply its base colour per vertex; "
                "a neural material is baked per texel.",
                path=path,
                field="meshes[].attributes.COLOR_0",
                fix="bake the vertex colours into the base colour texture, or remove COLOR_0.",
            )
        for slot, tex in self.material.textures.items():
            if slot not in BAKED_SLOTS:
                continue  # occlusion and emission stay textures (on their own uv set if they like)
            if tex.texcoord != 0:
                raise InputError(
                    f"material {self.name!r} reads its {slot} texture with uv1; a neural material is baked over uv0.",
                    path=path,
                    field=f"materials[{index}].{slot}.texCoord",
                    fix="bake the textures onto uv0 first, or point the texture at TEXCOORD_0.",
                )
            if self.uv_outside and (tex.wrap_s != "repeat" or tex.wrap_t != "repeat"):
                raise InputError(
                    f"material {self.name!r} clamps or mirrors its {slot} texture and its uv0 leave [0, 1]; the latent texture repeats.",
                    path=path,
                    field=f"materials[{index}].{slot}.sampler",
                    fix="use REPEAT wrapping, or keep uv0 inside [0, 1].",
                )

    parameters: dict[str, torch.Tensor] = {}  # noqa: RUF012 - the report's source_material_parameter_bytes: a texture asset has none

    def render_layer(self, g: GBuffer, frame: _Frame, s: SurfaceParameters, rows: torch.Tensor) -> GltfLayer:
        """The reference layer of G-buffer rows ``rows`` (from the deferred renderer's material inputs ``s``)."""
        return GltfLayer(s.base_color[rows], s.metallic[rows], s.roughness[rows], normalize(frame.local(s.normal)[rows]))

    def _slot(self, name: str, uv: torch.Tensor) -> torch.Tensor | None:
        tex = self.material.textures.get(name)
        if tex is None:
            return None
        return sample_bilinear(tex.texels, uv.to(tex.texels.dtype), wrap_s=tex.wrap_s, wrap_t=tex.wrap_t).float()

    def surface(self, uv: torch.Tensor) -> dict[str, torch.Tensor]:
        """Level-0 material values at ``uv`` ``[N, 2]``: base_color ``[N, 3]``, metallic, roughness,
        occlusion ``[N]``, tangent-space normal and emissive ``[N, 3]`` (factors applied)."""
        m, n = self.material, uv.shape[0]
        f32 = lambda t: t.float().to(uv.device)
        base = f32(m.base_color_factor)[:3].expand(n, 3)
        t = self._slot("base_color", uv)
        if t is not None:
            base = base * (t[:, :3] if t.shape[1] >= 3 else t[:, :1].expand(-1, 3))
        rough_metal = torch.stack((f32(m.roughness_factor), f32(m.metallic_factor))).expand(n, 2)
        t = self._slot("metallic_roughness", uv)
        if t is not None:
            rough_metal = rough_metal * (t[:, 1:3] if t.shape[1] >= 3 else t[:, :1].expand(-1, 2))
        normal = torch.tensor([0.0, 0.0, 1.0], device=uv.device).expand(n, 3)
        t = self._slot("normal", uv)
        if t is not None:
            normal = decode_normal_map(t[:, :3], strength=f32(m.normal_scale))
        occlusion = torch.ones(n, device=uv.device)
        t = self._slot("occlusion", uv)
        if t is not None:
            occlusion = 1.0 + f32(m.occlusion_strength) * (t[:, 0] - 1.0)
        emissive = f32(m.emissive_factor).expand(n, 3)
        t = self._slot("emissive", uv)
        if t is not None:
            emissive = emissive * (t[:, :3] if t.shape[1] >= 3 else t[:, :1].expand(-1, 3))
        return {
            "base_color": base.clamp(0.0, 1.0),
            "metallic": rough_metal[:, 1].clamp(0.0, 1.0),
            "roughness": rough_metal[:, 0].clamp(0.0, 1.0),
            "normal": normal,
            "occlusion": occlusion,
            "emissive": emissive,
        }

    def layer_and_inputs(
        self, uv: torch.Tensor, normal: torch.Tensor | None = None, position: torch.Tensor | None = None
    ) -> tuple[GltfLayer, torch.Tensor]:
        s = self.surface(uv)
        layer = GltfLayer(s["base_color"], s["metallic"], s["roughness"], s["normal"])
        features = torch.cat([s["base_color"], s["metallic"][:, None], s["roughness"][:, None], s["normal"]], dim=1)
        return layer, features

    def texel_inputs(self, uv: torch.Tensor, normal: torch.Tensor | None = None, position: torch.Tensor | None = None) -> torch.Tensor:
        return self.layer_and_inputs(uv)[1]

    def __call__(self, uv: torch.Tensor, normal: torch.Tensor | None = None, position: torch.Tensor | None = None) -> GltfLayer:
        return self.layer_and_inputs(uv)[0]


GEOMETRY_MAP = 1024
"""Side of the uv0 map of world normals a placed layered material reads its orientation from."""


class PlacedMaterial(AssetSurface):
    """A layered material (.json, .mtlx) on one material slot of an asset: every texel's
    orientation-dependent nodes (dust on up-facing areas, ...) see the asset's world normal there,
    so the bake is right for the object as placed.

    The world normals come from the slot's triangles rasterised into a uv0 map
    (:data:`GEOMETRY_MAP` squared, a dilated gutter; texels no triangle reaches keep
    ``fallback_normal``); a texel holds one normal, so uv0 must not overlap (mirrored halves
    sharing texels get one of the two) and must stay inside the unit square. Positions stay the
    material's own (uv), so noise patterns do not change scale with the asset's units.
    """

    def __init__(self, layered: Any, source: Path, scene: Scene, render_scene: RenderScene, index: int, path: Path, fallback_normal: torch.Tensor) -> None:
        super().__init__(scene, render_scene, index, path)
        if self.uv_outside:
            raise InputError(
                f"the triangles of material {self.name!r} have uv0 outside [0, 1]; a placed material needs one surface point per texel.",
                path=path,
                field="meshes[].attributes.TEXCOORD_0",
                fix="keep uv0 inside the unit square (a non-overlapping unwrap).",
            )
        from neuralbake.render.gbuffer import interpolate
        from neuralbake.render.uv_raster import rasterize_uv

        self.layered, self.source = layered, source
        self.parameters = getattr(layered, "parameters", {})
        size = GEOMETRY_MAP
        tri, bary = rasterize_uv(render_scene.uv0, self.faces, size)
        flat_tri, flat_bary = tri.reshape(-1), bary.reshape(-1, 2)
        normals = normalize(interpolate(render_scene.normals, self.faces, flat_tri.clamp(min=0), flat_bary))
        fallback = fallback_normal.reshape(1, 3).to(normals)
        self._normals = torch.where((flat_tri >= 0)[:, None], normals, fallback).reshape(size, size, 3)
        self.texel_coverage = float((tri >= 0).float().mean())
        """Fraction of the normal map's texels some triangle reaches (gutter included)."""

    def normal_at(self, uv: torch.Tensor) -> torch.Tensor:
        """World normals ``[N, 3]`` at ``uv`` (the nearest texel of the map)."""
        size = self._normals.shape[0]
        ij = torch.clamp((torch.remainder(uv, 1.0) * size).long(), 0, size - 1)
        return self._normals[ij[:, 1], ij[:, 0]]

    def layer_and_inputs(self, uv: torch.Tensor, normal: torch.Tensor | None = None, position: torch.Tensor | None = None) -> tuple[Any, torch.Tensor]:
        return self.layered.layer_and_inputs(uv, self.normal_at(uv))

    def texel_inputs(self, uv: torch.Tensor, normal: torch.Tensor | None = None, position: torch.Tensor | None = None) -> torch.Tensor:
        return self.layer_and_inputs(uv)[1]

    def __call__(self, uv: torch.Tensor, normal: torch.Tensor | None = None, position: torch.Tensor | None = None) -> Any:
        return self.layered(uv, self.normal_at(uv))

    def render_layer(self, g: GBuffer, frame: _Frame, s: SurfaceParameters, rows: torch.Tensor) -> Any:
        """The layered material at G-buffer rows ``rows``, oriented by each pixel's own vertex normal."""
        return self.layered(g.uv[0][rows], frame.normal[rows])


def _pick_material(rs: RenderScene, path: Path, name: str) -> int:
    """The index of material ``name`` of the asset, or of the one on the most triangles."""
    names = [m.name for m in rs.materials]
    used = torch.bincount(rs.material_ids.cpu(), minlength=len(names))
    listing = ", ".join(f"{n!r} ({int(c)} triangles)" for n, c in zip(names, used.tolist(), strict=True))
    if not name:
        return int(torch.argmax(used))
    if name not in names:
        raise InputError(f"the asset has no material {name!r}; it has {listing}.", path=path, field="material_name", fix="pass one of those names with --material.")
    index = max((i for i, n in enumerate(names) if n == name), key=lambda i: int(used[i]))  # of equal names, the most used
    if int(used[index]) == 0:
        raise InputError(f"no triangle uses material {name!r}.", path=path, field="material_name", fix=f"pick a material the meshes use: {listing}.")
    return index


def place_material(layered: Any, source: str | Path, asset: str | Path, name: str = "", *, fallback_normal: torch.Tensor, device: torch.device | str = "cpu") -> PlacedMaterial:
    """Put a compiled layered material on the triangles of the asset's material ``name`` (or of the one on the most triangles)."""
    path = Path(asset)
    scene = pose_scene(load_bake_input(path, field="asset", fix="pass a .gltf or .glb asset with --asset."))
    rs = prepare_scene(scene, device=device)
    return PlacedMaterial(layered, Path(source), scene, rs, _pick_material(rs, path, name), path, fallback_normal)


def load_asset_material(path: str | Path, name: str = "", *, device: torch.device | str = "cpu") -> AssetMaterial:
    """Read a glTF asset and pick the material to bake: ``name``, or the one on the most triangles."""
    path = Path(path)
    scene = pose_scene(load_bake_input(path, field="material", fix="pass a .gltf or .glb asset, a .json material or a .mtlx document."))
    rs = prepare_scene(scene, device=device)
    index = _pick_material(rs, path, name)
    if rs.materials[index].unlit:
        raise InputError(
            f"material {rs.materials[index].name!r} is unlit (KHR_materials_unlit): it has no BRDF to bake.",
            path=path,
            field=f"materials[{index}].extensions",
            fix="pick a lit material with --material.",
        )
    return AssetMaterial(scene, rs, index, path)


# -- rendering the asset with a layer --------------------------------------------------------------------


@dataclass(eq=False)
class _Frame:
    """The vertex tangent frame (world) of G-buffer rows, oriented to the viewer, and the face normal."""

    tangent: torch.Tensor
    bitangent: torch.Tensor
    normal: torch.Tensor
    geometric: torch.Tensor

    def local(self, w: torch.Tensor) -> torch.Tensor:
        return torch.stack(((w * self.tangent).sum(-1), (w * self.bitangent).sum(-1), (w * self.normal).sum(-1)), dim=-1)

    def world(self, w: torch.Tensor) -> torch.Tensor:
        return w[:, 0:1] * self.tangent + w[:, 1:2] * self.bitangent + w[:, 2:3] * self.normal

    def rows(self, rows: torch.Tensor) -> _Frame:
        return _Frame(self.tangent[rows], self.bitangent[rows], self.normal[rows], self.geometric[rows])


def vertex_frame(g: GBuffer) -> _Frame:
    """The vertex tangent frame of every G-buffer row: tangent, bitangent ``w n x t`` (the
    handedness of mirrored uv included, as the normal map's tangent space has it), normal."""
    t, _, n, geo = shading_frame(g, None)
    handed = torch.where(g.tangent[:, 3:4] < 0.0, -1.0, 1.0).to(n.dtype)
    return _Frame(t, torch.cross(n, t, dim=-1) * handed, n, geo)


def shade_layer(
    rs: RenderScene,
    g: GBuffer,
    rows: torch.Tensor,
    frame: _Frame,
    layer: Any,
    occlusion: torch.Tensor,
    emissive: torch.Tensor,
    environment: EnvironmentLight,
    spp: int,
    seed: int = 0,
    shadows: bool = True,
) -> torch.Tensor:
    """Radiance ``[len(rows), 3]`` of G-buffer rows ``rows`` shaded with ``layer`` (vertex frame):
    emission, the :data:`SUN` (with a shadow ray if ``shadows``: Warp's BVH), and ``environment`` by ``spp`` light samples and
    ``spp`` cosine samples combined by the power heuristic, scaled by ``occlusion``.

    The samples depend on the pixel and ``seed`` only (a scrambled Sobol sequence shifted per
    pixel, as in the deferred renderer), and the BSDF samples are cosine-distributed whatever the
    layer, so two layers rendered with the same arguments see the same light and sample directions:
    their images differ by the materials, not by noise.
    """
    view = frame.local(g.view[rows])
    position, geo = g.position[rows], frame.geometric
    origin = position + geo * (1e-4 * rs.extent)
    radiance = emissive.clone()
    direction, irradiance = SUN
    light = normalize(torch.tensor(direction, dtype=view.dtype, device=view.device).reshape(1, 3)).expand_as(view)
    lit = (light * geo).sum(-1) > 0.0
    if shadows and rows.numel():
        lit = lit & ~rs.caster.occluded(origin, light)
    radiance = radiance + layer.eval(frame.local(light), view) * irradiance * lit.to(view.dtype)[:, None]
    sobol = torch.quasirandom.SobolEngine(4, scramble=True, seed=seed).draw(spp).to(torch.float64)
    shift = torch.rand(g.width * g.height, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)[g.pixel[rows].cpu()]
    total = torch.zeros_like(radiance)
    env_dtype = environment.pmf.dtype
    for k in range(spp):
        u = torch.remainder(sobol[k] + shift, 1.0).to(device=view.device, dtype=env_dtype)
        for strategy in ("light", "bsdf"):
            if strategy == "light":
                wi_world, p_light = environment.sample(u[:, 0:2])
                wi_world, p_light = wi_world.to(view.dtype), p_light.to(view.dtype)
                wi = frame.local(wi_world)
                p_bsdf = cosine_hemisphere_pdf(wi) * (wi[:, 2] > 0)
                weight, pdf = _power(p_light, p_bsdf), p_light
            else:
                wi = square_to_cosine_hemisphere(u[:, 2:4].to(view.dtype))
                p_bsdf = cosine_hemisphere_pdf(wi)
                wi_world = frame.world(wi)
                p_light = environment.pdf(wi_world.to(env_dtype)).to(view.dtype)
                weight, pdf = _power(p_bsdf, p_light), p_bsdf
            above = ((wi_world * geo).sum(-1) > 0.0).to(view.dtype)
            value = layer.eval(wi, view) * environment.eval(wi_world.to(env_dtype)).to(view.dtype)
            total = total + _over_pdf(value, pdf) * (weight * above)[:, None]
    return radiance + total * (occlusion[:, None] / spp)


def asset_framing(rs: RenderScene, fov_y_deg: float = 40.0) -> tuple[tuple[float, float, float], float]:
    """``(target, distance)``: the asset's bounding-box centre and the camera distance that frames its bounding sphere."""
    centre = (rs.positions.min(0).values + rs.positions.max(0).values) / 2
    extent = float((rs.positions - centre).norm(dim=1).max())
    return (float(centre[0]), float(centre[1]), float(centre[2])), framing_radius(extent, fov_y_deg)


def asset_views(rs: RenderScene, count: int, *, seed: int = 7919, fov_y_deg: float = 40.0) -> list[Camera]:
    """``count`` held-out cameras at random directions around the asset, framing its bounding sphere."""
    target, distance = asset_framing(rs, fov_y_deg)
    return random_orbit(count, distance, seed=seed, target=target, fov_y_deg=fov_y_deg)


def load_asset_bundle(asset: str | Path, bundle: str | Path, *, device: torch.device | str = "cpu") -> tuple[AssetMaterial, Any]:
    """An asset bake's reference (the material its bundle records, ``material.name``) and its neural material."""
    from neuralbake.bakes.neural_material.latents import load_neural_material
    from neuralbake.io.bundle import read_bundle

    neural = load_neural_material(bundle, device=device)  # checks the bundle first
    baked_as = (read_bundle(bundle).manifest.get("material") or {}).get("name") or ""
    return load_asset_material(asset, baked_as, device=device), neural


def _block_compressed(scene: Scene, index: int) -> tuple[Scene, dict[str, int]]:
    """``scene`` with material ``index``'s textures replaced by their block-compressed round trips, and
    the bytes per slot (full mip chains). An image in several slots (occlusion packed with
    metal/rough) is compressed once, in the first slot's format, and counted once (0 bytes after)."""
    out = copy.copy(scene)
    out.materials = list(scene.materials)
    material = out.materials[index] = copy.copy(scene.materials[index])
    sizes: dict[str, int] = {}
    done: dict[int, np.ndarray] = {}
    for attr, ref in material.textures().items():
        slot = attr.removesuffix("_texture")
        fmt = _SLOT_FORMATS[slot]
        if id(ref.image) in done:
            sizes[slot] = 0
        else:
            image = ref.image
            h, w = image.shape[:2]
            pad = np.pad(image, ((0, -h % BLOCK), (0, -w % BLOCK), (0, 0)), mode="edge")
            if fmt == "bc5":
                xy, _ = bc_roundtrip(pad[..., :2], "bc5")
                n = xy * 2.0 - 1.0
                z = np.sqrt(np.clip(1.0 - (n * n).sum(-1, keepdims=True), 0.0, 1.0))
                decoded = np.concatenate([xy, z * 0.5 + 0.5], axis=-1)
            elif fmt == "bc1" and image.shape[2] < 3:
                decoded, _ = bc_roundtrip(np.repeat(pad[..., :1], 3, axis=2), "bc1")
            else:
                channels = 4 if image.shape[2] == 4 and slot == "base_color" else 3
                rgb = pad[..., :channels] if pad.shape[2] >= 3 else np.repeat(pad[..., :1], 3, axis=2)
                decoded, _ = bc_roundtrip(rgb, fmt)
            done[id(ref.image)] = np.ascontiguousarray(decoded[:h, :w], np.float32)
            sizes[slot] = mip_chain_bytes(h, w, fmt)
        setattr(material, attr, dataclasses.replace(ref, image=done[id(ref.image)]))
    return out, sizes


def mip_chain_bytes(height: int, width: int, fmt: str) -> int:
    """Bytes of a block-compressed texture with its full mip chain (every level padded to whole 4x4 blocks)."""
    block = 8 if fmt == "bc1" else 16
    total = 0
    while True:
        total += math.ceil(height / BLOCK) * math.ceil(width / BLOCK) * block
        if height == 1 and width == 1:
            return total
        height, width = max(1, height // 2), max(1, width // 2)


def stored_texture_bytes(material: AssetMaterial) -> dict[str, int]:
    """Bytes of the material's images as the asset stores them (PNG/JPEG files or embedded), per slot."""
    from neuralbake.io.gltf.document import GltfDocument
    from neuralbake.io.gltf.reader import DEFAULT_MAX_JSON_BYTES

    doc = GltfDocument(material.path, DEFAULT_MAX_JSON_BYTES)
    gltf = doc.gltf
    if material.index >= len(gltf.materials or []):
        return {}  # the reader's default material of a primitive without one: no images
    m = gltf.materials[material.index]
    pbr = m.pbrMetallicRoughness
    infos = {
        "base_color": pbr.baseColorTexture if pbr else None,
        "metallic_roughness": pbr.metallicRoughnessTexture if pbr else None,
        "normal": m.normalTexture,
        "occlusion": m.occlusionTexture,
        "emissive": m.emissiveTexture,
    }
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    for slot, info in infos.items():
        if info is None or info.index is None:
            continue
        source = gltf.textures[info.index].source
        if source in seen:  # one image in several slots (occlusion packed with metal/rough): stored once
            continue
        seen.add(source)
        image = gltf.images[source]
        if image.uri and not image.uri.startswith("data:"):
            nbytes = doc.local_file(image.uri, "images[].uri", "texture image").stat().st_size
        elif image.uri:
            nbytes = len(doc.uri_bytes(image.uri, "images[].uri", "image"))
        else:
            nbytes = int(gltf.bufferViews[image.bufferView].byteLength)
        sizes[slot] = int(nbytes)
    return sizes


def _flip_ldr(reference: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LDR FLIP error per pixel ``[H, W]`` and its magma picture ``[H, W, 3]`` of two display images."""
    import flip_evaluator

    ref, tst = np.ascontiguousarray(reference.clip(0, 1), np.float32), np.ascontiguousarray(test.clip(0, 1), np.float32)
    error, _, _ = flip_evaluator.evaluate(ref, tst, "LDR", inputsRGB=True, applyMagma=False)
    picture, _, _ = flip_evaluator.evaluate(ref, tst, "LDR", inputsRGB=True, applyMagma=True)
    return np.asarray(error, np.float32).reshape(ref.shape[:2]), np.asarray(picture, np.float32)


def _view_radiance(
    reference: AssetSurface, g: GBuffer, neural: Any, environment: EnvironmentLight, spp: int, *, seed: int, shadows: bool,
    compressed_scene: RenderScene | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Radiance of a G-buffer's rows with the reference, with the neural material (on the
    reference's triangles; the asset's other materials as they are) and, for a glTF material,
    with the block-compressed textures (``compressed_scene``), all lit with the same samples."""
    rs, index = reference.render_scene, reference.index
    frame = vertex_frame(g)
    s = evaluate_materials(rs, g)
    gltf = GltfLayer(s.base_color, s.metallic, s.roughness, normalize(frame.local(s.normal)))
    mine = torch.nonzero(g.material_id == index).reshape(-1)
    others = torch.nonzero(g.material_id != index).reshape(-1)
    occlusion, emissive = s.occlusion.clone(), s.emissive.clone()
    if isinstance(reference, PlacedMaterial):  # the layered material replaces the asset's own: no occlusion or emission maps
        occlusion[mine], emissive[mine] = 1.0, 0.0

    def shade(rows: torch.Tensor, layer: Any, occ: torch.Tensor, emi: torch.Tensor) -> torch.Tensor:
        return shade_layer(rs, g, rows, frame.rows(rows), layer, occ[rows], emi[rows], environment, spp, seed=seed, shadows=shadows)

    ref = torch.zeros_like(s.emissive)
    if others.numel():
        ref[others] = shade(others, gltf.rows(others), occlusion, emissive)
    net = ref.clone()
    if mine.numel():
        ref[mine] = shade(mine, reference.render_layer(g, frame, s, mine), occlusion, emissive)
    bc = None
    if compressed_scene is not None:
        s_bc = evaluate_materials(compressed_scene, g)
        every = torch.arange(g.pixel.shape[0], device=rs.device)
        bc = shade(every, GltfLayer(s_bc.base_color, s_bc.metallic, s_bc.roughness, normalize(frame.local(s_bc.normal))), s_bc.occlusion, s_bc.emissive)
        occlusion, emissive = s_bc.occlusion, s_bc.emissive  # the neural material ships them block-compressed
    if mine.numel():
        layer = neural(g.uv[0][mine], None, footprint=(g.uv_dx[0][mine], g.uv_dy[0][mine]))
        net[mine] = shade(mine, layer, occlusion, emissive)
    return ref, net, bc


def asset_comparison(
    out: Path,
    material: AssetSurface,
    neural: Any,
    *,
    size: int,
    spp: int,
    views: int = 4,
    progress: Callable[[int], None] | None = None,
    latent_bytes: int = 0,
    decoder_bytes: int = 0,
) -> dict[str, Any]:
    """Render ``views`` held-out views of the asset with the reference and the neural material
    (and, for a glTF material, its block-compressed textures); write
    ``renders/asset_comparison.png`` (per view reference | neural | FLIP [| BC set | FLIP]) and
    return the scores and the size table (see the module docstring)."""
    from neuralbake.io.images import save_png
    from neuralbake.render.pictures import panel_grid

    rs = material.render_scene
    device = rs.device
    textured = isinstance(material, AssetMaterial)
    bc_bytes: dict[str, int] = {}
    compressed = None
    if textured:
        bc_scene, bc_bytes = _block_compressed(material.scene, material.index)
        compressed = prepare_scene(bc_scene, device=device)
    environment = EnvironmentLight.from_map(default_environment(128, 64, device=device))
    shadows = warp_available()  # sun shadows need Warp's BVH; primary visibility does not
    background = torch.full((3,), 0.18, device=device)
    filtering = neural.filtering
    neural.filtering = True
    scores: dict[str, list[float]] = {"psnr": [], "flip": [], "bc_psnr": [], "bc_flip": []}
    rows_out: list[list[np.ndarray]] = []
    pixels: list[int] = []
    started = time.perf_counter()
    try:
        for view, camera in enumerate(asset_views(rs, views)):
            g = render_gbuffer(rs, camera, size, size)
            with torch.no_grad():
                radiance = _view_radiance(material, g, neural, environment, spp, seed=view, shadows=shadows, compressed_scene=compressed)
            # scored over the baked material's pixels only (an asset's other materials are the same in every image)
            mine = (g.material_id == material.index).to(radiance[0].dtype)[:, None]
            covered = (g.image(mine, 0.0)[..., 0] > 0.5).cpu().numpy()
            pixels.append(int(covered.sum()))
            mask = torch.from_numpy(covered)
            pictures = {key: tone_map(g.image(r, background)).float().cpu().numpy() for key, r in zip(("ref", "net", "bc"), radiance, strict=True) if r is not None}
            row = [pictures["ref"]]
            for prefix, key in (("", "net"), ("bc_", "bc")):
                if key not in pictures:
                    continue
                error, picture = _flip_ldr(pictures["ref"], pictures[key])
                visible = bool(covered.any())
                scores[f"{prefix}psnr"].append(psnr(torch.from_numpy(pictures[key])[mask], torch.from_numpy(pictures["ref"])[mask]) if visible else None)
                scores[f"{prefix}flip"].append(float(error[covered].mean()) if visible else None)
                row += [pictures[key], picture]
            rows_out.append(row)
            if progress is not None:
                progress(size * size)
    finally:
        neural.filtering = filtering
    save_png(out / "renders" / "asset_comparison.png", panel_grid(rows_out, gap=2))

    def mean(values: list[float | None]) -> float | None:  # over the views that show the material; None if none does
        seen = [v for v in values if v is not None and math.isfinite(v)]
        return round(float(np.mean(seen)), 3) if seen else None

    def each(values: list[float | None], digits: int) -> list[float | None]:
        return [None if v is None or not math.isfinite(v) else round(v, digits) for v in values]

    result: dict[str, Any] = {
        "asset": str(material.path.name),
        "material": material.name,
        "material_index": material.index,
        "reference": "the asset's glTF metal/rough material" if textured else f"layered material {material.source} placed on the asset",
        "uv_coverage": round(material.uv_coverage, 4),
        "views": views,
        "size": size,
        "spp": spp,
        "sun_shadows": shadows,
        "seconds": round(time.perf_counter() - started, 3),
        "psnr_db": mean(scores["psnr"]),
        "flip": mean(scores["flip"]),
        "psnr_per_view_db": each(scores["psnr"], 3),
        "flip_per_view": each(scores["flip"], 4),
        "material_pixels_per_view": pixels,
        "picture": "renders/asset_comparison.png: per view reference | neural | FLIP" + (" | BC set | FLIP" if textured else ""),
        "method": "deferred G-buffer of held-out random views; sun (BVH shadow) + procedural sky (light + cosine samples, power heuristic), "
        "the same samples for every image; the neural material filters its latents over ray-differential footprints; "
        "PSNR of ACES-tone-mapped sRGB and mean LDR FLIP over the baked material's pixels (views that do not show it are left out)"
        + ("; occlusion and emission from the BC1/BC7 textures in the neural render." if textured else "."),
    }
    neural_bytes = {"latents_u8": latent_bytes, "decoder_fp16": decoder_bytes}
    if isinstance(material, PlacedMaterial):
        result["normal_map_texel_coverage"] = round(material.texel_coverage, 4)
    if not textured:
        result["bytes"] = {"neural": neural_bytes, "neural_total": latent_bytes + decoder_bytes}
        return result
    stored = stored_texture_bytes(material)
    bc_material = bc_bytes
    kept = {slot: bc_material[slot] for slot in ("occlusion", "emissive") if slot in bc_material}
    neural_total = latent_bytes + decoder_bytes + sum(kept.values())
    result["bc"] = {"psnr_db": mean(scores["bc_psnr"]), "flip": mean(scores["bc_flip"]), "formats": {k: _SLOT_FORMATS[k] for k in bc_material}}
    result["bytes"] = {
        "source_stored": stored,
        "source_stored_total": sum(stored.values()),
        "bc_set": bc_material,
        "bc_set_total": sum(bc_material.values()),
        "neural": {**neural_bytes, "kept_textures_bc": kept},
        "neural_total": neural_total,
        "ratio_bc_set_to_neural": round(sum(bc_material.values()) / max(neural_total, 1), 3),
        "ratio_stored_to_neural": round(sum(stored.values()) / max(neural_total, 1), 3),
    }
    return result
