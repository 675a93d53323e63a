"""Draco-compressed glTF primitives (KHR_draco_mesh_compression) decoded with DracoPy: a mesh
encoded here round-trips with every attribute, damage is an InputError naming the field, and the
shared BrainStem asset decodes to the same surface, joints and weights as its uncompressed twin."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import DracoPy
import numpy as np
import pytest

from neuralbake.errors import InputError
from neuralbake.io.gltf import load_gltf

from ._support import glb_bytes

EXT = "KHR_draco_mesh_compression"


def grid_mesh(n: int = 4) -> dict[str, np.ndarray]:
    """An n x n vertex height field with normals, uvs, joints and weights that vary per vertex."""
    y, x = np.mgrid[0:n, 0:n].astype(np.float64)
    positions = np.stack([x, y, 0.1 * x * y], axis=-1).reshape(-1, 3)
    quads = [(r * n + c, r * n + c + 1, (r + 1) * n + c + 1, (r + 1) * n + c) for r in range(n - 1) for c in range(n - 1)]
    faces = np.array([t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))], np.uint32)
    normals = np.tile([0.0, 0.0, 1.0], (n * n, 1))
    k = np.arange(n * n)
    joints = np.stack([k % 5, (k + 1) % 5, k % 3, np.zeros_like(k)], axis=1).astype(np.uint16)
    w = np.stack([k + 1.0, np.full(n * n, 2.0), np.ones(n * n), np.zeros(n * n)], axis=1)
    weights = (w / w.sum(axis=1, keepdims=True)).astype(np.float32)
    uv = positions[:, :2] / (n - 1)
    return {"positions": positions, "faces": faces, "normals": normals, "uv": uv, "joints": joints, "weights": weights}


def draco_glb(path: Path, mesh: dict[str, np.ndarray], *, corrupt: bool = False, missing_id: bool = False) -> Path:
    """A GLB whose only primitive is Draco-compressed, built the way exporters lay it out."""
    payload = DracoPy.encode(
        mesh["positions"],
        mesh["faces"],
        quantization_bits=16,
        normals=mesh["normals"],
        tex_coord=mesh["uv"],
        generic_attributes={20: mesh["joints"], 21: mesh["weights"]},
    )
    probe = DracoPy.decode(payload)  # DracoPy picks the unique ids of positions/normals/uvs itself
    ids = {a["attribute_type"]: a["unique_id"] for a in probe.attributes}
    attributes = {
        "POSITION": ids[DracoPy.AttributeType.POSITION],
        "NORMAL": ids[DracoPy.AttributeType.NORMAL],
        "TEXCOORD_0": ids[DracoPy.AttributeType.TEX_COORD],
        "JOINTS_0": 20,
        "WEIGHTS_0": 99 if missing_id else 21,
    }
    if corrupt:
        payload = payload[: len(payload) // 3]
    count = len(probe.points)
    accessors = [
        {"componentType": 5126, "count": count, "type": "VEC3"},
        {"componentType": 5126, "count": count, "type": "VEC3"},
        {"componentType": 5126, "count": count, "type": "VEC2"},
        {"componentType": 5123, "count": count, "type": "VEC4"},
        {"componentType": 5126, "count": count, "type": "VEC4"},
        {"componentType": 5125, "count": 3 * len(mesh["faces"]), "type": "SCALAR"},
    ]
    prim = {
        "attributes": {"POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 2, "JOINTS_0": 3, "WEIGHTS_0": 4},
        "indices": 5,
        "extensions": {EXT: {"bufferView": 0, "attributes": attributes}},
    }
    padded = payload + b"\0" * ((-len(payload)) % 4)
    doc = {
        "asset": {"version": "2.0"},
        "extensionsUsed": [EXT],
        "extensionsRequired": [EXT],
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [{"name": "grid", "primitives": [prim]}],
        "accessors": accessors,
        "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": len(payload)}],
        "buffers": [{"byteLength": len(padded)}],
    }
    path.write_bytes(glb_bytes(doc, padded))
    return path


def test_self_made_draco_glb_keeps_every_attribute(tmp_path: Path) -> None:
    mesh = grid_mesh()
    got = load_gltf(draco_glb(tmp_path / "grid.glb", mesh)).meshes[0]
    assert got.num_triangles == len(mesh["faces"])
    # Draco reorders (and may split) vertices: match each decoded vertex to its source by position.
    step = np.ptp(mesh["positions"], axis=0).max() / (2**16 - 1)
    source = np.argmin(np.linalg.norm(got.positions[:, None, :] - mesh["positions"][None].astype(np.float32), axis=2), axis=1)
    np.testing.assert_allclose(got.positions, mesh["positions"][source], atol=2 * step)
    np.testing.assert_array_equal(got.joints, mesh["joints"][source])
    assert got.joints.dtype == np.uint16
    np.testing.assert_allclose(got.weights, mesh["weights"][source], atol=1e-6)
    np.testing.assert_allclose(got.uv0, mesh["uv"][source], atol=1e-6)
    np.testing.assert_allclose(got.normals, mesh["normals"][source], atol=1e-6)
    # Same surface: the set of triangle centroids agrees.
    want = np.sort(mesh["positions"][mesh["faces"].astype(np.int64)].mean(axis=1), axis=0)
    have = np.sort(got.positions[got.indices].mean(axis=1), axis=0)
    np.testing.assert_allclose(have, want, atol=2 * step)


def test_corrupt_draco_payload(tmp_path: Path) -> None:
    field = rf"meshes\[0\]\.primitives\[0\]\.extensions\.{EXT}\.bufferView"
    with pytest.raises(InputError, match=rf"{field}: the Draco payload cannot be decoded"):
        load_gltf(draco_glb(tmp_path / "bad.glb", grid_mesh(), corrupt=True))


def test_draco_unique_id_not_in_the_payload(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=rf"{EXT}\.attributes\.WEIGHTS_0: the Draco payload has no attribute with unique id 99"):
        load_gltf(draco_glb(tmp_path / "ids.glb", grid_mesh(), missing_id=True))


def test_draco_payload_bigger_than_declared(tmp_path: Path) -> None:
    path = draco_glb(tmp_path / "big.glb", grid_mesh())
    data = bytearray(path.read_bytes())
    json_length = struct.unpack_from("<I", data, 12)[0]
    text = bytes(data[20 : 20 + json_length]).replace(b'"count": 54', b'"count": 27')  # indices: 18 -> 9 triangles
    assert len(text) == json_length
    data[20 : 20 + json_length] = text
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="decodes to 18 triangles, but the indices accessor declares 9"):
        load_gltf(path)


@pytest.mark.needs_shared
def test_brainstem_draco_matches_the_plain_asset(shared_dir: Path) -> None:
    folder = shared_dir / "assets/BrainStem"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = load_gltf(folder / "BrainStem.glb")
        draco = load_gltf(folder / "BrainStem_draco.glb")
    assert len(plain.meshes) == len(draco.meshes) == 59
    assert plain.num_triangles == draco.num_triangles
    lo_p, hi_p = plain.bounds()
    lo_d, hi_d = draco.bounds()
    np.testing.assert_allclose(lo_d, lo_p, atol=1e-3)
    np.testing.assert_allclose(hi_d, hi_p, atol=1e-3)
    for a, b in zip(plain.meshes, draco.meshes):
        assert a.num_triangles == b.num_triangles and len(a.positions) == len(b.positions), a.name
        tol = 2 * np.ptp(a.positions, axis=0).max() / (2**14 - 1) + 1e-6  # Draco's default 14-bit positions
        np.testing.assert_allclose(np.sort(b.positions, axis=0), np.sort(a.positions, axis=0), atol=tol)
        ca = np.sort(a.positions[a.indices].mean(axis=1), axis=0)
        cb = np.sort(b.positions[b.indices].mean(axis=1), axis=0)
        np.testing.assert_allclose(cb, ca, atol=tol)
        assert a.joints is not None and b.joints is not None and a.weights is not None and b.weights is not None
        np.testing.assert_allclose(a.weights.sum(axis=1), 1.0, atol=1e-2)
        np.testing.assert_allclose(b.weights.sum(axis=1), 1.0, atol=1e-2)
        # Per vertex (matched by nearest position), the same joints carry the same weights.
        near = np.argmin(np.linalg.norm(b.positions[:, None] - a.positions[None], axis=2), axis=1)
        for v in range(0, len(b.positions), 7):
            wa = {int(j): float(w) for j, w in zip(a.joints[near[v]], a.weights[near[v]]) if w > 1e-3}
            wb = {int(j): float(w) for j, w in zip(b.joints[v], b.weights[v]) if w > 1e-3}
            assert wa.keys() == wb.keys(), (a.name, v)
            assert all(abs(wa[j] - wb[j]) < 1e-2 for j in wa)
