"""Cameras: ray generation against the pinhole model, and the three kinds of orbits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from neuralbake.errors import InputError
from neuralbake.render.camera import Camera, bounds_framing, fibonacci_orbit, framing_radius, look_at, orbit, random_orbit


def test_rays_follow_the_pinhole_model() -> None:
    cam = look_at((1.0, 2.0, 5.0), (0.0, 0.5, 0.0), fov_y_deg=60.0)
    right, up, forward = cam.basis()
    origins, dirs = cam.generate_rays(8, 4, dtype=torch.float64)
    assert origins.shape == dirs.shape == (4, 8, 3)
    torch.testing.assert_close(torch.linalg.vector_norm(dirs, dim=-1), torch.ones(4, 8, dtype=torch.float64))
    # The ray through the image's top-left corner: aspect 2, tan(30 deg) up and 2 tan(30 deg) left.
    _, corner = cam.generate_rays(8, 4, offset=(0.0, 0.0), dtype=torch.float64)
    t = math.tan(math.radians(30.0))
    expected = forward + t * (-2.0 * right + up)
    np.testing.assert_allclose(corner[0, 0].numpy(), expected / np.linalg.norm(expected), atol=1e-12)
    # Right-handed, orthonormal basis looking at the target.
    np.testing.assert_allclose(np.cross(right, up), -forward, atol=1e-12)
    # The projection matrices map the target to the screen centre.
    clip = cam.projection_matrix(2.0) @ cam.view_matrix() @ np.array([0.0, 0.5, 0.0, 1.0])
    np.testing.assert_allclose(clip[:2] / clip[3], [0.0, 0.0], atol=1e-12)


def test_look_at_straight_down_still_has_a_basis() -> None:
    right, up, forward = look_at((0.0, 3.0, 0.0)).basis()
    assert np.isfinite(right).all() and abs(np.dot(right, forward)) < 1e-12 and abs(np.dot(up, forward)) < 1e-12


def test_fibonacci_orbit_is_even() -> None:
    cams = fibonacci_orbit(64, 3.0, target=(1.0, 0.0, 0.0))
    pos = np.array([c.position for c in cams]) - [1.0, 0.0, 0.0]
    np.testing.assert_allclose(np.linalg.norm(pos, axis=1), 3.0)
    assert abs(pos.mean(axis=0)).max() < 0.1  # balanced around the target
    nearest = np.sort(np.linalg.norm(pos[:, None] - pos[None], axis=-1), axis=1)[:, 1]
    assert nearest.max() / nearest.min() < 2.0  # no clumps, no holes
    upper = fibonacci_orbit(16, 1.0, upper_hemisphere=True)
    assert all(c.position[1] > 0 for c in upper)


def test_random_orbit_is_seeded_and_in_the_band() -> None:
    a = random_orbit(20, (2.0, 4.0), seed=3, elevation_deg=(10.0, 60.0))
    b = random_orbit(20, (2.0, 4.0), seed=3, elevation_deg=(10.0, 60.0))
    c = random_orbit(20, (2.0, 4.0), seed=4, elevation_deg=(10.0, 60.0))
    assert a == b and a != c
    pos = np.array([x.position for x in a])
    r = np.linalg.norm(pos, axis=1)
    elevation = np.degrees(np.arcsin(pos[:, 1] / r))
    assert (r >= 2.0).all() and (r <= 4.0).all()
    assert (elevation >= 10.0 - 1e-9).all() and (elevation <= 60.0 + 1e-9).all()


def test_user_orbit_places_cameras_by_angle() -> None:
    front, right, top = orbit([0.0, 90.0, 0.0], [0.0, 0.0, 90.0], 2.0)
    np.testing.assert_allclose(front.position, (0, 0, 2), atol=1e-12)
    np.testing.assert_allclose(right.position, (2, 0, 0), atol=1e-12)
    np.testing.assert_allclose(top.position, (0, 2, 0), atol=1e-12)
    assert framing_radius(1.0, 60.0, margin=1.0) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: look_at((0, 0, 0), (0, 0, 0)),
        lambda: look_at((0, 0, 1), fov_y_deg=180),
        lambda: look_at((0, 0, 1), up=(0, 0, 0)),
        lambda: fibonacci_orbit(0, 1.0),
        lambda: random_orbit(3, -1.0, seed=0),
        lambda: orbit([0, 1], [0], 1.0),
        lambda: Camera((0, 0, 1)).generate_rays(0, 4),
    ],
)
def test_bad_camera_arguments(make) -> None:
    with pytest.raises(InputError, match="Fix:"):
        make()


def test_bounds_framing_centres_the_box_and_fits_its_sphere() -> None:
    points = np.array([[0.0, 0.0, 0.0], [2.0, 4.0, -2.0], [1.0, 1.0, -1.0]])
    target, distance = bounds_framing(points, 40.0)
    assert target == pytest.approx((1.0, 2.0, -1.0))
    assert distance == pytest.approx(framing_radius(math.sqrt(6.0), 40.0))
    assert bounds_framing(torch.tensor(points, dtype=torch.float32), 40.0)[1] == pytest.approx(distance, rel=1e-6)
