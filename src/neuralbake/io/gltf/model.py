"""The glTF data model the renderer and the bakes share: world-space triangle meshes
(:class:`Mesh`), metal/rough PBR materials (:class:`Material`) and the textures bound to their
slots (:class:`TextureRef`), gathered in a :class:`Scene`. Plain numpy dataclasses, no file I/O:
:mod:`neuralbake.io.gltf.reader` fills them from a ``.gltf``/``.glb`` and
:mod:`neuralbake.io.gltf.writer` writes them out. Images are kept as stored (float32
``[H, W, C]`` in ``[0, 1]``, no sRGB decode): the renderer knows which slots are colour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from neuralbake.errors import InputError
from neuralbake.io.gltf.rig import Rig

__all__ = ["OPAQUE_ALPHA", "WRAP_CODES", "Material", "Mesh", "Scene", "TextureRef", "check_opaque", "lowest_alpha", "see_through", "see_through_materials"]

WRAP_CODES = {10497: "repeat", 33071: "clamp", 33648: "mirror"}
"""glTF sampler ``wrapS``/``wrapT`` codes -> the :attr:`TextureRef.wrap_s` / ``wrap_t`` names."""


@dataclass(eq=False)
class TextureRef:
    """A texture bound to a material slot: the image and how it is addressed."""

    image: np.ndarray
    """float32 ``[H, W, C]`` in ``[0, 1]`` as stored in the file (colour slots are sRGB-encoded)."""
    texcoord: int = 0
    """Which uv set the slot reads: 0 (``TEXCOORD_0``) or 1 (``TEXCOORD_1``)."""
    wrap_s: str = "repeat"
    """Addressing along u: ``repeat``, ``clamp`` or ``mirror``."""
    wrap_t: str = "repeat"
    """Addressing along v: ``repeat``, ``clamp`` or ``mirror``."""
    name: str = ""
    """The image's uri or name in the source file (used in messages and as the written file's stem)."""


@dataclass(eq=False)
class Material:
    """A glTF metal/rough material; texture values multiply the factors, as the spec says."""

    name: str = "material"
    """Material name."""
    base_color_factor: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    """Linear RGBA multiplier of the base colour."""
    base_color_texture: TextureRef | None = None
    """sRGB base colour (RGB) and linear alpha."""
    metallic_factor: float = 1.0
    """Multiplier of the texture's blue channel."""
    roughness_factor: float = 1.0
    """Multiplier of the texture's green channel (perceptual roughness)."""
    metallic_roughness_texture: TextureRef | None = None
    """Linear texture: G roughness, B metallic."""
    normal_texture: TextureRef | None = None
    """Tangent-space normal map (OpenGL convention, linear)."""
    normal_scale: float = 1.0
    """Scale of the normal map's x and y."""
    occlusion_texture: TextureRef | None = None
    """Ambient occlusion in R (linear); applies to the environment light only."""
    occlusion_strength: float = 1.0
    """``1 + strength (ao - 1)``."""
    emissive_factor: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Linear RGB emitted radiance multiplier."""
    emissive_texture: TextureRef | None = None
    """sRGB emissive colour."""
    alpha_mode: str = "OPAQUE"
    """``OPAQUE``, ``MASK`` or ``BLEND``. The renderer draws every surface opaque, so the bakes refuse a material
    whose alpha would cut out or blend (:func:`check_opaque`)."""
    alpha_cutoff: float = 0.5
    """Threshold of the ``MASK`` mode."""
    ior: float = 1.5
    """``KHR_materials_ior``: the dielectric's index of refraction (its Fresnel reflectance; 1.5 without the extension)."""
    specular: float = 1.0
    """``KHR_materials_specular``'s ``specularFactor``: scales the dielectric's reflectance (1 without the extension)."""
    specular_color: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """``KHR_materials_specular``'s ``specularColorFactor``: tints its normal-incidence reflectance (linear RGB)."""
    iridescence: float = 0.0
    """``KHR_materials_iridescence``'s ``iridescenceFactor``: how much a thin film's colours replace the Fresnel (0: none)."""
    iridescence_ior: float = 1.3
    """The film's index (``iridescenceIor``)."""
    iridescence_thickness: tuple[float, float] = (100.0, 400.0)
    """``iridescenceThicknessMinimum`` and ``Maximum`` in nanometres; without a thickness texture the film is the maximum thick."""
    clearcoat: float = 0.0
    """``KHR_materials_clearcoat``'s ``clearcoatFactor``: a clear varnish layer's weight (0: none)."""
    clearcoat_roughness: float = 0.0
    """Its ``clearcoatRoughnessFactor``."""
    sheen_color: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """``KHR_materials_sheen``'s ``sheenColorFactor`` (linear RGB; black: no sheen)."""
    sheen_roughness: float = 0.0
    """Its ``sheenRoughnessFactor``."""
    double_sided: bool = False
    """Back faces are shaded with the flipped normal when true."""
    unlit: bool = False
    """``KHR_materials_unlit``: the base colour is the output radiance."""
    unshaded_extensions: tuple[str, ...] = ()
    """The material's extensions that change its look and that the renderer does not shade (``KHR_materials_clearcoat``,
    ``KHR_materials_transmission``...; :data:`~neuralbake.io.gltf.reader.UNSHADED_MATERIAL_EXTENSIONS`): the bakes refuse
    it (:func:`check_opaque`) rather than bake it without them."""

    def textures(self) -> dict[str, TextureRef]:
        """The bound texture slots by field name (``base_color_texture``, ...)."""
        slots = ("base_color_texture", "metallic_roughness_texture", "normal_texture", "occlusion_texture", "emissive_texture")
        return {s: getattr(self, s) for s in slots if getattr(self, s) is not None}


@dataclass(eq=False)
class Mesh:
    """One triangle primitive in world space. Attributes are per vertex; ``None`` when absent."""

    positions: np.ndarray
    """float32 ``[V, 3]`` world positions."""
    indices: np.ndarray
    """int64 ``[F, 3]`` vertex indices, counter-clockwise front faces."""
    normals: np.ndarray | None = None
    """float32 ``[V, 3]`` unit world normals."""
    tangents: np.ndarray | None = None
    """float32 ``[V, 4]``: unit world tangent (along +u) and handedness ``w`` (bitangent = ``w n x t``)."""
    uv0: np.ndarray | None = None
    """float32 ``[V, 2]`` ``TEXCOORD_0`` (origin top left, v down)."""
    uv1: np.ndarray | None = None
    """float32 ``[V, 2]`` ``TEXCOORD_1`` (lightmap / bake layout)."""
    colors: np.ndarray | None = None
    """float32 ``[V, 4]`` linear ``COLOR_0`` (alpha 1 when the file has RGB)."""
    material: int = 0
    """Index into :attr:`Scene.materials`."""
    name: str = "mesh"
    """``mesh name/primitive index`` of the source, for messages."""
    joints: np.ndarray | None = None
    """uint16 ``[V, 4]`` ``JOINTS_0``: indices into the skin's joints."""
    weights: np.ndarray | None = None
    """float32 ``[V, 4]`` ``WEIGHTS_0``: the weights of :attr:`joints` (summing to about 1)."""
    skin: int | None = None
    """Index into :attr:`Scene.rig`'s skins when the mesh is skinned. As read, its :attr:`positions`,
    :attr:`normals` and :attr:`tangents` are the bind pose (the file's attributes); the render's
    :func:`~neuralbake.render.skinning.pose_scene` replaces them by a posed copy (the rest pose,
    what a viewer shows without animation, or any frame), and the ``bind_*`` attributes keep what
    skinning starts from."""
    bind_positions: np.ndarray | None = None
    """float32 ``[V, 3]`` bind-pose positions (the file's POSITION) of a skinned mesh."""
    bind_normals: np.ndarray | None = None
    """float32 ``[V, 3]`` bind-pose normals of a skinned mesh."""
    bind_tangents: np.ndarray | None = None
    """float32 ``[V, 4]`` bind-pose tangents of a skinned mesh."""

    @property
    def num_triangles(self) -> int:
        """``F``."""
        return int(self.indices.shape[0])


@dataclass(eq=False)
class Scene:
    """Meshes in world space and the materials they index."""

    meshes: list[Mesh] = field(default_factory=list)
    """Every triangle primitive of every node of the scene."""
    materials: list[Material] = field(default_factory=list)
    """Materials; a primitive without one gets the glTF default material appended here."""
    source: str | None = None
    """The file it was read from, if any."""
    rig: Rig | None = None
    """Nodes, skins and animation clips (``None`` for a file with neither skins nor animations);
    :func:`neuralbake.render.skinning.pose_scene` poses the skinned meshes at any frame."""

    @property
    def num_triangles(self) -> int:
        """Triangles over all meshes."""
        return sum(m.num_triangles for m in self.meshes)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """World-space axis-aligned box ``(min [3], max [3])`` of all positions."""
        if not self.meshes:
            raise InputError("the scene has no meshes.", path=self.source, field="meshes", fix="add a mesh.")
        points = np.concatenate([m.positions for m in self.meshes])
        return points.min(axis=0), points.max(axis=0)


OPAQUE_ALPHA = 254.5 / 255.0
"""A ``BLEND`` material whose alpha nowhere falls below this (the 8-bit code 255) draws as opaque."""


def lowest_alpha(material: Material, meshes: list[Mesh] = ()) -> float:
    """The lowest alpha ``material`` can give a pixel: its factor's alpha times the lowest of its base colour texture's
    alpha (every texel, as the uv layout is not consulted) and of ``meshes``' ``COLOR_0`` alpha."""
    alpha = float(material.base_color_factor[3])
    texture = material.base_color_texture
    if texture is not None and texture.image.shape[-1] == 4:
        alpha *= float(texture.image[..., 3].min())
    colours = [float(m.colors[:, 3].min()) for m in meshes if m.colors is not None and m.colors.shape[-1] == 4 and len(m.colors)]
    return alpha * min(colours, default=1.0)


def see_through(material: Material, meshes: list[Mesh] = ()) -> float | None:
    """The lowest alpha of a material that would cut out (``MASK`` under its cutoff) or blend (``BLEND`` under 1) where
    ``meshes`` use it (:func:`lowest_alpha`); None when it draws opaque."""
    if material.alpha_mode == "OPAQUE":
        return None
    lowest = lowest_alpha(material, meshes)
    return lowest if lowest < (material.alpha_cutoff if material.alpha_mode == "MASK" else OPAQUE_ALPHA) else None


def see_through_materials(scene: Scene) -> dict[int, str]:
    """The materials of ``scene`` that let light through where its meshes use them (:func:`see_through`): index ->
    alphaMode. A MASK or BLEND material whose alpha never falls that low, or that no mesh uses, is left out."""
    out = {}
    for index, material in enumerate(scene.materials):
        users = [m for m in scene.meshes if m.material == index]
        if users and see_through(material, users) is not None:
            out[index] = material.alpha_mode
    return out


def check_opaque(scene: Scene, *, path: str | Path | None = None, field: str = "asset", alpha: bool = True,
                 why: str = "neuralbake renders every surface opaque and would bake the see-through parts solid",
                 fix: str = "bake an asset without see-through materials, or set that material's alphaMode to OPAQUE if its "
                            "transparent parts may be baked solid.") -> None:
    """Refuse a scene with a material whose alpha cuts out (``MASK`` below its cutoff) or blends (``BLEND`` below 1), or
    whose look depends on an extension the renderer does not shade (:attr:`Material.unshaded_extensions`).

    The bakes render every surface opaque: such a material would be baked solid where it is see-through, with no word
    said. A ``MASK`` or ``BLEND`` material whose alpha never falls that low draws as opaque and passes. The error names
    the material, its mode and the lowest alpha found, and the fix. ``alpha=False``: check the extensions only (work
    that composites see-through materials); ``why`` and ``fix``: the refusal's reason and remedy (a bake that keeps
    alpha in some settings names the setting that cannot).
    """
    for index, material in enumerate(scene.materials):
        users = [m for m in scene.meshes if m.material == index]
        if not users:
            continue
        if material.unshaded_extensions:
            names = ", ".join(material.unshaded_extensions)
            raise InputError(
                f"material {index} ({material.name!r}) uses {names}, which neuralbake's renderer does not shade; the bake "
                "would capture the material without it.",
                path=path or scene.source,
                field=f"{field}: materials[{index}].extensions",
                fix="bake an asset without those extensions, or remove them from the material if its look may be baked without them.",
            )
        lowest = see_through(material, users) if alpha else None
        if lowest is None:
            continue
        what = (f"cuts out where its alpha is below {material.alpha_cutoff:g}" if material.alpha_mode == "MASK"
                else "blends with what lies behind it")
        raise InputError(
            f"material {index} ({material.name!r}) has alphaMode {material.alpha_mode} and {what} (its alpha reaches "
            f"{lowest:.3f}); {why}.",
            path=path or scene.source,
            field=f"{field}: materials[{index}].alphaMode",
            fix=fix,
        )
