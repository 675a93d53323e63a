"""The visibility buffer: which triangle each pixel sees, where on it, and how far away, found
by casting one ray per pixel through a BVH (NVIDIA Warp's ``wp.Mesh`` / ``wp.mesh_query_ray``).

This pass is deliberately not differentiable: it only decides *which* triangle a pixel sees.
Everything continuous (barycentrics as a function of vertex positions, attribute interpolation,
shading) is recomputed from its output in PyTorch by :mod:`neuralbake.render.gbuffer`, so
gradients reach vertex attributes, textures and, through :func:`ray_triangle_barycentrics`,
vertex positions inside triangles. Silhouette gradients (edge sampling or antialiasing of
triangle ids) are the piece left for the mesh-simplification work; they need exactly the
triangle ids and depths this buffer holds.

Warp runs the same kernel on the CPU (compiled once, cached under ``~/.cache/warp``) and on CUDA;
the BVH lives on the device of the positions tensor and tensors cross over without copies
(``wp.from_torch``). Barycentrics follow the Moller-Trumbore convention:
``p = (1 - b1 - b2) p0 + b1 p1 + b2 p2`` for a triangle ``(p0, p1, p2)``; depth is the distance
along the unit ray direction (not camera-space z).

Without Warp (its CUDA wheel is ~150 MB and cannot go everywhere) primary visibility falls back
to a rasterizer written in PyTorch (:func:`rasterize_triangle_ids`): every triangle's pixel
bounding box is expanded into candidate pixels, tested with edge functions and resolved with a
``scatter_reduce(amin)`` on packed ``(depth, triangle)`` keys, which runs on any device; the
barycentrics and distance of each pixel are then computed from its own ray exactly as above.
Shadow and other secondary rays need Warp.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from neuralbake.errors import InputError
from neuralbake.render.camera import Camera

__all__ = [
    "closest_points",
    "RayCaster",
    "VisibilityBuffer",
    "plane_barycentrics",
    "ray_triangle_barycentrics",
    "visibility_buffer",
]

_WARP = None


def warp_available() -> bool:
    """Whether NVIDIA Warp can be imported (else primary visibility is rasterised in PyTorch)."""
    try:
        import warp  # noqa: F401
    except ImportError:
        return False
    return True


def _warp():
    """Import and initialise Warp once, quietly (its banner would land in every CLI run)."""
    global _WARP
    if _WARP is None:
        import warp as wp

        if hasattr(wp, "LOG_WARNING"):  # warp >= 1.10: levels; older: a quiet flag
            wp.config.log_level = max(wp.config.log_level, wp.LOG_WARNING)
        else:
            wp.config.quiet = True
        wp.init()
        _WARP = (wp, _build_kernels(wp))
    return _WARP


def _build_kernels(wp):
    @wp.kernel
    def closest_hit(
        mesh: wp.uint64,
        origins: wp.array(dtype=wp.vec3),
        directions: wp.array(dtype=wp.vec3),
        max_t: float,
        triangle: wp.array(dtype=wp.int32),
        barycentric: wp.array(dtype=wp.vec2),
        depth: wp.array(dtype=float),
    ):
        i = wp.tid()
        q = wp.mesh_query_ray(mesh, origins[i], directions[i], max_t)
        if q.result:
            triangle[i] = q.face
            # Warp reports the weights of p0 and p1; Moller-Trumbore's (b1, b2) weigh p1 and p2.
            barycentric[i] = wp.vec2(q.v, 1.0 - q.u - q.v)
            depth[i] = q.t
        else:
            triangle[i] = -1
            barycentric[i] = wp.vec2(0.0, 0.0)
            depth[i] = wp.inf

    @wp.kernel
    def any_hit(
        mesh: wp.uint64,
        origins: wp.array(dtype=wp.vec3),
        directions: wp.array(dtype=wp.vec3),
        max_t: wp.array(dtype=float),
        occluded: wp.array(dtype=wp.int32),
    ):
        i = wp.tid()
        q = wp.mesh_query_ray(mesh, origins[i], directions[i], max_t[i])
        occluded[i] = wp.where(q.result, 1, 0)

    @wp.kernel
    def closest_point(
        mesh: wp.uint64,
        points: wp.array(dtype=wp.vec3),
        max_distance: float,
        triangle: wp.array(dtype=wp.int32),
        barycentric: wp.array(dtype=wp.vec2),
    ):
        i = wp.tid()
        q = wp.mesh_query_point_no_sign(mesh, points[i], max_distance)
        if q.result:
            triangle[i] = q.face
            barycentric[i] = wp.vec2(q.v, 1.0 - q.u - q.v)  # (weights of p1, p2), as for the rays
        else:
            triangle[i] = -1
            barycentric[i] = wp.vec2(0.0, 0.0)

    return {"closest_hit": closest_hit, "any_hit": any_hit, "closest_point": closest_point}


def _warp_device(device: torch.device) -> str:
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}"
    raise InputError(f"ray casting runs on cpu or cuda, not {device}.", field="device", fix="move the scene to 'cpu' or 'cuda'.")


def _torch_stream(device: torch.device) -> contextlib.AbstractContextManager:
    """Run Warp work on PyTorch's current CUDA stream, so no extra synchronisation is needed."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    wp, _ = _warp()
    return wp.ScopedStream(wp.stream_from_torch(device))


class RayCaster:
    """A BVH over a triangle mesh that answers closest-hit and any-hit ray queries.

    ``positions``: float ``[V, 3]`` (any float dtype; cast to float32 for the BVH) on cpu or
    cuda; ``faces``: integer ``[F, 3]``. After moving vertices call :meth:`refit` (cheap; keeps
    the tree topology) or build a new caster when they moved a lot.
    """

    def __init__(self, positions: torch.Tensor, faces: torch.Tensor) -> None:
        if positions.dim() != 2 or positions.shape[1] != 3 or faces.dim() != 2 or faces.shape[1] != 3:
            raise InputError(
                f"expected positions [V, 3] and faces [F, 3], got {tuple(positions.shape)} and {tuple(faces.shape)}.",
                field="positions/faces",
                fix="pass a triangle mesh.",
            )
        if faces.shape[0] == 0:
            raise InputError("the mesh has no triangles.", field="faces", fix="pass at least one triangle.")
        self.device = positions.device
        self._points = positions.detach().to(torch.float32).contiguous().clone()
        self._indices = faces.detach().to(device=self.device, dtype=torch.int32).reshape(-1).contiguous()
        self.mesh = None
        if not warp_available():
            return  # primary visibility by rasterisation only (see the module docstring)
        wp, _ = _warp()
        self._wp_device = _warp_device(self.device)
        with _torch_stream(self.device):
            self.mesh = wp.Mesh(
                points=wp.from_torch(self._points, dtype=wp.vec3),
                indices=wp.from_torch(self._indices, dtype=wp.int32),
            )

    @property
    def num_triangles(self) -> int:
        """``F``."""
        return self._indices.shape[0] // 3

    def refit(self, positions: torch.Tensor) -> None:
        """Move the vertices to ``positions`` ``[V, 3]`` (same count) and refit the BVH."""
        if positions.shape != self._points.shape:
            raise InputError(
                f"refit needs {tuple(self._points.shape)} positions, got {tuple(positions.shape)}.",
                field="positions",
                fix="build a new RayCaster when the vertex count changes.",
            )
        self._points.copy_(positions.detach().to(self._points))
        if self.mesh is None:
            return
        with _torch_stream(self.device):
            self.mesh.refit()

    @property
    def faces(self) -> torch.Tensor:
        """int64 ``[F, 3]``."""
        return self._indices.reshape(-1, 3).long()

    @property
    def points(self) -> torch.Tensor:
        """float32 ``[V, 3]`` (the positions the BVH was built or refitted with)."""
        return self._points

    def _need_warp(self) -> None:
        if self.mesh is None:
            raise InputError(
                "ray queries other than primary visibility need NVIDIA Warp, which is not installed.",
                field="warp-lang",
                fix="pip install warp-lang==1.19.0, or render without shadows.",
            )

    def _rays(self, origins: torch.Tensor, directions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        o = origins.detach().reshape(-1, 3).to(device=self.device, dtype=torch.float32).contiguous()
        d = directions.detach().reshape(-1, 3).to(device=self.device, dtype=torch.float32).contiguous()
        if o.shape != d.shape:
            raise InputError(f"{o.shape[0]} origins but {d.shape[0]} directions.", field="directions", fix="pass one origin per ray.")
        return o, d

    def closest_hit(
        self, origins: torch.Tensor, directions: torch.Tensor, *, max_t: float = 1e30
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """First hits of rays ``[..., 3]``.

        Returns ``(triangle, barycentrics, t)``: int64 ``[...]`` (-1 on a miss), float32 ``[..., 2]``
        and float32 ``[...]`` (inf on a miss).
        """
        self._need_warp()
        wp, kernels = _warp()
        shape = origins.shape[:-1]
        o, d = self._rays(origins, directions)
        n = o.shape[0]
        tri = torch.empty(n, dtype=torch.int32, device=self.device)
        bary = torch.empty(n, 2, dtype=torch.float32, device=self.device)
        t = torch.empty(n, dtype=torch.float32, device=self.device)
        if n:
            with _torch_stream(self.device):
                wp.launch(
                    kernels["closest_hit"],
                    dim=n,
                    inputs=[self.mesh.id, wp.from_torch(o, dtype=wp.vec3), wp.from_torch(d, dtype=wp.vec3), float(max_t)],
                    outputs=[wp.from_torch(tri), wp.from_torch(bary, dtype=wp.vec2), wp.from_torch(t)],
                    device=self._wp_device,
                )
        return tri.to(torch.int64).reshape(shape), bary.reshape(*shape, 2), t.reshape(shape)

    def occluded(self, origins: torch.Tensor, directions: torch.Tensor, max_t: torch.Tensor | float = 1e30) -> torch.Tensor:
        """Whether anything lies along each ray before ``max_t`` (``[...]`` or a float): bool ``[...]``."""
        self._need_warp()
        wp, kernels = _warp()
        shape = origins.shape[:-1]
        o, d = self._rays(origins, directions)
        n = o.shape[0]
        limit = torch.as_tensor(max_t, dtype=torch.float32, device=self.device).expand(shape).reshape(-1).contiguous()
        hit = torch.empty(n, dtype=torch.int32, device=self.device)
        if n:
            with _torch_stream(self.device):
                wp.launch(
                    kernels["any_hit"],
                    dim=n,
                    inputs=[self.mesh.id, wp.from_torch(o, dtype=wp.vec3), wp.from_torch(d, dtype=wp.vec3), wp.from_torch(limit)],
                    outputs=[wp.from_torch(hit)],
                    device=self._wp_device,
                )
        return hit.bool().reshape(shape)


@dataclass
class VisibilityBuffer:
    """What each pixel of a ``height x width`` image sees (all tensors on the scene's device)."""

    triangle_id: torch.Tensor
    """int64 ``[H, W]``: index into the faces, -1 for background."""
    barycentrics: torch.Tensor
    """float32 ``[H, W, 2]``: ``(b1, b2)`` weights of the triangle's second and third vertex (0 on background)."""
    depth: torch.Tensor
    """float32 ``[H, W]``: distance along the unit ray (inf on background)."""
    material_id: torch.Tensor
    """int64 ``[H, W]``: the triangle's material, -1 on background."""
    ray_origin: torch.Tensor
    """``[H, W, 3]`` camera ray origins (the pixel centres' rays)."""
    ray_direction: torch.Tensor
    """``[H, W, 3]`` unit camera ray directions."""

    @property
    def mask(self) -> torch.Tensor:
        """bool ``[H, W]``: pixels that hit the mesh."""
        return self.triangle_id >= 0

    @property
    def coverage(self) -> float:
        """Fraction of pixels that hit the mesh."""
        return float(self.mask.float().mean())


def visibility_buffer(
    caster: RayCaster,
    camera: Camera,
    width: int,
    height: int,
    *,
    material_ids: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    backend: str = "auto",
) -> VisibilityBuffer:
    """Cast one ray through every pixel centre of ``camera``; see :class:`VisibilityBuffer`.

    ``material_ids``: int ``[F]`` per-triangle materials (all 0 when ``None``). ``dtype`` is the
    float type of the returned rays (the hit data are always float32 from the BVH).
    ``backend``: ``"warp"`` (BVH ray casts), ``"raster"`` (:func:`rasterize_triangle_ids`, then
    the pixel's ray against that triangle) or ``"auto"`` (Warp when the caster has a BVH).
    """
    if backend not in ("auto", "warp", "raster"):
        raise InputError(f"unknown visibility backend {backend!r}.", field="backend", fix="use auto, warp or raster.")
    origins, directions = camera.generate_rays(width, height, device=caster.device, dtype=dtype)
    if backend == "raster" or (backend == "auto" and caster.mesh is None):
        tri = rasterize_triangle_ids(caster.points, caster.faces, camera, width, height)
        hit = tri >= 0
        bary = torch.zeros(height, width, 2, dtype=torch.float32, device=caster.device)
        t = torch.full((height, width), float("inf"), dtype=torch.float32, device=caster.device)
        if bool(hit.any()):
            b, dist = ray_triangle_barycentrics(caster.points, caster.faces, tri[hit], origins[hit].float(), directions[hit].float())
            bary[hit], t[hit] = b.float(), dist.float()
    else:
        tri, bary, t = caster.closest_hit(origins, directions)
    hit = tri >= 0
    if material_ids is None:
        mat = torch.where(hit, 0, -1)
    else:
        mat = torch.where(hit, material_ids.to(caster.device)[tri.clamp(min=0)], -1)
    return VisibilityBuffer(tri, bary, t, mat, origins, directions)


def ray_triangle_barycentrics(
    positions: torch.Tensor, faces: torch.Tensor, triangle_id: torch.Tensor, origins: torch.Tensor, directions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable ray / triangle-plane intersection (Moller-Trumbore without the inside test).

    For each ray ``[N, 3]`` and its triangle ``triangle_id`` ``[N]`` (must be >= 0) returns
    barycentrics ``(b1, b2)`` ``[N, 2]`` and distance ``t`` ``[N]`` of the point where the ray meets the
    triangle's plane, as smooth functions of ``positions`` ``[V, 3]`` and the rays, so gradients
    flow to vertex positions. For the pixel's own ray this reproduces the visibility buffer's
    barycentrics; for a neighbouring pixel's ray it gives the ray differential on the same plane.
    """
    corners = positions.index_select(0, faces.index_select(0, triangle_id).reshape(-1)).reshape(triangle_id.shape[0], 3, 3)
    p0 = corners[:, 0]
    return plane_barycentrics(p0, corners[:, 1] - p0, corners[:, 2] - p0, origins.to(positions.dtype), directions.to(positions.dtype))


def plane_barycentrics(
    p0: torch.Tensor, e1: torch.Tensor, e2: torch.Tensor, origins: torch.Tensor, directions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ray_triangle_barycentrics` for triangles given as a corner ``p0`` and edges ``e1 = p1 - p0``,
    ``e2 = p2 - p0`` (``[N, 3]`` each) and rays ``[..., N, 3]`` (several rays per triangle batch: leading axes
    broadcast): barycentrics ``[..., N, 2]`` and distances ``[..., N]``."""
    d = directions
    s = origins - p0
    pvec = torch.cross(d, e2.expand_as(d), dim=-1)
    det = (e1 * pvec).sum(-1)
    tiny = torch.finfo(p0.dtype).tiny
    det = torch.where(det.abs() > tiny, det, torch.full_like(det, tiny))  # ray parallel to the plane
    inv = 1.0 / det
    qvec = torch.cross(s.expand_as(d), e1.expand_as(d), dim=-1)
    b1 = (s * pvec).sum(-1) * inv
    b2 = (d * qvec).sum(-1) * inv
    t = (e2 * qvec).sum(-1) * inv
    return torch.stack((b1, b2), dim=-1), t


def rasterize_triangle_ids(
    positions: torch.Tensor, faces: torch.Tensor, camera: Camera, width: int, height: int, *, max_candidates: int = 1 << 24
) -> torch.Tensor:
    """The nearest triangle at every pixel centre of ``camera``: int64 ``[H, W]``, -1 for background.

    Pure PyTorch (any device): project the vertices, expand each triangle's pixel bounding box into
    candidate pixels (in chunks of at most ``max_candidates``), keep those inside the triangle (edge
    functions, either winding), and keep per pixel the candidate of least view depth with one
    ``scatter_reduce("amin")`` over ``(depth bits << 32) | triangle`` keys. Triangles with a vertex
    behind the camera plane are skipped (no near-plane clipping; the orbit cameras of the fitting
    bakes never need it). Pixel centres are those of :meth:`Camera.generate_rays`.
    """
    device = positions.device
    px, py, z = camera.project(positions.detach().double(), width, height)
    f = faces.to(device=device, dtype=torch.int64)
    fx, fy, fz = px[f], py[f], z[f]
    in_front = (fz > 1e-9).all(dim=1)
    x0 = torch.ceil(fx.min(dim=1).values).clamp(0, width - 1)
    x1 = torch.floor(fx.max(dim=1).values).clamp(-1, width - 1)
    y0 = torch.ceil(fy.min(dim=1).values).clamp(0, height - 1)
    y1 = torch.floor(fy.max(dim=1).values).clamp(-1, height - 1)
    bw, bh = (x1 - x0 + 1).clamp(min=0), (y1 - y0 + 1).clamp(min=0)
    counts = (bw * bh * in_front).long()
    empty = torch.iinfo(torch.int64).max
    keys = torch.full((height * width,), empty, dtype=torch.int64, device=device)
    tris = torch.nonzero(counts > 0).flatten()
    start = 0
    cumulative = torch.cumsum(counts[tris], 0)
    while start < len(tris):
        base = int(cumulative[start - 1]) if start else 0
        stop = int(torch.searchsorted(cumulative, base + max_candidates, right=True))
        stop = max(stop, start + 1)
        chunk = tris[start:stop]
        n = counts[chunk]
        which = torch.repeat_interleave(chunk, n)
        offsets = torch.cumsum(n, 0) - n
        k = torch.arange(int(n.sum()), device=device) - torch.repeat_interleave(offsets, n)
        width_t = bw[which].long()
        ix = x0[which] + (k % width_t).double()
        iy = y0[which] + (k // width_t).double()
        ax, ay = fx[which, 0], fy[which, 0]
        bx, by = fx[which, 1], fy[which, 1]
        cx, cy = fx[which, 2], fy[which, 2]
        w0 = (bx - ix) * (cy - iy) - (by - iy) * (cx - ix)
        w1 = (cx - ix) * (ay - iy) - (cy - iy) * (ax - ix)
        w2 = (ax - ix) * (by - iy) - (ay - iy) * (bx - ix)
        area = w0 + w1 + w2
        inside = (((w0 >= 0) & (w1 >= 0) & (w2 >= 0)) | ((w0 <= 0) & (w1 <= 0) & (w2 <= 0))) & (area.abs() > 0)
        # perspective-correct view depth: 1/z interpolates linearly in screen space
        safe_area = torch.where(area == 0, torch.ones_like(area), area)
        inv_z = (w0 / fz[which, 0] + w1 / fz[which, 1] + w2 / fz[which, 2]) / safe_area
        depth = (1.0 / inv_z.clamp(min=1e-30)).float()
        pixel = (iy * width + ix).long()
        key = (depth.view(torch.int32).long() << 32) | which
        keys.scatter_reduce_(0, pixel[inside], key[inside], reduce="amin")
        start = stop
    tri = torch.where(keys == empty, -1, keys & 0xFFFFFFFF)
    return tri.reshape(height, width)


def _closest_points_torch(positions: torch.Tensor, faces: torch.Tensor, points: torch.Tensor, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Brute force over every triangle (Ericson's closest point on a triangle), ``chunk`` points at a time."""
    p0, p1, p2 = (positions[faces[:, k]].double() for k in range(3))
    ab, ac = p1 - p0, p2 - p0
    tri_out, bary_out = [], []
    for start in range(0, points.shape[0], chunk):
        p = points[start : start + chunk].double()[:, None, :]
        ap = p - p0
        d1, d2 = (ab * ap).sum(-1), (ac * ap).sum(-1)
        bp = p - p1
        d3, d4 = (ab * bp).sum(-1), (ac * bp).sum(-1)
        cp = p - p2
        d5, d6 = (ab * cp).sum(-1), (ac * cp).sum(-1)
        va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
        tiny = 1e-30
        # start from the interior solution, then overwrite by Voronoi region (edges, then vertices)
        denom = (va + vb + vc).clamp(min=tiny)
        v, w = vb / denom, vc / denom
        e_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
        v, w = torch.where(e_ab, d1 / (d1 - d3).clamp(min=tiny), v), torch.where(e_ab, torch.zeros_like(w), w)
        e_ac = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
        v, w = torch.where(e_ac, torch.zeros_like(v), v), torch.where(e_ac, d2 / (d2 - d6).clamp(min=tiny), w)
        e_bc = (va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0)
        t_bc = (d4 - d3) / ((d4 - d3) + (d5 - d6)).clamp(min=tiny)
        v, w = torch.where(e_bc, 1 - t_bc, v), torch.where(e_bc, t_bc, w)
        at_a = (d1 <= 0) & (d2 <= 0)
        at_b = (d3 >= 0) & (d4 <= d3)
        at_c = (d6 >= 0) & (d5 <= d6)
        v = torch.where(at_a | at_c, torch.zeros_like(v), torch.where(at_b, torch.ones_like(v), v))
        w = torch.where(at_a | at_b, torch.zeros_like(w), torch.where(at_c, torch.ones_like(w), w))
        closest = p0 + v[..., None] * ab + w[..., None] * ac
        best = ((closest - p) ** 2).sum(-1).argmin(1)
        rows = torch.arange(best.shape[0], device=best.device)
        tri_out.append(best)
        bary_out.append(torch.stack((v[rows, best], w[rows, best]), 1))
    return torch.cat(tri_out), torch.cat(bary_out).to(positions.dtype)


def closest_points(positions: torch.Tensor, faces: torch.Tensor, points: torch.Tensor, *, use_warp: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """For each of ``points`` ``[N, 3]``, the closest point on the mesh: ``(triangle [N], barycentrics
    [N, 2])`` (weights of the triangle's second and third vertices, as everywhere in the renderer).

    Through Warp's BVH point query when warp-lang is there (``use_warp=None``), else by brute force
    in PyTorch (every triangle; slower, same answer up to ties).
    """
    if use_warp is None:
        use_warp = warp_available()
    if not use_warp:
        return _closest_points_torch(positions, faces.long(), points)
    wp, kernels = _warp()
    device = positions.device
    target = _warp_device(device)
    with _torch_stream(device):
        verts = wp.array(positions.detach().float().contiguous().cpu().numpy() if device.type == "cpu" else positions.detach().float().contiguous(), dtype=wp.vec3, device=target)
        index = wp.array(faces.detach().to(torch.int32).reshape(-1).contiguous().cpu().numpy() if device.type == "cpu" else faces.detach().to(torch.int32).reshape(-1).contiguous(),
                         dtype=wp.int32, device=target)
        mesh = wp.Mesh(points=verts, indices=index)
        queries = wp.array(points.detach().float().contiguous().cpu().numpy() if device.type == "cpu" else points.detach().float().contiguous(), dtype=wp.vec3, device=target)
        triangle = wp.empty(points.shape[0], dtype=wp.int32, device=target)
        bary = wp.empty(points.shape[0], dtype=wp.vec2, device=target)
        extent = float((positions.max(0).values - positions.min(0).values).norm()) * 4 + 1.0
        wp.launch(kernels["closest_point"], dim=points.shape[0], inputs=[mesh.id, queries, extent, triangle, bary], device=target)
        out_tri = torch.as_tensor(triangle.numpy()).to(device=device, dtype=torch.int64)
        out_bary = torch.as_tensor(bary.numpy()).to(device=device, dtype=positions.dtype)
    return out_tri, out_bary
