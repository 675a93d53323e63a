"""Skins and animation: linear blend skinning (gradient-checked), the glTF rig reader and clip
sampling (LINEAR with slerp, STEP, CUBICSPLINE) against hand-computed poses of a tiny two-bone
rig, BrainStem posed at several frames against an independent evaluation (pygltflib + scipy),
and bad rigs refused with the field named."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralbake.errors import InputError
from neuralbake.io.gltf import load_gltf
from neuralbake.io.gltf.rig import Channel, sample_channel, slerp
from neuralbake.render.skinning import pose_scene, skin_normals, skin_positions

# --- linear blend skinning ------------------------------------------------------------------------


def _random_skin(vertices: int = 5, joints: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    positions = torch.randn(vertices, 3, generator=g, dtype=torch.float64)
    index = torch.randint(0, joints, (vertices, 4), generator=g)
    weights = torch.rand(vertices, 4, generator=g, dtype=torch.float64)
    weights = weights / weights.sum(1, keepdim=True)
    matrices = torch.eye(4, dtype=torch.float64).repeat(joints, 1, 1)
    matrices[:, :3, :] += 0.3 * torch.randn(joints, 3, 4, generator=g, dtype=torch.float64)
    return positions, index, weights, matrices


def test_skinning_gradients_match_finite_differences() -> None:
    positions, index, weights, matrices = _random_skin()
    inputs = (positions.requires_grad_(), weights.requires_grad_(), matrices.requires_grad_())
    assert torch.autograd.gradcheck(lambda p, w, m: skin_positions(p, index, w, m), inputs)
    normals = torch.nn.functional.normalize(torch.randn(5, 3, dtype=torch.float64), dim=1).requires_grad_()
    assert torch.autograd.gradcheck(lambda n, w, m: skin_normals(n, index, w, m), (normals, weights, matrices))


def test_skinning_is_exact_for_rigid_joints_and_checks_its_inputs() -> None:
    positions, index, weights, _ = _random_skin()
    angle = 0.7
    rotation = torch.tensor([[math.cos(angle), -math.sin(angle), 0], [math.sin(angle), math.cos(angle), 0], [0, 0, 1]], dtype=torch.float64)
    rigid = torch.eye(4, dtype=torch.float64).repeat(3, 1, 1)
    rigid[:, :3, :3] = rotation
    rigid[:, :3, 3] = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    expected = positions @ rotation.T + torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert torch.allclose(skin_positions(positions, index, weights, rigid), expected)  # same matrix everywhere: weights sum to 1
    normals = torch.nn.functional.normalize(positions, dim=1)
    assert torch.allclose(skin_normals(normals, index, weights, rigid), normals @ rotation.T)
    with pytest.raises(ValueError, match="outside"):
        skin_positions(positions, index + 3, weights, rigid)
    with pytest.raises(ValueError, match="must both be"):
        skin_positions(positions, index[:, :2], weights, rigid)


def test_several_frames_skin_at_once_as_one_at_a_time() -> None:
    positions, index, weights, _ = _random_skin(vertices=7, joints=4, seed=3)
    frames = torch.stack([_random_skin(vertices=7, joints=4, seed=10 + f)[3] for f in range(3)])  # [F, J, 4, 4]
    together = skin_positions(positions, index, weights, frames)
    assert together.shape == (3, 7, 3)
    for f in range(3):
        torch.testing.assert_close(together[f], skin_positions(positions, index, weights, frames[f]))
    inputs = (weights.clone().requires_grad_(), frames.clone().requires_grad_())
    assert torch.autograd.gradcheck(lambda w, m: skin_positions(positions, index, w, m), inputs)


# --- clip sampling -------------------------------------------------------------------------------


def test_channel_sampling_linear_slerp_step_and_cubic() -> None:
    times = np.array([0.0, 1.0, 3.0])
    linear = Channel(node=0, path="translation", times=times, values=np.array([[0, 0, 0], [2, 0, 0], [2, 4, 0]], float))
    assert np.allclose(sample_channel(linear, 0.25), [0.5, 0, 0]) and np.allclose(sample_channel(linear, 2.0), [2, 2, 0])
    assert np.allclose(sample_channel(linear, -1.0), [0, 0, 0]) and np.allclose(sample_channel(linear, 9.0), [2, 4, 0])  # clamped
    step = Channel(node=0, path="translation", times=times, values=linear.values, interpolation="STEP")
    assert np.allclose(sample_channel(step, 0.99), [0, 0, 0]) and np.allclose(sample_channel(step, 1.0), [2, 0, 0])
    z90 = np.array([0, 0, math.sin(math.pi / 4), math.cos(math.pi / 4)])
    rotation = Channel(node=0, path="rotation", times=times[:2], values=np.array([[0, 0, 0, 1.0], z90]))
    half = sample_channel(rotation, 0.5)
    assert np.allclose(half, [0, 0, math.sin(math.pi / 8), math.cos(math.pi / 8)])  # 45 degrees about z
    assert np.allclose(slerp(np.array([0, 0, 0, 1.0]), -z90, 0.5), half)  # the shorter arc
    # cubic Hermite: values 0 -> 1 over [0, 2] with out-tangent 3 at the start and in-tangent -1 at the end
    cubic = Channel(node=0, path="scale", times=np.array([0.0, 2.0]), interpolation="CUBICSPLINE",
                    values=np.array([[[0, 0, 0], [0, 0, 0], [3, 3, 3]], [[-1, -1, -1], [1, 1, 1], [0, 0, 0]]], float))
    u, d = 0.25, 2.0
    expected = (u**3 - 2 * u**2 + u) * d * 3 + (-2 * u**3 + 3 * u**2) * 1 + (u**3 - u**2) * d * -1
    assert np.allclose(sample_channel(cubic, 0.5), expected)


# --- a tiny two-bone rig written as glTF ---------------------------------------------------------


def _write_rig(folder: Path, *, joints_past: bool = False, bind_matrices: int = 2, times: tuple[float, ...] = (0.0, 1.0)) -> Path:
    """A vertical strip from y=0 to y=2: the bottom row on the root joint, the middle half and half,
    the top on the child joint (at y=1). The clip turns the child 90 degrees about z over [0, 1]
    (LINEAR), steps the root to x=1 at t=0.6 (STEP)."""
    positions = np.array([[x, y, 0] for y in (0.0, 1.0, 2.0) for x in (-0.1, 0.1)], np.float32)
    indices = np.array([0, 1, 3, 0, 3, 2, 2, 3, 5, 2, 5, 4], np.uint16)
    joints = np.array([[0, 0, 0, 0]] * 2 + [[0, 1, 0, 0]] * 2 + [[1, 5 if joints_past else 0, 0, 0]] * 2, np.uint16)
    weights = np.array([[1, 0, 0, 0]] * 2 + [[0.5, 0.5, 0, 0]] * 2 + [[1, 0.3 if joints_past else 0, 0, 0]] * 2, np.float32)
    if joints_past:
        weights[4:] /= weights[4:].sum(1, keepdims=True)
    inverse_bind = np.stack([np.eye(4), np.linalg.inv(np.array([[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 1.0]]))])[:bind_matrices]
    ibm = inverse_bind.transpose(0, 2, 1).astype(np.float32)  # column-major
    z90 = [0, 0, math.sin(math.pi / 4), math.cos(math.pi / 4)]
    blobs = [positions, indices, joints, weights, ibm,
             np.array(times, np.float32), np.array([[0, 0, 0, 1], z90][: len(times)] + [z90] * (len(times) - 2), np.float32),
             np.array([0.0, 0.6], np.float32), np.array([[0, 0, 0], [1, 0, 0]], np.float32)]
    data, views, offset = b"", [], 0
    for blob in blobs:
        raw = np.ascontiguousarray(blob).tobytes()
        views.append({"buffer": 0, "byteOffset": offset, "byteLength": len(raw)})
        data += raw + b"\0" * (-len(raw) % 4)
        offset = len(data)
    acc = lambda view, ctype, count, kind, **kw: {"bufferView": view, "componentType": ctype, "count": count, "type": kind, **kw}
    document = {
        "asset": {"version": "2.0"},
        "scene": 0,
        "scenes": [{"nodes": [0, 1]}],
        "nodes": [{"mesh": 0, "skin": 0}, {"children": [2]}, {"translation": [0, 1, 0]}],
        "skins": [{"joints": [1, 2], "inverseBindMatrices": 4}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "JOINTS_0": 2, "WEIGHTS_0": 3}, "indices": 1}]}],
        "animations": [{"name": "bend", "channels": [{"sampler": 0, "target": {"node": 2, "path": "rotation"}}, {"sampler": 1, "target": {"node": 1, "path": "translation"}}],
                        "samplers": [{"input": 5, "output": 6}, {"input": 7, "output": 8, "interpolation": "STEP"}]}],
        "accessors": [
            acc(0, 5126, 6, "VEC3", min=positions.min(0).tolist(), max=positions.max(0).tolist()), acc(1, 5123, 12, "SCALAR"),
            acc(2, 5123, 6, "VEC4"), acc(3, 5126, 6, "VEC4"), acc(4, 5126, bind_matrices, "MAT4"),
            acc(5, 5126, len(times), "SCALAR", min=[min(times)], max=[max(times)]), acc(6, 5126, len(times), "VEC4"),
            acc(7, 5126, 2, "SCALAR", min=[0.0], max=[0.6]), acc(8, 5126, 2, "VEC3"),
        ],
        "bufferViews": views,
        "buffers": [{"byteLength": len(data), "uri": "rig.bin"}],
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rig.bin").write_bytes(data)
    (folder / "rig.gltf").write_text(json.dumps(document))
    return folder / "rig.gltf"


def _load(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the strip has no normals: generated, with a warning
        return load_gltf(path)


def test_a_tiny_rig_poses_as_computed_by_hand(tmp_path: Path) -> None:
    scene = _load(_write_rig(tmp_path))
    mesh = scene.meshes[0]
    assert mesh.skin == 0 and np.allclose(mesh.positions, mesh.bind_positions)  # rest pose = bind pose here
    assert scene.rig.clip("bend").duration == pytest.approx(1.0)
    at = {t: pose_scene(scene, "bend", t).meshes[0].positions for t in (0.5, 0.7, 1.0)}
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
    # t = 0.5: the child turned 45 degrees about its own origin (0, 1, 0); the root not yet stepped
    assert np.allclose(at[0.5][5], [0.1 * c - s, 1 + 0.1 * s + c, 0], atol=1e-6)
    assert np.allclose(at[0.5][3], [0.5 * 0.1 + 0.5 * 0.1 * c, 1 + 0.5 * 0.1 * s, 0], atol=1e-6)  # half on each joint
    assert np.allclose(at[0.5][1], [0.1, 0, 0], atol=1e-6)
    # t = 0.7: the root stepped to x = 1, carrying everything; the child at 90 degrees from t = 1 on
    assert np.allclose(at[0.7][1], [1.1, 0, 0], atol=1e-6)
    assert np.allclose(at[1.0][5], [1 - 1.0, 1 + 0.1, 0], atol=1e-6)
    assert np.allclose(np.linalg.norm(pose_scene(scene, 0, 0.5).meshes[0].normals, axis=1), 1.0, atol=1e-5)
    with pytest.raises(KeyError, match="bend"):
        scene.rig.clip("walk")


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"joints_past": True}, "JOINTS_0", "skin has 2 joints"),
        ({"bind_matrices": 1}, "inverseBindMatrices", "one per joint"),
        ({"times": (0.0, 1.0, 0.5)}, "input", "strictly increasing"),
    ],
)
def test_bad_rigs_are_refused_naming_the_field(tmp_path: Path, change: dict, field: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        _load(_write_rig(tmp_path, **change))
    assert field in str(caught.value)


# --- BrainStem against an independent evaluation -------------------------------------------------


def _independent_pose(path: Path, time: float) -> dict[int, np.ndarray]:
    """Skinned positions per primitive of BrainStem's skinned node at ``time``, computed from the raw
    file with pygltflib, scipy's rotations and numpy alone (none of neuralbake's rig code)."""
    import pygltflib
    from scipy.spatial.transform import Rotation, Slerp

    gltf = pygltflib.GLTF2().load(str(path))
    blob = gltf.binary_blob()

    def read(index: int) -> np.ndarray:
        a = gltf.accessors[index]
        view = gltf.bufferViews[a.bufferView]
        width = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}[a.type]
        dtype = {5126: np.float32, 5123: np.uint16, 5121: np.uint8, 5125: np.uint32}[a.componentType]
        stride = view.byteStride or width * np.dtype(dtype).itemsize
        start = (view.byteOffset or 0) + (a.byteOffset or 0)
        rows = [np.frombuffer(blob, dtype, width, start + i * stride) for i in range(a.count)]
        return np.array(rows, np.float64)

    trs = {i: [np.array(n.translation or [0, 0, 0], float), np.array(n.rotation or [0, 0, 0, 1], float), np.array(n.scale or [1, 1, 1], float)] for i, n in enumerate(gltf.nodes)}
    for channel in gltf.animations[0].channels:
        sampler = gltf.animations[0].samplers[channel.sampler]
        times, values = read(sampler.input)[:, 0], read(sampler.output)
        t = float(np.clip(time, times[0], times[-1]))
        slot = ("translation", "rotation", "scale").index(channel.target.path)
        if channel.target.path == "rotation":
            trs[channel.target.node][slot] = Slerp(times, Rotation.from_quat(values))(t).as_quat()
        else:
            trs[channel.target.node][slot] = np.array([np.interp(t, times, values[:, k]) for k in range(values.shape[1])])
    parent = {c: i for i, n in enumerate(gltf.nodes) for c in (n.children or [])}

    def world(i: int) -> np.ndarray:
        t, r, s = trs[i]
        local = np.eye(4)
        local[:3, :3] = Rotation.from_quat(r).as_matrix() @ np.diag(s)
        local[:3, 3] = t
        return world(parent[i]) @ local if i in parent else local

    skin = gltf.skins[0]
    ibm = read(skin.inverseBindMatrices).reshape(-1, 4, 4).transpose(0, 2, 1)
    joint = np.stack([world(j) for j in skin.joints]) @ ibm
    node = next(n for n in gltf.nodes if n.skin is not None)
    out = {}
    for k, prim in enumerate(gltf.meshes[node.mesh].primitives):
        v = read(prim.attributes.POSITION)
        j, w = read(prim.attributes.JOINTS_0).astype(int), read(prim.attributes.WEIGHTS_0)
        blended = np.einsum("vk,vkab->vab", w, joint[j])
        out[k] = np.einsum("vab,vb->va", blended[:, :3, :3], v) + blended[:, :3, 3]
    return out


def test_brainstem_posed_at_several_frames_matches_an_independent_evaluation(shared_dir: Path) -> None:
    path = shared_dir / "assets" / "BrainStem" / "BrainStem.glb"
    scene = _load(path)
    assert len(scene.rig.skins) == 1 and scene.rig.clips[0].duration > 30
    assert all(m.skin == 0 for m in scene.meshes)
    for time in (0.0, 2.5, 11.3, 30.0):
        posed = pose_scene(scene, 0, time)
        expected = _independent_pose(path, time)
        # the reader drops degenerate triangles but keeps every vertex: compare primitive by primitive
        worst = max(float(np.abs(posed.meshes[k].positions - expected[k]).max()) for k in range(len(posed.meshes)))
        assert worst < 1e-4, f"t={time}: {worst}"
    moved = np.abs(pose_scene(scene, 0, 11.3).meshes[0].positions - scene.meshes[0].positions).max()
    assert moved > 0.05  # the clip really moves the character


def test_a_posed_frame_renders(shared_dir: Path) -> None:
    from neuralbake.render.camera import fibonacci_orbit, framing_radius
    from neuralbake.render.deferred import DirectionalLight, Lighting, render
    from neuralbake.render.scene import prepare_scene

    scene = _load(shared_dir / "assets" / "BrainStem" / "BrainStem.glb")
    lighting = Lighting(directional=[DirectionalLight(direction=(0.3, 0.8, 0.5), irradiance=2.0)], shadows=False)
    coverage = []
    for time in (0.0, 11.3):
        posed = pose_scene(scene, 0, time)
        lo, hi = posed.bounds()
        camera = fibonacci_orbit(3, framing_radius(float(np.linalg.norm(hi - lo)) / 2, 40.0), target=tuple(((lo + hi) / 2).tolist()))[0]
        out = render(prepare_scene(posed), camera, 32, 32, lighting)
        coverage.append(out.alpha)
        assert torch.isfinite(out.ldr).all() and 0.05 < float(out.alpha.mean()) < 0.95
    assert not torch.equal(coverage[0], coverage[1])  # the pose changes the silhouette


def _replays(tmp_path: Path, source: Path) -> None:
    from neuralbake.io.gltf import write_gltf

    for source in (source,):
        scene = _load(source)
        out = tmp_path / f"out_{source.stem}"
        out.mkdir()
        written = _load(write_gltf(out / "copy.gltf", scene))
        assert len(written.rig.skins) == len(scene.rig.skins) and len(written.rig.clips) == len(scene.rig.clips)
        assert all(m.skin is not None for m in written.meshes)
        for time in (0.0, 0.5, 7.0):
            a = np.concatenate([m.positions for m in pose_scene(scene, 0, time).meshes])
            b = np.concatenate([m.positions for m in pose_scene(written, 0, time).meshes])
            assert np.abs(a - b).max() < 1e-5, (source.name, time)


def test_a_written_rig_plays_as_the_source(tmp_path: Path) -> None:
    _replays(tmp_path, _write_rig(tmp_path / "rig"))


def test_a_written_brainstem_plays_as_the_source(tmp_path: Path, shared_dir: Path) -> None:
    _replays(tmp_path, shared_dir / "assets" / "BrainStem" / "BrainStem.glb")


def test_closest_points_warp_and_brute_force_agree() -> None:
    from neuralbake.render.visibility import closest_points, warp_available

    g = torch.Generator().manual_seed(3)
    positions = torch.randn(200, 3, generator=g)
    faces = torch.randint(0, 200, (300, 3), generator=g)
    faces = faces[(faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])]
    queries = 1.5 * torch.randn(150, 3, generator=g)

    def distance(triangle: torch.Tensor, bary: torch.Tensor) -> torch.Tensor:
        f = faces[triangle]
        point = (1 - bary.sum(1, keepdim=True)) * positions[f[:, 0]] + bary[:, :1] * positions[f[:, 1]] + bary[:, 1:] * positions[f[:, 2]]
        return (point - queries).norm(dim=1)

    brute = distance(*closest_points(positions, faces, queries, use_warp=False))
    # no vertex of any triangle is closer than the answer (the answer is a point of the mesh)
    corners = (positions[faces.reshape(-1)][None] - queries[:, None]).norm(dim=2).min(1).values
    assert (brute <= corners + 1e-5).all()
    if warp_available():
        assert torch.allclose(distance(*closest_points(positions, faces, queries, use_warp=True)), brute, atol=1e-5)
