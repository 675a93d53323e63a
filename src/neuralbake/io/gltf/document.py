"""One glTF file opened for reading: the container and structure checked by
:mod:`neuralbake.io.gltf.validate`, the checked document handed to pygltflib, and its buffers,
buffer views, accessors and images decoded on demand. Accessors are decoded here with numpy
(pygltflib hands back raw bytes); external buffer and image URIs are resolved only inside the
glTF's folder (:func:`neuralbake.io.refs.resolve_reference`; symlinks pointing out are refused
too), and only the bytes a buffer declares are read. Every problem is an
:class:`~neuralbake.errors.InputError` naming the file, the glTF field and the fix.
"""

from __future__ import annotations

import base64
import binascii
import tempfile
import warnings
from pathlib import Path

import numpy as np

from neuralbake.errors import InputError
from neuralbake.io.gltf.validate import MAX_ACCESSOR_COUNT, TYPE_WIDTHS, read_document, validate_document
from neuralbake.io.images import load_image
from neuralbake.io.refs import resolve_reference

__all__ = ["COMPONENT_DTYPES", "GltfDocument"]

COMPONENT_DTYPES = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
"""numpy type of each accessor ``componentType``."""


class GltfDocument:
    """Holds one parsed file and decodes its buffers, accessors and images."""

    def __init__(self, path: Path, max_json_bytes: int, max_accessor_count: int = MAX_ACCESSOR_COUNT) -> None:
        import pygltflib

        self.path = path
        # The container and structure are checked here, so pygltflib and numpy only see sound data.
        self.doc, self.bin_chunk = read_document(path, max_json_bytes=max_json_bytes)
        validate_document(
            self.doc,
            path,
            bin_chunk_length=None if self.bin_chunk is None else len(self.bin_chunk),
            max_accessor_count=max_accessor_count,
        )
        try:
            with warnings.catch_warnings():  # dataclasses_json nags about optional fields pygltflib types as required
                warnings.filterwarnings("ignore", category=RuntimeWarning, module="dataclasses_json")
                self.gltf = pygltflib.GLTF2.from_dict(self.doc, infer_missing=True)
            for mesh in self.gltf.meshes:  # as pygltflib's own from_json does: attributes as an object
                for prim in mesh.primitives:
                    prim.attributes = pygltflib.Attributes(**(prim.attributes or {}))
        except Exception as exc:  # pragma: no cover - the validation should leave pygltflib nothing to trip on
            raise InputError(
                f"this is not a readable glTF 2.0 file ({type(exc).__name__}: {exc}).",
                path=path,
                fix="export the asset again as glTF 2.0 (.gltf + .bin or .glb).",
            ) from exc
        self._buffers: dict[int, bytes] = {}

    def fail(self, problem: str, field: str, fix: str) -> InputError:
        return InputError(problem, path=self.path, field=field, fix=fix)

    def local_file(self, uri: str, field: str, what: str, *, context: str = "", fix: str | None = None) -> Path:
        """The existing file a relative URI names, confined to the glTF's folder.

        ``context`` is added to the message of a missing file (``" (material 'paint', ...)"``),
        ``fix`` replaces its default fix.
        """
        from urllib.parse import unquote

        file = resolve_reference(self.path, unquote(uri), field=field, what=what)
        if not file.is_file():
            fix = fix or f"put {Path(unquote(uri)).name} beside the glTF file."
            raise self.fail(f"the {what} file {file}{context} does not exist.", field, fix)
        return file

    def uri_bytes(self, uri: str, field: str, what: str, limit: int | None = None) -> bytes:
        """Bytes of a data URI or a confined external file (at most ``limit`` of the latter are read)."""
        if uri.startswith("data:"):
            head, _, data = uri.partition(",")
            if not head.endswith(";base64"):
                raise self.fail(f"the {what} data URI is not base64.", field, "re-export with base64 data URIs or external files.")
            try:
                return base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise self.fail(f"the {what} data URI holds malformed base64 ({exc}).", field, "re-export the asset.") from exc
        file = self.local_file(uri, field, what)
        try:
            with open(file, "rb") as handle:  # a buffer declares its length: never read more than that
                return handle.read(-1 if limit is None else limit)
        except OSError as exc:
            raise self.fail(f"the {what} file {file} cannot be read ({exc.strerror or exc}).", field, "check its permissions.") from exc

    def buffer(self, index: int) -> bytes:
        if index not in self._buffers:
            buf = self.gltf.buffers[index]
            if buf.uri is None:  # validated: buffers[0] of a .glb with a BIN chunk at least byteLength long
                data = self.bin_chunk
            else:
                data = self.uri_bytes(buf.uri, f"buffers[{index}].uri", "buffer", limit=buf.byteLength)
            if len(data) < buf.byteLength:
                raise self.fail(
                    f"the buffer declares {buf.byteLength:,} bytes but its data has {len(data):,}.",
                    f"buffers[{index}].byteLength",
                    "the .bin is truncated or belongs to another export; export the asset again.",
                )
            self._buffers[index] = bytes(data[: buf.byteLength])
        return self._buffers[index]

    def buffer_view(self, index: int) -> tuple[bytes, int, int | None]:
        view = self.gltf.bufferViews[index]
        data = self.buffer(view.buffer)
        offset = view.byteOffset or 0
        if offset + view.byteLength > len(data):
            raise self.fail("the buffer view runs past the end of its buffer.", f"bufferViews[{index}]", "re-export the asset.")
        return data, offset, view.byteStride

    def accessor(self, index: int) -> np.ndarray:
        """Decode accessor ``index`` to a float32 or integer array ``[count, width]``."""
        acc = self.gltf.accessors[index]
        where = f"accessors[{index}]"
        if acc.sparse is not None:
            raise self.fail("sparse accessors are not supported.", where, "re-export without sparse accessors (e.g. apply morph targets).")
        dtype = np.dtype(COMPONENT_DTYPES[acc.componentType]).newbyteorder("<")
        width = TYPE_WIDTHS[acc.type]
        if acc.bufferView is None:  # all zeros, per the spec
            out = np.zeros((acc.count, width), dtype=dtype)
        else:
            data, offset, stride = self.buffer_view(acc.bufferView)
            offset += acc.byteOffset or 0
            item = dtype.itemsize * width
            stride = stride or item
            need = offset + stride * (acc.count - 1) + item if acc.count else offset
            if need > len(data):
                raise self.fail("the accessor reads past the end of its buffer.", where, "re-export the asset (the .bin is truncated?).")
            raw = np.frombuffer(data, dtype=np.uint8, count=max(need - offset, 0), offset=offset)
            if stride == item:
                out = raw.view(dtype).reshape(acc.count, width).copy()
            else:
                rows = np.lib.stride_tricks.as_strided(raw, shape=(acc.count, item), strides=(stride, 1))
                out = np.ascontiguousarray(rows).view(dtype).reshape(acc.count, width)
        if acc.normalized:
            info = np.iinfo(dtype)
            out = np.maximum(out.astype(np.float32) / info.max, -1.0)
        return out

    def image(self, index: int, field: str, material: str) -> np.ndarray:
        img = self.gltf.images[index]
        label = img.uri if img.uri and not img.uri.startswith("data:") else (img.name or f"images[{index}]")
        fix = f"put the image {label} beside the glTF file (material {material!r} uses it), or re-export with embedded textures."
        if img.uri is not None:
            if img.uri.startswith("data:"):
                data = self.uri_bytes(img.uri, f"images[{index}].uri", "image")
            else:
                context = f" (material {material!r}, {field})"
                file = self.local_file(img.uri, f"images[{index}].uri", "texture image", context=context, fix=fix)
                array, _ = load_image(file)
                return array
        elif img.bufferView is not None:
            raw, offset, _ = self.buffer_view(img.bufferView)
            data = raw[offset : offset + self.gltf.bufferViews[img.bufferView].byteLength]
        else:
            raise self.fail(f"image {label} has neither a uri nor a bufferView.", f"images[{index}]", fix)
        suffix = {"image/png": ".png", "image/jpeg": ".jpg"}.get(img.mimeType or "", ".img")
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / f"embedded{suffix}"
            file.write_bytes(data)
            try:
                array, _ = load_image(file)
            except InputError as exc:
                raise self.fail(f"the embedded image {label} cannot be read ({exc.problem}).", f"images[{index}]", fix) from exc
        return array
