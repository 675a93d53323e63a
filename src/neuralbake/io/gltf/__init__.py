"""glTF 2.0 scenes in and out: meshes flattened to world space, metal/rough PBR materials and
their texture images, skins and animation clips, as plain numpy dataclasses that the renderer and
the fitting bakes share.

The package is split by concern: :mod:`~neuralbake.io.gltf.model` (the dataclasses),
:mod:`~neuralbake.io.gltf.validate` (container and structure checks before any array is read),
:mod:`~neuralbake.io.gltf.document` (one checked file: buffers, accessors, images),
:mod:`~neuralbake.io.gltf.draco` (``KHR_draco_mesh_compression``),
:mod:`~neuralbake.io.gltf.geometry` (generated normals and tangents, degenerate triangles),
:mod:`~neuralbake.io.gltf.rig` (skeletons, skins, clips and their joint matrices at any time),
:mod:`~neuralbake.io.gltf.reader` (:func:`load_gltf`) and :mod:`~neuralbake.io.gltf.writer`
(:func:`write_gltf`). The names below are the package's API; import them from here.
"""

from neuralbake.io.gltf.geometry import generate_normals, generate_tangents
from neuralbake.io.gltf.model import Material, Mesh, Scene, TextureRef, check_opaque
from neuralbake.io.gltf.reader import DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_TRIANGLES, load_bake_input, load_gltf, load_gltf_materials
from neuralbake.io.gltf.rig import Clip, Rig, Skin
from neuralbake.io.gltf.writer import write_gltf

__all__ = [
    "load_bake_input",
    "DEFAULT_MAX_JSON_BYTES",
    "DEFAULT_MAX_TRIANGLES",
    "Clip",
    "Material",
    "Mesh",
    "Rig",
    "Scene",
    "Skin",
    "TextureRef",
    "check_opaque",
    "generate_normals",
    "generate_tangents",
    "load_gltf",
    "load_gltf_materials",
    "write_gltf",
]
