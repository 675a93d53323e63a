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
from neuralbake.io.gltf import load_gltf
from neuralbake.io.refs import allow_outside_refs

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


def glb_bytes(doc: dict, blob: bytes | None, *, version: int = 2, length: int | None = None) -> bytes:
    text = json.dumps(doc).encode()
    text += b" " * ((-len(text)) % 4)
    body = struct.pack("<II", len(text), 0x4E4F534A) + text
    if blob is not None:
        blob = blob + b"\0" * ((-len(blob)) % 4)
        body += struct.pack("<II", len(blob), 0x004E4942) + blob
    total = 12 + len(body)
    return struct.pack("<4sII", b"glTF", version, total if length is None else length) + body


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
    secret, folder, blob = sentinel
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
    secret, folder, blob = sentinel
    (folder / "link.bin").symlink_to(secret)
    doc, _ = tiny_doc()
    doc["buffers"][0]["uri"] = "link.bin"
    path = folder / "t.gltf"
    path.write_text(json.dumps(doc))
    refused(path, "buffers[0].uri", "outside")


def test_image_uri_outside_the_folder_is_refused(sentinel: tuple[Path, Path, bytes]) -> None:
    secret, folder, blob = sentinel
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
