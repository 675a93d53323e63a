"""A glTF :class:`~neuralbake.io.gltf.Scene` made ready to render: all meshes merged into one
set of torch tensors on one device (positions, faces, per-triangle material ids, vertex
attributes), materials as tensors (linear colour textures, factors), and the BVH.

Build it once with :func:`prepare_scene` and render many views from it; a fitting bake swaps in
learnable tensors (``scene.colors.requires_grad_()``, ``scene.materials[0].textures["base_color"].texels = param``)
and moves vertices with :meth:`RenderScene.set_positions`, which refits the BVH. Colour textures
(base colour, emissive) are decoded from sRGB to linear once here, so the mip pyramids and the
shading work in linear space; :meth:`RenderScene.to_gltf_scene` encodes them back for writing.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from neuralbake.errors import InputError
from neuralbake.io.gltf import Material, Mesh, Scene, TextureRef, generate_normals, generate_tangents
from neuralbake.io.gltf.extensions import SHADED_FACTOR_FIELDS
from neuralbake.material.texture import linear_to_srgb, srgb_to_linear
from neuralbake.render.antialias import edge_neighbours as find_edge_neighbours
from neuralbake.render.mip import build_mip_pyramid
from neuralbake.render.visibility import RayCaster

__all__ = ["GLTF_VERTEX_ATTRIBUTES", "MATERIAL_SLOTS", "MaterialParameters", "RenderScene", "TextureSlot", "prepare_scene"]

MATERIAL_SLOTS = {
    "base_color": ("base_color_texture", True),
    "metallic_roughness": ("metallic_roughness_texture", False),
    "normal": ("normal_texture", False),
    "occlusion": ("occlusion_texture", False),
    "emissive": ("emissive_texture", True),
}
"""Texture slot name -> (glTF :class:`~neuralbake.io.gltf.Material` field, stored as sRGB)."""

GLTF_VERTEX_ATTRIBUTES = ("normals", "tangents", "uv0", "uv1", "colors")
"""Vertex attributes :meth:`RenderScene.gltf_meshes` can write (positions and indices always are)."""


@dataclass(eq=False)
class TextureSlot:
    """A texture as the renderer samples it."""

    texels: torch.Tensor
    """``[H, W, C]`` linear values (colour slots decoded from sRGB); may require grad."""
    texcoord: int = 0
    """uv set: 0 or 1."""
    wrap_s: str = "repeat"
    """Addressing along u."""
    wrap_t: str = "repeat"
    """Addressing along v."""
    name: str = ""
    """Source image name."""
    _cache: tuple[weakref.ref, int, list[torch.Tensor]] | None = field(default=None, repr=False)

    def cache_key(self) -> tuple[weakref.ref, int]:
        """What a cache built from :attr:`texels` is valid for: that very tensor (not merely its id, which a new tensor
        may reuse) at its current version."""
        return weakref.ref(self.texels), self.texels._version

    def cache_valid(self, key: tuple[weakref.ref, int] | None) -> bool:
        return key is not None and key[0]() is self.texels and key[1] == self.texels._version

    def pyramid(self) -> list[torch.Tensor]:
        """Mip levels of :attr:`texels`; cached while the texels neither change nor need gradients."""
        t = self.texels
        if t.requires_grad:
            return build_mip_pyramid(t)
        if self._cache is None or not self.cache_valid(self._cache[:2]):
            with torch.no_grad():
                self._cache = (*self.cache_key(), build_mip_pyramid(t))
        return self._cache[2]

    def adopt_pyramid(self, levels: list[torch.Tensor]) -> None:
        """Use ``levels`` (equal to :meth:`pyramid`'s, e.g. views into a packed table holding several slots) as the
        cached pyramid of the current texels."""
        self._cache = (*self.cache_key(), levels)


@dataclass(eq=False)
class MaterialParameters:
    """A glTF material as tensors (factors are 0-d or 1-d tensors so they can be learned)."""

    name: str
    """Material name."""
    base_color_factor: torch.Tensor
    """``[4]`` linear RGBA."""
    metallic_factor: torch.Tensor
    """``[]``."""
    roughness_factor: torch.Tensor
    """``[]``."""
    emissive_factor: torch.Tensor
    """``[3]``."""
    normal_scale: torch.Tensor
    """``[]``."""
    occlusion_strength: torch.Tensor
    """``[]``."""
    textures: dict[str, TextureSlot]
    """Bound slots by :data:`MATERIAL_SLOTS` name."""
    unlit: bool = False
    """``KHR_materials_unlit``: output the base colour."""
    double_sided: bool = False
    """Informational: the ray caster shades back faces of every material (flipped normal)."""
    alpha_mode: str = "OPAQUE"
    """glTF ``alphaMode``: ``OPAQUE``, ``MASK`` (cut out below :attr:`alpha_cutoff`) or ``BLEND`` (composited by alpha);
    see :mod:`~neuralbake.render.transparency`."""
    alpha_cutoff: float = 0.5
    """``MASK``'s threshold."""
    ior: float = 1.5
    """``KHR_materials_ior``: sets the dielectric's Fresnel reflectance (:func:`~neuralbake.material.gltf.dielectric_f0`)."""
    specular: float = 1.0
    """``KHR_materials_specular``'s factor (:func:`~neuralbake.material.gltf.dielectric_reflectance`)."""
    specular_color: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """``KHR_materials_specular``'s colour factor."""
    iridescence: float = 0.0
    """``KHR_materials_iridescence``'s factor (0: no film)."""
    iridescence_ior: float = 1.3
    """The film's index."""
    iridescence_thickness: tuple[float, float] = (100.0, 400.0)
    """The film's thickness bounds in nanometres; shaded at the maximum (no thickness texture)."""
    clearcoat: float = 0.0
    """``KHR_materials_clearcoat``'s factor (0: no coat)."""
    clearcoat_roughness: float = 0.0
    """The coat's roughness."""
    sheen_color: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """``KHR_materials_sheen``'s colour (black: no sheen)."""
    sheen_roughness: float = 0.0
    """The sheen's roughness."""


@dataclass(eq=False)
class RenderScene:
    """Merged geometry, materials and the BVH on one device (see the module docstring)."""

    positions: torch.Tensor
    """``[V, 3]`` world positions."""
    faces: torch.Tensor
    """int64 ``[F, 3]``."""
    material_ids: torch.Tensor
    """int64 ``[F]``."""
    normals: torch.Tensor
    """``[V, 3]`` unit normals."""
    tangents: torch.Tensor
    """``[V, 4]`` tangent xyz and handedness w (``(0, 0, 0, 1)`` where a mesh has none)."""
    uv0: torch.Tensor
    """``[V, 2]`` (zeros where a mesh has none)."""
    uv1: torch.Tensor
    """``[V, 2]`` (zeros where a mesh has none)."""
    colors: torch.Tensor
    """``[V, 4]`` linear vertex colours (ones where a mesh has none)."""
    materials: list[MaterialParameters]
    """Indexed by :attr:`material_ids`."""
    caster: RayCaster
    """BVH over :attr:`positions` / :attr:`faces`."""
    extent: float = 1.0
    """Diagonal of the bounding box (scales ray offsets)."""
    source: str | None = None
    """Where the scene was read from."""
    _edge_neighbours: torch.Tensor | None = field(default=None, repr=False)

    def edge_neighbours(self) -> torch.Tensor:
        """Triangle across each edge (:func:`~neuralbake.render.antialias.edge_neighbours`, seams
        welded by position), computed on first use and kept: moving vertices with
        :meth:`set_positions` does not change the topology."""
        if self._edge_neighbours is None:
            self._edge_neighbours = find_edge_neighbours(self.faces, self.positions)
        return self._edge_neighbours

    @property
    def device(self) -> torch.device:
        """Device of every tensor."""
        return self.positions.device

    @property
    def dtype(self) -> torch.dtype:
        """Float type of the geometry and materials."""
        return self.positions.dtype

    def set_positions(self, positions: torch.Tensor) -> None:
        """Replace the vertex positions (may require grad) and refit the BVH to them."""
        self.caster.refit(positions)
        self.positions = positions

    def gltf_meshes(
        self,
        *,
        attributes: Sequence[str] = GLTF_VERTEX_ATTRIBUTES,
        colors: torch.Tensor | None = None,
        material: int | None = None,
        name_prefix: str = "",
        extra: dict[str, np.ndarray] | None = None,
    ) -> list[Mesh]:
        """The current geometry as glTF :class:`~neuralbake.io.gltf.Mesh` es (detached, float32, on the
        CPU): one per material that has triangles, holding only the vertices its triangles use.

        Parameters
        ----------
        attributes:
            Which of :data:`GLTF_VERTEX_ATTRIBUTES` to write; the others are left ``None``.
        colors:
            ``[V, 4]`` linear vertex colours written in place of :attr:`colors` (when ``"colors"``
            is in ``attributes``), e.g. a fitted appearance.
        material:
            The material index every mesh gets; by default each keeps its own.
        name_prefix:
            Put before each mesh's name (its material's name).
        extra:
            Further per-vertex arrays of the merged vertices, by :class:`~neuralbake.io.gltf.Mesh`
            field name (``joints``, ``weights``, ``bind_positions``...), each written for the
            vertices a mesh uses.
        """
        unknown = sorted(set(attributes) - set(GLTF_VERTEX_ATTRIBUTES))
        if unknown:
            raise InputError(
                f"unknown vertex attribute(s) {', '.join(unknown)}.",
                field="attributes",
                fix=f"choose from {', '.join(GLTF_VERTEX_ATTRIBUTES)}.",
            )
        sources = {"normals": self.normals, "tangents": self.tangents, "uv0": self.uv0, "uv1": self.uv1, "colors": self.colors}
        if colors is not None:
            sources["colors"] = colors
        cpu = lambda t: t.detach().cpu().to(torch.float32).numpy()
        meshes = []
        for m in range(len(self.materials)):
            tris = self.faces[self.material_ids == m]
            if tris.numel() == 0:
                continue
            used, inverse = torch.unique(tris.reshape(-1), return_inverse=True)
            meshes.append(
                Mesh(
                    positions=cpu(self.positions[used]),
                    indices=inverse.reshape(-1, 3).cpu().numpy().astype(np.int64),
                    material=m if material is None else material,
                    name=f"{name_prefix}{self.materials[m].name}",
                    **{name: cpu(sources[name][used]) for name in attributes},
                    **{name: np.ascontiguousarray(array[used.cpu().numpy()]) for name, array in (extra or {}).items()},
                )
            )
        return meshes

    def to_gltf_scene(self) -> Scene:
        """A :class:`~neuralbake.io.gltf.Scene` of the current tensors (detached, on the CPU), colour
        textures encoded back to sRGB; one mesh per material (:meth:`gltf_meshes`), for
        :func:`~neuralbake.io.gltf.write_gltf`."""
        meshes = self.gltf_meshes()
        materials = []
        for p in self.materials:
            mat = Material(
                name=p.name,
                base_color_factor=tuple(float(v) for v in p.base_color_factor.detach().cpu()),
                metallic_factor=float(p.metallic_factor),
                roughness_factor=float(p.roughness_factor),
                emissive_factor=tuple(float(v) for v in p.emissive_factor.detach().cpu()),
                normal_scale=float(p.normal_scale),
                occlusion_strength=float(p.occlusion_strength),
                double_sided=p.double_sided,
                unlit=p.unlit,
                alpha_mode=p.alpha_mode,
                alpha_cutoff=p.alpha_cutoff,
                **_shaded_factors(p),
            )
            for slot, (attr, srgb) in MATERIAL_SLOTS.items():
                tex = p.textures.get(slot)
                if tex is not None:
                    texels = tex.texels.detach().to(torch.float32).cpu()
                    if srgb:
                        texels = _encode_colour(texels)
                    setattr(mat, attr, TextureRef(texels.clamp(0.0, 1.0).numpy(), tex.texcoord, tex.wrap_s, tex.wrap_t, tex.name))
            materials.append(mat)
        return Scene(meshes=meshes, materials=materials, source=self.source)


def _decode_colour(t: torch.Tensor) -> torch.Tensor:
    colour = 3 if t.shape[2] >= 3 else 1
    return torch.cat((srgb_to_linear(t[..., :colour]), t[..., colour:]), dim=-1)


def _encode_colour(t: torch.Tensor) -> torch.Tensor:
    colour = 3 if t.shape[2] >= 3 else 1
    return torch.cat((linear_to_srgb(t[..., :colour]), t[..., colour:]), dim=-1)


def _material_parameters(m: Material, device: torch.device, dtype: torch.dtype) -> MaterialParameters:
    tensor = lambda v: torch.as_tensor(v, dtype=dtype, device=device)
    textures = {}
    for slot, (attr, srgb) in MATERIAL_SLOTS.items():
        ref: TextureRef | None = getattr(m, attr)
        if ref is None:
            continue
        texels = torch.from_numpy(np.ascontiguousarray(ref.image, dtype=np.float32)).to(device=device, dtype=dtype)
        textures[slot] = TextureSlot(_decode_colour(texels) if srgb else texels, ref.texcoord, ref.wrap_s, ref.wrap_t, ref.name)
    return MaterialParameters(
        name=m.name,
        base_color_factor=tensor(m.base_color_factor),
        metallic_factor=tensor(m.metallic_factor),
        roughness_factor=tensor(m.roughness_factor),
        emissive_factor=tensor(m.emissive_factor),
        normal_scale=tensor(m.normal_scale),
        occlusion_strength=tensor(m.occlusion_strength),
        textures=textures,
        unlit=m.unlit,
        double_sided=m.double_sided,
        alpha_mode=m.alpha_mode,
        alpha_cutoff=float(m.alpha_cutoff),
        **_shaded_factors(m),
    )


def _shaded_factors(material: Material | MaterialParameters) -> dict[str, float | tuple[float, ...]]:
    """The shaded extensions' factors (:data:`~neuralbake.io.gltf.extensions.SHADED_FACTOR_FIELDS`) as plain floats and
    tuples of floats: both material records carry them under the same names."""
    plain = lambda v: tuple(float(c) for c in v) if isinstance(v, (tuple, list, np.ndarray)) else float(v)  # noqa: E731
    return {name: plain(getattr(material, name)) for name in SHADED_FACTOR_FIELDS}


def _complete(mesh: Mesh, material: Material) -> dict[str, np.ndarray]:
    """Per-vertex arrays of one mesh with defaults for what it lacks (generated with a warning)."""
    v = len(mesh.positions)
    normals = mesh.normals
    if normals is None:
        warnings.warn(f"mesh {mesh.name!r} has no normals; generating smooth normals.", stacklevel=4)
        normals, _ = generate_normals(mesh.positions, mesh.indices, mode="smooth")
    tangents = mesh.tangents
    if tangents is None and material.normal_texture is not None:
        uv = mesh.uv0 if material.normal_texture.texcoord == 0 else mesh.uv1
        if uv is not None:
            warnings.warn(f"mesh {mesh.name!r} has a normal map but no tangents; generating them.", stacklevel=4)
            tangents = generate_tangents(mesh.positions, normals, uv, mesh.indices)
    if tangents is None:
        tangents = np.tile(np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32), (v, 1))
    return {
        "normals": normals,
        "tangents": tangents,
        "uv0": mesh.uv0 if mesh.uv0 is not None else np.zeros((v, 2), np.float32),
        "uv1": mesh.uv1 if mesh.uv1 is not None else np.zeros((v, 2), np.float32),
        "colors": mesh.colors if mesh.colors is not None else np.ones((v, 4), np.float32),
    }


def prepare_scene(scene: Scene, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> RenderScene:
    """Merge ``scene``'s meshes onto ``device`` in ``dtype`` and build the BVH.

    Raises :class:`~neuralbake.errors.InputError` for an empty scene, a mesh whose material index
    is out of range, or a texture whose uv set the mesh lacks.
    """
    device = torch.device(device)
    if not scene.meshes:
        raise InputError("the scene has no meshes.", path=scene.source, field="meshes", fix="load a glTF with at least one mesh.")
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("positions", "faces", "material_ids", "normals", "tangents", "uv0", "uv1", "colors")
    }
    offset = 0
    for i, mesh in enumerate(scene.meshes):
        if not 0 <= mesh.material < len(scene.materials):
            raise InputError(
                f"mesh {mesh.name!r} uses material {mesh.material}, but the scene has {len(scene.materials)}.",
                path=scene.source,
                field=f"meshes[{i}].material",
                fix="add the material or fix the index.",
            )
        material = scene.materials[mesh.material]
        for slot, ref in material.textures().items():
            if (mesh.uv0 if ref.texcoord == 0 else mesh.uv1) is None:
                raise InputError(
                    f"material {material.name!r} samples {slot} with uv set {ref.texcoord}, which mesh {mesh.name!r} lacks.",
                    path=scene.source,
                    field=f"meshes[{i}].uv{ref.texcoord}",
                    fix=f"unwrap the mesh (add uv{ref.texcoord}) or remove the texture.",
                )
        attrs = _complete(mesh, material)
        parts["positions"].append(mesh.positions)
        parts["faces"].append(mesh.indices.astype(np.int64) + offset)
        parts["material_ids"].append(np.full(len(mesh.indices), mesh.material, dtype=np.int64))
        for k, a in attrs.items():
            parts[k].append(a)
        offset += len(mesh.positions)
    arrays = {k: np.concatenate(v) for k, v in parts.items()}
    as_float = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device=device, dtype=dtype)
    positions = as_float(arrays["positions"])
    faces = torch.from_numpy(arrays["faces"]).to(device)
    lo, hi = arrays["positions"].min(axis=0), arrays["positions"].max(axis=0)
    return RenderScene(
        positions=positions,
        faces=faces,
        material_ids=torch.from_numpy(arrays["material_ids"]).to(device),
        normals=as_float(arrays["normals"]),
        tangents=as_float(arrays["tangents"]),
        uv0=as_float(arrays["uv0"]),
        uv1=as_float(arrays["uv1"]),
        colors=as_float(arrays["colors"]),
        materials=[_material_parameters(m, device, dtype) for m in scene.materials],
        caster=RayCaster(positions, faces),
        extent=float(np.linalg.norm(hi - lo)) or 1.0,
        source=scene.source,
    )
