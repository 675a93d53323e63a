"""glTF 2.0 scenes in and out: meshes flattened to world space, metal/rough PBR materials and
their texture images, as plain numpy dataclasses that the renderer and the fitting bakes share.

Reading is defensive, because glTF files arrive from anywhere: :mod:`neuralbake.io.gltf_validate`
checks the ``.glb`` header and chunk table, the JSON's size (``max_json_bytes``) and nesting depth,
and then every index, offset, length, stride and count of the document before any array is read,
so a damaged or hostile file fails with an :class:`~neuralbake.errors.InputError` naming the glTF
field (``accessors[3].bufferView``), never a traceback or a hang. External buffer and image URIs
are resolved only inside the glTF's folder (:func:`neuralbake.io.refs.resolve_reference`; symlinks
pointing out are refused too), and only the bytes a buffer declares are read. pygltflib then holds
the checked document; accessors are decoded here with numpy because pygltflib hands back raw bytes.
``KHR_draco_mesh_compression`` primitives are decoded with DracoPy (:mod:`neuralbake.io.draco`),
keeping every attribute (Draco reorders the vertices). Every node's mesh is placed in world
space (node transforms multiplied down the hierarchy; normals by the inverse transpose, or by the
cofactor matrix under a singular transform such as the zero scale that hides a node, tangents by
the linear part, triangle winding flipped under mirroring transforms), and every primitive
becomes one :class:`Mesh` holding its own material index. Images are kept as stored (float32
``[H, W, C]`` in ``[0, 1]``, no sRGB decode): the renderer knows which slots are colour.

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
triangles (repeated indices or zero area) are dropped and counted.

Writing (:func:`write_gltf`) produces ``name.gltf`` + ``name.bin`` + PNG textures beside it, with
positions, normals, tangents, uv0, uv1, ``COLOR_0`` and indices as float32 / uint32 accessors, and
materials including ``KHR_materials_unlit``. Textures are 8-bit PNGs by default (16-bit on
request), so a write followed by :func:`load_gltf` returns exactly what was written whenever the
texels are multiples of 1/255 (1/65535). Every file is written atomically and the ``.gltf`` last,
so a crash never leaves a ``.gltf`` that points at missing data.
"""

from __future__ import annotations

import base64
import binascii
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from neuralbake.errors import InputError
from neuralbake.io.draco import AccessorSpec, decode_draco_primitive
from neuralbake.io.files import atomic_write_bytes, atomic_write_text
from neuralbake.io.gltf_validate import MAX_ACCESSOR_COUNT, read_document, validate_document
from neuralbake.io.images import load_image, save_png
from neuralbake.io.limits import MAX_JSON_BYTES
from neuralbake.io.refs import resolve_reference

__all__ = [
    "DEFAULT_MAX_JSON_BYTES",
    "DEFAULT_MAX_TRIANGLES",
    "Material",
    "Mesh",
    "Scene",
    "TextureRef",
    "generate_normals",
    "generate_tangents",
    "load_gltf",
    "load_gltf_materials",
    "write_gltf",
]

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
_KNOWN_EXTENSIONS = {"KHR_materials_unlit", "KHR_mesh_quantization", "KHR_materials_emissive_strength", "KHR_draco_mesh_compression"}

_COMPONENTS = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
_WIDTHS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
_WRAP_CODES = {10497: "repeat", 33071: "clamp", 33648: "mirror"}
_WRAP_NAMES = {v: k for k, v in _WRAP_CODES.items()}
_TRIANGLES = 4


# --- the data model -------------------------------------------------------------------------------


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
    """``OPAQUE``, ``MASK`` or ``BLEND`` (the renderer treats every surface as opaque)."""
    alpha_cutoff: float = 0.5
    """Threshold of the ``MASK`` mode."""
    double_sided: bool = False
    """Back faces are shaded with the flipped normal when true."""
    unlit: bool = False
    """``KHR_materials_unlit``: the base colour is the output radiance."""

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
    """uint16 ``[V, 4]`` ``JOINTS_0``: indices into the skin's joints (skinning is not applied)."""
    weights: np.ndarray | None = None
    """float32 ``[V, 4]`` ``WEIGHTS_0``: the weights of :attr:`joints` (summing to about 1)."""

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


# --- geometry helpers ---------------------------------------------------------------------------------


def _normalize(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.maximum(n, 1e-20)


def generate_normals(positions: np.ndarray, indices: np.ndarray, *, mode: str = "smooth") -> tuple[np.ndarray, np.ndarray]:
    """Vertex normals for a mesh without them; returns ``(normals [V', 3], indices [F, 3])``.

    ``smooth``: area-weighted average of the faces around each vertex (vertices kept);
    ``flat``: every triangle gets its own three vertices with the face normal, so callers must
    re-index the other attributes with the returned indices (see :func:`load_gltf`).
    """
    p0, p1, p2 = (positions[indices[:, k]].astype(np.float64) for k in range(3))
    face = np.cross(p1 - p0, p2 - p0)  # length = 2 area, so the sum is area weighted
    if mode == "flat":
        normals = np.repeat(_normalize(face), 3, axis=0).astype(np.float32)
        return normals, np.arange(3 * len(indices), dtype=np.int64).reshape(-1, 3)
    if mode != "smooth":
        raise InputError(f"unknown normal generation mode {mode!r}.", field="generate_normals", fix="use 'smooth' or 'flat'.")
    acc = np.zeros((len(positions), 3), dtype=np.float64)
    for k in range(3):
        np.add.at(acc, indices[:, k], face)
    lonely = np.linalg.norm(acc, axis=1) < 1e-30  # vertices used by no triangle
    acc[lonely] = (0.0, 0.0, 1.0)
    return _normalize(acc).astype(np.float32), indices


def generate_tangents(positions: np.ndarray, normals: np.ndarray, uv: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Per-vertex tangents ``[V, 4]`` (xyz along +u, w handedness) from the uv layout.

    Lengyel's method: each triangle's ``dP/du`` and ``dP/dv`` (area weighted) are summed per
    vertex, the tangent is Gram-Schmidt orthogonalised against the normal, and ``w`` is chosen so
    that ``w (n x t)`` points along ``-dP/dv`` (glTF's v runs down the image, and its normal maps
    put green up). Triangles with a degenerate uv map contribute nothing; vertices left without
    a tangent get any unit vector perpendicular to the normal.
    """
    p = positions.astype(np.float64)
    t = uv.astype(np.float64)
    i0, i1, i2 = indices[:, 0], indices[:, 1], indices[:, 2]
    e1, e2 = p[i1] - p[i0], p[i2] - p[i0]
    d1, d2 = t[i1] - t[i0], t[i2] - t[i0]
    det = d1[:, 0] * d2[:, 1] - d2[:, 0] * d1[:, 1]
    ok = np.abs(det) > 1e-20
    r = np.where(ok, 1.0 / np.where(ok, det, 1.0), 0.0)[:, None]
    dp_du = (e1 * d2[:, 1:2] - e2 * d1[:, 1:2]) * r * np.abs(det)[:, None]
    dp_dv = (e2 * d1[:, 0:1] - e1 * d2[:, 0:1]) * r * np.abs(det)[:, None]
    tan = np.zeros_like(p)
    bit = np.zeros_like(p)
    for k in (i0, i1, i2):
        np.add.at(tan, k, dp_du)
        np.add.at(bit, k, dp_dv)
    n = normals.astype(np.float64)
    tan = tan - n * np.sum(n * tan, axis=1, keepdims=True)
    weak = np.linalg.norm(tan, axis=1) < 1e-20
    if weak.any():  # any perpendicular: cross with the axis least aligned with the normal
        axis = np.eye(3)[np.argmin(np.abs(n[weak]), axis=1)]
        tan[weak] = np.cross(n[weak], axis)
    tan = _normalize(tan)
    w = np.where(np.sum(np.cross(n, tan) * -bit, axis=1) < 0.0, -1.0, 1.0)
    return np.concatenate([tan, w[:, None]], axis=1).astype(np.float32)


def _cofactor(m: np.ndarray) -> np.ndarray:
    """Cofactor matrix of a 3x3 ``m`` (``det(m) m^-T`` when invertible; defined for singular ``m`` too)."""
    c0, c1, c2 = m[:, 0], m[:, 1], m[:, 2]
    return np.stack([np.cross(c1, c2), np.cross(c2, c0), np.cross(c0, c1)], axis=1)


def _drop_degenerate(positions: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, int]:
    repeated = (indices[:, 0] == indices[:, 1]) | (indices[:, 1] == indices[:, 2]) | (indices[:, 0] == indices[:, 2])
    p = positions.astype(np.float64)
    cross = np.cross(p[indices[:, 1]] - p[indices[:, 0]], p[indices[:, 2]] - p[indices[:, 0]])
    scale = max(float(np.ptp(p, axis=0).max()) if len(p) else 1.0, 1e-30)
    flat = np.linalg.norm(cross, axis=1) <= (1e-12 * scale * scale)
    bad = repeated | flat
    return indices[~bad], int(bad.sum())


# --- reading ------------------------------------------------------------------------------------------


class _Reader:
    """Holds one parsed file and decodes its buffers, accessors and images."""

    def __init__(self, path: Path, max_json_bytes: int, max_accessor_count: int = MAX_ACCESSOR_COUNT) -> None:
        import pygltflib

        self.path = path
        # The container and structure are checked here, so pygltflib and numpy only see sound data.
        self.doc, self.bin_chunk = read_document(path, max_json_bytes=max_json_bytes)
        validate_document(
            self.doc,
            path,
            bin_chunk_length=None if self.bin_chunk is None else len(self.bin_chunk),
            max_accessor_count=max_accessor_count,
        )
        try:
            with warnings.catch_warnings():  # dataclasses_json nags about optional fields pygltflib types as required
                warnings.filterwarnings("ignore", category=RuntimeWarning, module="dataclasses_json")
                self.gltf = pygltflib.GLTF2.from_dict(self.doc, infer_missing=True)
            for mesh in self.gltf.meshes:  # as pygltflib's own from_json does: attributes as an object
                for prim in mesh.primitives:
                    prim.attributes = pygltflib.Attributes(**(prim.attributes or {}))
        except Exception as exc:  # pragma: no cover - the validation should leave pygltflib nothing to trip on
            raise InputError(
                f"this is not a readable glTF 2.0 file ({type(exc).__name__}: {exc}).",
                path=path,
                fix="export the asset again as glTF 2.0 (.gltf + .bin or .glb).",
            ) from exc
        self._buffers: dict[int, bytes] = {}

    def fail(self, problem: str, field: str, fix: str) -> InputError:
        return InputError(problem, path=self.path, field=field, fix=fix)

    def local_file(self, uri: str, field: str, what: str, *, context: str = "", fix: str | None = None) -> Path:
        """The existing file a relative URI names, confined to the glTF's folder.

        ``context`` is added to the message of a missing file (``" (material 'paint', ...)"``),
        ``fix`` replaces its default fix.
        """
        from urllib.parse import unquote

        file = resolve_reference(self.path, unquote(uri), field=field, what=what)
        if not file.is_file():
            fix = fix or f"put {Path(unquote(uri)).name} beside the glTF file."
            raise self.fail(f"the {what} file {file}{context} does not exist.", field, fix)
        return file

    def uri_bytes(self, uri: str, field: str, what: str, limit: int | None = None) -> bytes:
        """Bytes of a data URI or a confined external file (at most ``limit`` of the latter are read)."""
        if uri.startswith("data:"):
            head, _, data = uri.partition(",")
            if not head.endswith(";base64"):
                raise self.fail(f"the {what} data URI is not base64.", field, "re-export with base64 data URIs or external files.")
            try:
                return base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise self.fail(f"the {what} data URI holds malformed base64 ({exc}).", field, "re-export the asset.") from exc
        file = self.local_file(uri, field, what)
        try:
            with open(file, "rb") as handle:  # a buffer declares its length: never read more than that
                return handle.read(-1 if limit is None else limit)
        except OSError as exc:
            raise self.fail(f"the {what} file {file} cannot be read ({exc.strerror or exc}).", field, "check its permissions.") from exc

    def buffer(self, index: int) -> bytes:
        if index not in self._buffers:
            buf = self.gltf.buffers[index]
            if buf.uri is None:  # validated: buffers[0] of a .glb with a BIN chunk at least byteLength long
                data = self.bin_chunk
            else:
                data = self.uri_bytes(buf.uri, f"buffers[{index}].uri", "buffer", limit=buf.byteLength)
            if len(data) < buf.byteLength:
                raise self.fail(
                    f"the buffer declares {buf.byteLength:,} bytes but its data has {len(data):,}.",
                    f"buffers[{index}].byteLength",
                    "the .bin is truncated or belongs to another export; export the asset again.",
                )
            self._buffers[index] = bytes(data[: buf.byteLength])
        return self._buffers[index]

    def buffer_view(self, index: int) -> tuple[bytes, int, int | None]:
        view = self.gltf.bufferViews[index]
        data = self.buffer(view.buffer)
        offset = view.byteOffset or 0
        if offset + view.byteLength > len(data):
            raise self.fail("the buffer view runs past the end of its buffer.", f"bufferViews[{index}]", "re-export the asset.")
        return data, offset, view.byteStride

    def accessor(self, index: int) -> np.ndarray:
        """Decode accessor ``index`` to a float32 or integer array ``[count, width]``."""
        acc = self.gltf.accessors[index]
        where = f"accessors[{index}]"
        if acc.sparse is not None:
            raise self.fail("sparse accessors are not supported.", where, "re-export without sparse accessors (e.g. apply morph targets).")
        dtype = np.dtype(_COMPONENTS[acc.componentType]).newbyteorder("<")
        width = _WIDTHS[acc.type]
        if acc.bufferView is None:  # all zeros, per the spec
            out = np.zeros((acc.count, width), dtype=dtype)
        else:
            data, offset, stride = self.buffer_view(acc.bufferView)
            offset += acc.byteOffset or 0
            item = dtype.itemsize * width
            stride = stride or item
            need = offset + stride * (acc.count - 1) + item if acc.count else offset
            if need > len(data):
                raise self.fail("the accessor reads past the end of its buffer.", where, "re-export the asset (the .bin is truncated?).")
            raw = np.frombuffer(data, dtype=np.uint8, count=max(need - offset, 0), offset=offset)
            if stride == item:
                out = raw.view(dtype).reshape(acc.count, width).copy()
            else:
                rows = np.lib.stride_tricks.as_strided(raw, shape=(acc.count, item), strides=(stride, 1))
                out = np.ascontiguousarray(rows).view(dtype).reshape(acc.count, width)
        if acc.normalized:
            info = np.iinfo(dtype)
            out = np.maximum(out.astype(np.float32) / info.max, -1.0)
        return out

    def image(self, index: int, field: str, material: str) -> np.ndarray:
        img = self.gltf.images[index]
        label = img.uri if img.uri and not img.uri.startswith("data:") else (img.name or f"images[{index}]")
        fix = f"put the image {label} beside the glTF file (material {material!r} uses it), or re-export with embedded textures."
        if img.uri is not None:
            if img.uri.startswith("data:"):
                data = self.uri_bytes(img.uri, f"images[{index}].uri", "image")
            else:
                context = f" (material {material!r}, {field})"
                file = self.local_file(img.uri, f"images[{index}].uri", "texture image", context=context, fix=fix)
                array, _ = load_image(file)
                return array
        elif img.bufferView is not None:
            raw, offset, _ = self.buffer_view(img.bufferView)
            data = raw[offset : offset + self.gltf.bufferViews[img.bufferView].byteLength]
        else:
            raise self.fail(f"image {label} has neither a uri nor a bufferView.", f"images[{index}]", fix)
        suffix = {"image/png": ".png", "image/jpeg": ".jpg"}.get(img.mimeType or "", ".img")
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / f"embedded{suffix}"
            file.write_bytes(data)
            try:
                array, _ = load_image(file)
            except InputError as exc:
                raise self.fail(f"the embedded image {label} cannot be read ({exc.problem}).", f"images[{index}]", fix) from exc
        return array


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


def _texture_ref(reader: _Reader, info: object | None, field: str, material: str, cache: dict[int, np.ndarray]) -> TextureRef | None:
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
        wrap_s = _WRAP_CODES.get(sampler.wrapS or 10497, "repeat")
        wrap_t = _WRAP_CODES.get(sampler.wrapT or 10497, "repeat")
    if (info.extensions or {}).get("KHR_texture_transform"):
        warnings.warn(f"{reader.path}: material {material!r} {field} uses KHR_texture_transform, which is ignored.", stacklevel=4)
    image = gltf.images[source]
    name = image.uri if image.uri and not image.uri.startswith("data:") else (image.name or f"image{source}")
    return TextureRef(cache[source], int(info.texCoord or 0), wrap_s, wrap_t, name)


def _read_materials(reader: _Reader) -> list[Material]:
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
        out.append(mat)
    return out


def _check_extensions(reader: _Reader) -> None:
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


def _scene_nodes(reader: _Reader) -> list[tuple[int, np.ndarray]]:
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


def _primitive_arrays(reader: _Reader, prim: object, where: str) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
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
            specs[name] = AccessorSpec(np.dtype(_COMPONENTS[acc.componentType]), _WIDTHS[acc.type], bool(acc.normalized), acc.count)
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
    reader: _Reader, mesh_index: int, prim_index: int, world: np.ndarray, materials: list[Material], normals_mode: str
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
    indices, dropped = _drop_degenerate(positions, indices)
    if dropped:
        warnings.warn(f"{reader.path}: {label}: dropped {dropped} degenerate triangle(s) (repeated vertices or zero area).", stacklevel=3)
    if not len(indices):
        warnings.warn(f"{reader.path}: {label}: no triangles left; the primitive is skipped.", stacklevel=3)
        return None
    if normals is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            if singular:
                cof = _cofactor(linear) * (-1.0 if mirrored else 1.0)  # the sign keeps normals with the (flipped) winding
                normals = normals.astype(np.float64) @ (cof / max(float(np.abs(cof).max()), 1e-300)).T
            else:
                normals = normals.astype(np.float64) @ np.linalg.inv(linear)  # (M^-T n^T)^T
            length = np.linalg.norm(normals, axis=1)
            normals = _normalize(normals)
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
            t = _normalize(t)
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
    reader = _Reader(path, max_json_bytes)
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

    Parameters
    ----------
    path:
        The glTF file; external buffers and images are resolved beside it, and only inside its
        folder (unless :func:`neuralbake.io.refs.allow_outside_refs` is in force).
    max_triangles:
        Budget: a scene with more triangles (after instancing), or more than three vertices per
        triangle of the budget, is refused before its attributes are decoded. Every accessor's
        count is capped at ``3 * max_triangles`` (at least
        :data:`~neuralbake.io.gltf_validate.MAX_ACCESSOR_COUNT`).
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
    reader = _Reader(path, max_json_bytes, max(3 * max_triangles, MAX_ACCESSOR_COUNT))
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
    scene = Scene(materials=materials, source=str(path))
    for index, world in nodes:
        mesh_index = reader.gltf.nodes[index].mesh
        for prim_index in range(len(reader.gltf.meshes[mesh_index].primitives)):
            mesh = _read_primitive(reader, mesh_index, prim_index, world, materials, generate_normals_mode)
            if mesh is not None:
                scene.meshes.append(mesh)
    if not scene.meshes:
        raise InputError("the scene has no triangle meshes.", path=path, field="scenes", fix="export a scene with at least one mesh.")
    return scene


# --- writing ------------------------------------------------------------------------------------------


def _safe_stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(text).stem).strip("._") or "texture"


class _BinWriter:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.length = 0
        self.views: list[dict] = []
        self.accessors: list[dict] = []

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
        component = 5125 if array.dtype == np.uint32 else 5126
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


def write_gltf(path: str | Path, scene: Scene, *, texture_bits: int = 8) -> Path:
    """Write ``scene`` as ``path`` (``.gltf``) + ``<stem>.bin`` + ``<stem>_<image>.png`` textures.

    Meshes are written in world space (one node each, no transform). Textures shared by several
    slots (the same array object) are written once. ``texture_bits`` is 8 or 16. Returns the
    ``.gltf`` path. Raises :class:`~neuralbake.errors.InputError` for inconsistent meshes.
    """
    import pygltflib

    path = Path(path)
    if path.suffix.lower() != ".gltf":
        raise InputError("write_gltf writes .gltf files (+ .bin + PNG).", path=path, field="path", fix="name the output *.gltf.")
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
            name = f"{stem}_{_safe_stem(ref.name or 'texture')}"
            base, k = name, 1
            while name in used_names:
                k += 1
                name = f"{base}_{k}"
            used_names.add(name)
            image = np.asarray(ref.image, dtype=np.float32)
            save_png(path.parent / f"{name}.png", image, bits=texture_bits)
            image_index[key] = len(images)
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
        materials.append(entry)

    meshes, nodes = [], []
    for mesh in scene.meshes:
        attrs = {"POSITION": bins.add(mesh.positions.astype(np.float32), "VEC3", target=34962, minmax=True)}
        for key, arr, kind in (
            ("NORMAL", mesh.normals, "VEC3"),
            ("TANGENT", mesh.tangents, "VEC4"),
            ("TEXCOORD_0", mesh.uv0, "VEC2"),
            ("TEXCOORD_1", mesh.uv1, "VEC2"),
            ("COLOR_0", mesh.colors, "VEC4"),
        ):
            if arr is not None:
                attrs[key] = bins.add(arr.astype(np.float32), kind, target=34962)
        indices = bins.add(mesh.indices.astype(np.uint32).reshape(-1), "SCALAR", target=34963)
        meshes.append({"name": mesh.name, "primitives": [{"attributes": attrs, "indices": indices, "material": mesh.material, "mode": 4}]})
        nodes.append({"mesh": len(meshes) - 1, "name": mesh.name})

    doc = {
        "asset": {"version": "2.0", "generator": "neuralbake"},
        "scene": 0,
        "scenes": [{"nodes": list(range(len(nodes)))}],
        "nodes": nodes,
        "meshes": meshes,
        "materials": materials,
        "accessors": bins.accessors,
        "bufferViews": bins.views,
        "buffers": [{"uri": f"{stem}.bin", "byteLength": bins.length}],
    }
    if textures:
        doc.update({"textures": textures, "samplers": samplers, "images": images})
    if any(m.unlit for m in scene.materials):
        doc["extensionsUsed"] = ["KHR_materials_unlit"]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="dataclasses_json")
        gltf = pygltflib.GLTF2.from_dict(doc)  # checks the structure against pygltflib's schema classes
    atomic_write_bytes(path.parent / f"{stem}.bin", b"".join(bins.chunks))
    atomic_write_text(path, gltf.to_json(indent=2))
    return path
