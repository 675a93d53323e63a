"""Linear blend skinning, differentiable: skinned positions, normals and tangents from bind-pose
attributes, per-vertex joints and weights and the joint matrices of a frame.

``v' = sum_i w_i (M_{j_i} v)``: each vertex is moved by the weighted blend of its (at most four)
joints' skinning matrices (joint world matrix @ inverse bind matrix, see
:meth:`neuralbake.io.gltf.rig.Rig.joint_matrices`). Normals go by the blended matrix's cofactor
(its inverse transpose up to scale: right under non-uniform scale, defined even where it is
singular), tangents by its linear part. Gradients flow to the bind positions, the weights and the
matrices (a skin-weight fit moves the weights, a shape fit the positions).

:func:`pose_scene` poses a loaded :class:`~neuralbake.io.gltf.Scene` at any time of any clip, for
the renderer: skinned meshes are re-skinned, everything else is left in place.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from neuralbake.io.gltf.model import Scene
from neuralbake.io.gltf.rig import Clip

__all__ = ["blend_matrices", "pose_scene", "skin_normals", "skin_positions", "skin_tangents"]


def blend_matrices(joints: torch.Tensor, weights: torch.Tensor, joint_matrices: torch.Tensor) -> torch.Tensor:
    """``[..., V, 4, 4]`` per-vertex blends ``sum_i weights[:, i] * joint_matrices[..., joints[:, i]]``.

    ``joint_matrices`` is ``[J, 4, 4]``, or ``[..., J, 4, 4]`` for several frames at once. The
    weights are scattered into a dense ``[V, J]`` table and multiplied with the matrices, so many
    frames take one product of ``[..., V, 16]`` rather than a gathered ``[..., V, K, 4, 4]``. The
    joint indices are range-checked on the CPU only: on a GPU the check would wait for the device
    on every call of a fit's step, and the indices come from the reader (checked against the skin)
    or a top-k over its joints.
    """
    if joints.shape != weights.shape or joints.ndim != 2:
        raise ValueError(f"blend_matrices: joints {tuple(joints.shape)} and weights {tuple(weights.shape)} must both be [V, K]")
    if joint_matrices.ndim < 3 or joint_matrices.shape[-2:] != (4, 4):
        raise ValueError(f"blend_matrices: joint_matrices must be [..., J, 4, 4], got {tuple(joint_matrices.shape)}")
    if joints.device.type == "cpu" and joints.numel() and (int(joints.min()) < 0 or int(joints.max()) >= joint_matrices.shape[-3]):
        raise ValueError(f"blend_matrices: a joint index lies outside the {joint_matrices.shape[-3]} joints")
    count = joint_matrices.shape[-3]
    dense = torch.zeros(joints.shape[0], count, dtype=joint_matrices.dtype, device=joint_matrices.device)
    dense = dense.scatter_add(1, joints.long(), weights.to(joint_matrices.dtype))  # repeated joints add up, as in the sum
    flat = joint_matrices.reshape(*joint_matrices.shape[:-3], count, 16)
    return (dense @ flat).reshape(*joint_matrices.shape[:-3], joints.shape[0], 4, 4)


def skin_positions(positions: torch.Tensor, joints: torch.Tensor, weights: torch.Tensor, joint_matrices: torch.Tensor) -> torch.Tensor:
    """``[..., V, 3]`` skinned positions of bind-pose ``positions`` ``[V, 3]`` (``joint_matrices`` ``[..., J, 4, 4]``)."""
    m = blend_matrices(joints, weights, joint_matrices)
    return (m[..., :3, :3] @ positions.to(m.dtype)[..., None])[..., 0] + m[..., :3, 3]


def _cofactor(m: torch.Tensor) -> torch.Tensor:
    """Cofactor matrices of ``[..., 3, 3]`` (``det(m) m^-T``; defined for singular ``m``)."""
    c0 = torch.linalg.cross(m[..., :, 1], m[..., :, 2], dim=-1)
    c1 = torch.linalg.cross(m[..., :, 2], m[..., :, 0], dim=-1)
    c2 = torch.linalg.cross(m[..., :, 0], m[..., :, 1], dim=-1)
    return torch.stack((c0, c1, c2), -1)


def skin_normals(normals: torch.Tensor, joints: torch.Tensor, weights: torch.Tensor, joint_matrices: torch.Tensor) -> torch.Tensor:
    """``[V, 3]`` unit skinned normals (by the blended matrix's cofactor)."""
    m = blend_matrices(joints, weights, joint_matrices)[:, :3, :3]
    n = (_cofactor(m) @ normals.to(m.dtype)[..., None])[..., 0]
    return torch.nn.functional.normalize(n, dim=-1)


def skin_tangents(tangents: torch.Tensor, joints: torch.Tensor, weights: torch.Tensor, joint_matrices: torch.Tensor) -> torch.Tensor:
    """``[V, 4]`` skinned tangents (unit direction by the linear part, handedness kept)."""
    m = blend_matrices(joints, weights, joint_matrices)[:, :3, :3]
    t = torch.nn.functional.normalize((m @ tangents[:, :3].to(m.dtype)[..., None])[..., 0], dim=-1)
    return torch.cat((t, tangents[:, 3:].to(m.dtype)), -1)


def pose_scene(scene: Scene, clip: Clip | str | int | None = None, time: float = 0.0) -> Scene:
    """A copy of ``scene`` with every skinned mesh posed by ``clip`` at ``time`` seconds (the rest
    pose without a clip); unskinned meshes are shared, not copied."""
    rig = scene.rig
    if rig is None:
        if clip is not None:
            raise ValueError("pose_scene: the scene has no skins or animations to pose")
        return scene
    if clip is not None and not isinstance(clip, Clip):
        clip = rig.clip(clip)
    cache: dict[int, torch.Tensor] = {}
    meshes = []
    for mesh in scene.meshes:
        if mesh.skin is None or mesh.bind_positions is None:
            meshes.append(mesh)
            continue
        if mesh.skin not in cache:
            cache[mesh.skin] = torch.from_numpy(rig.joint_matrices(mesh.skin, clip, time))
        matrices = cache[mesh.skin]
        joints = torch.from_numpy(mesh.joints.astype(np.int64))
        weights = torch.from_numpy(mesh.weights.astype(np.float64))
        as_np = lambda t: t.float().numpy()  # noqa: E731
        positions = as_np(skin_positions(torch.from_numpy(mesh.bind_positions.astype(np.float64)), joints, weights, matrices))
        normals = None if mesh.bind_normals is None else as_np(skin_normals(torch.from_numpy(mesh.bind_normals.astype(np.float64)), joints, weights, matrices))
        tangents = None if mesh.bind_tangents is None else as_np(skin_tangents(torch.from_numpy(mesh.bind_tangents.astype(np.float64)), joints, weights, matrices))
        meshes.append(replace(mesh, positions=positions, normals=normals, tangents=tangents))
    return replace(scene, meshes=meshes)
