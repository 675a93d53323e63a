"""Analytic silhouette antialiasing: gradients of an image with respect to vertex positions at
occlusion edges.

A visibility buffer is piecewise constant in the vertex positions: moving a silhouette edge by a
fraction of a pixel changes no pixel's triangle, so the rendered image has no gradient there. This
pass makes the silhouettes differentiable in the way Laine et al. (2020, "Modular Primitives for
High-Performance Differentiable Rendering", the nvdiffrast antialiasing operation) describe;
the code is our own, in plain PyTorch on any device:

1. Every pair of horizontally or vertically adjacent pixels whose triangle ids differ is a
   candidate. The pixel with the smaller depth is the *front* pixel; its triangle ``T`` is the
   occluder (background counts as infinitely far).
2. ``T``'s vertices are projected to pixel coordinates (differentiably,
   :meth:`~neuralbake.render.camera.Camera.project`). The edge of ``T`` whose line separates the
   two pixel centres, with its crossing inside the edge, is found from the edge functions at the
   two centres; the crossing's position along the pair's axis is
   ``t = e(front) / (e(front) - e(back))`` (0 at the front centre, 1 at the other).
3. The pair is kept only when that edge is a *silhouette* of the mesh: no other triangle shares
   it, or the triangle across it faces the other way (computed once per topology by
   :func:`edge_neighbours`, with split vertices at UV and normal seams welded by position).
   Edges inside a continuous surface are not blurred.
4. The pixel on whose side of the midpoint the edge crosses is blended towards its neighbour by
   the distance of the crossing from the midpoint: the front pixel by ``0.5 - t`` when ``t < 0.5``
   (part of it lies beyond the edge), the back pixel by ``t - 0.5`` when ``t > 0.5`` (the
   occluder covers part of it). Contributions of all pairs add up.

The forward image is slightly smoothed along silhouettes; the gradient with respect to the
positions flows through ``t`` and is exactly the derivative of this blend, which is what makes
silhouettes move in an image-space fit. Gradients also flow to the colours of both pixels.

Why hand-written: nvdiffrast (whose ``antialias`` this follows) is not on PyPI and needs a CUDA
build; Mitsuba's projective sampling works on its own scene representation, not on our
visibility buffer.
"""

from __future__ import annotations

import functools

import torch

from neuralbake.errors import InputError
from neuralbake.render.camera import Camera

__all__ = ["antialias", "edge_neighbours", "weld_vertices"]


def weld_vertices(positions: torch.Tensor, *, tolerance: float = 1e-6) -> torch.Tensor:
    """A canonical index per vertex: vertices whose positions agree to ``tolerance`` times the
    bounding-box diagonal share one (split vertices at UV or normal seams, touching primitives).
    int64 ``[V]``."""
    p = positions.detach().to(torch.float64)
    low = p.min(dim=0).values
    extent = float((p.max(dim=0).values - low).norm()) or 1.0
    grid = torch.round((p - low) / (tolerance * extent)).to(torch.int64)
    _, canonical = torch.unique(grid, dim=0, return_inverse=True)
    return canonical


def edge_neighbours(faces: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
    """For each triangle's edges ``(v0, v1)``, ``(v1, v2)``, ``(v2, v0)``: the other triangle sharing
    that edge, or -1 on a boundary edge and on non-manifold edges (three or more triangles).

    With ``positions``, vertices at the same place count as one (:func:`weld_vertices`), so a UV
    seam or the join of two primitives is not taken for a boundary. int64 ``[F, 3]``; compute it
    once per mesh topology.
    """
    f = faces.to(torch.int64)
    if positions is not None:
        f = weld_vertices(positions).to(f.device)[f]
    n_faces = f.shape[0]
    a = torch.cat((f[:, 0], f[:, 1], f[:, 2]))
    b = torch.cat((f[:, 1], f[:, 2], f[:, 0]))
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    key = lo * (int(f.max().item()) + 1 if f.numel() else 1) + hi
    order = torch.argsort(key, stable=True)
    sorted_key = key[order]
    _, counts = torch.unique_consecutive(sorted_key, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    pairs = starts[counts == 2]
    first, second = order[pairs], order[pairs + 1]
    neighbour = torch.full((3 * n_faces,), -1, dtype=torch.int64, device=f.device)
    neighbour[first] = second % n_faces
    neighbour[second] = first % n_faces
    return neighbour.reshape(3, n_faces).T.contiguous()


def _facing(px: torch.Tensor, py: torch.Tensor, faces: torch.Tensor, triangles: torch.Tensor) -> torch.Tensor:
    """Sign of each triangle's signed area in pixel space (+1 / -1; its winding as seen by the camera)."""
    f = faces[triangles]
    x, y = px[f], py[f]
    area = (x[:, 1] - x[:, 0]) * (y[:, 2] - y[:, 0]) - (y[:, 1] - y[:, 0]) * (x[:, 2] - x[:, 0])
    return torch.sign(area)


def antialias(
    image: torch.Tensor,
    triangle_id: torch.Tensor,
    depth: torch.Tensor,
    positions: torch.Tensor,
    faces: torch.Tensor,
    camera: Camera,
    *,
    neighbours: torch.Tensor | None = None,
) -> torch.Tensor:
    """Blend ``image`` ``[H, W, C]`` across silhouette edges so that it is differentiable in ``positions``.

    ``triangle_id`` int ``[H, W]`` (-1 on background) and ``depth`` ``[H, W]`` (inf on background)
    come from the visibility buffer that produced ``image`` (e.g. :class:`VisibilityBuffer`);
    ``positions`` ``[V, 3]`` (may require grad) and ``faces`` ``[F, 3]`` are the mesh it saw through
    ``camera``. ``neighbours`` (:func:`edge_neighbours` of ``faces`` and ``positions``) may be passed to skip its
    computation. Returns a new ``[H, W, C]`` image; see the module docstring for the method.
    """
    if image.ndim != 3:
        raise InputError(f"image must be [H, W, C], got shape {tuple(image.shape)}.", field="image", fix="add a channel axis.")
    height, width, channels = image.shape
    if tuple(triangle_id.shape) != (height, width) or tuple(depth.shape) != (height, width):
        raise InputError(
            f"triangle_id {tuple(triangle_id.shape)} and depth {tuple(depth.shape)} must match the image's {height} x {width}.",
            field="triangle_id",
            fix="pass the visibility buffer the image was rendered from.",
        )
    faces = faces.to(device=positions.device, dtype=torch.int64)
    if neighbours is None:
        neighbours = edge_neighbours(faces, positions)
    px, py, _ = camera.project(positions, width, height)
    tri = triangle_id.to(positions.device).reshape(-1)
    dep = depth.to(positions.device).reshape(-1)
    flat = image.reshape(-1, channels)
    first, second = _adjacent_pairs(height, width, positions.device)  # horizontal and vertical neighbours at once
    differ = tri[first] != tri[second]
    first, second = first[differ], second[differ]
    first_in_front = dep[first] <= dep[second]
    front = torch.where(first_in_front, first, second)
    back = torch.where(first_in_front, second, first)
    occluder = tri[front]
    valid = occluder >= 0
    front, back, occluder = front[valid], back[valid], occluder[valid]
    fx, fy = (front % width).to(px.dtype)[:, None], torch.div(front, width, rounding_mode="floor").to(px.dtype)[:, None]
    bx, by = (back % width).to(px.dtype)[:, None], torch.div(back, width, rounding_mode="floor").to(px.dtype)[:, None]
    # the occluder's three edges side by side ([M, 3]): edge k runs from corner k to corner k + 1
    a = faces[occluder]
    b = a[:, [1, 2, 0]]
    ax, ay = px[a], py[a]
    ex, ey = px[b] - ax, py[b] - ay
    e_front = ex * (fy - ay) - ey * (fx - ax)
    e_back = ex * (by - ay) - ey * (bx - ax)
    crosses = (e_front * e_back) < 0
    t = e_front / torch.where(crosses, e_front - e_back, torch.ones_like(e_front))
    # the crossing point must lie on the edge segment, not on its extension
    cx, cy = fx + t * (bx - fx), fy + t * (by - fy)
    length2 = ex * ex + ey * ey
    along = ((cx - ax) * ex + (cy - ay) * ey) / torch.where(length2 > 0, length2, torch.ones_like(length2))
    ok = crosses & (along >= 0) & (along <= 1) & (length2 > 0)
    nearest = torch.where(ok, t.detach(), torch.full_like(t, 2.0))
    best_edge = torch.argmin(nearest, dim=1, keepdim=True)  # the first of equally near crossings
    found = ok.gather(1, best_edge)[:, 0]
    t = t.gather(1, best_edge)[:, 0]
    across = neighbours[occluder, best_edge[:, 0]]
    facing = _facing(px.detach(), py.detach(), faces, torch.cat((occluder, across.clamp(min=0))))
    silhouette = found & ((across < 0) | (facing[across.shape[0] :] != facing[: across.shape[0]]))
    front, back, t = front[silhouette], back[silhouette], t[silhouette]
    front_colour, back_colour = flat[front], flat[back]
    front_weight = (0.5 - t).clamp(min=0)[:, None]
    back_weight = (t - 0.5).clamp(min=0)[:, None]
    delta = torch.zeros_like(flat).index_add(0, torch.cat((front, back)), torch.cat((front_weight * (back_colour - front_colour), back_weight * (front_colour - back_colour))))
    return (flat + delta).reshape(height, width, channels)


@functools.lru_cache(maxsize=4)
def _adjacent_pairs(height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat indices of every horizontally, then every vertically adjacent pixel pair of an image (made once per size)."""
    index = torch.arange(height * width, device=device).reshape(height, width)
    first = torch.cat((index[:, :-1].reshape(-1), index[:-1, :].reshape(-1)))
    second = torch.cat((index[:, 1:].reshape(-1), index[1:, :].reshape(-1)))
    return first, second
