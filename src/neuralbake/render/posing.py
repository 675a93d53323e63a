"""A glTF scene on a device, shown as one moment of its animation sees it.

:class:`Posable` keeps a :class:`~neuralbake.render.scene.RenderScene` of a scene and, for a
skinned scene, its bind pose, joints and weights merged over all meshes (unskinned meshes ride on an
extra identity joint), so that any time of its first clip can be shown by re-skinning the vertices
(:mod:`neuralbake.render.skinning`) and refitting the BVH, without preparing the scene again. The
skinning is differentiable in the bind positions (and, through :meth:`Posable.deform`'s weights, in
the weights), which the shape and skin fits use.
"""

from __future__ import annotations

import numpy as np
import torch

from neuralbake.io.gltf import Scene
from neuralbake.render.scene import RenderScene, prepare_scene
from neuralbake.render.skinning import skin_normals, skin_positions, skin_tangents

__all__ = ["Posable"]


class Posable:
    """A scene on the run's device, shown as a view sees it: at rest for a static asset, skinned at
    the view's animation time for a skinned one (one skin; unskinned meshes ride on an identity joint)."""

    def __init__(self, scene: Scene, device: torch.device) -> None:
        self.scene = scene
        self.rs = prepare_scene(scene, device=device)
        self.rig = scene.rig if any(m.skin is not None and m.bind_positions is not None for m in scene.meshes) else None
        self.bind: torch.Tensor | None = None
        self._matrices: dict[float, torch.Tensor] = {}
        if self.rig is None:
            return
        skin = next(m.skin for m in scene.meshes if m.skin is not None)
        self.skin = skin
        identity = len(self.rig.skins[skin].joints)
        parts: dict[str, list[np.ndarray]] = {"bind": [], "normals": [], "tangents": [], "joints": [], "weights": []}
        for m in scene.meshes:
            skinned = m.skin is not None and m.bind_positions is not None
            v = len(m.positions)
            parts["bind"].append(m.bind_positions if skinned else m.positions)
            normals = m.bind_normals if skinned else m.normals
            parts["normals"].append(normals if normals is not None else np.tile([0.0, 0.0, 1.0], (v, 1)))
            tangents = m.bind_tangents if skinned else m.tangents
            parts["tangents"].append(tangents if tangents is not None else np.tile([0.0, 0.0, 0.0, 1.0], (v, 1)))
            parts["joints"].append(m.joints.astype(np.int64) if skinned else np.full((v, 4), identity))
            parts["weights"].append(m.weights if skinned else np.tile([1.0, 0.0, 0.0, 0.0], (v, 1)))
        as_tensor = lambda name, dtype: torch.from_numpy(np.concatenate(parts[name]).astype(dtype)).to(device)  # noqa: E731
        self.bind = as_tensor("bind", np.float32).to(self.rs.dtype)
        self.bind_normals, self.bind_tangents = as_tensor("normals", np.float32), as_tensor("tangents", np.float32)
        self.joints, self.weights = as_tensor("joints", np.int64), as_tensor("weights", np.float32)

    def matrices(self, time: float | None) -> torch.Tensor:
        key = -1.0 if time is None else float(time)
        if key not in self._matrices:
            clip = None if time is None or not self.rig.clips else self.rig.clips[0]
            joints = self.rig.joint_matrices(self.skin, clip, 0.0 if time is None else time)
            self._matrices[key] = torch.from_numpy(np.concatenate((joints, np.eye(4)[None]))).to(self.rs.device, self.rs.dtype)
        return self._matrices[key]

    def deform(self, positions: torch.Tensor, time: float | None, joints: torch.Tensor | None = None, weights: torch.Tensor | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Bind positions -> (posed positions, normals, tangents) at ``time`` (default joints and weights: the scene's)."""
        m = self.matrices(time)
        joints = self.joints if joints is None else joints
        weights = self.weights if weights is None else weights
        return (skin_positions(positions, joints, weights, m).to(self.rs.dtype),
                skin_normals(self.bind_normals, joints, weights, m).to(self.rs.dtype),
                skin_tangents(self.bind_tangents, joints, weights, m).to(self.rs.dtype))

    def show(self, time: float | None, positions: torch.Tensor | None = None) -> RenderScene:
        """``rs`` posed at ``time`` (``positions``: bind positions, default the scene's own; a static scene shows ``positions`` as they are)."""
        if self.rig is not None:
            posed, normals, tangents = self.deform(self.bind if positions is None else positions, time)
            self.rs.set_positions(posed.detach())
            self.rs.normals, self.rs.tangents = normals.detach(), tangents.detach()
        elif positions is not None:
            self.rs.set_positions(positions.detach())
        return self.rs


