"""The glTF reader against damaged and hostile files: confinement of buffer and image URIs, GLB
headers, JSON size and depth, structure checks before any array is read, and non-finite values.
Every refusal must be an InputError naming the glTF field, never another exception."""

from __future__ import annotations

import base64
import copy
import io
import json
import os
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from neuralbake.errors import InputError
from neuralbake.io.gltf import DEFAULT_MAX_TRIANGLES, load_gltf, load_gltf_materials
from neuralbake.io.gltf.validate import MAX_ACCESSOR_COUNT
from neuralbake.io.refs import allow_outside_refs

from ._support import glb_bytes

# --- tiny assets ----------------------------------------------------------------------------------------

POSITIONS = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32)
NORMALS = np.tile(np.array([0, 0, 1], np.float32), (4, 1))
UVS = np.array([[0, 1], [1, 1], [1, 0], [0, 0]], np.float32)
JOINTS = np.array([[0, 1, 0, 0], [1, 2, 0, 0], [2, 0, 0, 0], [3, 1, 2, 0]], np.uint16)
WEIGHTS = np.array([[0.5, 0.5, 0, 0], [0.25, 0.75, 0, 0], [1, 0, 0, 0], [0.2, 0.3, 0.5, 0]], np.float32)
INDICES = np.array([0, 1, 2, 0, 2, 3], np.uint16)


def png_data_uri() -> str:
    out = io.BytesIO()
    Image.fromarray(np.full((2, 2, 3), 128, np.uint8)).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def tiny_doc(positions: np.ndarray = POSITIONS, uvs: np.ndarray = UVS, normals: np.ndarray = NORMALS) -> tuple[dict, bytes]:
    """A one-quad glTF with normals, uvs, joints/weights, indices and a textured material."""
    arrays = [
        (positions, "VEC3", 5126),
        (normals, "VEC3", 5126),
        (uvs, "VEC2", 5126),
        (JOINTS, "VEC4", 5123),
        (WEIGHTS, "VEC4", 5126),
        (INDICES, "SCALAR", 5123),
    ]
    blob, views, accessors = b"", [], []
    for array, kind, component in arrays:
        data = np.ascontiguousarray(array).tobytes()
        views.append({"buffer": 0, "byteOffset": len(blob), "byteLength": len(data)})
        accessors.append({"bufferView": len(views) - 1, "componentType": component, "count": len(array), "type": kind})
        blob += data + b"\0" * ((-len(data)) % 4)
    doc = {
        "asset": {"version": "2.0"},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [
            {
                "name": "quad",
                "primitives": [
                    {
                        "attributes": {"POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 2, "JOINTS_0": 3, "WEIGHTS_0": 4},
                        "indices": 5,
                        "material": 0,
                    }
                ],
            }
        ],
        "materials": [{"name": "paint", "pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}}],
        "textures": [{"source": 0, "sampler": 0}],
        "samplers": [{"wrapS": 33071}],
        "images": [{"uri": png_data_uri()}],
        "accessors": accessors,
        "bufferViews": views,
        "buffers": [{"byteLength": len(blob)}],
    }
    return doc, blob


def write_gltf_pair(folder: Path, doc: dict, blob: bytes, name: str = "t") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = copy.deepcopy(doc)
    doc["buffers"][0].setdefault("uri", f"{name}.bin")
    (folder / f"{name}.bin").write_bytes(blob)
    path = folder / f"{name}.gltf"
    path.write_text(json.dumps(doc))
    return path


def write_glb(path: Path, doc: dict, blob: bytes | None, **kw) -> Path:
    path.write_bytes(glb_bytes(doc, blob, **kw))
    return path


def refused(path: Path, field: str, match: str | None = None, **kw) -> InputError:
    """Load ``path`` and assert an InputError (nothing else) whose message names ``field``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            load_gltf(path, **kw)
        except InputError as exc:
            error = exc
        else:
            raise AssertionError(f"{path} loaded, but should have been refused at {field}")
    assert error.field == field, str(error)
    assert f"{field}:" in str(error) and "Fix:" in str(error)
    if match is not None:
        assert match in str(error), str(error)
    return error


def test_the_tiny_asset_loads_as_gltf_and_glb(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    for path in (write_gltf_pair(tmp_path, doc, blob), write_glb(tmp_path / "t.glb", doc, blob)):
        mesh = load_gltf(path).meshes[0]
        np.testing.assert_array_equal(mesh.positions, POSITIONS)
        np.testing.assert_array_equal(mesh.joints, JOINTS)
        assert mesh.joints.dtype == np.uint16 and mesh.weights.dtype == np.float32
        np.testing.assert_array_equal(mesh.weights, WEIGHTS)


def test_joints_and_weights_follow_flat_unwelding(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    del doc["meshes"][0]["primitives"][0]["attributes"]["NORMAL"]
    with pytest.warns(UserWarning, match="generating flat"):
        mesh = load_gltf(write_gltf_pair(tmp_path, doc, blob), generate_normals_mode="flat").meshes[0]
    order = INDICES.astype(np.int64)
    assert mesh.positions.shape == (6, 3)
    np.testing.assert_array_equal(mesh.joints, JOINTS[order])
    np.testing.assert_array_equal(mesh.weights, WEIGHTS[order])


# --- 1. confinement ----------------------------------------------------------------------------------


@pytest.fixture
def sentinel(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """``tmp_path/secret.bin`` (outside) and the asset folder ``tmp_path/asset``."""
    _, blob = tiny_doc()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(blob)  # a valid buffer: only the confinement rule stops it
    folder = tmp_path / "asset"
    folder.mkdir()
    return secret, folder, blob


def test_buffer_uri_outside_the_folder_is_refused(sentinel: tuple[Path, Path, bytes]) -> None:
    _secret, folder, blob = sentinel
    doc, _ = tiny_doc()
    doc["buffers"][0]["uri"] = "../secret.bin"
    path = write_gltf_pair(folder, doc, blob)
    error = refused(path, "buffers[0].uri", "outside the input's folder")
    assert "--allow-outside-refs" in str(error)
    with allow_outside_refs():
        np.testing.assert_array_equal(load_gltf(path).meshes[0].positions, POSITIONS)


def test_absolute_and_climbing_buffer_uris_are_refused(sentinel: tuple[Path, Path, bytes]) -> None:
    secret, folder, blob = sentinel
    for uri in (str(secret), secret.as_uri().replace("file://", ""), "../../../../../../etc/passwd", "sub/../../secret.bin"):
        doc, _ = tiny_doc()
        doc["buffers"][0]["uri"] = uri
        refused(write_gltf_pair(folder, doc, blob), "buffers[0].uri", "outside")


def test_symlink_pointing_outside_is_refused(sentinel: tuple[Path, Path, bytes]) -> None:
    secret, folder, _blob = sentinel
    (folder / "link.bin").symlink_to(secret)
    doc, _ = tiny_doc()
    doc["buffers"][0]["uri"] = "link.bin"
    path = folder / "t.gltf"
    path.write_text(json.dumps(doc))
    refused(path, "buffers[0].uri", "outside")


def test_image_uri_outside_the_folder_is_refused(sentinel: tuple[Path, Path, bytes]) -> None:
    _secret, folder, blob = sentinel
    Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(folder.parent / "secret.png")
    doc, _ = tiny_doc()
    doc["images"][0] = {"uri": "../secret.png"}
    path = write_gltf_pair(folder, doc, blob)
    refused(path, "images[0].uri", "texture image")
    with allow_outside_refs():
        assert load_gltf(path).materials[0].base_color_texture.image.shape == (2, 2, 3)


def test_a_buffer_reads_only_its_declared_bytes(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    path = write_gltf_pair(tmp_path, doc, blob + os.urandom(4096))  # a longer file is fine, the tail unread
    np.testing.assert_array_equal(load_gltf(path).meshes[0].positions, POSITIONS)


def test_malformed_base64_data_uri(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    doc["buffers"][0]["uri"] = "data:application/octet-stream;base64,AAAA*!!notbase64"
    path = tmp_path / "b.gltf"
    path.write_text(json.dumps(doc))
    refused(path, "buffers[0].uri", "malformed base64")
    doc["buffers"][0]["uri"] = "data:application/octet-stream;base64," + base64.b64encode(blob).decode()
    path.write_text(json.dumps(doc))
    np.testing.assert_array_equal(load_gltf(path).meshes[0].positions, POSITIONS)  # data URIs still work


def test_buffer_shorter_than_declared(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    refused(write_gltf_pair(tmp_path, doc, blob[:-8]), "buffers[0].byteLength", "declares")


# --- 2. GLB headers and JSON limits -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field", "match"),
    [
        (lambda b: b"glTX" + b[4:], "header.magic", "magic"),
        (lambda b: b[:8], "header", "shorter than the 12-byte"),
        (lambda b: b[:4] + struct.pack("<I", 99) + b[8:], "header.version", "version is 99"),
        (lambda b: b[:8] + struct.pack("<I", 0) + b[12:], "header.length", "declares 0 bytes"),
        (lambda b: b[:8] + struct.pack("<I", 20) + b[12:], "header.length", "declares 20 bytes"),
        (lambda b: b[:8] + struct.pack("<I", 10**9) + b[12:], "header.length", "declares 1,000,000,000 bytes"),
        (lambda b: b[:12] + struct.pack("<I", 0x7FFFFFFC) + b[16:], "chunks[0].chunkLength", "remain in the file"),
        (lambda b: b[:12] + struct.pack("<I", 6) + b[16:], "chunks[0].chunkLength", "not a multiple of 4"),
        (lambda b: b[:16] + struct.pack("<I", 0x004E4942) + b[20:], "chunks[0].chunkType", "not the JSON chunk"),
    ],
)
def test_damaged_glb_headers(tmp_path: Path, mutate, field: str, match: str) -> None:
    doc, blob = tiny_doc()
    data = mutate(glb_bytes(doc, blob))
    path = tmp_path / "bad.glb"
    path.write_bytes(data)
    refused(path, field, match)


def test_bin_chunk_length_past_the_file(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    data = bytearray(glb_bytes(doc, blob))
    json_length = struct.unpack_from("<I", data, 12)[0]
    struct.pack_into("<I", data, 20 + json_length, 0x7FFFFFFC)
    path = tmp_path / "bin.glb"
    path.write_bytes(bytes(data))
    refused(path, "chunks[1].chunkLength", "remain in the file")


def test_glb_buffer_longer_than_the_bin_chunk(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    doc["buffers"][0]["byteLength"] = len(blob) + 64
    refused(write_glb(tmp_path / "short.glb", doc, blob), "buffers[0].byteLength", "binary chunk")
    refused(write_glb(tmp_path / "nobin.glb", doc, None), "buffers[0].uri", "no uri")


@pytest.mark.parametrize("container", ["gltf", "glb"])
def test_deep_json_nesting_is_refused(tmp_path: Path, container: str) -> None:
    # 5000 nested arrays: a RecursionError inside pygltflib before the depth check.
    if container == "gltf":
        path = tmp_path / "deep.gltf"
        path.write_text('{"asset": {"version": "2.0"}, "extras": ' + "[" * 5000 + "]" * 5000 + "}")
    else:
        path = tmp_path / "deep.glb"
        text = ('{"asset": {"version": "2.0"}, "extras": ' + "[" * 5000 + "]" * 5000 + "}").encode()
        text += b" " * ((-len(text)) % 4)
        body = struct.pack("<II", len(text), 0x4E4F534A) + text
        path.write_bytes(struct.pack("<4sII", b"glTF", 2, 12 + len(body)) + body)
    with pytest.raises(InputError, match="nests arrays/objects 5001 deep"):
        load_gltf(path)


def test_json_size_limit(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    path = write_gltf_pair(tmp_path, doc, blob)
    refused(path, "max_json_bytes", "at most 100 are read", max_json_bytes=100)
    refused(write_glb(tmp_path / "t.glb", doc, blob), "max_json_bytes", "GLB JSON chunk", max_json_bytes=100)
    assert load_gltf(path, max_json_bytes=10**6).meshes  # and a generous limit reads it


def test_json_that_is_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "list.gltf"
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match="not an object"):
        load_gltf(path)


# --- 3. structure before arrays ---------------------------------------------------------------------------


def _set(path: str, value):
    """A mutation of the document: ``a.0.b`` = value (``del`` removes the key)."""

    def change(doc: dict) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        target = doc
        for key in keys[:-1]:
            target = target[key]
        if value == "del":
            del target[keys[-1]]
        else:
            target[keys[-1]] = value

    return change


PRIM = "meshes.0.primitives.0"
STRUCTURE_CASES = [
    ("scene", 3, "scene"),
    ("scenes.0.nodes", [5], "scenes[0].nodes[0]"),
    ("scenes.0.nodes", "0", "scenes[0].nodes"),
    ("nodes.0.children", [9], "nodes[0].children[0]"),
    ("nodes.0.mesh", 3, "nodes[0].mesh"),
    ("nodes.0.mesh", True, "nodes[0].mesh"),
    ("nodes.0.translation", ["a", 0, 0], "nodes[0].translation[0]"),
    ("nodes.0.matrix", [1, 0, 0], "nodes[0].matrix"),
    (f"{PRIM}.attributes.POSITION", 7, "meshes[0].primitives[0].attributes.POSITION"),
    (f"{PRIM}.attributes.POSITION", 1.5, "meshes[0].primitives[0].attributes.POSITION"),
    (f"{PRIM}.attributes.NORMAL", 2, "meshes[0].primitives[0].attributes.NORMAL"),  # a VEC2 accessor
    (f"{PRIM}.attributes.__class__", 0, "meshes[0].primitives[0].attributes.__class__"),
    (f"{PRIM}.indices", 9, "meshes[0].primitives[0].indices"),
    (f"{PRIM}.indices", 0, "meshes[0].primitives[0].indices"),  # a float VEC3 accessor
    (f"{PRIM}.material", 4, "meshes[0].primitives[0].material"),
    (f"{PRIM}.attributes", [0], "meshes[0].primitives[0].attributes"),
    ("meshes.0.primitives", {"a": 1}, "meshes[0].primitives"),
    ("accessors.0.bufferView", 9, "accessors[0].bufferView"),
    ("accessors.0.bufferView", "0", "accessors[0].bufferView"),
    ("accessors.0.byteOffset", -4, "accessors[0].byteOffset"),
    ("accessors.0.count", -1, "accessors[0].count"),
    ("accessors.0.count", 1000, "accessors[0].count"),
    ("accessors.0.byteOffset", 40, "accessors[0].count"),  # runs past its buffer view
    ("accessors.0.componentType", 9999, "accessors[0].componentType"),
    ("accessors.0.type", "VEC7", "accessors[0].type"),
    ("accessors.0.normalized", "yes", "accessors[0].normalized"),
    ("accessors.0", 5, "accessors[0]"),
    ("accessors", {"0": 1}, "accessors"),
    ("bufferViews.0.buffer", 3, "bufferViews[0].buffer"),
    ("bufferViews.0.byteOffset", -8, "bufferViews[0].byteOffset"),
    ("bufferViews.0.byteLength", -1, "bufferViews[0].byteLength"),
    ("bufferViews.0.byteLength", 10**9, "bufferViews[0].byteLength"),
    ("bufferViews.0.byteStride", 2, "bufferViews[0].byteStride"),
    ("bufferViews.0.byteStride", 254, "bufferViews[0].byteStride"),
    ("bufferViews.0.byteStride", 6, "bufferViews[0].byteStride"),
    ("buffers.0.byteLength", -5, "buffers[0].byteLength"),
    ("buffers.0.byteLength", "big", "buffers[0].byteLength"),
    ("textures.0.source", 4, "textures[0].source"),
    ("textures.0.sampler", 2, "textures[0].sampler"),
    ("materials.0.pbrMetallicRoughness.baseColorTexture.index", 6, "materials[0].pbrMetallicRoughness.baseColorTexture.index"),
    ("materials.0.normalTexture", {"index": -1}, "materials[0].normalTexture.index"),
    ("materials.0.emissiveFactor", [1, "x", 0], "materials[0].emissiveFactor[1]"),
    ("materials.0.pbrMetallicRoughness.metallicFactor", "shiny", "materials[0].pbrMetallicRoughness.metallicFactor"),
    ("images.0.bufferView", 17, "images[0].bufferView"),
    ("asset.version", "1.0", "asset.version"),
    ("asset", "del", "asset"),
]


@pytest.mark.parametrize(("where", "value", "field"), STRUCTURE_CASES, ids=[f"{c[0]}={c[1]!r:.12}" for c in STRUCTURE_CASES])
@pytest.mark.parametrize("container", ["gltf", "glb"])
def test_structure_is_checked_before_arrays(tmp_path: Path, where: str, value, field: str, container: str) -> None:
    doc, blob = tiny_doc()
    _set(where, value)(doc)
    path = write_gltf_pair(tmp_path, doc, blob) if container == "gltf" else write_glb(tmp_path / "t.glb", doc, blob)
    refused(path, field)


def test_index_messages_say_what_is_missing(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    doc["accessors"][3]["bufferView"] = 42
    error = refused(write_gltf_pair(tmp_path, doc, blob), "accessors[3].bufferView")
    assert "bufferViews[42]" in error.problem and "6 bufferViews" in error.problem


def test_attributes_of_different_lengths(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    doc["accessors"][1]["count"] = 3
    refused(write_gltf_pair(tmp_path, doc, blob), "meshes[0].primitives[0].attributes", "different vertex counts")


# --- 4. non-finite values ------------------------------------------------------------------------------


def test_non_finite_positions_are_refused(tmp_path: Path) -> None:
    positions = POSITIONS.copy()
    positions[1, 0] = np.nan
    positions[2] = np.inf
    doc, blob = tiny_doc(positions=positions)
    error = refused(write_gltf_pair(tmp_path, doc, blob), "meshes[0].primitives[0].attributes.POSITION")
    assert "POSITION has 4 non-finite values" in error.problem and "accessors[0]" in error.problem


def test_transforms_overflowing_positions_are_refused(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    doc["nodes"] = [{"scale": [1e308, 1, 1], "children": [1]}, {"scale": [1e308, 1, 1], "mesh": 0}]
    refused(write_gltf_pair(tmp_path, doc, blob), "meshes[0].primitives[0].attributes.POSITION", "finite float range")


def test_non_finite_uvs_are_refused(tmp_path: Path) -> None:
    uvs = UVS.copy()
    uvs[0, 1] = np.inf
    doc, blob = tiny_doc(uvs=uvs)
    error = refused(write_gltf_pair(tmp_path, doc, blob), "meshes[0].primitives[0].attributes.TEXCOORD_0")
    assert "TEXCOORD_0 has 1 non-finite value" in error.problem


def test_non_finite_normals_are_repaired_with_a_warning(tmp_path: Path) -> None:
    normals = NORMALS.copy()
    normals[3] = np.nan
    doc, blob = tiny_doc(normals=normals)
    with pytest.warns(UserWarning, match="1 non-finite normal"):
        mesh = load_gltf(write_gltf_pair(tmp_path, doc, blob)).meshes[0]
    np.testing.assert_allclose(mesh.normals, NORMALS, atol=1e-6)


# --- 6. still-unsupported extensions ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["EXT_meshopt_compression", "KHR_meshopt_compression", "KHR_texture_basisu", "EXT_texture_webp"])
def test_unsupported_extensions_are_still_refused(tmp_path: Path, name: str) -> None:
    doc, blob = tiny_doc()
    doc["extensionsUsed"] = [name]
    doc["extensionsRequired"] = [name]
    error = refused(write_gltf_pair(tmp_path, doc, blob), f"extensionsUsed.{name}")
    assert "gltf-transform" in error.fix


# --- 5. type confusion, normalized accessors, singular transforms, accessor counts ----------------------

# Values of the wrong JSON type must fail as an InputError before any dict/set lookup (a list is unhashable).
TYPE_CASES = [
    ("accessors.0.componentType", [5126], "accessors[0].componentType"),
    ("accessors.0.componentType", {"a": 1}, "accessors[0].componentType"),
    ("accessors.0.componentType", True, "accessors[0].componentType"),
    ("accessors.0.componentType", 5126.0, "accessors[0].componentType"),
    ("accessors.0.type", ["VEC3"], "accessors[0].type"),
    ("accessors.0.type", {"VEC3": 1}, "accessors[0].type"),
    (f"{PRIM}.mode", [4], "meshes[0].primitives[0].mode"),
    (f"{PRIM}.extensions", [], "meshes[0].primitives[0].extensions"),
    ("meshes.0.name", ["quad"], "meshes[0].name"),
    ("nodes.0.name", {"n": 1}, "nodes[0].name"),
    ("images.0.mimeType", ["image/png"], "images[0].mimeType"),
    ("images.0.name", 7, "images[0].name"),
    ("samplers.0.wrapS", [33071], "samplers[0].wrapS"),
    ("samplers.0.wrapT", {"x": 1}, "samplers[0].wrapT"),
    ("samplers.0.wrapS", 5, "samplers[0].wrapS"),  # not one of the three glTF wrap modes
    ("samplers.0.wrapS", True, "samplers[0].wrapS"),
    ("materials.0.alphaMode", ["MASK"], "materials[0].alphaMode"),
    ("materials.0.alphaMode", "CUTOUT", "materials[0].alphaMode"),
    ("materials.0.name", ["paint"], "materials[0].name"),
    ("materials.0.doubleSided", "yes", "materials[0].doubleSided"),
    ("materials.0.pbrMetallicRoughness", [], "materials[0].pbrMetallicRoughness"),
    ("materials.0.pbrMetallicRoughness", 0, "materials[0].pbrMetallicRoughness"),
    ("materials.0.extensions", [], "materials[0].extensions"),
    ("materials.0.extensions", {"KHR_materials_emissive_strength": [2]}, "materials[0].extensions.KHR_materials_emissive_strength"),
    ("materials.0.pbrMetallicRoughness.baseColorTexture.extensions", [], "materials[0].pbrMetallicRoughness.baseColorTexture.extensions"),
    ("textures.0.extensions", [1], "textures[0].extensions"),
    ("extensions", [], "extensions"),
    ("extensionsUsed", [["KHR_materials_unlit"]], "extensionsUsed"),
    ("extensionsRequired", {"KHR_materials_unlit": 1}, "extensionsRequired"),
    ("textures", 5, "textures"),  # a top-level array that is not one, referenced by an index
    ("images", 1.5, "images"),
    ("samplers", True, "samplers"),
]


@pytest.mark.parametrize(("where", "value", "field"), TYPE_CASES, ids=[f"{c[0]}={c[1]!r:.16}" for c in TYPE_CASES])
@pytest.mark.parametrize("loader", [load_gltf, load_gltf_materials], ids=["load_gltf", "load_gltf_materials"])
def test_wrong_json_types_are_input_errors(tmp_path: Path, where: str, value, field: str, loader) -> None:
    doc, blob = tiny_doc()
    _set(where, value)(doc)
    path = write_gltf_pair(tmp_path, doc, blob)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError) as caught:
            loader(path)
    assert caught.value.field == field, str(caught.value)
    assert f"{field}:" in str(caught.value) and "Fix:" in str(caught.value)


NORMALIZED_CASES = [
    ("accessors.0", 5126, "accessors[0].normalized"),  # float POSITION
    ("accessors.4", 5126, "accessors[4].normalized"),  # float WEIGHTS_0
    ("accessors.5", 5125, "accessors[5].normalized"),  # uint32 (checked before its view's length)
]


@pytest.mark.parametrize(("where", "component", "field"), NORMALIZED_CASES, ids=[c[2] for c in NORMALIZED_CASES])
@pytest.mark.parametrize("container", ["gltf", "glb"])
def test_normalized_float_and_uint32_accessors_are_refused(tmp_path: Path, where: str, component: int, field: str, container: str) -> None:
    doc, blob = tiny_doc()
    _set(f"{where}.componentType", component)(doc)
    _set(f"{where}.normalized", True)(doc)
    path = write_gltf_pair(tmp_path, doc, blob) if container == "gltf" else write_glb(tmp_path / "t.glb", doc, blob)
    refused(path, field, f"componentType {component}")


@pytest.mark.parametrize(
    ("where", "field"),
    [("accessors.5", "meshes[0].primitives[0].indices"), ("accessors.3", "meshes[0].primitives[0].attributes.JOINTS_0")],
)
def test_normalized_indices_and_joints_are_refused(tmp_path: Path, where: str, field: str) -> None:
    doc, blob = tiny_doc()
    _set(f"{where}.normalized", True)(doc)
    refused(write_gltf_pair(tmp_path, doc, blob), field, "not normalized")


def _face_normals(mesh) -> np.ndarray:
    p = mesh.positions.astype(np.float64)
    i = mesh.indices
    face = np.cross(p[i[:, 1]] - p[i[:, 0]], p[i[:, 2]] - p[i[:, 0]])
    return face / np.linalg.norm(face, axis=1, keepdims=True)


_ROT90_X = [1, 0, 0, 0, 0, 0, 1, 0, 0, -1, 0, 0, 0, 0, 0, 1]  # column-major: +90 degrees about x


@pytest.mark.parametrize(
    "node",
    [
        {"scale": [1, 1, 0]},  # the quad lies in z = 0: a zero z scale leaves it whole
        {"scale": [-1, 1, 0]},  # mirrored and singular
        {"scale": [2, 3, 0], "rotation": [0, 0, 0.38268343, 0.92387953]},
        {"matrix": [2, 0, 0, 0, 0, 0.5, 0, 0, 0, 0, 0, 0, 1, 2, 3, 1]},
    ],
    ids=["scale-z0", "mirror-z0", "rotated-z0", "matrix-z0"],
)
def test_singular_node_transforms_keep_surviving_triangles(tmp_path: Path, node: dict) -> None:
    doc, blob = tiny_doc()
    doc["nodes"] = [{"mesh": 0, **node}]
    mesh = load_gltf(write_gltf_pair(tmp_path, doc, blob)).meshes[0]  # once np.linalg.inv: LinAlgError
    assert mesh.num_triangles == 2
    np.testing.assert_allclose(np.linalg.norm(mesh.normals, axis=1), 1.0, atol=1e-6)
    face = _face_normals(mesh)
    for k in range(3):  # vertex normals agree with the winding after the transform
        assert (np.sum(mesh.normals[mesh.indices[:, k]] * face, axis=1) > 0.99).all()


@pytest.mark.parametrize(
    "nodes",
    [
        [{"mesh": 0, "scale": [1, 0, 1]}],  # the quad (in z = 0) flattened onto the x axis
        [{"mesh": 0, "scale": [0, 0, 0]}],  # the usual way to hide a node
        [{"mesh": 0, "matrix": [0] * 16}],
        [{"scale": [1, 1, 0], "children": [1]}, {"mesh": 0, "matrix": _ROT90_X}],  # turned into y = 0, then z squashed
    ],
    ids=["scale-y0", "scale-000", "zero-matrix", "rotated-child"],
)
def test_collapsed_primitives_are_skipped(tmp_path: Path, nodes: list) -> None:
    doc, blob = tiny_doc()
    doc["nodes"] = nodes
    doc["scenes"] = [{"nodes": [0]}]
    path = write_gltf_pair(tmp_path, doc, blob)
    with warnings.catch_warnings(record=True) as record, pytest.raises(InputError) as caught:
        warnings.simplefilter("always")
        load_gltf(path)
    assert any("no triangles left; the primitive is skipped" in str(w.message) for w in record)
    assert caught.value.field == "scenes" and "no triangle meshes" in caught.value.problem


def test_a_hidden_node_beside_a_visible_one(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    doc["nodes"] = [{"mesh": 0, "scale": [0, 0, 0]}, {"mesh": 0, "translation": [0, 0, 1]}]
    doc["scenes"] = [{"nodes": [0, 1]}]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        scene = load_gltf(write_gltf_pair(tmp_path, doc, blob))
    assert any("primitive is skipped" in str(w.message) for w in record)
    assert len(scene.meshes) == 1
    np.testing.assert_allclose(scene.meshes[0].positions, POSITIONS + [0, 0, 1])
    np.testing.assert_allclose(scene.meshes[0].normals, NORMALS, atol=1e-6)


def test_the_accessor_count_cap_matches_the_triangle_budget() -> None:
    assert MAX_ACCESSOR_COUNT == 3 * DEFAULT_MAX_TRIANGLES


@pytest.mark.parametrize("index", [0, 2, 5])
@pytest.mark.parametrize("container", ["gltf", "glb"])
def test_huge_zero_filled_accessors_are_refused(tmp_path: Path, index: int, container: str) -> None:
    # No bufferView: all zeros per the spec, allocated from the count alone (2**45 x 3 floats = 400 TB).
    doc, blob = tiny_doc()
    del doc["accessors"][index]["bufferView"]
    doc["accessors"][index]["count"] = 2**45
    path = write_gltf_pair(tmp_path, doc, blob) if container == "gltf" else write_glb(tmp_path / "t.glb", doc, blob)
    error = refused(path, f"accessors[{index}].count", f"at most {MAX_ACCESSOR_COUNT:,}")
    assert "max_triangles" in error.fix
    with pytest.raises(InputError) as caught:
        load_gltf_materials(path)  # the materials-only reader validates the same document
    assert caught.value.field == f"accessors[{index}].count"


def test_the_accessor_cap_follows_a_raised_triangle_budget(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    del doc["accessors"][2]["bufferView"]
    doc["accessors"][2]["count"] = MAX_ACCESSOR_COUNT + 1  # unused by the scene: never decoded
    doc["samplers"], doc["textures"], doc["images"] = [], [], []
    doc["materials"] = [{"name": "plain"}]
    del doc["meshes"][0]["primitives"][0]["attributes"]["TEXCOORD_0"]
    path = write_gltf_pair(tmp_path, doc, blob)
    refused(path, "accessors[2].count")
    assert load_gltf(path, max_triangles=MAX_ACCESSOR_COUNT).num_triangles == 2


def _zero_positions(count: int, *, indexed: bool) -> tuple[dict, bytes]:
    doc, blob = tiny_doc()
    prim = doc["meshes"][0]["primitives"][0]
    prim["attributes"] = {"POSITION": 0}
    if not indexed:
        del prim["indices"]
    doc["accessors"][0] = {"componentType": 5126, "count": count, "type": "VEC3"}
    doc["materials"] = [{"name": "plain"}]
    doc["samplers"], doc["textures"], doc["images"] = [], [], []
    return doc, blob


def test_non_indexed_primitives_count_against_the_budget(tmp_path: Path) -> None:
    doc, blob = _zero_positions(3000, indexed=False)
    doc["nodes"] = [{"mesh": 0}, {"mesh": 0}]  # instanced twice: 2 x 1000 triangles
    doc["scenes"] = [{"nodes": [0, 1]}]
    refused(write_gltf_pair(tmp_path, doc, blob), "max_triangles", "2,000 triangles", max_triangles=1999)


def test_unreferenced_vertices_count_against_the_budget(tmp_path: Path) -> None:
    doc, blob = _zero_positions(3000, indexed=True)  # 2 triangles, but 3000 vertices decoded
    refused(write_gltf_pair(tmp_path, doc, blob), "max_triangles", "3,000 vertices", max_triangles=100)


def test_missing_image_file_names_the_material(tmp_path: Path) -> None:
    doc, blob = tiny_doc()
    doc["images"][0] = {"uri": "absent.png"}
    error = refused(write_gltf_pair(tmp_path, doc, blob), "images[0].uri", "does not exist")
    assert "'paint'" in error.problem and "absent.png" in error.fix
