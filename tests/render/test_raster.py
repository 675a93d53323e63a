"""The PyTorch rasteriser fallback of the visibility buffer against brute-force ray casts and Warp."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralbake.render.camera import look_at
from neuralbake.render.visibility import RayCaster, rasterize_triangle_ids, visibility_buffer, warp_available

from ._support import brute_force, tiny_mesh


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_raster_backend_matches_brute_force(seed) -> None:
    points, faces = tiny_mesh(seed)
    caster = RayCaster(torch.from_numpy(points), torch.from_numpy(faces))
    cam = look_at((0.5, -2.0, 1.5), (0.0, 0.0, 0.4), up=(0, 0, 1), fov_y_deg=55)
    vb = visibility_buffer(caster, cam, 40, 30, backend="raster")
    o, d = vb.ray_origin.reshape(-1, 3).numpy(), vb.ray_direction.reshape(-1, 3).numpy()
    tri, bary, depth, all_t = brute_force(points, faces, o, d)
    second = np.sort(all_t, axis=1)[:, 1]
    with np.errstate(invalid="ignore"):
        clear = (tri < 0) | (second - depth > 1e-4)
    got = vb.triangle_id.reshape(-1).numpy()
    # pixel centres on a triangle edge may go either way: allow a few
    assert (got[clear] == tri[clear]).mean() > 0.97
    same = clear & (got == tri) & (tri >= 0)
    np.testing.assert_allclose(vb.barycentrics.reshape(-1, 2).numpy()[same], bary[same], atol=2e-5)
    np.testing.assert_allclose(vb.depth.reshape(-1).numpy()[same], depth[same], rtol=1e-5)


@pytest.mark.skipif(not warp_available(), reason="warp-lang is not installed")
def test_raster_and_warp_agree_on_a_dense_mesh() -> None:
    # a bumpy height field: many small triangles, seen obliquely
    n = 24
    u, v = np.meshgrid(np.linspace(-1, 1, n), np.linspace(-1, 1, n))
    h = 0.15 * np.sin(4 * u) * np.cos(3 * v)
    points = np.stack([u, v, h], -1).reshape(-1, 3).astype(np.float32)
    idx = np.arange(n * n).reshape(n, n)
    quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], -1).reshape(-1, 4)
    faces = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    caster = RayCaster(torch.from_numpy(points), torch.from_numpy(faces))
    cam = look_at((0.3, -2.2, 1.4), (0.0, 0.0, 0.0), up=(0, 0, 1), fov_y_deg=50)
    warp = visibility_buffer(caster, cam, 64, 48, backend="warp")
    raster = visibility_buffer(caster, cam, 64, 48, backend="raster")
    assert (warp.triangle_id == raster.triangle_id).float().mean() > 0.97
    assert torch.equal(warp.mask, raster.mask) or (warp.mask != raster.mask).float().mean() < 0.01


def test_triangles_behind_the_camera_are_skipped_and_chunks_do_not_matter() -> None:
    points, faces = tiny_mesh(0)
    cam = look_at((0.5, -2.0, 1.5), (0.0, 0.0, 0.4), up=(0, 0, 1), fov_y_deg=55)
    p, f = torch.from_numpy(points), torch.from_numpy(faces)
    whole = rasterize_triangle_ids(p, f, cam, 32, 24)
    chunked = rasterize_triangle_ids(p, f, cam, 32, 24, max_candidates=7)
    assert torch.equal(whole, chunked)
    behind = torch.cat([p, torch.tensor([[0.5, -3.0, 1.5], [0.6, -3.0, 1.6], [0.4, -3.1, 1.5]])])
    extra = torch.cat([f, torch.tensor([[len(p), len(p) + 1, len(p) + 2]])])
    assert torch.equal(rasterize_triangle_ids(behind, extra, cam, 32, 24), whole)
