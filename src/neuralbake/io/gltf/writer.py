"""glTF 2.0 files out: :func:`write_gltf` writes a :class:`~neuralbake.io.gltf.model.Scene` as
``name.gltf`` + ``name.bin`` + PNG textures beside it (or one ``name.glb`` holding them all), with positions, normals, tangents, uv0,
uv1, ``COLOR_0`` and indices as float32 / uint32 accessors, and materials including
``KHR_materials_unlit``. A scene with skinned meshes is written with its rig: every node of the
source (same indices), the skins with their inverse bind matrices, the skinned meshes in their
bind pose with ``JOINTS_0`` / ``WEIGHTS_0``, and the animation clips, so it plays as the source did. Textures are 8-bit PNGs by default (16-bit on request), so a write
followed by :func:`~neuralbake.io.gltf.load_gltf` returns exactly what was written whenever the
texels are multiples of 1/255 (1/65535). Every file is written atomically and the ``.gltf`` last,
so a crash never leaves a ``.gltf`` that points at missing data.
"""

from __future__ import annotations

import re
import struct
import tempfile
import warnings
from pathlib import Path

import numpy as np

from neuralbake.errors import InputError
from neuralbake.io.files import atomic_write_bytes, atomic_write_text
from neuralbake.io.gltf.model import WRAP_CODES, Mesh, Scene, TextureRef
from neuralbake.io.gltf.rig import Rig
from neuralbake.io.images import save_png

__all__ = ["write_gltf"]

_WRAP_NAMES = {v: k for k, v in WRAP_CODES.items()}


def _safe_stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(text).stem).strip("._") or "texture"


class _BinWriter:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.length = 0
        self.views: list[dict] = []
        self.accessors: list[dict] = []

    def add_bytes(self, data: bytes) -> int:
        """A buffer view holding ``data`` (an embedded image); returns the view's index."""
        pad = (-self.length) % 4
        if pad:
            self.chunks.append(b"\0" * pad)
            self.length += pad
        self.views.append({"buffer": 0, "byteOffset": self.length, "byteLength": len(data)})
        self.chunks.append(data)
        self.length += len(data)
        return len(self.views) - 1

    def add(self, array: np.ndarray, kind: str, *, target: int | None, minmax: bool = False) -> int:
        data = np.ascontiguousarray(array).tobytes()
        pad = (-self.length) % 4
        if pad:
            self.chunks.append(b"\0" * pad)
            self.length += pad
        view = {"buffer": 0, "byteOffset": self.length, "byteLength": len(data)}
        if target is not None:
            view["target"] = target
        self.views.append(view)
        self.chunks.append(data)
        self.length += len(data)
        component = {np.dtype(np.uint32): 5125, np.dtype(np.uint16): 5123}.get(array.dtype, 5126)
        acc = {"bufferView": len(self.views) - 1, "componentType": component, "count": int(array.shape[0]), "type": kind}
        if minmax:
            acc["min"] = [float(v) for v in array.reshape(array.shape[0], -1).min(axis=0)]
            acc["max"] = [float(v) for v in array.reshape(array.shape[0], -1).max(axis=0)]
        self.accessors.append(acc)
        return len(self.accessors) - 1


def _check_mesh_for_writing(mesh: Mesh, index: int, n_materials: int) -> None:
    v = len(mesh.positions)
    for name, width in (("normals", 3), ("tangents", 4), ("uv0", 2), ("uv1", 2), ("colors", 4)):
        a = getattr(mesh, name)
        if a is not None and (a.ndim != 2 or a.shape != (v, width)):
            raise InputError(
                f"mesh {mesh.name!r} has {name} of shape {a.shape}, expected ({v}, {width}).",
                field=f"meshes[{index}].{name}",
                fix="pass one value per vertex.",
            )
    if mesh.indices.ndim != 2 or mesh.indices.shape[1] != 3 or (len(mesh.indices) and (mesh.indices.min() < 0 or mesh.indices.max() >= v)):
        raise InputError(f"mesh {mesh.name!r} has invalid indices.", field=f"meshes[{index}].indices", fix="pass [F, 3] indices < V.")
    if not 0 <= mesh.material < n_materials:
        raise InputError(
            f"mesh {mesh.name!r} uses material {mesh.material}, but there are {n_materials}.",
            field=f"meshes[{index}].material",
            fix="add the material.",
        )


def _rig_nodes(rig: Rig) -> tuple[list[dict], list[int]]:
    """The rig's nodes (same indices, so skins and channels keep theirs) and its roots."""
    nodes: list[dict] = []
    for i, node in enumerate(rig.nodes):
        entry: dict = {"name": node.name}
        if node.matrix is not None:
            entry["matrix"] = [float(v) for v in np.asarray(node.matrix).T.reshape(-1)]  # column-major
        else:
            entry.update(translation=[float(v) for v in node.translation], rotation=[float(v) for v in node.rotation], scale=[float(v) for v in node.scale])
        children = [j for j, other in enumerate(rig.nodes) if other.parent == i]
        if children:
            entry["children"] = children
        nodes.append(entry)
    return nodes, [i for i, node in enumerate(rig.nodes) if node.parent < 0]


def _rig_skins_and_clips(rig: Rig, bins: _BinWriter) -> tuple[list[dict], list[dict]]:
    skins = []
    for skin in rig.skins:
        inverse_bind = np.ascontiguousarray(np.asarray(skin.inverse_bind, np.float32).transpose(0, 2, 1))  # column-major
        skins.append({"name": skin.name, "joints": [int(j) for j in skin.joints], "inverseBindMatrices": bins.add(inverse_bind.reshape(-1, 16), "MAT4", target=None)})
    clips = []
    for clip in rig.clips:
        samplers, channels = [], []
        for channel in clip.channels:
            times = np.asarray(channel.times, np.float32).reshape(-1, 1)
            values = np.asarray(channel.values, np.float32).reshape(-1, channel.values.shape[-1])
            kind = {3: "VEC3", 4: "VEC4"}[values.shape[1]]
            samplers.append({"input": bins.add(times, "SCALAR", target=None, minmax=True), "output": bins.add(values, kind, target=None), "interpolation": channel.interpolation})
            channels.append({"sampler": len(samplers) - 1, "target": {"node": int(channel.node), "path": channel.path}})
        if channels:
            clips.append({"name": clip.name, "samplers": samplers, "channels": channels})
    return skins, clips


def write_gltf(path: str | Path, scene: Scene, *, texture_bits: int = 8) -> Path:
    """Write ``scene`` as ``path`` (``.gltf``) + ``<stem>.bin`` + ``<stem>_<image>.png`` textures (``<image>.png``
    where the texture's name already starts with ``<stem>_``, so ``lod.gltf``'s ``lod_uv1`` is not ``lod_lod_uv1.png``).

    Meshes are written in world space (one node each, no transform). Textures shared by several
    slots (the same array object) are written once. ``texture_bits`` is 8 or 16. Returns the
    ``.gltf`` path. Raises :class:`~neuralbake.errors.InputError` for inconsistent meshes.
    """
    import pygltflib

    path = Path(path)
    if path.suffix.lower() not in (".gltf", ".glb"):
        raise InputError("write_gltf writes .gltf (+ .bin + PNG) or .glb files.", path=path, field="path", fix="name the output *.gltf or *.glb.")
    binary = path.suffix.lower() == ".glb"
    if texture_bits not in (8, 16):
        raise InputError(f"texture_bits must be 8 or 16, got {texture_bits}.", field="texture_bits", fix="pass 8 or 16.")
    if not path.parent.is_dir():
        raise InputError("the output folder does not exist.", path=path.parent, fix="create it first (prepare_output_dir).")
    for i, mesh in enumerate(scene.meshes):
        _check_mesh_for_writing(mesh, i, len(scene.materials))
    stem = path.stem
    bins = _BinWriter()
    images: list[dict] = []
    image_index: dict[int, int] = {}
    used_names: set[str] = set()

    def texture_info(ref: TextureRef | None, extra: dict | None = None) -> dict | None:
        if ref is None:
            return None
        key = id(ref.image)
        if key not in image_index:
            own = _safe_stem(ref.name or "texture")
            name = own if own.startswith(f"{stem}_") else f"{stem}_{own}"  # a texture named lod_uv1 in lod.gltf: lod_uv1.png
            base, k = name, 1
            while name in used_names:
                k += 1
                name = f"{base}_{k}"
            used_names.add(name)
            image = np.asarray(ref.image, dtype=np.float32)
            image_index[key] = len(images)
            if binary:  # embedded in the .glb's buffer
                with tempfile.TemporaryDirectory(prefix="neuralbake-glb-") as folder:
                    save_png(Path(folder) / "image.png", image, bits=texture_bits)
                    data = (Path(folder) / "image.png").read_bytes()
                images.append({"bufferView": bins.add_bytes(data), "mimeType": "image/png", "name": ref.name or name})
            else:
                save_png(path.parent / f"{name}.png", image, bits=texture_bits)
                images.append({"uri": f"{name}.png", "name": ref.name or name})
        samplers.append({"wrapS": _WRAP_NAMES[ref.wrap_s], "wrapT": _WRAP_NAMES[ref.wrap_t]})
        textures.append({"source": image_index[key], "sampler": len(samplers) - 1})
        info = {"index": len(textures) - 1}
        if ref.texcoord:
            info["texCoord"] = ref.texcoord
        info.update(extra or {})
        return info

    samplers: list[dict] = []
    textures: list[dict] = []
    materials = []
    for m in scene.materials:
        pbr = {
            "baseColorFactor": [float(v) for v in m.base_color_factor],
            "metallicFactor": float(m.metallic_factor),
            "roughnessFactor": float(m.roughness_factor),
        }
        for key, ref in (("baseColorTexture", m.base_color_texture), ("metallicRoughnessTexture", m.metallic_roughness_texture)):
            info = texture_info(ref)
            if info is not None:
                pbr[key] = info
        entry = {"name": m.name, "pbrMetallicRoughness": pbr, "emissiveFactor": [float(v) for v in m.emissive_factor]}
        for key, ref, extra in (
            ("normalTexture", m.normal_texture, {"scale": float(m.normal_scale)}),
            ("occlusionTexture", m.occlusion_texture, {"strength": float(m.occlusion_strength)}),
            ("emissiveTexture", m.emissive_texture, None),
        ):
            info = texture_info(ref, extra)
            if info is not None:
                entry[key] = info
        entry["alphaMode"] = m.alpha_mode
        if m.alpha_mode == "MASK":
            entry["alphaCutoff"] = float(m.alpha_cutoff)
        entry["doubleSided"] = bool(m.double_sided)
        if m.unlit:
            entry["extensions"] = {"KHR_materials_unlit": {}}
        else:
            extensions: dict[str, dict] = {}
            if m.ior != 1.5:
                extensions["KHR_materials_ior"] = {"ior": float(m.ior)}
            if m.specular != 1.0 or tuple(m.specular_color) != (1.0, 1.0, 1.0):
                extensions["KHR_materials_specular"] = {"specularFactor": float(m.specular), "specularColorFactor": [float(c) for c in m.specular_color]}
            if m.iridescence > 0.0:
                low, high = (float(t) for t in m.iridescence_thickness)
                extensions["KHR_materials_iridescence"] = {"iridescenceFactor": float(m.iridescence), "iridescenceIor": float(m.iridescence_ior),
                                                           "iridescenceThicknessMinimum": low, "iridescenceThicknessMaximum": high}
            if m.clearcoat > 0.0:
                extensions["KHR_materials_clearcoat"] = {"clearcoatFactor": float(m.clearcoat), "clearcoatRoughnessFactor": float(m.clearcoat_roughness)}
            if any(c > 0.0 for c in m.sheen_color):
                extensions["KHR_materials_sheen"] = {"sheenColorFactor": [float(c) for c in m.sheen_color], "sheenRoughnessFactor": float(m.sheen_roughness)}
            if extensions:
                entry["extensions"] = extensions
        materials.append(entry)

    rig = scene.rig if scene.rig is not None and any(m.skin is not None for m in scene.meshes) else None
    nodes, roots = ([], []) if rig is None else _rig_nodes(rig)
    meshes = []
    for mesh in scene.meshes:
        skinned = rig is not None and mesh.skin is not None and mesh.bind_positions is not None
        # a skinned mesh is stored in its bind pose; its joints place it (the node's transform plays no part)
        positions, normals, tangents = (mesh.bind_positions, mesh.bind_normals, mesh.bind_tangents) if skinned else (mesh.positions, mesh.normals, mesh.tangents)
        attrs = {"POSITION": bins.add(positions.astype(np.float32), "VEC3", target=34962, minmax=True)}
        for key, arr, kind in (
            ("NORMAL", normals, "VEC3"),
            ("TANGENT", tangents, "VEC4"),
            ("TEXCOORD_0", mesh.uv0, "VEC2"),
            ("TEXCOORD_1", mesh.uv1, "VEC2"),
            ("COLOR_0", mesh.colors, "VEC4"),
        ):
            if arr is not None:
                attrs[key] = bins.add(arr.astype(np.float32), kind, target=34962)
        if skinned:
            attrs["JOINTS_0"] = bins.add(mesh.joints.astype(np.uint16), "VEC4", target=34962)
            attrs["WEIGHTS_0"] = bins.add(mesh.weights.astype(np.float32), "VEC4", target=34962)
        indices = bins.add(mesh.indices.astype(np.uint32).reshape(-1), "SCALAR", target=34963)
        meshes.append({"name": mesh.name, "primitives": [{"attributes": attrs, "indices": indices, "material": mesh.material, "mode": 4}]})
        nodes.append({"mesh": len(meshes) - 1, "name": mesh.name, **({"skin": int(mesh.skin)} if skinned else {})})
        roots.append(len(nodes) - 1)

    doc = {
        "asset": {"version": "2.0", "generator": "neuralbake"},
        "scene": 0,
        "scenes": [{"nodes": roots}],
        "nodes": nodes,
        "meshes": meshes,
        "materials": materials,
        "accessors": bins.accessors,
        "bufferViews": bins.views,
        "buffers": [{"byteLength": bins.length} if binary else {"uri": f"{stem}.bin", "byteLength": bins.length}],
    }
    if rig is not None:
        doc["skins"], doc["animations"] = _rig_skins_and_clips(rig, bins)
        doc["accessors"], doc["bufferViews"] = bins.accessors, bins.views
        doc["buffers"] = [{"byteLength": bins.length} if binary else {"uri": f"{stem}.bin", "byteLength": bins.length}]
        if not doc["animations"]:
            del doc["animations"]
    if textures:
        doc.update({"textures": textures, "samplers": samplers, "images": images})
    used = sorted({name for entry in materials for name in entry.get("extensions", {})})
    if used:
        doc["extensionsUsed"] = used
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="dataclasses_json")
        gltf = pygltflib.GLTF2.from_dict(doc)  # checks the structure against pygltflib's schema classes
    if binary:
        atomic_write_bytes(path, _glb(gltf.to_json(), b"".join(bins.chunks)))
        return path
    atomic_write_bytes(path.parent / f"{stem}.bin", b"".join(bins.chunks))
    atomic_write_text(path, gltf.to_json(indent=2))
    return path


def _glb(text: str, blob: bytes) -> bytes:
    """A binary glTF: 12-byte header, the JSON chunk (space-padded), the BIN chunk (zero-padded)."""
    json_bytes = text.encode("utf-8")
    json_bytes += b" " * ((-len(json_bytes)) % 4)
    blob += b"\0" * ((-len(blob)) % 4)
    chunks = struct.pack("<II", len(json_bytes), 0x4E4F534A) + json_bytes
    if blob:
        chunks += struct.pack("<II", len(blob), 0x004E4942) + blob
    return struct.pack("<III", 0x46546C67, 2, 12 + len(chunks)) + chunks
