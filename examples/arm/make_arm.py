"""Write ``arm.gltf``: a small skinned, animated arm for the simplify and skin examples (CC0, made by
this project). A capped tube 2 units long along +Y with colour bands, three joints (shoulder at the
origin, elbow at y = 0.8, wrist at y = 1.5) with weights blended smoothly across each joint, and one
two-second clip ("wave") that bends the elbow 90 degrees and the wrist 45 degrees and back.

    python examples/arm/make_arm.py            # rewrites examples/arm/arm.gltf + arm.bin
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from neuralbake.io.gltf import Material, Mesh, Scene, write_gltf
from neuralbake.io.gltf.rig import Channel, Clip, Node, Rig, Skin

AROUND, ALONG, RADIUS, LENGTH = 24, 48, 0.15, 2.0
JOINT_Y = (0.0, 0.8, 1.5)
BLEND = 0.15
"""Half-width of the band around each joint over which the weights pass from one bone to the next."""


def _quat_z(degrees: float) -> list[float]:
    half = math.radians(degrees) / 2
    return [0.0, 0.0, math.sin(half), math.cos(half)]


def _tube() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = np.linspace(0.0, LENGTH, ALONG + 1)
    a = np.linspace(0.0, 2 * math.pi, AROUND, endpoint=False)
    yy, aa = np.meshgrid(y, a, indexing="ij")
    ring = np.stack((RADIUS * np.cos(aa), yy, RADIUS * np.sin(aa)), -1).reshape(-1, 3)
    normals = np.stack((np.cos(aa), np.zeros_like(aa), np.sin(aa)), -1).reshape(-1, 3)
    faces = []
    for i in range(ALONG):
        for j in range(AROUND):
            p, q = i * AROUND + j, i * AROUND + (j + 1) % AROUND
            faces += [(p, q + AROUND, q), (p, p + AROUND, q + AROUND)]
    # flat caps (their own vertices, so their normals point along the tube)
    points, normal_list, face_list = [ring], [normals], [np.array(faces)]
    for end, sign in ((0.0, -1.0), (LENGTH, 1.0)):
        base = sum(len(p) for p in points)
        rim = np.stack((RADIUS * np.cos(a), np.full_like(a, end), RADIUS * np.sin(a)), -1)
        points.append(np.concatenate((rim, [[0.0, end, 0.0]])))
        normal_list.append(np.tile([0.0, sign, 0.0], (AROUND + 1, 1)))
        centre = base + AROUND
        cap = [(base + j, centre, base + (j + 1) % AROUND) if sign > 0 else (base + (j + 1) % AROUND, centre, base + j) for j in range(AROUND)]
        face_list.append(np.array(cap))
    return np.concatenate(points).astype(np.float32), np.concatenate(normal_list).astype(np.float32), np.concatenate(face_list).astype(np.int64)


def _weights(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Joints and weights: upper arm, forearm and hand, blended across the elbow and the wrist."""
    elbow = np.clip((y - (JOINT_Y[1] - BLEND)) / (2 * BLEND), 0.0, 1.0)
    wrist = np.clip((y - (JOINT_Y[2] - BLEND)) / (2 * BLEND), 0.0, 1.0)
    dense = np.stack((1.0 - elbow, elbow * (1.0 - wrist), wrist), 1)
    joints = np.tile(np.array([0, 1, 2, 0], np.uint16), (len(y), 1))
    weights = np.concatenate((dense, np.zeros((len(y), 1))), 1).astype(np.float32)
    return joints, weights


def make_arm() -> Scene:
    positions, normals, faces = _tube()
    joints, weights = _weights(positions[:, 1])
    colours = np.ones((len(positions), 4), np.float32)
    band = (np.floor(positions[:, 1] / 0.25) % 2 == 0)
    colours[band, :3] = (0.85, 0.35, 0.15)
    colours[~band, :3] = (0.2, 0.45, 0.8)
    nodes = [
        Node(parent=-1, translation=np.zeros(3), rotation=np.array([0.0, 0, 0, 1]), scale=np.ones(3), name="shoulder"),
        Node(parent=0, translation=np.array([0.0, JOINT_Y[1], 0]), rotation=np.array([0.0, 0, 0, 1]), scale=np.ones(3), name="elbow"),
        Node(parent=1, translation=np.array([0.0, JOINT_Y[2] - JOINT_Y[1], 0]), rotation=np.array([0.0, 0, 0, 1]), scale=np.ones(3), name="wrist"),
    ]
    inverse_bind = np.stack([np.eye(4) for _ in JOINT_Y])
    for k, y in enumerate(JOINT_Y):
        inverse_bind[k, 1, 3] = -y
    times = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
    clip = Clip(name="wave", channels=[
        Channel(node=1, path="rotation", times=times, values=np.array([_quat_z(d) for d in (0, 45, 90, 45, 0)])),
        Channel(node=2, path="rotation", times=times, values=np.array([_quat_z(d) for d in (0, -20, -45, -20, 0)])),
        Channel(node=0, path="rotation", times=times, values=np.array([_quat_z(d) for d in (0, 10, 20, 10, 0)])),
    ])
    rig = Rig(nodes=nodes, skins=[Skin(joints=np.array([0, 1, 2]), inverse_bind=inverse_bind, name="arm")], clips=[clip])
    mesh = Mesh(positions=positions, indices=faces, normals=normals, colors=colours, name="arm", joints=joints, weights=weights, skin=0,
                bind_positions=positions.copy(), bind_normals=normals.copy())
    material = Material(name="arm", base_color_factor=(1.0, 1.0, 1.0, 1.0), metallic_factor=0.0, roughness_factor=0.55)
    return Scene(meshes=[mesh], materials=[material], rig=rig)


if __name__ == "__main__":
    out = write_gltf(Path(__file__).with_name("arm.gltf"), make_arm())
    print(f"wrote {out}")
