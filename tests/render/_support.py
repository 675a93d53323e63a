"""Shared test support for the visibility buffer: a tiny scene with overlaps and gaps, and a
brute-force Moller-Trumbore ray caster in numpy that every backend is checked against."""

from __future__ import annotations

import numpy as np


def tiny_mesh(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A pyramid on a floor plus a few random triangles in front of it (overlaps and gaps)."""
    rng = np.random.default_rng(seed)
    pyramid = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0], [0, 0, 0.8]], np.float64)
    faces = [[0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4], [0, 2, 1], [0, 3, 2]]
    points = [pyramid]
    for k in range(8):
        centre = rng.uniform([-1.2, -1.2, 0.2], [1.2, 1.2, 1.4])
        points.append(centre + rng.normal(0, 0.35, (3, 3)))
        faces.append([5 + 3 * k, 6 + 3 * k, 7 + 3 * k])
    return np.concatenate(points).astype(np.float32), np.array(faces, np.int64)


def brute_force(points: np.ndarray, faces: np.ndarray, o: np.ndarray, d: np.ndarray):
    """Closest hit of every ray with every triangle (both sides), float64."""
    p = points.astype(np.float64)[faces]  # [F, 3, 3]
    e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
    o, d = o.astype(np.float64)[:, None], d.astype(np.float64)[:, None]  # [N, 1, 3]
    pvec = np.cross(d, e2[None])
    det = np.sum(e1[None] * pvec, -1)
    inv = 1.0 / np.where(np.abs(det) < 1e-12, np.nan, det)
    s = o - p[None, :, 0]
    b1 = np.sum(s * pvec, -1) * inv
    q = np.cross(s, e1[None])
    b2 = np.sum(d * q, -1) * inv
    t = np.sum(e2[None] * q, -1) * inv
    hit = (b1 >= 0) & (b2 >= 0) & (b1 + b2 <= 1) & (t > 0)
    t = np.where(hit, t, np.inf)
    tri = np.argmin(t, axis=1)
    rows = np.arange(len(tri))
    best = t[rows, tri]
    return np.where(np.isfinite(best), tri, -1), np.stack([b1[rows, tri], b2[rows, tri]], -1), best, t
