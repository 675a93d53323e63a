"""glTF containers and structure checked before any array is read.

:func:`read_document` opens a ``.gltf`` (JSON text) or ``.glb`` (binary container) itself: the
GLB header and chunk table are checked with :mod:`struct` (magic, version 2, declared length equal
to the file size, chunks inside the file and 4-byte aligned, JSON first), and the JSON is checked
for size and nesting depth before it is parsed. pygltflib only ever sees a document that passed.

:func:`validate_document` then checks the document's structure the way the glTF 2.0 schema and
spec state it, so that the reader's numpy code can trust it: every index (scene nodes, children,
meshes, accessors, buffer views, buffers, materials, textures, images, samplers) is an integer in
range, every offset, length, stride and count is a non-negative integer, every accessor's count is
at most :data:`MAX_ACCESSOR_COUNT` (an accessor without a buffer view is zeros allocated from its
count alone), component types, accessor types, wrap modes and alpha modes are known values of the
right JSON type (checked before any lookup, so ``[5126]`` fails with a sentence, not a
``TypeError``), ``normalized`` is set only on 8- and 16-bit integer accessors (never on indices or
joints), names and MIME types are strings, optional objects are objects, strides are in
``[4, 252]`` and multiples of 4, accessors lie inside their buffer views and buffer views inside
their buffers, the GLB binary chunk holds what the first buffer declares, and the numbers the
reader converts (factors, transforms) are finite.
Each problem is an :class:`~neuralbake.errors.InputError` naming the glTF field
(``accessors[3].bufferView``) — a damaged file fails with a sentence, never a traceback.

Out of scope here: the bytes of external buffers (checked when the reader loads them) and the
values of vertex arrays (non-finite positions are refused by the reader after decoding).
"""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path
from typing import Any

from neuralbake.errors import InputError
from neuralbake.io.limits import parse_json_text

__all__ = [
    "ATTRIBUTE_TYPES",
    "COMPONENT_SIZES",
    "MAX_ACCESSOR_COUNT",
    "TYPE_WIDTHS",
    "read_document",
    "validate_document",
]

GLB_MAGIC = b"glTF"
_CHUNK_JSON = 0x4E4F534A
_CHUNK_BIN = 0x004E4942

COMPONENT_SIZES = {5120: 1, 5121: 1, 5122: 2, 5123: 2, 5125: 4, 5126: 4}
"""Bytes per component of each accessor ``componentType``."""
TYPE_WIDTHS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
"""Components per element of each accessor ``type``."""
ATTRIBUTE_TYPES = {
    "POSITION": ("VEC3",),
    "NORMAL": ("VEC3",),
    "TANGENT": ("VEC4",),
    "TEXCOORD_0": ("VEC2",),
    "TEXCOORD_1": ("VEC2",),
    "COLOR_0": ("VEC3", "VEC4"),
    "JOINTS_0": ("VEC4",),
    "WEIGHTS_0": ("VEC4",),
}
"""Accessor types the reader accepts for the attributes it decodes (others are not read)."""
MAX_ACCESSOR_COUNT = 60_000_000
"""Default cap on every accessor's ``count``: three elements per triangle of the reader's default
budget (:data:`neuralbake.io.gltf.DEFAULT_MAX_TRIANGLES`, 20 million). An accessor without a buffer
view is all zeros and is allocated from its count alone, so the count must be bounded up front."""
_NORMALIZABLE_COMPONENTS = (5120, 5121, 5122, 5123)  # the spec forbids normalized FLOAT and UNSIGNED_INT
_WRAP_MODES = (10497, 33071, 33648)
_ALPHA_MODES = ("OPAQUE", "MASK", "BLEND")
_INDEX_COMPONENTS = (5121, 5123, 5125)
_JOINT_COMPONENTS = (5121, 5123)
_ATTRIBUTE_NAME = re.compile(r"^_?[A-Za-z][A-Za-z0-9_]*$")  # pygltflib sets them as Python attributes
_REEXPORT = "re-export the asset (the file is damaged or was written by a faulty exporter)."


# --- the container ------------------------------------------------------------------------------------


def read_document(path: Path, *, max_json_bytes: int) -> tuple[dict[str, Any], bytes | None]:
    """Read ``path`` (``.gltf`` or ``.glb``, told apart by the magic bytes) into ``(document, BIN chunk)``.

    Raises
    ------
    InputError
        An unreadable file, a damaged GLB header or chunk table, JSON over ``max_json_bytes`` or
        nested deeper than :data:`~neuralbake.io.limits.MAX_JSON_DEPTH`, invalid JSON or UTF-8.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
            handle.seek(0, 2)
            size = handle.tell()
            if head != GLB_MAGIC:
                if path.suffix.lower() == ".glb":
                    raise InputError(
                        f"the file does not start with the GLB magic 'glTF' (found {head!r}).",
                        path=path,
                        field="header.magic",
                        fix=_REEXPORT,
                    )
                if size > max_json_bytes:
                    raise _too_big(path, size, max_json_bytes, "the glTF JSON")
                handle.seek(0)
                return _parse(path, handle.read(), "the glTF JSON"), None
            handle.seek(0)
            data = handle.read()
    except OSError as exc:
        raise InputError(f"the file cannot be read ({exc.strerror or exc}).", path=path, fix="check the path and permissions.") from exc
    return _read_glb(path, data, max_json_bytes)


def _too_big(path: Path, size: int, limit: int, what: str) -> InputError:
    return InputError(
        f"{what} is {size:,} bytes; at most {limit:,} are read.",
        path=path,
        field="max_json_bytes",
        fix="store buffers and images in a .bin / .glb instead of data URIs, or raise max_json_bytes for this trusted file.",
    )


def _parse(path: Path, raw: bytes, what: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start}).", path=path, fix=_REEXPORT) from exc
    try:
        doc = parse_json_text(text, source=path, what="glTF JSON", fix="export the asset again as glTF 2.0 (.gltf + .bin or .glb).")
    except InputError as exc:
        raise InputError(f"this is not a readable glTF 2.0 file: {exc.problem}", path=path, fix=exc.fix) from exc
    if not isinstance(doc, dict):
        raise InputError(f"{what} is a JSON {type(doc).__name__}, not an object.", path=path, fix="export the asset again as glTF 2.0.")
    return doc


def _read_glb(path: Path, data: bytes, max_json_bytes: int) -> tuple[dict[str, Any], bytes | None]:
    size = len(data)
    if size < 12:
        raise InputError(f"the file is {size} bytes, shorter than the 12-byte GLB header.", path=path, field="header", fix=_REEXPORT)
    _, version, length = struct.unpack_from("<4sII", data, 0)
    if version != 2:
        raise InputError(
            f"the GLB container version is {version}; only version 2 (glTF 2.0) is read.",
            path=path,
            field="header.version",
            fix="convert the asset to glTF 2.0 (e.g. Blender's glTF exporter or `npx @gltf-transform/cli copy`).",
        )
    if length != size:
        raise InputError(
            f"the GLB header declares {length:,} bytes but the file has {size:,}.",
            path=path,
            field="header.length",
            fix="the file is truncated or padded; download or export it again.",
        )
    if size % 4:
        raise InputError(f"the GLB is {size:,} bytes, not a multiple of 4.", path=path, field="header.length", fix=_REEXPORT)
    chunks: list[tuple[int, bytes]] = []
    offset = 12
    while offset < size:
        field = f"chunks[{len(chunks)}]"
        if offset + 8 > size:
            raise InputError("a chunk header runs past the end of the file.", path=path, field=field, fix=_REEXPORT)
        chunk_length, chunk_type = struct.unpack_from("<II", data, offset)
        if chunk_length % 4:
            problem = f"the chunk length {chunk_length:,} is not a multiple of 4."
            raise InputError(problem, path=path, field=f"{field}.chunkLength", fix=_REEXPORT)
        if offset + 8 + chunk_length > size:
            raise InputError(
                f"the chunk declares {chunk_length:,} bytes but only {size - offset - 8:,} remain in the file.",
                path=path,
                field=f"{field}.chunkLength",
                fix=_REEXPORT,
            )
        chunks.append((chunk_type, data[offset + 8 : offset + 8 + chunk_length]))
        offset += 8 + chunk_length
    if not chunks or chunks[0][0] != _CHUNK_JSON:
        raise InputError("the first chunk of the GLB is not the JSON chunk.", path=path, field="chunks[0].chunkType", fix=_REEXPORT)
    kinds = [kind for kind, _ in chunks]
    if kinds.count(_CHUNK_JSON) > 1 or kinds.count(_CHUNK_BIN) > 1 or (_CHUNK_BIN in kinds and kinds.index(_CHUNK_BIN) != 1):
        raise InputError(
            "the GLB must hold one JSON chunk and at most one BIN chunk, right after it.", path=path, field="chunks", fix=_REEXPORT
        )
    json_chunk = chunks[0][1]
    if len(json_chunk) > max_json_bytes:
        raise _too_big(path, len(json_chunk), max_json_bytes, "the GLB JSON chunk")
    doc = _parse(path, json_chunk, "the GLB JSON chunk")
    return doc, (chunks[1][1] if len(chunks) > 1 and chunks[1][0] == _CHUNK_BIN else None)


# --- the structure ------------------------------------------------------------------------------------


class _Checker:
    """Field-by-field checks of one document; every failure names the field."""

    def __init__(self, doc: dict[str, Any], path: Path) -> None:
        self.doc = doc
        self.path = path

    def fail(self, field: str, problem: str, fix: str = _REEXPORT) -> InputError:
        return InputError(problem, path=self.path, field=field, fix=fix)

    def items(self, key: str) -> list[dict[str, Any]]:
        value = self.doc.get(key, [])
        if not isinstance(value, list):
            raise self.fail(key, f"must be an array, got {type(value).__name__}.")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.fail(f"{key}[{i}]", f"must be an object, got {type(item).__name__}.")
        return value

    def obj(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be an object, got {type(value).__name__}.")
        return value

    def integer(self, value: Any, field: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, f"must be an integer, got {value!r:.40}.")
        if value < minimum:
            raise self.fail(field, f"must be at least {minimum}, got {value}.")
        return value

    def optional_obj(self, value: Any, field: str) -> dict[str, Any]:
        """An optional object: ``{}`` when absent (``None``), else it must be an object (not ``[]`` or ``0``)."""
        return {} if value is None else self.obj(value, field)

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            raise self.fail(field, f"must be a string, got {value!r:.40}.")
        return value

    def enum(self, value: Any, field: str, known: tuple[Any, ...] | dict[Any, Any], what: str) -> Any:
        """``value`` must be one of ``known`` and of its type: checked before any hashing, so ``[5126]`` fails cleanly."""
        kind = type(next(iter(known)))
        if isinstance(value, bool) or not isinstance(value, kind) or value not in known:
            names = ", ".join(str(k) for k in known)
            raise self.fail(field, f"is {value!r:.40}; known {what} are {names}.")
        return value

    def index(self, value: Any, field: str, target: str) -> int:
        value = self.integer(value, field)
        count = len(self.doc.get(target) or [])
        if value >= count:
            raise self.fail(field, f"refers to {target}[{value}], but the file has {count} {target}.")
        return value

    def number(self, value: Any, field: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(field, f"must be a finite number, got {value!r:.40}.")

    def numbers(self, value: Any, field: str, length: int) -> None:
        if not isinstance(value, list) or len(value) != length:
            raise self.fail(field, f"must be an array of {length} numbers.")
        for i, v in enumerate(value):
            self.number(v, f"{field}[{i}]")

    def index_list(self, value: Any, field: str, target: str) -> None:
        if not isinstance(value, list):
            raise self.fail(field, f"must be an array of indices, got {type(value).__name__}.")
        for i, v in enumerate(value):
            self.index(v, f"{field}[{i}]", target)


def validate_document(
    doc: dict[str, Any], path: Path, *, bin_chunk_length: int | None, max_accessor_count: int = MAX_ACCESSOR_COUNT
) -> None:
    """Check the structure of a parsed glTF document before any of its data is read.

    ``bin_chunk_length`` is the length of the GLB binary chunk, ``None`` for a ``.gltf`` or a GLB
    without one. ``max_accessor_count`` caps every accessor's ``count`` (elements, not bytes).
    Raises :class:`~neuralbake.errors.InputError` naming the first bad field.
    """
    c = _Checker(doc, path)
    asset = c.obj(doc.get("asset"), "asset")
    version = asset.get("version")
    if not isinstance(version, str) or not version.startswith("2."):
        raise c.fail("asset.version", f"is {version!r}; only glTF 2.0 files are read.", "convert the asset to glTF 2.0.")
    for key in ("extensionsUsed", "extensionsRequired"):
        names = doc.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise c.fail(key, "must be an array of extension names.")
    c.optional_obj(doc.get("extensions"), "extensions")
    for key in ("buffers", "bufferViews", "accessors", "scenes", "nodes", "meshes", "materials", "textures", "samplers", "images"):
        c.items(key)  # every array an index may point into, before any index is checked against its length
    _check_buffers(c, bin_chunk_length)
    _check_accessors(c, max_accessor_count)
    _check_scenes_and_nodes(c)
    _check_meshes(c)
    _check_materials_and_textures(c)


def _check_buffers(c: _Checker, bin_chunk_length: int | None) -> None:
    buffers = c.items("buffers")
    for i, buf in enumerate(buffers):
        length = c.integer(buf.get("byteLength"), f"buffers[{i}].byteLength", 1)
        uri = buf.get("uri")
        if uri is not None and not isinstance(uri, str):
            raise c.fail(f"buffers[{i}].uri", "must be a string.")
        if uri is None:
            if i != 0 or bin_chunk_length is None:
                raise c.fail(
                    f"buffers[{i}].uri",
                    "the buffer has no uri, and only the first buffer of a .glb with a binary chunk may omit it.",
                )
            if length > bin_chunk_length:
                raise c.fail(
                    f"buffers[{i}].byteLength",
                    f"declares {length:,} bytes but the GLB binary chunk holds {bin_chunk_length:,}.",
                    "the file is truncated; download or export it again.",
                )
    for i, view in enumerate(c.items("bufferViews")):
        where = f"bufferViews[{i}]"
        buffer = c.index(view.get("buffer"), f"{where}.buffer", "buffers")
        offset = c.integer(view.get("byteOffset", 0), f"{where}.byteOffset")
        length = c.integer(view.get("byteLength"), f"{where}.byteLength", 1)
        stride = view.get("byteStride")
        if stride is not None:
            c.integer(stride, f"{where}.byteStride", 4)
            if stride > 252 or stride % 4:
                raise c.fail(f"{where}.byteStride", f"is {stride}; it must be a multiple of 4 between 4 and 252.")
        available = buffers[buffer]["byteLength"]
        if offset + length > available:
            raise c.fail(
                f"{where}.byteLength",
                f"the view covers bytes {offset:,}..{offset + length:,} but buffers[{buffer}] has {available:,}.",
            )


def _check_accessors(c: _Checker, max_count: int) -> None:
    views = c.items("bufferViews")
    for i, acc in enumerate(c.items("accessors")):
        where = f"accessors[{i}]"
        component = c.enum(acc.get("componentType"), f"{where}.componentType", COMPONENT_SIZES, "component types")
        kind = c.enum(acc.get("type"), f"{where}.type", TYPE_WIDTHS, "types")
        count = c.integer(acc.get("count"), f"{where}.count")
        if count > max_count:
            raise c.fail(
                f"{where}.count",
                f"is {count:,}; at most {max_count:,} elements per accessor are read "
                f"(three per triangle of a {max_count // 3:,}-triangle budget).",
                "simplify or split the mesh, or raise max_triangles for this trusted file (the limit is 3 x max_triangles).",
            )
        offset = c.integer(acc.get("byteOffset", 0), f"{where}.byteOffset")
        normalized = acc.get("normalized", False)
        if not isinstance(normalized, bool):
            raise c.fail(f"{where}.normalized", "must be true or false.")
        if normalized and component not in _NORMALIZABLE_COMPONENTS:
            raise c.fail(
                f"{where}.normalized",
                f"is true on a componentType {component} accessor; glTF allows normalized only for "
                "8- and 16-bit integers (5120-5123), never for FLOAT (5126) or UNSIGNED_INT (5125).",
            )
        if acc.get("bufferView") is None:
            continue
        view_index = c.index(acc["bufferView"], f"{where}.bufferView", "bufferViews")
        view = views[view_index]
        item = COMPONENT_SIZES[component] * TYPE_WIDTHS[kind]
        stride = view.get("byteStride") or item
        need = offset + stride * (count - 1) + item if count else offset
        if need > view["byteLength"]:
            raise c.fail(
                f"{where}.count",
                f"{count:,} {kind} elements from byte {offset:,} need {need:,} bytes, "
                f"but bufferViews[{view_index}] has {view['byteLength']:,}.",
            )


def _check_scenes_and_nodes(c: _Checker) -> None:
    scenes = c.items("scenes")
    if c.doc.get("scene") is not None:
        c.index(c.doc["scene"], "scene", "scenes")
    for i, scene in enumerate(scenes):
        c.index_list(scene.get("nodes", []), f"scenes[{i}].nodes", "nodes")
    for i, node in enumerate(c.items("nodes")):
        where = f"nodes[{i}]"
        c.index_list(node.get("children", []), f"{where}.children", "nodes")
        if node.get("mesh") is not None:
            c.index(node["mesh"], f"{where}.mesh", "meshes")
        if node.get("name") is not None:
            c.string(node["name"], f"{where}.name")
        for key, length in (("matrix", 16), ("translation", 3), ("rotation", 4), ("scale", 3)):
            if node.get(key) is not None:
                c.numbers(node[key], f"{where}.{key}", length)


def _check_meshes(c: _Checker) -> None:
    accessors = c.items("accessors")
    for m, mesh in enumerate(c.items("meshes")):
        if mesh.get("name") is not None:
            c.string(mesh["name"], f"meshes[{m}].name")
        primitives = mesh.get("primitives")
        if not isinstance(primitives, list):
            raise c.fail(f"meshes[{m}].primitives", "must be an array of primitives.")
        for p, prim in enumerate(primitives):
            where = f"meshes[{m}].primitives[{p}]"
            prim = c.obj(prim, where)
            attributes = c.obj(prim.get("attributes"), f"{where}.attributes")
            counts = set()
            for name, value in attributes.items():
                field = f"{where}.attributes.{name}"
                if not _ATTRIBUTE_NAME.match(name):
                    raise c.fail(field, "is not a valid attribute name.")
                acc = accessors[c.index(value, field, "accessors")]
                counts.add(acc["count"])
                if name in ATTRIBUTE_TYPES and acc["type"] not in ATTRIBUTE_TYPES[name]:
                    raise c.fail(field, f"{name} must be a {' or '.join(ATTRIBUTE_TYPES[name])} accessor, got {acc['type']}.")
                if name == "JOINTS_0" and (acc["componentType"] not in _JOINT_COMPONENTS or acc.get("normalized")):
                    raise c.fail(field, "JOINTS_0 must hold unsigned bytes or shorts (not normalized).")
            if len(counts) > 1:
                raise c.fail(f"{where}.attributes", f"the attributes have different vertex counts {sorted(counts)}.")
            if prim.get("indices") is not None:
                acc = accessors[c.index(prim["indices"], f"{where}.indices", "accessors")]
                if acc["type"] != "SCALAR" or acc["componentType"] not in _INDEX_COMPONENTS or acc.get("normalized"):
                    problem = "indices must be a SCALAR accessor of unsigned bytes, shorts or ints (not normalized)."
                    raise c.fail(f"{where}.indices", problem)
            if prim.get("material") is not None:
                c.index(prim["material"], f"{where}.material", "materials")
            if prim.get("mode") is not None:
                c.integer(prim["mode"], f"{where}.mode")
            extensions = c.optional_obj(prim.get("extensions"), f"{where}.extensions")
            draco = extensions.get("KHR_draco_mesh_compression")
            if draco is not None:
                field = f"{where}.extensions.KHR_draco_mesh_compression"
                draco = c.obj(draco, field)
                c.index(draco.get("bufferView"), f"{field}.bufferView", "bufferViews")
                ids = c.obj(draco.get("attributes"), f"{field}.attributes")
                for name, value in ids.items():
                    c.integer(value, f"{field}.attributes.{name}")
                    if name not in attributes:
                        raise c.fail(f"{field}.attributes.{name}", f"{name} is compressed but missing from the primitive's attributes.")


def _texture_info(c: _Checker, info: Any, field: str) -> None:
    if info is None:
        return
    info = c.obj(info, field)
    c.index(info.get("index"), f"{field}.index", "textures")
    c.integer(info.get("texCoord", 0), f"{field}.texCoord")
    c.optional_obj(info.get("extensions"), f"{field}.extensions")
    for key in ("scale", "strength"):
        if info.get(key) is not None:
            c.number(info[key], f"{field}.{key}")


def _check_materials_and_textures(c: _Checker) -> None:
    for i, mat in enumerate(c.items("materials")):
        where = f"materials[{i}]"
        if mat.get("name") is not None:
            c.string(mat["name"], f"{where}.name")
        pbr = c.optional_obj(mat.get("pbrMetallicRoughness"), f"{where}.pbrMetallicRoughness")
        if pbr.get("baseColorFactor") is not None:
            c.numbers(pbr["baseColorFactor"], f"{where}.pbrMetallicRoughness.baseColorFactor", 4)
        for key in ("metallicFactor", "roughnessFactor"):
            if pbr.get(key) is not None:
                c.number(pbr[key], f"{where}.pbrMetallicRoughness.{key}")
        for key in ("baseColorTexture", "metallicRoughnessTexture"):
            _texture_info(c, pbr.get(key), f"{where}.pbrMetallicRoughness.{key}")
        for key in ("normalTexture", "occlusionTexture", "emissiveTexture"):
            _texture_info(c, mat.get(key), f"{where}.{key}")
        if mat.get("emissiveFactor") is not None:
            c.numbers(mat["emissiveFactor"], f"{where}.emissiveFactor", 3)
        if mat.get("alphaCutoff") is not None:
            c.number(mat["alphaCutoff"], f"{where}.alphaCutoff")
        if mat.get("alphaMode") is not None:
            c.enum(mat["alphaMode"], f"{where}.alphaMode", _ALPHA_MODES, "alpha modes")
        if not isinstance(mat.get("doubleSided", False), bool):
            raise c.fail(f"{where}.doubleSided", "must be true or false.")
        extensions = c.optional_obj(mat.get("extensions"), f"{where}.extensions")
        strength = extensions.get("KHR_materials_emissive_strength")
        field = f"{where}.extensions.KHR_materials_emissive_strength"
        if strength is not None and c.obj(strength, field).get("emissiveStrength") is not None:
            c.number(strength["emissiveStrength"], f"{field}.emissiveStrength")
    for i, tex in enumerate(c.items("textures")):
        c.optional_obj(tex.get("extensions"), f"textures[{i}].extensions")
        if tex.get("source") is not None:
            c.index(tex["source"], f"textures[{i}].source", "images")
        if tex.get("sampler") is not None:
            c.index(tex["sampler"], f"textures[{i}].sampler", "samplers")
    for i, sampler in enumerate(c.items("samplers")):
        for key in ("wrapS", "wrapT"):
            if sampler.get(key) is not None:
                c.enum(sampler[key], f"samplers[{i}].{key}", _WRAP_MODES, "wrap modes")
    for i, image in enumerate(c.items("images")):
        if image.get("uri") is not None and not isinstance(image["uri"], str):
            raise c.fail(f"images[{i}].uri", "must be a string.")
        for key in ("mimeType", "name"):
            if image.get(key) is not None:
                c.string(image[key], f"images[{i}].{key}")
        if image.get("bufferView") is not None:
            c.index(image["bufferView"], f"images[{i}].bufferView", "bufferViews")
