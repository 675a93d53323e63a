"""Skeletons, skins and animation clips of a glTF file, and the joint matrices of any frame.

:class:`Rig` holds every node's rest transform and parent, the skins (joint nodes and inverse bind
matrices) and the clips (channels of translation / rotation / scale keys, ``LINEAR``, ``STEP`` or
``CUBICSPLINE``). :meth:`Rig.joint_matrices` evaluates a clip at a time into the ``[J, 4, 4]``
matrices that linear blend skinning applies (:mod:`neuralbake.render.skinning`): the joint's world
matrix times its inverse bind matrix, as the glTF spec defines them (the skinned mesh's own node
transform plays no part). Morph-target ``weights`` channels are read past and reported: the
renderer does not morph.

Written here rather than taken from a library: pygltflib parses the JSON but evaluates nothing,
and trimesh reads skins without animating them; the evaluation is the spec's few formulas (slerp,
the cubic Hermite spline, TRS products) over numpy arrays, in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from neuralbake.io.gltf.document import GltfDocument

__all__ = ["Channel", "Clip", "Node", "Rig", "Skin", "quaternion_matrix", "read_rig", "slerp"]

PATH_WIDTHS = {"translation": 3, "rotation": 4, "scale": 3}
INTERPOLATIONS = ("LINEAR", "STEP", "CUBICSPLINE")


@dataclass(eq=False)
class Node:
    """A node's place in the hierarchy and its rest transform."""

    parent: int
    """Index of the parent node, -1 for a root."""
    translation: np.ndarray
    """float64 ``[3]``."""
    rotation: np.ndarray
    """float64 ``[4]`` unit quaternion ``(x, y, z, w)``."""
    scale: np.ndarray
    """float64 ``[3]``."""
    matrix: np.ndarray | None = None
    """float64 ``[4, 4]`` when the node gives a matrix instead of TRS (such a node is not animated)."""
    name: str = ""


@dataclass(eq=False)
class Skin:
    """A skin: which nodes are its joints and their inverse bind matrices."""

    joints: np.ndarray
    """int64 ``[J]`` node indices (``JOINTS_0`` values index this list)."""
    inverse_bind: np.ndarray
    """float64 ``[J, 4, 4]`` (identity where the file gives none)."""
    name: str = ""


@dataclass(eq=False)
class Channel:
    """One animated property of one node."""

    node: int
    path: str
    """``translation``, ``rotation`` or ``scale``."""
    times: np.ndarray
    """float64 ``[K]`` key times in seconds, increasing."""
    values: np.ndarray
    """float64 ``[K, C]`` (``CUBICSPLINE``: ``[K, 3, C]``: in-tangent, value, out-tangent)."""
    interpolation: str = "LINEAR"


@dataclass(eq=False)
class Clip:
    """A named animation: channels that play together."""

    name: str
    channels: list[Channel]

    @property
    def duration(self) -> float:
        """The last key time over all channels (seconds)."""
        return max((float(c.times[-1]) for c in self.channels), default=0.0)


@dataclass(eq=False)
class Rig:
    """Every node, the skins and the animation clips of one glTF file."""

    nodes: list[Node]
    skins: list[Skin] = field(default_factory=list)
    clips: list[Clip] = field(default_factory=list)
    ignored_channels: int = 0
    """Channels read past (morph-target weights, or targets without a node)."""

    def clip(self, name_or_index: str | int) -> Clip:
        """A clip by name or index (``KeyError`` naming the clips there are)."""
        if isinstance(name_or_index, int):
            if not 0 <= name_or_index < len(self.clips):
                raise KeyError(f"clip {name_or_index} does not exist; the asset has {len(self.clips)} clip(s)")
            return self.clips[name_or_index]
        for clip in self.clips:
            if clip.name == name_or_index:
                return clip
        raise KeyError(f"no clip named {name_or_index!r}; the asset has: {', '.join(c.name for c in self.clips) or 'none'}")

    def local_matrices(self, clip: Clip | None = None, time: float = 0.0) -> np.ndarray:
        """``[N, 4, 4]`` node matrices relative to their parents, animated by ``clip`` at ``time`` (rest pose without one)."""
        trs = {i: [n.translation, n.rotation, n.scale] for i, n in enumerate(self.nodes) if n.matrix is None}
        for channel in clip.channels if clip is not None else ():
            if channel.node in trs:
                trs[channel.node][("translation", "rotation", "scale").index(channel.path)] = sample_channel(channel, time)
        out = np.empty((len(self.nodes), 4, 4))
        for i, node in enumerate(self.nodes):
            if node.matrix is not None:
                out[i] = node.matrix
            else:
                t, r, s = trs[i]
                out[i] = trs_matrix(t, r, s)
        return out

    def world_matrices(self, clip: Clip | None = None, time: float = 0.0) -> np.ndarray:
        """``[N, 4, 4]`` node matrices in world space (parents first; roots at the origin)."""
        local = self.local_matrices(clip, time)
        world = np.empty_like(local)
        done = np.zeros(len(self.nodes), bool)
        for start in range(len(self.nodes)):
            chain = []
            i = start
            while i >= 0 and not done[i]:
                chain.append(i)
                i = self.nodes[i].parent
            base = world[i] if i >= 0 else np.eye(4)
            for j in reversed(chain):
                base = base @ local[j]
                world[j] = base
                done[j] = True
        return world

    def joint_matrices(self, skin: int, clip: Clip | None = None, time: float = 0.0) -> np.ndarray:
        """``[J, 4, 4]`` skinning matrices of ``skin``: joint world matrix @ inverse bind matrix."""
        s = self.skins[skin]
        return self.world_matrices(clip, time)[s.joints] @ s.inverse_bind


def quaternion_matrix(q: np.ndarray) -> np.ndarray:
    """``[..., 3, 3]`` rotation of unit quaternions ``[..., 4]`` ``(x, y, z, w)``."""
    x, y, z, w = np.moveaxis(np.asarray(q, np.float64), -1, 0)
    return np.stack(
        (
            np.stack((1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)), -1),
            np.stack((2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)), -1),
            np.stack((2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)), -1),
        ),
        -2,
    )


def trs_matrix(t: np.ndarray, r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``T @ R @ S`` as one ``[4, 4]`` matrix."""
    m = np.eye(4)
    m[:3, :3] = quaternion_matrix(r) * np.asarray(s, np.float64)[None, :]
    m[:3, 3] = t
    return m


def slerp(a: np.ndarray, b: np.ndarray, u: float) -> np.ndarray:
    """Spherical interpolation of unit quaternions along the shorter arc."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    dot = float(np.dot(a, b))
    if dot < 0.0:
        b, dot = -b, -dot
    if dot > 0.9995:  # nearly parallel: normalised lerp is exact to float precision
        q = a + u * (b - a)
        return q / np.linalg.norm(q)
    theta = np.arccos(min(dot, 1.0))
    return (np.sin((1 - u) * theta) * a + np.sin(u * theta) * b) / np.sin(theta)


def sample_channel(channel: Channel, time: float) -> np.ndarray:
    """The channel's value at ``time`` (clamped to its first and last keys)."""
    times, values, mode = channel.times, channel.values, channel.interpolation
    cubic = mode == "CUBICSPLINE"
    value_at = (lambda k: values[k, 1]) if cubic else (lambda k: values[k])
    if time <= times[0] or len(times) == 1:
        out = value_at(0)
    elif time >= times[-1]:
        out = value_at(len(times) - 1)
    else:
        k = int(np.searchsorted(times, time, side="right") - 1)
        t0, t1 = times[k], times[k + 1]
        u = (time - t0) / (t1 - t0)
        if mode == "STEP":
            out = values[k]
        elif cubic:
            d = t1 - t0
            u2, u3 = u * u, u * u * u
            out = (2 * u3 - 3 * u2 + 1) * values[k, 1] + (u3 - 2 * u2 + u) * d * values[k, 2] + (-2 * u3 + 3 * u2) * values[k + 1, 1] + (u3 - u2) * d * values[k + 1, 0]
        elif channel.path == "rotation":
            out = slerp(values[k], values[k + 1], u)
        else:
            out = (1 - u) * values[k] + u * values[k + 1]
    out = np.array(out, np.float64)
    if channel.path == "rotation":
        norm = np.linalg.norm(out)
        out = out / norm if norm > 0 else np.array([0.0, 0.0, 0.0, 1.0])
    return out


def _local_parts(node: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    if node.matrix is not None:
        return np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0]), np.ones(3), np.asarray(node.matrix, np.float64).reshape(4, 4).T
    t = np.asarray(node.translation or (0.0, 0.0, 0.0), np.float64)
    r = np.asarray(node.rotation or (0.0, 0.0, 0.0, 1.0), np.float64)
    s = np.asarray(node.scale or (1.0, 1.0, 1.0), np.float64)
    return t, r / (np.linalg.norm(r) or 1.0), s, None


def _accessor(reader: GltfDocument, index: object, field: str, fix: str) -> np.ndarray:
    if not isinstance(index, int) or not 0 <= index < len(reader.gltf.accessors or []):
        raise reader.fail(f"accessor {index!r} does not exist.", field, fix)
    return np.asarray(reader.accessor(index), np.float64)


def read_rig(reader: GltfDocument) -> Rig | None:
    """The file's nodes, skins and clips (``None`` when it has neither skins nor animations)."""
    gltf = reader.gltf
    if not gltf.skins and not gltf.animations:
        return None
    fix = "re-export the rig (e.g. Blender: glTF export with Skinning and Animation on)."
    parents = np.full(len(gltf.nodes), -1, np.int64)
    for i, node in enumerate(gltf.nodes):
        for child in node.children or []:
            if not 0 <= child < len(gltf.nodes) or parents[child] >= 0:
                raise reader.fail(f"node {i} lists child {child}, which is missing or has another parent.", f"nodes[{i}].children", fix)
            parents[child] = i
    nodes = []
    for i, node in enumerate(gltf.nodes):
        t, r, s, matrix = _local_parts(node)
        nodes.append(Node(parent=int(parents[i]), translation=t, rotation=r, scale=s, matrix=matrix, name=node.name or f"node{i}"))
    rig = Rig(nodes=nodes)
    for k, skin in enumerate(gltf.skins or []):
        joints = np.asarray(skin.joints or [], np.int64)
        where = f"skins[{k}]"
        if joints.size == 0 or joints.min() < 0 or joints.max() >= len(nodes):
            raise reader.fail("the skin's joints are empty or name nodes that do not exist.", f"{where}.joints", fix)
        if skin.inverseBindMatrices is None:
            inverse_bind = np.tile(np.eye(4), (len(joints), 1, 1))
        else:
            flat = _accessor(reader, skin.inverseBindMatrices, f"{where}.inverseBindMatrices", fix)
            if flat.shape != (len(joints), 16) or not np.isfinite(flat).all():
                raise reader.fail(
                    f"inverseBindMatrices must hold {len(joints)} finite MAT4s (one per joint), got shape {flat.shape}.", f"{where}.inverseBindMatrices", fix
                )
            inverse_bind = flat.reshape(-1, 4, 4).transpose(0, 2, 1)  # column-major
        rig.skins.append(Skin(joints=joints, inverse_bind=inverse_bind, name=skin.name or f"skin{k}"))
    for a, animation in enumerate(gltf.animations or []):
        channels = []
        for c, channel in enumerate(animation.channels or []):
            where = f"animations[{a}].channels[{c}]"
            target = channel.target
            if target is None or target.node is None or target.path not in PATH_WIDTHS:
                rig.ignored_channels += 1  # morph weights (or an extension's target): not animated here
                continue
            if not 0 <= target.node < len(nodes):
                raise reader.fail(f"the channel targets node {target.node}, which does not exist.", f"{where}.target.node", fix)
            if not 0 <= (channel.sampler or 0) < len(animation.samplers or []):
                raise reader.fail(f"the channel uses sampler {channel.sampler}, which does not exist.", f"{where}.sampler", fix)
            sampler = animation.samplers[channel.sampler]
            swhere = f"animations[{a}].samplers[{channel.sampler}]"
            mode = sampler.interpolation or "LINEAR"
            if mode not in INTERPOLATIONS:
                raise reader.fail(f"unknown interpolation {mode!r}.", f"{swhere}.interpolation", "use LINEAR, STEP or CUBICSPLINE.")
            times = _accessor(reader, sampler.input, f"{swhere}.input", fix).reshape(-1)
            values = _accessor(reader, sampler.output, f"{swhere}.output", fix)
            width = PATH_WIDTHS[target.path]
            keys = len(times) * (3 if mode == "CUBICSPLINE" else 1)
            if len(times) == 0 or values.shape != (keys, width):
                raise reader.fail(
                    f"{target.path} keys need {keys} values of {width} components for {len(times)} key times, got shape {values.shape}.", f"{swhere}.output", fix
                )
            if not (np.isfinite(times).all() and np.isfinite(values).all()) or (np.diff(times) <= 0).any():
                raise reader.fail("key times must be finite and strictly increasing, values finite.", f"{swhere}.input", fix)
            if mode == "CUBICSPLINE":
                values = values.reshape(len(times), 3, width)
            channels.append(Channel(node=int(target.node), path=target.path, times=times, values=values, interpolation=mode))
        rig.clips.append(Clip(name=animation.name or f"clip{a}", channels=channels))
    return rig
