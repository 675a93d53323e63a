"""glTF 2.0 files in: :func:`load_gltf` reads a ``.gltf`` or ``.glb`` into a world-space
:class:`~neuralbake.io.gltf.model.Scene`, :func:`load_gltf_materials` only its materials.

Reading is defensive, because glTF files arrive from anywhere: the file is opened as a
:class:`~neuralbake.io.gltf.document.GltfDocument` (container, JSON size and depth, and every
index, offset, length, stride and count checked before any array is read), so a damaged or
hostile file fails with an :class:`~neuralbake.errors.InputError` naming the glTF field
(``accessors[3].bufferView``), never a traceback or a hang. ``KHR_draco_mesh_compression``
primitives are decoded with DracoPy (:mod:`neuralbake.io.gltf.draco`), keeping every attribute
(Draco reorders the vertices). Every node's mesh is placed in world space (node transforms
multiplied down the hierarchy; normals by the inverse transpose, or by the cofactor matrix under a
singular transform such as the zero scale that hides a node, tangents by the linear part, triangle
winding flipped under mirroring transforms), and every primitive becomes one
:class:`~neuralbake.io.gltf.model.Mesh` holding its own material index. A skinned primitive (its
node has a skin, it has ``JOINTS_0`` and ``WEIGHTS_0``) keeps its file attributes as the bind pose
and is placed by its joints instead (the spec ignores the skinned node's own transform): it is
read in its bind pose, and the file's skins and clips are read into ``Scene.rig``
(:mod:`neuralbake.io.gltf.rig`) so that the caller poses it with
:func:`neuralbake.render.skinning.pose_scene` (the rest pose, or any frame).

What cannot be used is refused with an :class:`~neuralbake.errors.InputError` that names the file,
the glTF field and the fix: meshopt compressed meshes and KTX2/WebP textures (convert them
first), point and line primitives, sparse accessors, missing buffer or image files and references
outside the glTF's folder, textures whose texture coordinate set is absent, non-finite positions,
uvs, colours or weights, and scenes with more triangles (or more than three vertices per triangle
of the budget) than the budget. Softer problems are
repaired with a warning: missing normals are generated (smooth by default), non-finite normals are
replaced by generated smooth ones and non-finite tangents regenerated, missing tangents of
normal-mapped primitives are generated from the uv layout (Lengyel's per-triangle method, not
MikkTSpace, so seams of generated tangents can differ slightly from an engine's), and degenerate
triangles (repeated indices or zero area) are dropped and counted; the maths for that is in
:mod:`neuralbake.io.gltf.geometry`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from neuralbake.errors import InputError
from neuralbake.io.gltf.document import COMPONENT_DTYPES, GltfDocument
from neuralbake.io.gltf.draco import AccessorSpec, decode_draco_primitive
from neuralbake.io.gltf.extensions import read_ior, read_shaded_factors
from neuralbake.io.gltf.geometry import cofactor, drop_degenerate_triangles, generate_normals, generate_tangents, normalize
from neuralbake.io.gltf.model import WRAP_CODES, Material, Mesh, Scene, TextureRef, check_opaque
from neuralbake.io.gltf.rig import read_rig
from neuralbake.io.gltf.validate import MAX_ACCESSOR_COUNT, TYPE_WIDTHS
from neuralbake.io.limits import MAX_JSON_BYTES

__all__ = ["DEFAULT_MAX_JSON_BYTES", "DEFAULT_MAX_TRIANGLES", "UNSHADED_MATERIAL_EXTENSIONS", "load_gltf", "load_gltf_materials"]

DEFAULT_MAX_TRIANGLES = 20_000_000
"""Triangle budget of :func:`load_gltf` (about 1.5 GB of float32 vertex data and BVH on the GPU)."""

DEFAULT_MAX_JSON_BYTES = MAX_JSON_BYTES
"""Largest glTF JSON text (a ``.gltf`` file or a ``.glb``'s JSON chunk) that :func:`load_gltf` parses."""

_UNSUPPORTED_EXTENSIONS = {
    "EXT_meshopt_compression": "decompress it first, e.g. `npx @gltf-transform/cli copy in.glb out.glb`",
    "KHR_meshopt_compression": "decompress it first, e.g. `npx @gltf-transform/cli copy in.glb out.glb`",
    "KHR_texture_basisu": "convert the KTX2 textures to PNG, e.g. `npx @gltf-transform/cli png in.glb out.glb`",
    "EXT_texture_webp": "convert the WebP textures to PNG, e.g. `npx @gltf-transform/cli png in.glb out.glb`",
}
UNSHADED_MATERIAL_EXTENSIONS = (
    "KHR_materials_anisotropy",
    "KHR_materials_clearcoat",
    "KHR_materials_diffuse_transmission",
    "KHR_materials_dispersion",
    "KHR_materials_iridescence",
    "KHR_materials_pbrSpecularGlossiness",
    "KHR_materials_sheen",
    "KHR_materials_specular",
    "KHR_materials_transmission",
    "KHR_materials_volume",
)
"""Material extensions that change a material's look and that the renderer does not shade: read, recorded on the
material (:attr:`~neuralbake.io.gltf.model.Material.unshaded_extensions`) and refused by the bakes."""
_KNOWN_EXTENSIONS = {"KHR_materials_unlit", "KHR_mesh_quantization", "KHR_materials_emissive_strength", "KHR_materials_ior", "KHR_draco_mesh_compression"}
_TRIANGLES = 4


def _local_matrix(node: object) -> np.ndarray:
    if node.matrix is not None:
        return np.asarray(node.matrix, dtype=np.float64).reshape(4, 4).T  # stored column-major
    t = np.asarray(node.translation or (0.0, 0.0, 0.0), dtype=np.float64)
    x, y, z, w = np.asarray(node.rotation or (0.0, 0.0, 0.0, 1.0), dtype=np.float64)
    s = np.asarray(node.scale or (1.0, 1.0, 1.0), dtype=np.float64)
    rot = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    m = np.eye(4)
    m[:3, :3] = rot * s[None, :]
    m[:3, 3] = t
    return m


def _texture_ref(reader: GltfDocument, info: object | None, field: str, material: str, cache: dict[int, np.ndarray]) -> TextureRef | None:
    if info is None or info.index is None:
        return None
    gltf = reader.gltf
    tex = gltf.textures[info.index]
    ext = tex.extensions or {}
    source = tex.source
    if source is None:
        names = ", ".join(sorted(ext)) or "none"
        raise reader.fail(
            f"texture {info.index} of material {material!r} has no PNG/JPEG source (extensions: {names}).",
            f"textures[{info.index}].source",
            "convert the textures to PNG, e.g. `npx @gltf-transform/cli png in.glb out.glb`.",
        )
    if source not in cache:
        cache[source] = reader.image(source, field, material)
    wrap_s = wrap_t = "repeat"
    if tex.sampler is not None:
        sampler = gltf.samplers[tex.sampler]
        wrap_s = WRAP_CODES.get(sampler.wrapS or 10497, "repeat")
        wrap_t = WRAP_CODES.get(sampler.wrapT or 10497, "repeat")
    if (info.extensions or {}).get("KHR_texture_transform"):
        warnings.warn(f"{reader.path}: material {material!r} {field} uses KHR_texture_transform, which is ignored.", stacklevel=4)
    image = gltf.images[source]
    name = image.uri if image.uri and not image.uri.startswith("data:") else (image.name or f"image{source}")
    return TextureRef(cache[source], int(info.texCoord or 0), wrap_s, wrap_t, name)


def _read_materials(reader: GltfDocument) -> list[Material]:
    out = []
    cache: dict[int, np.ndarray] = {}
    for i, m in enumerate(reader.gltf.materials):
        name = m.name or f"material{i}"
        pbr = m.pbrMetallicRoughness
        mat = Material(name=name)
        if pbr is not None:
            mat.base_color_factor = tuple(float(v) for v in (pbr.baseColorFactor or (1.0, 1.0, 1.0, 1.0)))
            mat.metallic_factor = float(1.0 if pbr.metallicFactor is None else pbr.metallicFactor)
            mat.roughness_factor = float(1.0 if pbr.roughnessFactor is None else pbr.roughnessFactor)
            mat.base_color_texture = _texture_ref(reader, pbr.baseColorTexture, "baseColorTexture", name, cache)
            mat.metallic_roughness_texture = _texture_ref(reader, pbr.metallicRoughnessTexture, "metallicRoughnessTexture", name, cache)
        mat.normal_texture = _texture_ref(reader, m.normalTexture, "normalTexture", name, cache)
        if m.normalTexture is not None and m.normalTexture.scale is not None:
            mat.normal_scale = float(m.normalTexture.scale)
        mat.occlusion_texture = _texture_ref(reader, m.occlusionTexture, "occlusionTexture", name, cache)
        if m.occlusionTexture is not None and m.occlusionTexture.strength is not None:
            mat.occlusion_strength = float(m.occlusionTexture.strength)
        mat.emissive_factor = tuple(float(v) for v in (m.emissiveFactor or (0.0, 0.0, 0.0)))
        strength = ((m.extensions or {}).get("KHR_materials_emissive_strength") or {}).get("emissiveStrength")
        if strength is not None:
            mat.emissive_factor = tuple(float(v) * float(strength) for v in mat.emissive_factor)
        mat.emissive_texture = _texture_ref(reader, m.emissiveTexture, "emissiveTexture", name, cache)
        mat.alpha_mode = m.alphaMode or "OPAQUE"
        mat.alpha_cutoff = float(0.5 if m.alphaCutoff is None else m.alphaCutoff)
        mat.double_sided = bool(m.doubleSided)
        mat.unlit = "KHR_materials_unlit" in (m.extensions or {})
        ior = ((m.extensions or {}).get("KHR_materials_ior") or {}).get("ior")
        if ior is not None:
            mat.ior = read_ior(reader.path, ior, i)
        mat.unshaded_extensions = tuple(e for e in UNSHADED_MATERIAL_EXTENSIONS if e in (m.extensions or {}))
        read_shaded_factors(reader.path, mat, m.extensions or {}, i)
        out.append(mat)
    return out


def _check_extensions(reader: GltfDocument) -> None:
    gltf = reader.gltf
    used = set(gltf.extensionsUsed or []) | set(gltf.extensionsRequired or [])
    for mesh in gltf.meshes:
        for prim in mesh.primitives:
            used |= set((prim.extensions or {}).keys())
    for name, fix in _UNSUPPORTED_EXTENSIONS.items():
        if name in (gltf.extensionsRequired or []) or (name in used and "compression" in name):
            raise reader.fail(
                f"the file uses the extension {name}, which neuralbake does not support.", f"extensionsUsed.{name}", fix + "."
            )
    for name in sorted(set(gltf.extensionsRequired or []) - _KNOWN_EXTENSIONS):
        raise reader.fail(
            f"the file requires the extension {name}, which neuralbake does not support.",
            "extensionsRequired",
            "re-export the asset without that extension.",
        )


def _scene_nodes(reader: GltfDocument) -> list[tuple[int, np.ndarray]]:
    """``(node index, world matrix)`` of every node with a mesh, depth first."""
    gltf = reader.gltf
    if gltf.scenes:
        roots = gltf.scenes[gltf.scene or 0].nodes or []
    else:
        children = {c for n in gltf.nodes for c in (n.children or [])}
        roots = [i for i in range(len(gltf.nodes)) if i not in children]
    out, stack, seen = [], [(r, np.eye(4)) for r in reversed(roots)], set()
    while stack:
        index, parent = stack.pop()
        if index in seen:
            raise reader.fail("the node hierarchy has a cycle.", f"nodes[{index}].children", "re-export the asset.")
        seen.add(index)
        node = gltf.nodes[index]
        world = parent @ _local_matrix(node)
        if node.mesh is not None:
            out.append((index, world))
        stack.extend((c, world) for c in reversed(node.children or []))
    return out


_VERTEX_ATTRIBUTES = ("POSITION", "NORMAL", "TANGENT", "TEXCOORD_0", "TEXCOORD_1", "COLOR_0", "JOINTS_0", "WEIGHTS_0")
_MUST_BE_FINITE = {
    "POSITION": "repair the mesh (e.g. Blender: Mesh > Clean Up > Delete Loose, Merge by Distance) and export it again",
    "TEXCOORD_0": "unwrap the mesh again and export it",
    "TEXCOORD_1": "unwrap the mesh again and export it",
    "COLOR_0": "repaint or remove the vertex colours and export again",
    "WEIGHTS_0": "re-weight the skin (e.g. Blender: Normalize All) and export again",
}


def _primitive_arrays(reader: GltfDocument, prim: object, where: str) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
    """Flat indices (``None`` when unindexed) and decoded vertex attributes of a plain or Draco primitive."""
    gltf = reader.gltf
    accessors = {name: getattr(prim.attributes, name, None) for name in _VERTEX_ATTRIBUTES}
    accessors = {name: index for name, index in accessors.items() if index is not None}
    draco = (prim.extensions or {}).get("KHR_draco_mesh_compression")
    arrays: dict[str, np.ndarray] = {}
    indices = None
    if draco is not None:
        field = f"{where}.extensions.KHR_draco_mesh_compression"
        ids = {name: int(uid) for name, uid in draco["attributes"].items() if name in _VERTEX_ATTRIBUTES}
        if "POSITION" not in ids:
            raise reader.fail("the Draco extension does not list POSITION.", f"{field}.attributes", "re-export the asset.")
        specs = {}
        for name in ids:
            acc = gltf.accessors[accessors[name]]
            specs[name] = AccessorSpec(
                np.dtype(COMPONENT_DTYPES[acc.componentType]), TYPE_WIDTHS[acc.type], bool(acc.normalized), acc.count
            )
        data, offset, _ = reader.buffer_view(draco["bufferView"])
        payload = data[offset : offset + gltf.bufferViews[draco["bufferView"]].byteLength]
        declared = gltf.accessors[prim.indices if prim.indices is not None else accessors["POSITION"]].count // 3
        faces, arrays = decode_draco_primitive(payload, ids, specs, path=reader.path, field=field, max_triangles=declared)
        indices = faces.reshape(-1)
    elif prim.indices is not None:
        indices = reader.accessor(prim.indices).reshape(-1).astype(np.int64)
    for name, index in accessors.items():
        if name not in arrays:  # uncompressed attributes (of a Draco primitive, those it does not list)
            arrays[name] = reader.accessor(index)
    if "POSITION" in arrays:
        count = len(arrays["POSITION"])
        for name, array in arrays.items():
            if len(array) != count:
                problem = f"{name} has {len(array):,} values but POSITION has {count:,}."
                raise reader.fail(problem, f"{where}.attributes.{name}", "re-export the mesh.")
    for name, fix in _MUST_BE_FINITE.items():
        array = arrays.get(name)
        if array is not None and np.issubdtype(array.dtype, np.floating):
            bad = int(np.count_nonzero(~np.isfinite(array)))
            if bad:
                raise reader.fail(
                    f"{name} has {bad:,} non-finite values (NaN or infinity), in accessors[{accessors[name]}].",
                    f"{where}.attributes.{name}",
                    fix + ".",
                )
    return indices, arrays


def _read_primitive(
    reader: GltfDocument, mesh_index: int, prim_index: int, world: np.ndarray, materials: list[Material], normals_mode: str
) -> Mesh | None:
    gltf = reader.gltf
    prim = gltf.meshes[mesh_index].primitives[prim_index]
    where = f"meshes[{mesh_index}].primitives[{prim_index}]"
    label = f"{gltf.meshes[mesh_index].name or f'mesh{mesh_index}'}/{prim_index}"
    mode = _TRIANGLES if prim.mode is None else prim.mode
    if mode != _TRIANGLES:
        kind = {0: "POINTS", 1: "LINES", 2: "LINE_LOOP", 3: "LINE_STRIP", 5: "TRIANGLE_STRIP", 6: "TRIANGLE_FAN"}.get(mode, str(mode))
        raise reader.fail(
            f"primitive mode {kind} is not supported; only TRIANGLES (4) is.",
            f"{where}.mode",
            "triangulate the mesh on export (e.g. `npx @gltf-transform/cli unweld`, or Blender's triangulate modifier).",
        )
    if getattr(prim.attributes, "POSITION", None) is None:
        raise reader.fail("the primitive has no POSITION attribute.", f"{where}.attributes", "re-export the mesh with positions.")
    flat, arrays = _primitive_arrays(reader, prim, where)
    positions = arrays["POSITION"].astype(np.float64)
    count = len(positions)
    if flat is None:
        indices = np.arange(count - count % 3, dtype=np.int64).reshape(-1, 3)
    else:
        if len(flat) % 3:
            raise reader.fail(f"{len(flat)} indices is not a multiple of 3.", f"{where}.indices", "re-export the mesh.")
        indices = flat.reshape(-1, 3)
    if len(indices) and (indices.min() < 0 or indices.max() >= count):
        raise reader.fail("an index points past the vertex arrays.", f"{where}.indices", "re-export the mesh.")
    material = len(materials) if prim.material is None else int(prim.material)
    if prim.material is None:
        materials.append(Material(name="default"))
    mat = materials[material]
    normals = arrays.get("NORMAL")
    tangents = arrays.get("TANGENT")
    uvs = [arrays.get(f"TEXCOORD_{k}") for k in (0, 1)]
    colors = arrays.get("COLOR_0")
    joints = arrays.get("JOINTS_0")
    weights = arrays.get("WEIGHTS_0")
    for slot, ref in mat.textures().items():
        if ref.texcoord > 1 or uvs[ref.texcoord] is None:
            raise reader.fail(
                f"material {mat.name!r} reads {slot} with TEXCOORD_{ref.texcoord}, but primitive {label} has no such uv set.",
                f"{where}.attributes.TEXCOORD_{ref.texcoord}",
                f"unwrap the mesh (add TEXCOORD_{ref.texcoord}) or remove the texture from the material.",
            )
    # World space: positions by the full matrix, normals by the inverse transpose, tangents by the linear part.
    linear = world[:3, :3]
    with np.errstate(over="ignore", invalid="ignore"):
        positions = positions @ linear.T + world[:3, 3]
    if not np.isfinite(positions).all():
        raise reader.fail(
            "the node transforms carry POSITION outside the finite float range.",
            f"{where}.attributes.POSITION",
            "apply sane transforms (e.g. Blender: Apply > All Transforms) and export again.",
        )
    det = float(np.linalg.det(linear))
    mirrored = det < 0.0
    # A zero scale is legal glTF (it hides a node): the linear part is then singular and has no
    # inverse. Normals go by the cofactor matrix instead (det M * M^-T, defined for every M, and
    # (Ma) x (Mb) = cof(M) (a x b), so it matches the transformed faces); triangles collapsed to
    # lines or points are dropped below as degenerate.
    biggest = float(np.abs(linear).max(initial=0.0))
    singular = not (biggest > 0.0 and abs(float(np.linalg.det(linear / biggest))) > 1e-14)  # scale-free, no overflow
    if mirrored:
        indices = indices[:, [0, 2, 1]]
    indices, dropped = drop_degenerate_triangles(positions, indices)
    if dropped:
        warnings.warn(f"{reader.path}: {label}: dropped {dropped} degenerate triangle(s) (repeated vertices or zero area).", stacklevel=3)
    if not len(indices):
        warnings.warn(f"{reader.path}: {label}: no triangles left; the primitive is skipped.", stacklevel=3)
        return None
    if normals is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            if singular:
                cof = cofactor(linear) * (-1.0 if mirrored else 1.0)  # the sign keeps normals with the (flipped) winding
                normals = normals.astype(np.float64) @ (cof / max(float(np.abs(cof).max()), 1e-300)).T
            else:
                normals = normals.astype(np.float64) @ np.linalg.inv(linear)  # (M^-T n^T)^T
            length = np.linalg.norm(normals, axis=1)
            normals = normalize(normals)
        bad = ~np.isfinite(normals).all(axis=1)
        if bad.any():  # a NaN normal would poison every bake texel it touches; the geometry knows better
            warnings.warn(
                f"{reader.path}: {label}: {int(bad.sum())} non-finite normal(s) (NaN or infinity); replacing them with smooth normals.",
                stacklevel=3,
            )
        lost = ~bad & ~(length > 1e-12) if singular else np.zeros_like(bad)
        if lost.any():  # normals along the squashed direction of a zero scale have no image
            warnings.warn(
                f"{reader.path}: {label}: {int(lost.sum())} normal(s) vanish under the node's zero-scale (singular) "
                "transform; replacing them with smooth normals.",
                stacklevel=3,
            )
        if bad.any() or lost.any():
            normals[bad | lost] = generate_normals(positions, indices, mode="smooth")[0][bad | lost]
    if tangents is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            t = tangents[:, :3].astype(np.float64) @ linear.T
            flattened = singular and not (np.linalg.norm(t, axis=1) > 1e-12 * biggest).all()
            t = normalize(t)
        if not np.isfinite(t).all() or not np.isfinite(tangents[:, 3]).all():
            warnings.warn(f"{reader.path}: {label}: non-finite tangents (NaN or infinity); they are dropped.", stacklevel=3)
            tangents = None
        elif flattened:
            warnings.warn(
                f"{reader.path}: {label}: tangents vanish under the node's zero-scale (singular) transform; they are dropped.",
                stacklevel=3,
            )
            tangents = None
        else:
            w = np.where(tangents[:, 3:4] < 0.0, -1.0, 1.0) * (-1.0 if mirrored else 1.0)
            tangents = np.concatenate([t, w], axis=1)
    if colors is not None and colors.shape[1] == 3:
        colors = np.concatenate([colors, np.ones((len(colors), 1), dtype=colors.dtype)], axis=1)
    if normals is None:
        warnings.warn(f"{reader.path}: {label} has no normals; generating {normals_mode} normals.", stacklevel=3)
        normals, new_indices = generate_normals(positions, indices, mode=normals_mode)
        if normals_mode == "flat":  # unweld every per-vertex attribute to match
            order = indices.reshape(-1)
            positions = positions[order]
            uvs = [None if uv is None else uv[order] for uv in uvs]
            colors, tangents, joints, weights = (None if a is None else a[order] for a in (colors, tangents, joints, weights))
            indices = new_indices
    if tangents is None and mat.normal_texture is not None:
        warnings.warn(f"{reader.path}: {label} has a normal map but no tangents; generating them from the uv layout.", stacklevel=3)
        tangents = generate_tangents(positions, normals, uvs[mat.normal_texture.texcoord], indices)
    as32 = lambda a: None if a is None else np.ascontiguousarray(a, dtype=np.float32)
    return Mesh(
        as32(positions),
        np.ascontiguousarray(indices, dtype=np.int64),
        as32(normals),
        as32(tangents),
        as32(uvs[0]),
        as32(uvs[1]),
        as32(colors),
        material,
        label,
        joints=None if joints is None else np.ascontiguousarray(joints, dtype=np.uint16),
        weights=as32(weights),
    )


def load_gltf_materials(path: str | Path, *, max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> list[Material]:
    """Read only the materials (with their decoded texture images) of a ``.gltf`` or ``.glb``.

    The same validation and confinement as :func:`load_gltf`; meshes are not decoded, so a
    texture-only use (neural texture compression of a material's maps) does not pay for them.

    Raises
    ------
    InputError
        As :func:`load_gltf`, for the document and the texture images.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("the glTF file does not exist.", path=path, fix="check the path (a .gltf or .glb file).")
    reader = GltfDocument(path, max_json_bytes)
    _check_extensions(reader)
    return _read_materials(reader)


def load_gltf(
    path: str | Path,
    *,
    max_triangles: int = DEFAULT_MAX_TRIANGLES,
    generate_normals_mode: str = "smooth",
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
) -> Scene:
    """Read a ``.gltf`` or ``.glb`` file into a world-space :class:`Scene`.

    Skinned meshes come in their bind pose: posing is skinning, which belongs to the render
    (:func:`neuralbake.render.skinning.pose_scene`), so a caller that shows or fits the scene as a
    viewer would poses it (``pose_scene(load_gltf(path))`` is the rest pose).

    Parameters
    ----------
    path:
        The glTF file; external buffers and images are resolved beside it, and only inside its
        folder (unless :func:`neuralbake.io.refs.allow_outside_refs` is in force).
    max_triangles:
        Budget: a scene with more triangles (after instancing), or more than three vertices per
        triangle of the budget, is refused before its attributes are decoded. Every accessor's
        count is capped at ``3 * max_triangles`` (at least
        :data:`~neuralbake.io.gltf.validate.MAX_ACCESSOR_COUNT`).
    generate_normals_mode:
        ``smooth`` or ``flat``, used for primitives without normals (with a warning).
    max_json_bytes:
        Largest JSON text parsed (the ``.gltf`` file, or the ``.glb``'s JSON chunk); a ``.gltf``
        with large embedded data URIs may need more.

    Raises
    ------
    InputError
        Unreadable or damaged file (GLB header, JSON size or depth, any index, offset, length or
        stride out of range), unsupported extensions (meshopt, KTX2, WebP), a corrupt Draco
        payload, non-triangle primitives, missing buffer or image files or ones outside the
        glTF's folder, non-finite positions, uvs, colours or weights, textures without their uv
        set, too many triangles.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("the glTF file does not exist.", path=path, fix="check the path (a .gltf or .glb file).")
    reader = GltfDocument(path, max_json_bytes, max(3 * max_triangles, MAX_ACCESSOR_COUNT))
    _check_extensions(reader)
    nodes = _scene_nodes(reader)
    total = vertices = 0
    for index, _ in nodes:
        for prim in reader.gltf.meshes[reader.gltf.nodes[index].mesh].primitives:
            position = getattr(prim.attributes, "POSITION", None)
            count = 0 if position is None else reader.gltf.accessors[position].count
            vertices += count  # decoded (and kept) whatever the indices say: an unreferenced vertex costs memory too
            if prim.indices is not None:
                total += reader.gltf.accessors[prim.indices].count // 3
            else:  # non-indexed: every three vertices are one triangle
                total += count // 3
    fix = "simplify the mesh first, or raise max_triangles if the machine has the memory (about 80 bytes per triangle)."
    if total > max_triangles:
        problem = f"the scene has {total:,} triangles, over the budget of {max_triangles:,}."
        raise InputError(problem, path=path, field="max_triangles", fix=fix)
    if vertices > 3 * max_triangles:
        problem = f"the scene has {vertices:,} vertices, over the budget of {3 * max_triangles:,} (three per triangle of max_triangles)."
        raise InputError(problem, path=path, field="max_triangles", fix=fix)
    materials = _read_materials(reader)
    rig = read_rig(reader)
    scene = Scene(materials=materials, source=str(path), rig=rig)
    for index, world in nodes:
        node = reader.gltf.nodes[index]
        skin = node.skin if rig is not None and node.skin is not None else None
        if skin is not None and not 0 <= skin < len(rig.skins):
            raise reader.fail(f"the node uses skin {skin}, which does not exist.", f"nodes[{index}].skin", "re-export the rig.")
        for prim_index, prim in enumerate(reader.gltf.meshes[node.mesh].primitives):
            # A skinned mesh lives in its bind space; its node's transform plays no part (glTF spec).
            # (A skinned node's primitive without JOINTS_0 and WEIGHTS_0 follows the node.)
            skinned = skin is not None and all(getattr(prim.attributes, name, None) is not None for name in ("JOINTS_0", "WEIGHTS_0"))
            mesh = _read_primitive(reader, node.mesh, prim_index, np.eye(4) if skinned else world, materials, generate_normals_mode)
            if mesh is None:
                continue
            if skinned:
                _bind(reader, mesh, skin, len(rig.skins[skin].joints), f"meshes[{node.mesh}].primitives[{prim_index}].attributes.JOINTS_0")
            scene.meshes.append(mesh)
    if not scene.meshes:
        raise InputError("the scene has no triangle meshes.", path=path, field="scenes", fix="export a scene with at least one mesh.")
    return scene


def _bind(reader: GltfDocument, mesh: Mesh, skin: int, joints: int, field: str) -> None:
    """Make ``mesh`` a skinned mesh of ``skin``: its attributes become the bind pose."""
    assert mesh.joints is not None
    used = mesh.weights > 0
    if used.any() and int(mesh.joints[used].max()) >= joints:
        raise reader.fail(
            f"JOINTS_0 uses joint {int(mesh.joints[used].max())}, but the skin has {joints} joints.", field, "re-export the skin."
        )
    mesh.joints = np.where(used, mesh.joints, 0).astype(np.uint16)  # unused slots may hold any index
    mesh.skin = skin
    mesh.bind_positions = mesh.positions.copy()
    mesh.bind_normals = None if mesh.normals is None else mesh.normals.copy()
    mesh.bind_tangents = None if mesh.tangents is None else mesh.tangents.copy()


def load_bake_input(
    path: str | Path, *, field: str = "asset", max_triangles: int = DEFAULT_MAX_TRIANGLES, problem: str | None = None, fix: str = "pass a .gltf or .glb file.",
    see_through: bool = False,
) -> Scene:
    """:func:`load_gltf` for a bake's input: a missing file is an :class:`InputError` naming ``field``
    (``problem``: its message, default "the <field> does not exist."); the reader's repair warnings
    (generated normals or tangents, dropped degenerate triangles) are silenced, as they do not stop a bake; a
    material that would cut out or blend is refused (:func:`~neuralbake.io.gltf.model.check_opaque`: the bakes draw
    their results opaque) unless ``see_through`` (work that composites such materials); a material whose look depends on
    an extension the renderer does not shade is refused either way."""
    import warnings

    path = Path(path)
    if not path.is_file():
        raise InputError(problem or f"the {field} does not exist.", path=path, field=field, fix=fix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = load_gltf(path, max_triangles=max_triangles)
    check_opaque(scene, path=path, field=field, alpha=not see_through)
    return scene
