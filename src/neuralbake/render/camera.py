"""Pinhole cameras for rendering meshes: look-at cameras with a vertical field of view, the orbits
that fitting bakes draw their views from (Fibonacci sphere, seeded random, user given), and one
primary ray per pixel.

Conventions (glTF's, world up +y): a camera looks along ``forward = normalize(target - position)``;
``right = normalize(forward x up)``, ``up' = right x forward``. Pixel ``(row, col)`` of a ``W x H``
image has its centre at ``(col + 0.5, row + 0.5)``; row 0 is the top. The ray through image point
``(x, y)`` (in pixels) is ``normalize(forward + tan(fov_y / 2) ((2 x / W - 1) aspect right + (1 - 2 y / H) up'))``
with ``aspect = W / H``, so ``fov_y`` is the vertical field of view whatever the image shape.
:meth:`Camera.view_matrix` and :meth:`Camera.projection_matrix` give the same camera as OpenGL
matrices, for a rasterizer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from neuralbake.errors import InputError

__all__ = [
    "Camera",
    "bounds_framing",
    "fibonacci_orbit",
    "framing_radius",
    "look_at",
    "orbit",
    "random_orbit",
]

Vec3 = tuple[float, float, float]

GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))
"""Azimuth step of the Fibonacci sphere (about 137.5 degrees)."""


def _vec3(name: str, value: Sequence[float] | np.ndarray | torch.Tensor) -> Vec3:
    v = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value, dtype=np.float64).reshape(-1)
    if v.shape != (3,) or not np.isfinite(v).all():
        raise InputError(f"{name} must be 3 finite numbers, got {value!r}.", field=name, fix=f"pass {name}=(x, y, z).")
    return (float(v[0]), float(v[1]), float(v[2]))


@dataclass(frozen=True)
class Camera:
    """A pinhole camera. Build with :func:`look_at` (which checks the arguments)."""

    position: Vec3
    """Centre of projection, world space."""
    target: Vec3 = (0.0, 0.0, 0.0)
    """Point the camera looks at."""
    up: Vec3 = (0.0, 1.0, 0.0)
    """Approximate up direction (replaced when parallel to the view direction)."""
    fov_y_deg: float = 45.0
    """Vertical field of view in degrees, in (0, 180)."""

    def basis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit ``(right, up, forward)`` world vectors, float64 ``[3]`` each."""
        forward = np.subtract(self.target, self.position)
        forward = forward / np.linalg.norm(forward)
        up = np.asarray(self.up, dtype=np.float64)
        right = np.cross(forward, up)
        if np.linalg.norm(right) < 1e-6 * np.linalg.norm(up):  # looking along up: pick another up
            alt = np.array([0.0, 0.0, 1.0]) if abs(forward[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
            right = np.cross(forward, alt)
        right = right / np.linalg.norm(right)
        return right, np.cross(right, forward), forward

    def frame_tensor(self, dtype: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
        """``[4, 3]`` rows right, up, forward and position as one tensor on ``device``: made once per camera, dtype
        and device and then reused, so a fit's renders do not copy the basis to the GPU (four small uploads) each time.
        Read-only: callers must not modify it in place."""
        where = torch.device(device if device is not None else "cpu")
        if where.type == "cuda" and where.index is None:  # one key per GPU: "cuda" means the current one
            where = torch.device("cuda", torch.cuda.current_device())
        try:
            return _frame_tensor(self, dtype, str(where))
        except TypeError:  # a camera built with unhashable fields (lists): made afresh
            return torch.as_tensor(np.stack((*self.basis(), np.asarray(self.position, np.float64))), dtype=dtype, device=device)

    def generate_rays(
        self,
        width: int,
        height: int,
        *,
        offset: tuple[float, float] = (0.5, 0.5),
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Primary rays: origins and unit directions, each ``[height, width, 3]``.

        ``offset`` is the position inside each pixel in pixels (``(0.5, 0.5)`` the centre;
        ``(1.5, 0.5)`` is the neighbour to the right, which ray differentials use).
        """
        _check_size(width, height)
        right, up, forward, position = self.frame_tensor(dtype, device)
        tan_half = math.tan(math.radians(self.fov_y_deg) / 2.0)
        x = (torch.arange(width, dtype=dtype, device=device) + offset[0]) * (2.0 / width) - 1.0
        y = 1.0 - (torch.arange(height, dtype=dtype, device=device) + offset[1]) * (2.0 / height)
        aspect = width / height
        d = forward + tan_half * (aspect * x[None, :, None] * right + y[:, None, None] * up)
        d = d / torch.linalg.vector_norm(d, dim=-1, keepdim=True)
        return position.clone().expand(height, width, 3), d  # a copy: callers may write their origins

    def pixel_directions(
        self, pixel: torch.Tensor, width: int, height: int, offsets: Sequence[tuple[float, float]], dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """Unit directions ``[K, N, 3]`` of the rays :meth:`generate_rays` casts through the flat pixel indices
        ``pixel`` (``row * width + col``, ``[N]``) at each of the ``K`` ``offsets`` (same arithmetic, so the
        same values), computed for those pixels only."""
        _check_size(width, height)
        device = pixel.device
        right, up, forward, _ = self.frame_tensor(dtype, device)
        off = torch.as_tensor(offsets, dtype=dtype, device=device).reshape(-1, 2)
        tan_half = math.tan(math.radians(self.fov_y_deg) / 2.0)
        col = (pixel % width).to(dtype)
        row = torch.div(pixel, width, rounding_mode="floor").to(dtype)
        x = (col[None, :] + off[:, 0:1]) * (2.0 / width) - 1.0
        y = 1.0 - (row[None, :] + off[:, 1:2]) * (2.0 / height)
        d = forward + tan_half * ((width / height) * x[..., None] * right + y[..., None] * up)
        return d / torch.linalg.vector_norm(d, dim=-1, keepdim=True)

    def project(self, points: torch.Tensor, width: int, height: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pixel coordinates and view depth of world ``points`` ``[N, 3]``, differentiable in ``points``.

        Returns ``(px, py, z)``, each ``[N]`` in ``points``' dtype: pixel ``(i, j)``'s centre (the
        ray :meth:`generate_rays` casts through it) projects to ``(i, j)`` exactly; ``z`` is the
        distance along the view direction (points with ``z <= 0`` are behind the camera and get
        meaningless pixel coordinates).
        """
        _check_size(width, height)
        right, up, forward, position = self.frame_tensor(points.dtype, points.device)
        rel = points - position
        z = rel @ forward
        tan_half = math.tan(math.radians(self.fov_y_deg) / 2.0)
        safe_z = torch.where(z > 1e-9, z, torch.ones_like(z))
        # generate_rays: pixel i's centre is x = (i + 0.5) * 2 / W - 1, so i = (x + 1) W / 2 - 0.5
        px = ((rel @ right) / (safe_z * tan_half * (width / height)) + 1.0) * (width / 2.0) - 0.5
        py = (1.0 - (rel @ up) / (safe_z * tan_half)) * (height / 2.0) - 0.5
        return px, py, z

    def view_matrix(self) -> np.ndarray:
        """World to camera (OpenGL: camera looks down -z), float64 ``[4, 4]``."""
        right, up, forward = self.basis()
        m = np.eye(4)
        m[0, :3], m[1, :3], m[2, :3] = right, up, -forward
        m[:3, 3] = -m[:3, :3] @ np.asarray(self.position)
        return m

    def projection_matrix(self, aspect: float, near: float = 0.01, far: float = 100.0) -> np.ndarray:
        """OpenGL perspective projection (clip z in ``[-w, w]``), float64 ``[4, 4]``."""
        f = 1.0 / math.tan(math.radians(self.fov_y_deg) / 2.0)
        m = np.zeros((4, 4))
        m[0, 0], m[1, 1] = f / aspect, f
        m[2, 2], m[2, 3] = (far + near) / (near - far), 2.0 * far * near / (near - far)
        m[3, 2] = -1.0
        return m


@functools.lru_cache(maxsize=512)
def _frame_tensor(camera: Camera, dtype: torch.dtype, device: str) -> torch.Tensor:
    """:meth:`Camera.frame_tensor`, kept per camera, dtype and device (cameras are frozen, so the values cannot go stale);
    made outside inference mode, so a later render with autograd can save it."""
    with torch.inference_mode(False):
        return torch.as_tensor(np.stack((*camera.basis(), np.asarray(camera.position, np.float64))), dtype=dtype, device=device)


def _check_size(width: int, height: int) -> None:
    for name, value in (("width", width), ("height", height)):
        if not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}.", field=name, fix=f"pass {name} >= 1.")


def look_at(
    position: Sequence[float], target: Sequence[float] = (0.0, 0.0, 0.0), *, up: Sequence[float] = (0.0, 1.0, 0.0), fov_y_deg: float = 45.0
) -> Camera:
    """A camera at ``position`` looking at ``target``, checked (distinct points, fov in (0, 180))."""
    p, t, u = _vec3("position", position), _vec3("target", target), _vec3("up", up)
    if np.linalg.norm(np.subtract(t, p)) < 1e-12:
        raise InputError("the camera position equals its target.", field="target", fix="move the camera away from the target.")
    if np.linalg.norm(u) < 1e-12:
        raise InputError("the up vector is zero.", field="up", fix="pass up=(0, 1, 0).")
    if not (0.0 < float(fov_y_deg) < 180.0):
        raise InputError(f"fov_y_deg must be in (0, 180), got {fov_y_deg!r}.", field="fov_y_deg", fix="pass e.g. 45.")
    return Camera(p, t, u, float(fov_y_deg))


def framing_radius(extent: float, fov_y_deg: float, *, margin: float = 1.1) -> float:
    """Orbit radius at which a bounding sphere of radius ``extent`` just fits the view height,
    times ``margin``: ``margin * extent / sin(fov_y / 2)``."""
    return margin * float(extent) / math.sin(math.radians(fov_y_deg) / 2.0)


def bounds_framing(points: np.ndarray | torch.Tensor, fov_y_deg: float) -> tuple[Vec3, float]:
    """``(target, distance)`` framing a point set: its bounding box's centre and the orbit radius at
    which the bounding sphere about that centre fits the view (:func:`framing_radius`)."""
    p = points.detach() if isinstance(points, torch.Tensor) else torch.from_numpy(np.asarray(points, np.float64))
    centre = (p.min(0).values + p.max(0).values) / 2  # in the points' own precision
    extent = float((p - centre).norm(dim=1).max())
    return (float(centre[0]), float(centre[1]), float(centre[2])), framing_radius(extent, fov_y_deg)


def _check_count(count: int) -> None:
    if not isinstance(count, int) or count < 1:
        raise InputError(f"count must be a positive integer, got {count!r}.", field="count", fix="pass count >= 1.")


def _check_radius(radius: float) -> float:
    if not (isinstance(radius, (int, float)) and math.isfinite(radius) and radius > 0.0):
        raise InputError(f"radius must be a positive number, got {radius!r}.", field="radius", fix="pass the orbit radius (> 0).")
    return float(radius)


def _on_sphere(directions: np.ndarray, radius: float, target: Vec3, fov_y_deg: float) -> list[Camera]:
    centre = np.asarray(target)
    return [look_at(centre + radius * d, target, fov_y_deg=fov_y_deg) for d in directions]


def fibonacci_orbit(
    count: int, radius: float, *, target: Sequence[float] = (0.0, 0.0, 0.0), fov_y_deg: float = 45.0, upper_hemisphere: bool = False
) -> list[Camera]:
    """``count`` cameras spread evenly over a sphere (the Fibonacci lattice), all looking at ``target``.

    Camera ``i`` sits at height ``y = 1 - 2 (i + 0.5) / count`` (``1 - (i + 0.5) / count`` with
    ``upper_hemisphere``) and azimuth ``i`` golden angles: nearly equal areas per camera, no
    clumping at the poles, and the same cameras for the same arguments.
    """
    _check_count(count)
    radius = _check_radius(radius)
    i = np.arange(count, dtype=np.float64) + 0.5
    y = 1.0 - (i / count if upper_hemisphere else 2.0 * i / count)
    r = np.sqrt(np.clip(1.0 - y * y, 0.0, 1.0))
    phi = GOLDEN_ANGLE * np.arange(count)
    d = np.stack([r * np.sin(phi), y, r * np.cos(phi)], axis=1)
    return _on_sphere(d, radius, _vec3("target", target), fov_y_deg)


def random_orbit(
    count: int,
    radius: float | tuple[float, float],
    *,
    seed: int,
    target: Sequence[float] = (0.0, 0.0, 0.0),
    fov_y_deg: float = 45.0,
    elevation_deg: tuple[float, float] = (-90.0, 90.0),
) -> list[Camera]:
    """``count`` cameras at uniformly random directions (uniform over the band of elevations
    ``elevation_deg``, in area), at ``radius`` or a uniform radius in ``(min, max)``; seeded with
    numpy's PCG64, so a seed always gives the same cameras."""
    _check_count(count)
    lo, hi = (radius, radius) if isinstance(radius, (int, float)) else radius
    lo, hi = _check_radius(lo), _check_radius(hi)
    e0, e1 = (math.radians(float(e)) for e in elevation_deg)
    if not (-math.pi / 2 <= e0 <= e1 <= math.pi / 2):
        raise InputError(
            f"elevation_deg must be (low, high) within [-90, 90], got {elevation_deg!r}.", field="elevation_deg", fix="pass e.g. (0, 90)."
        )
    rng = np.random.default_rng(seed)
    y = rng.uniform(math.sin(e0), math.sin(e1), count)  # uniform in sin(elevation) = uniform in area
    phi = rng.uniform(0.0, 2.0 * math.pi, count)
    r = np.sqrt(np.clip(1.0 - y * y, 0.0, 1.0))
    d = np.stack([r * np.sin(phi), y, r * np.cos(phi)], axis=1)
    radii = rng.uniform(lo, hi, count) if hi > lo else np.full(count, lo)
    centre = np.asarray(_vec3("target", target))
    return [look_at(centre + radii[k] * d[k], tuple(centre), fov_y_deg=fov_y_deg) for k in range(count)]


def orbit(
    azimuths_deg: Sequence[float],
    elevations_deg: Sequence[float],
    radius: float,
    *,
    target: Sequence[float] = (0.0, 0.0, 0.0),
    fov_y_deg: float = 45.0,
) -> list[Camera]:
    """User-given views: one camera per ``(azimuth, elevation)`` pair, in degrees.

    Azimuth 0 is on +z (glTF's front), 90 on +x; elevation 90 is straight above (+y).
    """
    az = np.radians(np.asarray(azimuths_deg, dtype=np.float64).reshape(-1))
    el = np.radians(np.asarray(elevations_deg, dtype=np.float64).reshape(-1))
    if az.shape != el.shape or az.size == 0:
        raise InputError(
            f"got {az.size} azimuths and {el.size} elevations.",
            field="elevations_deg",
            fix="pass one elevation per azimuth (at least one).",
        )
    radius = _check_radius(radius)
    d = np.stack([np.cos(el) * np.sin(az), np.sin(el), np.cos(el) * np.cos(az)], axis=1)
    return _on_sphere(d, radius, _vec3("target", target), fov_y_deg)
