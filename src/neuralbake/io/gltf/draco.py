"""Draco-compressed glTF primitives (``KHR_draco_mesh_compression``) decoded with DracoPy.

DracoPy wraps Google's reference Draco decoder, which dequantises positions, normals and uvs
itself; this module only maps what it decodes back onto the glTF attribute names. The
extension's ``attributes`` object names, for each glTF attribute, the Draco *unique id* it was
encoded under, and that id (not the Draco attribute type, which is ``GENERIC`` for joints,
weights and tangents) is how each decoded array is found. Decoded arrays are then given the type
the primitive's accessor declares: normalised integer colours and weights become floats in
``[0, 1]``, joints stay integers.

Draco reorders vertices and faces when it encodes (that is how it compresses), so a decoded
primitive has the same surface but not the same vertex order as the uncompressed original.

A payload that does not decode, decodes to a point cloud, or decodes to more vertices or
triangles than the primitive's accessors declare (the reader's triangle budget trusts those
counts) is refused with an :class:`~neuralbake.errors.InputError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from neuralbake.errors import InputError

__all__ = ["AccessorSpec", "decode_draco_primitive"]


@dataclass(frozen=True)
class AccessorSpec:
    """What a primitive's accessor declares for one attribute (the decoded data must match it)."""

    dtype: np.dtype
    """Component type (``uint16`` for ``5123``...)."""
    width: int
    """Components per vertex."""
    normalized: bool
    """Whether integer components map to ``[0, 1]`` (or ``[-1, 1]``)."""
    count: int
    """Vertex count the accessor declares."""


def decode_draco_primitive(
    payload: bytes,
    ids: dict[str, int],
    specs: dict[str, AccessorSpec],
    *,
    path: str | Path,
    field: str,
    max_triangles: int | None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Decode one Draco payload into ``(indices [F, 3] int64, {attribute name: [V, width] array})``.

    Parameters
    ----------
    payload:
        The bytes of the extension's buffer view.
    ids:
        The extension's ``attributes``: glTF attribute name -> Draco unique id.
    specs:
        The primitive's accessor declaration of each name in ``ids``.
    path, field:
        The glTF file and the extension's field, for messages.
    max_triangles:
        Most triangles accepted (the indices accessor's count / 3), or ``None`` for no check.

    Raises
    ------
    InputError
        DracoPy missing, a corrupt payload, a point cloud, a missing unique id, or arrays that do
        not match their accessors.
    """
    try:
        import DracoPy
    except ImportError as exc:  # pragma: no cover - DracoPy is a dependency
        raise InputError(
            "the mesh is Draco-compressed and DracoPy is not installed.", path=path, field=field, fix="pip install DracoPy."
        ) from exc
    try:
        mesh = DracoPy.decode(bytes(payload))
    except Exception as exc:  # DracoPy raises FileTypeException / ValueError / RuntimeError on damage
        raise InputError(
            f"the Draco payload cannot be decoded ({type(exc).__name__}: {exc}).",
            path=path,
            field=f"{field}.bufferView",
            fix="the file is damaged; export or download it again.",
        ) from exc
    if not isinstance(mesh, DracoPy.DracoMesh):
        raise InputError(
            "the Draco payload is a point cloud, not a triangle mesh.", path=path, field=f"{field}.bufferView", fix="export triangles."
        )
    faces = np.asarray(mesh.faces, dtype=np.int64).reshape(-1, 3)
    vertices = None
    arrays: dict[str, np.ndarray] = {}
    for name, unique_id in ids.items():
        where = f"{field}.attributes.{name}"
        attribute = mesh.get_attribute_by_unique_id(int(unique_id))
        if attribute is None:
            raise InputError(
                f"the Draco payload has no attribute with unique id {unique_id}.", path=path, field=where, fix="re-export the asset."
            )
        spec = specs[name]
        data = np.asarray(attribute["data"])
        data = data.reshape(len(data), -1)
        if data.shape[1] != spec.width:
            raise InputError(
                f"{name} decodes to {data.shape[1]} components per vertex, but its accessor declares {spec.width}.",
                path=path,
                field=where,
                fix="re-export the asset.",
            )
        if len(data) > spec.count:  # the triangle/memory budget was computed from the accessors' counts
            raise InputError(
                f"{name} decodes to {len(data):,} vertices, but its accessor declares {spec.count:,}.",
                path=path,
                field=where,
                fix="re-export the asset.",
            )
        if vertices is not None and len(data) != vertices:
            problem = f"{name} decodes to {len(data):,} vertices, other attributes to {vertices:,}."
            raise InputError(problem, path=path, field=where, fix="re-export the asset.")
        vertices = len(data)
        arrays[name] = _as_declared(data, spec, name, path=path, field=where)
    if vertices is None:
        vertices = len(mesh.points)
    if max_triangles is not None and len(faces) > max_triangles:
        raise InputError(
            f"the Draco payload decodes to {len(faces):,} triangles, but the indices accessor declares {max_triangles:,}.",
            path=path,
            field=f"{field}.bufferView",
            fix="re-export the asset.",
        )
    if len(faces) and (faces.min() < 0 or faces.max() >= vertices):
        problem = "a decoded face points past the decoded vertices."
        raise InputError(problem, path=path, field=f"{field}.bufferView", fix="re-export the asset.")
    return faces, arrays


def _as_declared(data: np.ndarray, spec: AccessorSpec, name: str, *, path: str | Path, field: str) -> np.ndarray:
    """Give decoded ``data`` the accessor's type (Draco hands integers back widened to 32 bits)."""
    if np.issubdtype(spec.dtype, np.integer):
        if not np.issubdtype(data.dtype, np.integer):
            if spec.normalized:  # a float payload for a normalised accessor already holds the [0, 1] values
                return data.astype(np.float32)
            problem = f"{name} decodes to floats, but its accessor declares integers."
            raise InputError(problem, path=path, field=field, fix="re-export the asset.")
        info = np.iinfo(spec.dtype)
        if len(data) and (data.min() < info.min or data.max() > info.max):
            raise InputError(
                f"{name} decodes to values outside the accessor's {spec.dtype.name} range.",
                path=path,
                field=field,
                fix="re-export the asset.",
            )
        if spec.normalized:
            return np.maximum(data.astype(np.float32) / info.max, -1.0)
        return data.astype(spec.dtype)
    return data.astype(np.float32)
