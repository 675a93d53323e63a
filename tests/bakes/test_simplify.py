"""QEM decimation for LODs: budgets reached, uv charts kept, per-vertex weights steer the plain path
and protect on the textured one, skinned meshes stay skinned and pose like their original; bad
budgets are refused."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from neuralbake.bakes.simplify import decimate_scene, triangle_budget
from neuralbake.errors import InputError
from neuralbake.io.gltf import Mesh, Scene, load_gltf

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path) -> Scene:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_gltf(path)


def _uv_area(mesh: Mesh) -> float:
    a = mesh.uv0[mesh.indices]
    e1, e2 = a[:, 1] - a[:, 0], a[:, 2] - a[:, 0]
    return float(0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).sum())


def _sphere(rows: int = 24, cols: int = 48) -> Scene:
    """A closed sphere without uvs (welded poles), one material."""
    theta = np.linspace(0, math.pi, rows + 1)[1:-1]
    phi = np.linspace(0, 2 * math.pi, cols, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    ring = np.stack((np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)), -1).reshape(-1, 3)
    points = np.concatenate((ring, [[0, 0, 1], [0, 0, -1]])).astype(np.float32)
    top, bottom = len(ring), len(ring) + 1
    faces = []
    for i in range(rows - 2):
        for j in range(cols):
            a, b, c, d = i * cols + j, i * cols + (j + 1) % cols, (i + 1) * cols + j, (i + 1) * cols + (j + 1) % cols
            faces += [(a, c, b), (b, c, d)]
    for j in range(cols):
        faces += [(top, j, (j + 1) % cols), (bottom, (rows - 3) * cols + (j + 1) % cols, (rows - 3) * cols + j)]
    return Scene(meshes=[Mesh(positions=points, indices=np.array(faces, np.int64), normals=points.copy())], materials=[])


def test_budgets_are_checked() -> None:
    assert triangle_budget(1000, ratio=0.25) == 250 and triangle_budget(1000, triangles=300) == 300 and triangle_budget(10, triangles=99) == 10
    for bad in (0.0, 1.5, -0.1, float("nan"), True, None):
        with pytest.raises(InputError, match="ratio"):
            triangle_budget(1000, ratio=bad)
    with pytest.raises(InputError, match="triangles"):
        triangle_budget(1000, triangles=-3)
    with pytest.raises(InputError, match="no triangles"):
        decimate_scene(Scene(meshes=[], materials=[]), 10)


def test_a_textured_mesh_reaches_its_budget_and_keeps_its_uv_charts() -> None:
    crate = _load(ROOT / "examples" / "crate" / "crate.gltf")
    result = decimate_scene(crate, 500)
    mesh = result.scene.meshes[0]
    assert abs(result.triangles_after - 500) <= 5 and result.triangles_before == crate.num_triangles
    assert _uv_area(mesh) == pytest.approx(_uv_area(crate.meshes[0]), rel=0.05)  # the charts are still covered
    assert np.allclose(np.linalg.norm(mesh.normals, axis=1), 1.0, atol=1e-4)
    assert mesh.indices.max() < len(mesh.positions) and len(result.source_vertex[0]) == len(mesh.positions)
    # every new vertex lies where the original surface was (QEM moves vertices only slightly)
    nearest = np.sqrt(((mesh.positions[:, None] - crate.meshes[0].positions[None]) ** 2).sum(-1)).min(1)
    assert nearest.max() < 0.1 * float(np.linalg.norm(np.subtract(*crate.bounds())))


def test_weights_keep_vertices_on_the_plain_path_and_protect_on_the_textured_one() -> None:
    sphere = _sphere()
    plain = decimate_scene(sphere, 300).scene.meshes[0]
    heavy = np.where(sphere.meshes[0].positions[:, 2] > 0.3, 50.0, 1.0)
    weighted = decimate_scene(sphere, 300, vertex_weights=[heavy]).scene.meshes[0]
    top = lambda m: int((m.positions[:, 2] > 0.3).sum())  # noqa: E731
    assert top(weighted) > 1.5 * top(plain)  # the heavy cap keeps its vertices

    crate = _load(ROOT / "examples" / "crate" / "crate.gltf")
    original = crate.meshes[0]
    keep = original.positions[:, 1] > np.quantile(original.positions[:, 1], 0.8)  # the top of the crate
    protected = decimate_scene(crate, 500, vertex_weights=[np.where(keep, 10.0, 1.0)]).scene.meshes[0]
    kept = {tuple(p) for p in np.round(protected.positions, 5)}
    assert all(tuple(p) in kept for p in np.round(original.positions[keep], 5))  # untouched where protected


def test_a_skinned_character_stays_skinned_and_poses_like_its_original(shared_dir: Path) -> None:
    from neuralbake.render.skinning import pose_scene

    brainstem = _load(shared_dir / "assets" / "BrainStem" / "BrainStem.glb")
    result = decimate_scene(brainstem, round(0.1 * brainstem.num_triangles))
    assert abs(result.triangles_after - 0.1 * brainstem.num_triangles) < 0.02 * brainstem.num_triangles
    assert all(m.skin == 0 and m.bind_positions is not None and m.weights is not None for m in result.scene.meshes)
    for time in (0.0, 12.0):
        lod, original = pose_scene(result.scene, 0, time), pose_scene(brainstem, 0, time)
        ref = np.concatenate([m.positions for m in original.meshes])
        sample = np.concatenate([m.positions for m in lod.meshes])[::7]
        gap = np.sqrt(((sample[:, None] - ref[None, ::3]) ** 2).sum(-1)).min(1)
        assert np.quantile(gap, 0.95) < 0.03 * float(np.linalg.norm(ref.max(0) - ref.min(0)))  # follows the animated body
