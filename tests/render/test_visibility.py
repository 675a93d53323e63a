"""The visibility buffer against a brute-force Moller-Trumbore in numpy, the differentiable
barycentrics against the BVH's, shadow (any-hit) queries and BVH refits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralbake.errors import InputError
from neuralbake.render.camera import look_at
from neuralbake.render.visibility import RayCaster, ray_triangle_barycentrics, visibility_buffer

from ._support import brute_force, tiny_mesh


def test_visibility_buffer_matches_brute_force() -> None:
    points, faces = tiny_mesh()
    caster = RayCaster(torch.from_numpy(points), torch.from_numpy(faces))
    material_ids = torch.arange(len(faces)) % 3
    cam = look_at((0.5, -2.0, 1.5), (0.0, 0.0, 0.4), up=(0, 0, 1), fov_y_deg=55)
    vb = visibility_buffer(caster, cam, 24, 18, material_ids=material_ids)
    o, d = vb.ray_origin.reshape(-1, 3).numpy(), vb.ray_direction.reshape(-1, 3).numpy()
    tri, bary, depth, all_t = brute_force(points, faces, o, d)
    got = vb.triangle_id.reshape(-1).numpy()
    assert 0.3 < (tri >= 0).mean() < 0.95  # the view shows both mesh and background
    # Where two surfaces are within float32 noise of each other either answer is right.
    second = np.sort(all_t, axis=1)[:, 1]
    with np.errstate(invalid="ignore"):  # inf - inf on background rays
        clear = (tri < 0) | (second - depth > 1e-4)
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(got[clear], tri[clear])
    hit = clear & (tri >= 0)
    np.testing.assert_allclose(vb.barycentrics.reshape(-1, 2).numpy()[hit], bary[hit], atol=2e-5)
    np.testing.assert_allclose(vb.depth.reshape(-1).numpy()[hit], depth[hit], rtol=1e-5)
    assert np.isinf(vb.depth.reshape(-1).numpy()[tri < 0]).all()
    expected_mat = np.where(got >= 0, material_ids.numpy()[np.maximum(got, 0)], -1)
    np.testing.assert_array_equal(vb.material_id.reshape(-1).numpy(), expected_mat)
    assert vb.coverage == pytest.approx((got >= 0).mean())


def test_differentiable_barycentrics_reproduce_the_hits() -> None:
    points, faces = tiny_mesh(1)
    pos = torch.from_numpy(points).double()
    f = torch.from_numpy(faces)
    vb = visibility_buffer(RayCaster(pos, f), look_at((0.3, -3.0, 2.0), (0, 0, 0.4), up=(0, 0, 1)), 16, 16, dtype=torch.float64)
    m = vb.mask
    bary, t = ray_triangle_barycentrics(pos, f, vb.triangle_id[m], vb.ray_origin[m], vb.ray_direction[m])
    torch.testing.assert_close(bary, vb.barycentrics[m].double(), atol=2e-5, rtol=0)
    torch.testing.assert_close(t, vb.depth[m].double(), atol=2e-5, rtol=1e-5)
    # The hit point recomputed from the barycentrics lies on the ray.
    fv = pos[f[vb.triangle_id[m]]]
    point = (1 - bary.sum(-1, keepdim=True)) * fv[:, 0] + bary[:, :1] * fv[:, 1] + bary[:, 1:] * fv[:, 2]
    torch.testing.assert_close(point, vb.ray_origin[m] + t[:, None] * vb.ray_direction[m], atol=1e-10, rtol=0)


def test_barycentric_gradients() -> None:
    gen = torch.Generator().manual_seed(0)
    pos = (torch.tensor([[0.0, 0, 0], [1, 0, 0.2], [0, 1, -0.1], [1, 1, 0.3]]) + 0.05 * torch.randn(4, 3, generator=gen)).double()
    faces = torch.tensor([[0, 1, 2], [1, 3, 2]])
    tri = torch.tensor([0, 1, 0])
    o = torch.tensor([[0.2, 0.3, 2.0], [0.7, 0.6, 2.0], [0.1, 0.1, 2.0]], dtype=torch.float64)
    d = torch.nn.functional.normalize(torch.tensor([[0.0, 0.05, -1.0], [0.02, 0.0, -1.0], [0.0, 0.0, -1.0]], dtype=torch.float64), dim=-1)
    pos.requires_grad_(True)
    o.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p, oo: ray_triangle_barycentrics(p, faces, tri, oo, d), (pos, o))


def test_shadow_queries_and_refit() -> None:
    pos = torch.tensor([[-1.0, -1, 0], [1, -1, 0], [0, 1, 0]])
    caster = RayCaster(pos, torch.tensor([[0, 1, 2]]))
    o = torch.tensor([[0.0, 0, 1], [0.0, 0, 1], [0.0, 0, -1], [5.0, 0, 1]])
    d = torch.tensor([[0.0, 0, -1], [0.0, 0, 1], [0.0, 0, 1], [0.0, 0, -1]])
    assert caster.occluded(o, d).tolist() == [True, False, True, False]
    assert caster.occluded(o, d, torch.tensor([0.5, 1.0, 2.0, 1.0])).tolist() == [False, False, True, False]
    caster.refit(pos + torch.tensor([5.0, 0.0, 0.0]))
    assert caster.occluded(o, d).tolist() == [False, False, False, True]
    tri, _, t = caster.closest_hit(o[3:], d[3:])
    assert tri.tolist() == [0] and t.tolist() == [1.0]


def test_visibility_on_cuda_matches_cpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    points, faces = tiny_mesh()
    cam = look_at((0.7, -3.5, 2.5), (0.0, 0.0, 0.4), up=(0, 0, 1))
    cpu = visibility_buffer(RayCaster(torch.from_numpy(points), torch.from_numpy(faces)), cam, 32, 32)
    gpu = visibility_buffer(RayCaster(torch.from_numpy(points).cuda(), torch.from_numpy(faces).cuda()), cam, 32, 32)
    assert (cpu.triangle_id == gpu.triangle_id.cpu()).float().mean() > 0.99


def test_bad_meshes() -> None:
    with pytest.raises(InputError, match="no triangles"):
        RayCaster(torch.zeros(3, 3), torch.zeros(0, 3, dtype=torch.long))
    with pytest.raises(InputError, match=r"\[V, 3\]"):
        RayCaster(torch.zeros(3, 2), torch.zeros(1, 3, dtype=torch.long))
    caster = RayCaster(torch.eye(3), torch.tensor([[0, 1, 2]]))
    with pytest.raises(InputError, match="refit"):
        caster.refit(torch.zeros(4, 3))
