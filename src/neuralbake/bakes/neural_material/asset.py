"""Neural materials of glTF assets: a textured metal/rough material as the bake's reference.

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
- :class:`PlacedMaterial` is a layered material placed on an asset's material slot instead.
- Occlusion and emission are not reflectance: the occlusion map scales only the environment light
  and the emissive map adds radiance whatever the directions, so the decoder (``f cos`` of a light
  and a view) cannot carry them. They stay textures.

The bake is scored on renders of the asset by :mod:`neuralbake.bakes.neural_material.asset_scoring`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from neuralbake.bakes.neural_material.latents import load_neural_material
from neuralbake.errors import InputError
from neuralbake.io.bundle import read_bundle
from neuralbake.io.gltf import Scene, load_bake_input
from neuralbake.material.frame import normalize, orthonormal_basis
from neuralbake.material.gltf import BrdfExtensions, dielectric_reflectance, gltf_eval, gltf_pdf, gltf_sample
from neuralbake.material.texture import decode_normal_map
from neuralbake.render.gbuffer import GBuffer, SurfaceParameters, interpolate
from neuralbake.render.layer_shading import VertexFrame
from neuralbake.render.mip import sample_bilinear
from neuralbake.render.scene import RenderScene, prepare_scene
from neuralbake.render.skinning import pose_scene
from neuralbake.render.uv_raster import rasterize_uv

__all__ = ["ASSET_SUFFIXES", "AssetMaterial", "AssetSurface", "BAKED_SLOTS", "GltfLayer", "PlacedMaterial", "is_asset", "load_asset_bundle", "load_asset_material", "place_material"]

ASSET_SUFFIXES = (".gltf", ".glb")
"""Files :func:`load_asset_material` reads (a material bake's input is an asset when it has one of these)."""

BAKED_SLOTS = ("base_color", "metallic_roughness", "normal")
"""The glTF slots that go into the latent texture and decoder (occlusion and emission stay textures)."""


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
    extensions: BrdfExtensions = field(default_factory=BrdfExtensions)
    """The BRDF's ``KHR_materials_*`` inputs, per point or one value each."""

    def __post_init__(self) -> None:
        self.normal = normalize(self.shading_normal)
        self.tangent, self.bitangent = orthonormal_basis(self.normal)  # the BRDF is isotropic: any frame about the normal

    def _to_shading(self, w: torch.Tensor) -> torch.Tensor:
        return torch.stack(((w * self.tangent).sum(-1), (w * self.bitangent).sum(-1), (w * self.normal).sum(-1)), dim=-1)

    def _params(self) -> dict[str, torch.Tensor | float | None]:
        """What every glTF lobe operation reads: metallic, roughness and the coat (which its sampler samples), about the
        vertex normal (+z of this layer's frame) seen in the shading frame: the coat is not normal-mapped."""
        coat_normal = torch.stack((self.tangent[:, 2], self.bitangent[:, 2], self.normal[:, 2]), dim=-1) if self.extensions.coated else None
        return {"metallic": self.metallic, "roughness": self.roughness, **self.extensions.coat(), "clearcoat_normal": coat_normal}

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        above = ((wi[:, 2] > 0) & (wo[:, 2] > 0)).to(wi.dtype)[:, None]
        return gltf_eval(self._to_shading(wi), self._to_shading(wo), base_color=self.base_color, **{**self.extensions.keywords(), **self._params()}) * above

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
        return GltfLayer(self.base_color[rows], self.metallic[rows], self.roughness[rows], self.shading_normal[rows], self.extensions.map(lambda v: v[rows]))


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

    def render_layer(self, g: GBuffer, frame: VertexFrame, s: SurfaceParameters, rows: torch.Tensor) -> GltfLayer:
        """The reference layer of G-buffer rows ``rows`` (from the deferred renderer's material inputs ``s``)."""
        return GltfLayer(s.base_color[rows], s.metallic[rows], s.roughness[rows], normalize(frame.local(s.normal)[rows]), s.extensions.map(lambda v: v[rows]))

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
        m = self.material
        rgb, grazing = dielectric_reflectance(float(m.ior), float(m.specular), tuple(m.specular_color))
        base = s["base_color"]
        sheen = torch.tensor(m.sheen_color, dtype=base.dtype, device=base.device) if any(c > 0 for c in m.sheen_color) else 0.0
        extensions = BrdfExtensions(
            f0=torch.tensor(rgb, dtype=base.dtype, device=base.device).expand_as(base), f90=grazing, iridescence=float(m.iridescence),
            iridescence_ior=float(m.iridescence_ior), iridescence_thickness=float(m.iridescence_thickness[1]), clearcoat=float(m.clearcoat),
            clearcoat_roughness=float(m.clearcoat_roughness), sheen_color=sheen, sheen_roughness=float(m.sheen_roughness),
        )
        layer = GltfLayer(base, s["metallic"], s["roughness"], s["normal"], extensions)
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

    def render_layer(self, g: GBuffer, frame: VertexFrame, s: SurfaceParameters, rows: torch.Tensor) -> Any:
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


def load_asset_bundle(asset: str | Path, bundle: str | Path, *, device: torch.device | str = "cpu") -> tuple[AssetMaterial, Any]:
    """An asset bake's reference (the material its bundle records, ``material.name``) and its neural material."""
    neural = load_neural_material(bundle, device=device)  # checks the bundle first
    baked_as = (read_bundle(bundle).manifest.get("material") or {}).get("name") or ""
    return load_asset_material(asset, baked_as, device=device), neural
