"""Mesh maths the glTF reader needs to hand over usable world-space meshes: vertex normals
(smooth or flat) and tangents (from the uv layout) for meshes that lack them, the cofactor matrix
that carries normals through singular node transforms, and the test for degenerate triangles.
It lives in ``io`` (the lowest layer) because :func:`~neuralbake.io.gltf.load_gltf` repairs
missing or broken normals and tangents as it reads; the renderer
(:func:`neuralbake.render.scene.prepare_scene`) and code that builds meshes import it from here.
"""

from __future__ import annotations

import numpy as np

from neuralbake.errors import InputError

__all__ = ["cofactor", "drop_degenerate_triangles", "generate_normals", "generate_tangents", "normalize"]


def normalize(v: np.ndarray) -> np.ndarray:
    """Rows of ``v`` (``[..., 3]``) scaled to unit length (zero rows stay zero)."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.maximum(n, 1e-20)


def generate_normals(positions: np.ndarray, indices: np.ndarray, *, mode: str = "smooth") -> tuple[np.ndarray, np.ndarray]:
    """Vertex normals for a mesh without them; returns ``(normals [V', 3], indices [F, 3])``.

    ``smooth``: area-weighted average of the faces around each vertex (vertices kept);
    ``flat``: every triangle gets its own three vertices with the face normal, so callers must
    re-index the other attributes with the returned indices (see :func:`~neuralbake.io.gltf.load_gltf`).
    """
    p0, p1, p2 = (positions[indices[:, k]].astype(np.float64) for k in range(3))
    face = np.cross(p1 - p0, p2 - p0)  # length = 2 area, so the sum is area weighted
    if mode == "flat":
        normals = np.repeat(normalize(face), 3, axis=0).astype(np.float32)
        return normals, np.arange(3 * len(indices), dtype=np.int64).reshape(-1, 3)
    if mode != "smooth":
        raise InputError(f"unknown normal generation mode {mode!r}.", field="generate_normals", fix="use 'smooth' or 'flat'.")
    acc = np.zeros((len(positions), 3), dtype=np.float64)
    for k in range(3):
        np.add.at(acc, indices[:, k], face)
    lonely = np.linalg.norm(acc, axis=1) < 1e-30  # vertices used by no triangle
    acc[lonely] = (0.0, 0.0, 1.0)
    return normalize(acc).astype(np.float32), indices


def generate_tangents(positions: np.ndarray, normals: np.ndarray, uv: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Per-vertex tangents ``[V, 4]`` (xyz along +u, w handedness) from the uv layout.

    Lengyel's method: each triangle's ``dP/du`` and ``dP/dv`` (area weighted) are summed per
    vertex, the tangent is Gram-Schmidt orthogonalised against the normal, and ``w`` is chosen so
    that ``w (n x t)`` points along ``-dP/dv`` (glTF's v runs down the image, and its normal maps
    put green up). Triangles with a degenerate uv map contribute nothing; vertices left without
    a tangent get any unit vector perpendicular to the normal.
    """
    p = positions.astype(np.float64)
    t = uv.astype(np.float64)
    i0, i1, i2 = indices[:, 0], indices[:, 1], indices[:, 2]
    e1, e2 = p[i1] - p[i0], p[i2] - p[i0]
    d1, d2 = t[i1] - t[i0], t[i2] - t[i0]
    det = d1[:, 0] * d2[:, 1] - d2[:, 0] * d1[:, 1]
    ok = np.abs(det) > 1e-20
    r = np.where(ok, 1.0 / np.where(ok, det, 1.0), 0.0)[:, None]
    dp_du = (e1 * d2[:, 1:2] - e2 * d1[:, 1:2]) * r * np.abs(det)[:, None]
    dp_dv = (e2 * d1[:, 0:1] - e1 * d2[:, 0:1]) * r * np.abs(det)[:, None]
    tan = np.zeros_like(p)
    bit = np.zeros_like(p)
    for k in (i0, i1, i2):
        np.add.at(tan, k, dp_du)
        np.add.at(bit, k, dp_dv)
    n = normals.astype(np.float64)
    tan = tan - n * np.sum(n * tan, axis=1, keepdims=True)
    weak = np.linalg.norm(tan, axis=1) < 1e-20
    if weak.any():  # any perpendicular: cross with the axis least aligned with the normal
        axis = np.eye(3)[np.argmin(np.abs(n[weak]), axis=1)]
        tan[weak] = np.cross(n[weak], axis)
    tan = normalize(tan)
    w = np.where(np.sum(np.cross(n, tan) * -bit, axis=1) < 0.0, -1.0, 1.0)
    return np.concatenate([tan, w[:, None]], axis=1).astype(np.float32)


def cofactor(m: np.ndarray) -> np.ndarray:
    """Cofactor matrix of a 3x3 ``m`` (``det(m) m^-T`` when invertible; defined for singular ``m`` too)."""
    c0, c1, c2 = m[:, 0], m[:, 1], m[:, 2]
    return np.stack([np.cross(c1, c2), np.cross(c2, c0), np.cross(c0, c1)], axis=1)


def drop_degenerate_triangles(positions: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, int]:
    """``indices`` without the triangles that repeat a vertex or have (near) zero area, and how many were dropped."""
    repeated = (indices[:, 0] == indices[:, 1]) | (indices[:, 1] == indices[:, 2]) | (indices[:, 0] == indices[:, 2])
    p = positions.astype(np.float64)
    cross = np.cross(p[indices[:, 1]] - p[indices[:, 0]], p[indices[:, 2]] - p[indices[:, 0]])
    scale = max(float(np.ptp(p, axis=0).max()) if len(p) else 1.0, 1e-30)
    flat = np.linalg.norm(cross, axis=1) <= (1e-12 * scale * scale)
    bad = repeated | flat
    return indices[~bad], int(bad.sum())
