"""QEM decimation of a glTF scene that keeps what an LOD needs: materials, uv layout, normals,
colours and skins.

The edge collapses are MeshLab's quadric decimation (Garland-Heckbert error quadrics, through
pymeshlab), a maintained and widely used implementation; fast-simplification was considered (it is
faster) but knows neither texture coordinates nor per-vertex weights, and locking glTF's uv seams
instead stops a seam-rich asset long before its budget (DamagedHelmet could not go below 67 %).

Each primitive is decimated on its own (it keeps its material) to a share of the triangle budget
proportional to its triangle count. Its vertices are first **welded by position**: glTF splits a
vertex wherever its uv or normal changes, which would make every seam an open border to the
decimator. Then

* a primitive with ``TEXCOORD_0`` goes through MeshLab's texture-aware variant: its uvs are wedge
  (per triangle corner) attributes that enter the quadrics, so collapses along a seam keep both
  sides' uvs and no triangle spans two charts. MeshLab only accepts wedge uvs together with a
  texture, so the mesh is handed over as a temporary OBJ with a 2 x 2 placeholder texture. This
  variant has no per-vertex weighting: ``vertex_weights`` protect instead (the heaviest vertices,
  weighing at least :data:`PROTECT_WEIGHT`, at most one for every eight triangles of the budget, keep
  their faces, as do those ``protect`` marks);
* a primitive without uvs goes through the plain variant with MeshLab's quality weighting: a
  collapse's error is multiplied by its vertices' weight, so heavy vertices (image-space error,
  joints, artists' masks) are kept longest.

Afterwards the glTF vertices are rebuilt from the new faces' corners: every other attribute
(normal, tangent, colour, uv1, joints, weights) is copied from the original vertex that the corner
survives from (each collapse keeps one of its ends), taking, among that position's split vertices,
the one whose uv is nearest the corner's and then whose normal is nearest the new face's, so uv
seams keep each side's attributes and hard edges (vertices split by their normals) stay hard. Skinned
primitives are decimated in their bind pose, so the result stays skinnable, and posed back into
the rest pose.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from neuralbake.errors import InputError
from neuralbake.io.gltf.geometry import drop_degenerate_triangles
from neuralbake.io.gltf.model import Mesh, Scene
from neuralbake.render.skinning import pose_scene

__all__ = ["PROTECT_WEIGHT", "Decimated", "decimate_scene", "non_manifold_edges", "triangle_budget", "weld"]

MIN_TRIANGLES_PER_MESH = 4
"""A primitive is never decimated below this many triangles (or below what it has)."""
PROTECT_WEIGHT = 2.0
"""On textured primitives, a vertex weight from which the vertex's faces are kept whole."""
WELD_TOLERANCE = 1e-6
"""Vertices closer than this fraction of the primitive's bounding-box diagonal are one position."""


@dataclass(eq=False)
class Decimated:
    """A decimated scene and where its vertices came from."""

    scene: Scene
    source_vertex: list[np.ndarray]
    """Per mesh, int64 ``[V']``: the original vertex whose attributes each new vertex carries."""
    triangles_before: int
    triangles_after: int


def triangle_budget(total: int, *, ratio: float | None = None, triangles: int | None = None) -> int:
    """The target triangle count from a ratio in (0, 1] or an absolute count (checked)."""
    if triangles:
        if isinstance(triangles, bool) or not isinstance(triangles, int) or triangles < 1:
            raise InputError(f"triangles must be a positive integer, got {triangles!r}.", field="triangles", fix="pass e.g. 5000.")
        return min(triangles, total)
    if ratio is None or isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or math.isnan(ratio) or not 0.0 < ratio <= 1.0:
        raise InputError(f"ratio must be in (0, 1], got {ratio!r}.", field="ratio", fix="pass e.g. 0.25 to keep a quarter of the triangles.")
    return max(1, round(total * ratio))


def weld(positions: np.ndarray, tolerance: float = WELD_TOLERANCE) -> tuple[np.ndarray, np.ndarray]:
    """``(group [V], representative [W])``: one group per distinct position, and its first vertex."""
    p = np.asarray(positions, np.float64)
    low = p.min(0)
    extent = float(np.linalg.norm(p.max(0) - low)) or 1.0
    _, first, group = np.unique(np.round((p - low) / (tolerance * extent)).astype(np.int64), axis=0, return_index=True, return_inverse=True)
    return group.reshape(-1), first


def non_manifold_edges(mesh: Mesh) -> int:
    """Edges (of the mesh welded by position) that three or more triangles share. The decimation
    copes with them (MeshLab keeps them as they come); the report counts them."""
    group, _ = weld(mesh.positions)
    faces = group[mesh.indices]
    edges = np.sort(np.concatenate((faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]])), 1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    return int((counts > 2).sum())


def _shares(counts: list[int], target: int) -> list[int]:
    """Split ``target`` triangles over meshes in proportion to their ``counts`` (largest remainders)."""
    total = sum(counts)
    exact = [target * c / total for c in counts]
    shares = [max(min(c, MIN_TRIANGLES_PER_MESH), math.floor(e)) for c, e in zip(counts, exact)]
    order = sorted(range(len(counts)), key=lambda i: exact[i] - math.floor(exact[i]), reverse=True)
    for i in order:
        if sum(shares) >= target:
            break
        if shares[i] < counts[i]:
            shares[i] += 1
    return [min(s, c) for s, c in zip(shares, counts)]


def _textured(positions: np.ndarray, faces: np.ndarray, corner_uv: np.ndarray, target: int, protect: np.ndarray | None, first: np.ndarray):
    """Texture-aware QEM of a welded mesh with wedge uvs -> (positions, faces, corner uvs, source per vertex)."""
    import pymeshlab
    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="neuralbake-qem-") as folder:
        root = Path(folder)
        Image.new("RGB", (2, 2)).save(root / "placeholder.png")
        (root / "mesh.mtl").write_text("newmtl lod\nmap_Kd placeholder.png\n")
        corners = corner_uv.reshape(-1, 2).astype(np.float64)
        with open(root / "mesh.obj", "w") as handle:
            handle.write("mtllib mesh.mtl\n")
            np.savetxt(handle, positions, fmt="v %.9g %.9g %.9g")
            np.savetxt(handle, np.c_[corners[:, 0], 1.0 - corners[:, 1]], fmt="vt %.9g %.9g")  # OBJ's v points up
            handle.write("usemtl lod\n")
            wedge = np.arange(len(corners)).reshape(-1, 3)
            np.savetxt(handle, np.stack((faces + 1, wedge + 1), -1).reshape(len(faces), 6), fmt="f %d/%d %d/%d %d/%d")
        meshes = pymeshlab.MeshSet()
        meshes.load_new_mesh(str(root / "mesh.obj"))
    mesh = meshes.current_mesh()
    if mesh.vertex_number() != len(positions):
        raise RuntimeError("MeshLab reordered the OBJ's vertices; the decimation cannot be traced back")
    mesh.add_vertex_custom_scalar_attribute(first.astype(np.float64), "source")
    selected = _select_unprotected(meshes, protect)
    meshes.meshing_decimation_quadric_edge_collapse_with_texture(
        targetfacenum=int(target), extratcoordw=1.0, preserveboundary=False, preservenormal=True, optimalplacement=True, selected=selected
    )
    out = meshes.current_mesh()
    uv = out.wedge_tex_coord_matrix().reshape(-1, 3, 2).copy()
    uv[..., 1] = 1.0 - uv[..., 1]
    source = np.round(out.vertex_custom_scalar_attribute_array("source")).astype(np.int64)
    return out.vertex_matrix(), out.face_matrix().astype(np.int64), uv, source


def _select_unprotected(meshes: object, protect: np.ndarray) -> bool:
    """Select the faces without a protected corner (the decimation then touches only those)."""
    if not protect.any():
        return False
    meshes.current_mesh().add_vertex_custom_scalar_attribute(protect.astype(np.float64), "protect")
    meshes.compute_selection_by_condition_per_vertex(condselect="protect < 0.5")
    meshes.compute_selection_transfer_vertex_to_face(inclusive=False)
    return True


def _plain(positions: np.ndarray, faces: np.ndarray, target: int, weights: np.ndarray | None, protect: np.ndarray, first: np.ndarray):
    """Quality-weighted QEM of a welded mesh -> (positions, faces, source per vertex)."""
    import pymeshlab

    quality = np.ones(len(positions)) if weights is None else weights
    mesh = pymeshlab.Mesh(vertex_matrix=positions, face_matrix=faces.astype(np.int32), v_scalar_array=quality)
    mesh.add_vertex_custom_scalar_attribute(first.astype(np.float64), "source")
    meshes = pymeshlab.MeshSet()
    meshes.add_mesh(mesh)
    selected = _select_unprotected(meshes, protect)
    meshes.meshing_decimation_quadric_edge_collapse(
        targetfacenum=int(target), preserveboundary=False, preservenormal=True, optimalplacement=True, qualityweight=weights is not None,
        autoclean=False,  # its clean-up may merge or drop vertices, which would lose their trace back
        selected=selected,
    )
    out = meshes.current_mesh()
    return out.vertex_matrix(), out.face_matrix().astype(np.int64), np.round(out.vertex_custom_scalar_attribute_array("source")).astype(np.int64)


def _corner_sources(survivor: np.ndarray, corner_uv: np.ndarray | None, face_normal: np.ndarray, group: np.ndarray,
                    mesh_uv: np.ndarray | None, mesh_normals: np.ndarray) -> np.ndarray:
    """For every corner of the new faces, the original vertex it takes its attributes from: among the
    split vertices at the corner's surviving position, the one whose uv is nearest the corner's uv,
    then whose normal is nearest the new face's normal. So uv seams keep each side's uv, normal and
    tangent, and hard edges (vertices split by their normals) stay hard."""
    order = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[order], np.arange(group.max() + 1))
    ends = np.append(starts[1:], len(order))
    out = np.empty(len(survivor), np.int64)
    for k, s in enumerate(survivor):
        g = group[s]
        members = order[starts[g] : ends[g]]
        if len(members) == 1:
            out[k] = members[0]
            continue
        score = 1.0 - mesh_normals[members] @ face_normal[k]
        if mesh_uv is not None:
            score = score + 1e6 * ((mesh_uv[members] - corner_uv[k]) ** 2).sum(1)
        out[k] = members[np.argmin(score)]
    return out


def _face_normals(points: np.ndarray, faces: np.ndarray) -> np.ndarray:
    p = points[faces]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    return n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-30)


def _decimate_mesh(mesh: Mesh, target: int, weights: np.ndarray | None, protect: np.ndarray | None = None) -> tuple[Mesh, np.ndarray]:
    skinned = mesh.skin is not None and mesh.bind_positions is not None
    positions = np.asarray(mesh.bind_positions if skinned else mesh.positions, np.float64)
    group, first = weld(positions)
    welded, faces = positions[first], group[mesh.indices]
    welded_weights = None
    if weights is not None:
        welded_weights = np.ones(len(first))
        np.maximum.at(welded_weights, group, np.asarray(weights, np.float64))
    welded_protect = np.zeros(len(first), bool)
    if protect is not None:
        np.logical_or.at(welded_protect, group, np.asarray(protect, bool))
    corner_uv = None
    if mesh.uv0 is not None:
        if welded_weights is not None:
            # the heaviest vertices (at least PROTECT_WEIGHT) are kept, at most a quarter of the
            # budget's vertices, so that the rest can still meet it
            heavy = np.flatnonzero(welded_weights >= PROTECT_WEIGHT)
            heavy = heavy[np.argsort(-welded_weights[heavy], kind="stable")][: max(0, target // 8)]
            welded_protect[heavy] = True
        new_positions, new_faces, corner_uv, survivor = _textured(welded, faces, mesh.uv0[mesh.indices], target, welded_protect, first)
        corner_uv = corner_uv.reshape(-1, 2)
    else:
        new_positions, new_faces, survivor = _plain(welded, faces, target, welded_weights, welded_protect, first)
    # one glTF vertex per (position, uv, source split vertex) of the new faces' corners
    bind_normals = mesh.bind_normals if skinned else mesh.normals
    reference_normals = bind_normals if bind_normals is not None else np.zeros((len(positions), 3))
    corners = new_faces.reshape(-1)
    sources = _corner_sources(survivor[corners], corner_uv, np.repeat(_face_normals(new_positions, new_faces), 3, 0), group, mesh.uv0, reference_normals)
    columns = [corners[:, None].astype(np.float64), sources[:, None].astype(np.float64)]
    if corner_uv is not None:
        columns.append(np.round(corner_uv * 2**20))
    _, unique, corner_vertex = np.unique(np.concatenate(columns, 1), axis=0, return_index=True, return_inverse=True)
    source = sources[unique]
    points, indices = new_positions[corners[unique]].astype(np.float32), corner_vertex.reshape(-1, 3)
    uv0 = None if corner_uv is None else corner_uv[unique].astype(np.float32)
    indices, _ = drop_degenerate_triangles(points.astype(np.float64), indices)
    pick = lambda a: None if a is None else np.ascontiguousarray(a[source])  # noqa: E731
    normals, tangents = pick(bind_normals), pick(mesh.bind_tangents if skinned else mesh.tangents)
    simplified = replace(
        mesh, positions=points, indices=indices, normals=normals, tangents=tangents, uv0=uv0, uv1=pick(mesh.uv1), colors=pick(mesh.colors),
        joints=pick(mesh.joints), weights=pick(mesh.weights),
    )
    if skinned:
        simplified = replace(simplified, bind_positions=points, bind_normals=normals, bind_tangents=tangents)
    return simplified, source


def decimate_scene(
    scene: Scene, target: int, *, vertex_weights: list[np.ndarray] | None = None, protect: list[np.ndarray | None] | None = None
) -> Decimated:
    """Decimate ``scene`` to about ``target`` triangles (see the module docstring).

    ``vertex_weights``: per mesh, float ``[V]`` >= 1 (1: plain QEM; larger keeps a vertex longer).
    ``protect``: per mesh, bool ``[V]`` (or ``None``): faces whose corners are all protected are
    kept as they are (the budget is then met, as far as it can be, elsewhere).
    """
    before = scene.num_triangles
    if not scene.meshes or before == 0:
        raise InputError("the scene has no triangles to simplify.", path=scene.source, field="meshes", fix="pass a mesh with triangles.")
    if vertex_weights is not None and (len(vertex_weights) != len(scene.meshes) or any(len(w) != len(m.positions) for w, m in zip(vertex_weights, scene.meshes))):
        raise ValueError("decimate_scene: vertex_weights needs one [V] array per mesh")
    shares = _shares([m.num_triangles for m in scene.meshes], max(1, int(target)))
    meshes, sources = [], []
    for k, (mesh, share) in enumerate(zip(scene.meshes, shares)):
        if share >= mesh.num_triangles:
            meshes.append(mesh)
            sources.append(np.arange(len(mesh.positions)))
            continue
        simplified, source = _decimate_mesh(mesh, share, None if vertex_weights is None else vertex_weights[k], None if protect is None else protect[k])
        meshes.append(simplified)
        sources.append(source)
    result = replace(scene, meshes=meshes)
    if scene.rig is not None and any(m.skin is not None for m in meshes):
        result = pose_scene(result)  # skinned meshes were decimated in their bind pose
    return Decimated(scene=result, source_vertex=sources, triangles_before=before, triangles_after=result.num_triangles)
