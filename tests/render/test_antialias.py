"""Silhouette antialiasing: geometry gradients at occlusion edges (gradcheck, topology, a fit that moves an edge)."""

from __future__ import annotations

import math

import pytest
import torch

from neuralbake.errors import InputError
from neuralbake.render.antialias import antialias, edge_neighbours
from neuralbake.render.camera import look_at
from neuralbake.render.visibility import RayCaster, visibility_buffer

CAMERA = look_at((0.0, 0.0, 3.0), (0.0, 0.0, 0.0), up=(0, 1, 0), fov_y_deg=40)
SIZE = 24


def _visibility(positions: torch.Tensor, faces: torch.Tensor):
    caster = RayCaster(positions.detach().float(), faces)
    return visibility_buffer(caster, CAMERA, SIZE, SIZE, backend="raster")


def _flat_image(vis, colours: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """Per-triangle colour on hit pixels, background elsewhere: an aliased render."""
    tri = vis.triangle_id
    image = colours[tri.clamp(min=0)]
    return torch.where((tri >= 0)[..., None], image, background)


def test_edge_neighbours_of_a_quad_and_a_lone_triangle() -> None:
    faces = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6]])
    n = edge_neighbours(faces)
    # face 0's edge (2, 0) is face 1's edge (0, 2); everything else is a boundary
    assert n.tolist() == [[-1, -1, 1], [0, -1, -1], [-1, -1, -1]]


def test_gradcheck_in_positions() -> None:
    positions = torch.tensor([[-0.61, -0.52, 0.0], [0.58, -0.43, 0.05], [0.07, 0.63, -0.1]], dtype=torch.float64)
    faces = torch.tensor([[0, 1, 2]])
    vis = _visibility(positions, faces)
    colours = torch.tensor([[0.9, 0.4, 0.1]], dtype=torch.float64)
    image = _flat_image(vis, colours, torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64))
    weights = torch.rand(SIZE, SIZE, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def f(p: torch.Tensor) -> torch.Tensor:
        return (antialias(image, vis.triangle_id, vis.depth, p, faces, CAMERA) * weights).sum()

    p = positions.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (p,), eps=1e-7, atol=1e-6)
    grad = torch.autograd.grad(f(p), p)[0]
    assert grad.abs().sum() > 0  # the silhouette does pull the vertices
    # and the image itself is differentiable in the colours
    c = image.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda im: antialias(im, vis.triangle_id, vis.depth, positions, faces, CAMERA).sum(), (c,))


def test_inner_edges_are_not_blurred_and_silhouettes_are() -> None:
    # a flat quad of two triangles: one colour everywhere on it, so only the outline may change
    positions = torch.tensor([[-0.6, -0.6, 0.0], [0.6, -0.6, 0.0], [0.6, 0.6, 0.0], [-0.6, 0.6, 0.0]], dtype=torch.float64)
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    vis = _visibility(positions, faces)
    image = _flat_image(vis, torch.tensor([[1.0], [1.0]], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64))
    # a different colour per triangle: the shared diagonal must still be left alone
    two = _flat_image(vis, torch.tensor([[1.0], [0.5]], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64))
    out = antialias(two, vis.triangle_id, vis.depth, positions, faces, CAMERA)
    interior = torch.zeros(SIZE, SIZE, dtype=torch.bool)
    interior[1:-1, 1:-1] = (vis.triangle_id[:-2, 1:-1] >= 0) & (vis.triangle_id[2:, 1:-1] >= 0)
    interior[1:-1, 1:-1] &= (vis.triangle_id[1:-1, :-2] >= 0) & (vis.triangle_id[1:-1, 2:] >= 0)
    assert torch.equal(out[interior], two[interior])
    changed = (antialias(image, vis.triangle_id, vis.depth, positions, faces, CAMERA) != image)[..., 0]
    assert changed.any()
    assert not (changed & interior).any()


def test_an_occluding_triangle_is_blended_over_the_one_behind() -> None:
    # small triangle in front of a big one: its outline is a silhouette against a surface, not background
    positions = torch.tensor(
        [[-1.0, -1.0, -0.5], [1.0, -1.0, -0.5], [0.0, 1.0, -0.5], [-0.3, -0.3, 0.2], [0.33, -0.27, 0.2], [0.02, 0.35, 0.2]], dtype=torch.float64
    )
    faces = torch.tensor([[0, 1, 2], [3, 4, 5]])
    vis = _visibility(positions, faces)
    image = _flat_image(vis, torch.tensor([[0.0], [1.0]], dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64))
    p = positions.clone().requires_grad_(True)
    out = antialias(image, vis.triangle_id, vis.depth, p, faces, CAMERA)
    grad = torch.autograd.grad(out.sum(), p)[0]
    assert grad[3:].abs().sum() > 0  # the front triangle's vertices move its outline


def test_fitting_moves_a_silhouette_to_its_target() -> None:
    faces = torch.tensor([[0, 1, 2]])
    target_positions = torch.tensor([[-0.5, -0.45, 0.0], [0.55, -0.4, 0.0], [0.0, 0.5, 0.0]], dtype=torch.float64)
    colours, background = torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64)

    def draw(p: torch.Tensor) -> torch.Tensor:
        vis = _visibility(p, faces)
        return antialias(_flat_image(vis, colours, background), vis.triangle_id, vis.depth, p, faces, CAMERA)

    target = draw(target_positions)
    offset = torch.tensor([[0.08, -0.06, 0.0], [-0.07, 0.05, 0.0], [0.06, 0.07, 0.0]], dtype=torch.float64)
    p = (target_positions + offset).requires_grad_(True)
    optimiser = torch.optim.Adam([p], lr=0.005)
    start = (p.detach() - target_positions)[:, :2].norm(dim=1).mean()
    for _ in range(150):
        optimiser.zero_grad()
        loss = ((draw(p) - target) ** 2).sum()
        loss.backward()
        p.grad[:, 2] = 0  # depth does not show in a flat colour
        optimiser.step()
    end = (p.detach() - target_positions)[:, :2].norm(dim=1).mean()
    assert end < 0.3 * start


def test_bad_shapes_are_clear_errors() -> None:
    positions = torch.zeros(3, 3)
    faces = torch.tensor([[0, 1, 2]])
    with pytest.raises(InputError, match="image"):
        antialias(torch.zeros(4, 4), torch.zeros(4, 4, dtype=torch.int64), torch.zeros(4, 4), positions, faces, CAMERA)
    with pytest.raises(InputError, match="visibility buffer"):
        antialias(torch.zeros(4, 4, 3), torch.zeros(5, 4, dtype=torch.int64), torch.zeros(4, 4), positions, faces, CAMERA)


@pytest.mark.parametrize("edge", [13.3, 13.7])
def test_a_straight_edge_gets_its_box_filtered_coverage(edge) -> None:
    # a quad wider than the view on the left, top and bottom; its right side is a vertical
    # silhouette at pixel x = edge. Box-filtered coverage of column i is clamp(edge - (i - 0.5), 0, 1).

    tan_half = math.tan(math.radians(CAMERA.fov_y_deg) / 2)
    x_edge = ((edge + 0.5) / (SIZE / 2) - 1.0) * 3.0 * tan_half
    positions = torch.tensor([[-3.0, -3.0, 0.0], [x_edge, -3.0, 0.0], [x_edge, 3.0, 0.0], [-3.0, 3.0, 0.0]], dtype=torch.float64)
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    vis = _visibility(positions, faces)
    image = _flat_image(vis, torch.tensor([[1.0], [1.0]], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64))
    out = antialias(image, vis.triangle_id, vis.depth, positions, faces, CAMERA)[..., 0]
    columns = torch.arange(SIZE, dtype=torch.float64)
    expected = (edge - (columns - 0.5)).clamp(0, 1)
    torch.testing.assert_close(out, expected.expand(SIZE, SIZE), atol=1e-9, rtol=0)
    assert not torch.equal(image[..., 0], expected.expand(SIZE, SIZE))  # the aliased image is not it
