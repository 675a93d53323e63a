"""Texture-space rasterisation: a non-overlapping uv1 atlas for a scene (xatlas), and triangles
rasterised into a texture at texel centres (which triangle, which barycentrics, per texel) with a
dilated gutter -- what baking into a uv atlas needs, whatever is baked."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from neuralbake.io.gltf import Scene

__all__ = ["generate_uv1_atlas", "rasterize_uv"]


def generate_uv1_atlas(scene: Scene, *, resolution: int, padding: int = 2) -> Scene:
    """A copy of ``scene`` with a non-overlapping uv1 atlas over all meshes (xatlas), vertices split
    along chart seams (every vertex attribute, skinning ones included, follows its vertex; the rig is
    kept). Triangle order is kept, so triangle ids (and barycentrics) of the input and the output agree."""
    import xatlas

    atlas = xatlas.Atlas()
    for mesh in scene.meshes:
        atlas.add_mesh(np.ascontiguousarray(mesh.positions, np.float32), np.ascontiguousarray(mesh.indices, np.uint32))
    pack = xatlas.PackOptions()
    pack.resolution = int(resolution)
    pack.padding = int(padding)
    pack.bilinear = True
    atlas.generate(xatlas.ChartOptions(), pack)
    meshes = []
    for k, mesh in enumerate(scene.meshes):
        vmap, indices, uvs = atlas[k]
        pick = lambda a, vmap=vmap: None if a is None else np.ascontiguousarray(a[vmap])
        meshes.append(
            replace(
                mesh,
                positions=pick(mesh.positions),
                indices=indices.astype(np.int64),
                normals=pick(mesh.normals),
                tangents=pick(mesh.tangents),
                uv0=pick(mesh.uv0),
                uv1=np.ascontiguousarray(uvs, np.float32),
                colors=pick(mesh.colors),
                joints=pick(mesh.joints),
                weights=pick(mesh.weights),
                bind_positions=pick(mesh.bind_positions),
                bind_normals=pick(mesh.bind_normals),
                bind_tangents=pick(mesh.bind_tangents),
            )
        )
    return Scene(meshes=meshes, materials=scene.materials, source=scene.source, rig=scene.rig)


def rasterize_uv(uv: torch.Tensor, faces: torch.Tensor, size: int, *, dilate: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Triangles rasterised into a ``size`` x ``size`` texture at texel centres in uv space.

    Returns ``(triangle [S, S] int64, -1 where empty; barycentrics [S, S, 2])``. Texels within
    ``dilate`` texels of a chart copy their nearest covered neighbour (a gutter, so bilinear
    filtering and mips do not pull in empty texels). Not differentiable (a baking utility).
    """
    device = uv.device
    p = uv.detach().to(torch.float64)[faces] * size - 0.5  # [F, 3, 2] in texel-centre coordinates
    lo = torch.clamp(torch.ceil(p.amin(1)), 0, size - 1).long()
    hi = torch.clamp(torch.floor(p.amax(1)), 0, size - 1).long()
    span = torch.clamp(hi - lo + 1, min=0)
    counts = span[:, 0] * span[:, 1]
    tri_all = torch.repeat_interleave(torch.arange(len(faces), device=device), counts)
    start = torch.cumsum(counts, 0) - counts
    local = torch.arange(int(counts.sum()), device=device) - start[tri_all]
    x = lo[tri_all, 0] + local % span[tri_all, 0]
    y = lo[tri_all, 1] + local // span[tri_all, 0]
    q = p[tri_all]
    e1, e2, d = q[:, 1] - q[:, 0], q[:, 2] - q[:, 0], torch.stack((x, y), 1).double() - q[:, 0]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    ok = det.abs() > 1e-12
    det = torch.where(ok, det, torch.ones_like(det))
    b1 = (d[:, 0] * e2[:, 1] - d[:, 1] * e2[:, 0]) / det
    b2 = (e1[:, 0] * d[:, 1] - e1[:, 1] * d[:, 0]) / det
    eps = 1e-7
    inside = ok & (b1 >= -eps) & (b2 >= -eps) & (b1 + b2 <= 1 + eps)
    flat = (y * size + x)[inside]
    triangle = torch.full((size * size,), -1, dtype=torch.long, device=device)
    bary = torch.zeros(size * size, 2, dtype=torch.float64, device=device)
    triangle[flat] = tri_all[inside]
    bary[flat] = torch.stack((b1, b2), 1)[inside]
    triangle, bary = triangle.reshape(size, size), bary.reshape(size, size, 2)
    for _ in range(dilate):
        empty = triangle < 0
        if not bool(empty.any()):
            break
        for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
            src_t = torch.roll(triangle, (dy, dx), (0, 1))
            src_b = torch.roll(bary, (dy, dx), (0, 1))
            take = empty & (src_t >= 0) & (triangle < 0)
            triangle = torch.where(take, src_t, triangle)
            bary = torch.where(take[..., None], src_b, bary)
    return triangle, bary.to(uv.dtype)
