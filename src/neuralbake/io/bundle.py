"""The network bundle: safetensors weights, a JSON manifest, and packed device layouts.

A bundle is a folder holding

``<name>.safetensors``
    every tensor at full (fp32) precision, keyed by name; the exact training result.
``<name>.json``
    the manifest: format name and version, the architecture and encoding (free-form dicts owned by
    the code that made the network), precision, the sha256 and size of every file, and for each
    device layout the per-layer weight and bias offsets.
``<name>.fp16.bin`` / ``<name>.fp32.bin``
    the *device layout*: every layer's weight matrix and bias vector packed into one contiguous
    little-endian buffer that a shader binds as a ``ByteAddressBuffer`` / ``StructuredBuffer``.

Device layout (format version 1), the analog of RTX Neural Shaders' host vs device-optimal layout:
layers follow each other in network order; each layer stores its weight matrix row-major
(``[outputs, inputs]``, element ``(o, i)`` at ``weight_offset + (o * inputs + i) * elem_size``),
then its bias vector. Every weight matrix starts on a 64-byte boundary and every bias vector on a
16-byte boundary (the alignments cooperative-vector matrix loads and 16-byte vector loads want);
the gaps are zero. Offsets in the manifest are in bytes from the start of the buffer.

This module knows tensors and dicts only; turning a bundle back into a model is the job of
``neuralbake.nn.serialize`` (``io`` sits below ``nn`` and does not import it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from neuralbake.errors import BundleError
from neuralbake.io.files import atomic_write_bytes, atomic_write_json

__all__ = [
    "BIAS_ALIGNMENT",
    "BUNDLE_FORMAT",
    "BUNDLE_FORMAT_VERSION",
    "WEIGHT_ALIGNMENT",
    "Bundle",
    "LayerTensors",
    "pack_device_layout",
    "read_bundle",
    "read_device_layout",
    "sha256_file",
    "unpack_device_layout",
    "write_bundle",
]

BUNDLE_FORMAT = "neuralbake.network"
BUNDLE_FORMAT_VERSION = 1
WEIGHT_ALIGNMENT = 64
"""Byte alignment of every weight matrix in the device layout."""
BIAS_ALIGNMENT = 16
"""Byte alignment of every bias vector in the device layout."""

_DEVICE_DTYPES = {"fp16": (torch.float16, np.dtype("<f2")), "fp32": (torch.float32, np.dtype("<f4"))}


@dataclass(frozen=True)
class LayerTensors:
    """One linear layer as it goes into the device layout."""

    name: str
    """Layer name, e.g. ``layers.0``."""
    weight: torch.Tensor
    """Weight matrix, shape ``[outputs, inputs]``."""
    bias: torch.Tensor
    """Bias vector, shape ``[outputs]``."""


@dataclass
class Bundle:
    """A bundle read from disk."""

    tensors: dict[str, torch.Tensor]
    """Every tensor of ``<name>.safetensors`` (fp32)."""
    manifest: dict[str, Any]
    """The parsed manifest."""
    directory: Path
    """The folder it was read from."""


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment


def pack_device_layout(layers: Sequence[LayerTensors], precision: str) -> tuple[bytes, list[dict[str, Any]]]:
    """Pack layers into one contiguous buffer (see the module docstring for the layout).

    Returns
    -------
    buffer, layer_table
        The bytes, and per layer ``name``, ``inputs``, ``outputs``, ``weight_offset``,
        ``bias_offset`` (bytes).
    """
    if precision not in _DEVICE_DTYPES:
        raise ValueError(f"precision must be one of {sorted(_DEVICE_DTYPES)}, got {precision!r}")
    torch_dtype, np_dtype = _DEVICE_DTYPES[precision]
    table: list[dict[str, Any]] = []
    chunks: list[tuple[int, bytes]] = []
    offset = 0
    for layer in layers:
        outputs, inputs = layer.weight.shape
        if layer.bias.shape != (outputs,):
            raise ValueError(f"layer {layer.name}: bias shape {tuple(layer.bias.shape)} does not match {outputs} outputs")
        weight_offset = _align(offset, WEIGHT_ALIGNMENT)
        weight_bytes = layer.weight.detach().to("cpu", torch_dtype).contiguous().numpy().astype(np_dtype).tobytes()
        bias_offset = _align(weight_offset + len(weight_bytes), BIAS_ALIGNMENT)
        bias_bytes = layer.bias.detach().to("cpu", torch_dtype).contiguous().numpy().astype(np_dtype).tobytes()
        chunks += [(weight_offset, weight_bytes), (bias_offset, bias_bytes)]
        offset = bias_offset + len(bias_bytes)
        table.append(
            {
                "name": layer.name,
                "inputs": int(inputs),
                "outputs": int(outputs),
                "weight_offset": weight_offset,
                "bias_offset": bias_offset,
            }
        )
    buffer = bytearray(_align(offset, WEIGHT_ALIGNMENT))
    for start, data in chunks:
        buffer[start : start + len(data)] = data
    return bytes(buffer), table


def unpack_device_layout(buffer: bytes, layer_table: Sequence[Mapping[str, Any]], precision: str) -> list[LayerTensors]:
    """Inverse of :func:`pack_device_layout`; returns fp32 tensors."""
    _, np_dtype = _DEVICE_DTYPES[precision]
    layers = []
    for entry in layer_table:
        outputs, inputs = int(entry["outputs"]), int(entry["inputs"])
        weight_end = entry["weight_offset"] + outputs * inputs * np_dtype.itemsize
        bias_end = entry["bias_offset"] + outputs * np_dtype.itemsize
        if max(weight_end, bias_end) > len(buffer):
            raise BundleError(
                f"the device buffer ends at byte {len(buffer)} but layer {entry['name']} needs {max(weight_end, bias_end)}.",
                field=entry["name"],
                fix="re-export the bundle; the file is truncated.",
            )
        weight = np.frombuffer(buffer, dtype=np_dtype, count=outputs * inputs, offset=entry["weight_offset"])
        bias = np.frombuffer(buffer, dtype=np_dtype, count=outputs, offset=entry["bias_offset"])
        layers.append(
            LayerTensors(
                name=entry["name"],
                weight=torch.from_numpy(weight.astype(np.float32).reshape(outputs, inputs)),
                bias=torch.from_numpy(bias.astype(np.float32)),
            )
        )
    return layers


def write_bundle(
    directory: str | Path,
    tensors: Mapping[str, torch.Tensor],
    *,
    kind: str,
    metadata: Mapping[str, Any],
    layers: Sequence[LayerTensors] = (),
    name: str = "network",
) -> Path:
    """Write ``<name>.safetensors``, the device layouts and the manifest ``<name>.json``.

    Parameters
    ----------
    tensors:
        Everything needed to rebuild the model, saved as fp32.
    kind:
        What the bundle holds (e.g. ``"coordinate_mlp"``); readers check it.
    metadata:
        JSON-serialisable description (architecture, encoding, precision ...) stored verbatim.
    layers:
        The linear layers to pack into the device layouts, in evaluation order.

    The manifest is written last, so a folder with a manifest always has complete weight files.
    Returns the manifest path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights_path = directory / f"{name}.safetensors"
    cpu_tensors = {key: value.detach().to("cpu", torch.float32).contiguous() for key, value in tensors.items()}
    atomic_write_bytes(weights_path, save(cpu_tensors, metadata={"format": BUNDLE_FORMAT}))
    files = {"weights": _file_entry(weights_path)}
    device_layouts = {}
    for precision in _DEVICE_DTYPES:
        if not layers:
            break
        buffer, table = pack_device_layout(layers, precision)
        path = directory / f"{name}.{precision}.bin"
        atomic_write_bytes(path, buffer)
        device_layouts[precision] = {
            "file": path.name,
            "bytes": len(buffer),
            "sha256": hashlib.sha256(buffer).hexdigest(),
            "weight_alignment": WEIGHT_ALIGNMENT,
            "bias_alignment": BIAS_ALIGNMENT,
            "matrix_layout": "row_major",
            "layers": table,
        }
    manifest = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "kind": kind,
        "files": files,
        "tensors": {key: {"shape": list(value.shape), "dtype": "float32"} for key, value in cpu_tensors.items()},
        "device_layouts": device_layouts,
        **dict(metadata),
    }
    manifest_path = directory / f"{name}.json"
    atomic_write_json(manifest_path, manifest)
    return manifest_path


def _file_entry(path: Path) -> dict[str, Any]:
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path)}


def _require(manifest: Mapping[str, Any], key: str, path: Path) -> Any:
    if key not in manifest:
        raise BundleError(f"the manifest has no {key!r} field.", path=path, field=key, fix="re-export the bundle with neuralbake.")
    return manifest[key]


def _check_file(directory: Path, entry: Mapping[str, Any], manifest_path: Path, field: str) -> Path:
    path = directory / entry["file"]
    if not path.is_file():
        raise BundleError(
            "the file named by the manifest is missing.",
            path=path,
            field=field,
            fix="copy the whole bundle folder, not only some of its files.",
        )
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise BundleError(
            f"the file has {size} bytes but the manifest records {entry['bytes']}; it is truncated or was replaced.",
            path=path,
            field=field,
            fix="copy the bundle again from its source, or re-run the bake.",
        )
    if sha256_file(path) != entry["sha256"]:
        raise BundleError(
            "the file's sha256 does not match the manifest; it is corrupt or was modified.",
            path=path,
            field=field,
            fix="copy the bundle again from its source, or re-run the bake.",
        )
    return path


def read_bundle(directory: str | Path, *, kind: str | None = None, name: str = "network") -> Bundle:
    """Read and verify a bundle written by :func:`write_bundle`.

    Checks the format name and version, the kind, every file's size and sha256, and that the
    tensors have the shapes the manifest records.

    Raises
    ------
    BundleError
        On any missing, truncated, corrupt or mismatched part (the message names the file and field).
    """
    directory = Path(directory)
    manifest_path = directory / f"{name}.json"
    if not manifest_path.is_file():
        raise BundleError(
            f"no bundle manifest {manifest_path.name} here.",
            path=directory,
            fix="pass the folder a bake wrote with --out.",
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"the manifest is not valid JSON ({exc}).", path=manifest_path, fix="re-export the bundle.") from exc
    if not isinstance(manifest, dict):
        raise BundleError("the manifest is not a JSON object.", path=manifest_path, fix="re-export the bundle.")
    if _require(manifest, "format", manifest_path) != BUNDLE_FORMAT:
        raise BundleError(
            f"format is {manifest['format']!r}, expected {BUNDLE_FORMAT!r}.", path=manifest_path, field="format", fix="pass a neuralbake network bundle."
        )
    version = _require(manifest, "format_version", manifest_path)
    if version != BUNDLE_FORMAT_VERSION:
        raise BundleError(
            f"format_version {version} is not supported (this neuralbake reads version {BUNDLE_FORMAT_VERSION}).",
            path=manifest_path,
            field="format_version",
            fix="use the neuralbake version that wrote the bundle, or re-run the bake.",
        )
    if kind is not None and manifest.get("kind") != kind:
        raise BundleError(
            f"this bundle holds a {manifest.get('kind')!r}, not a {kind!r}.", path=manifest_path, field="kind", fix="pass a bundle of the right kind."
        )
    files = _require(manifest, "files", manifest_path)
    weights_path = _check_file(directory, _require(files, "weights", manifest_path), manifest_path, "files.weights")
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise BundleError(f"the weight file cannot be read ({exc}).", path=weights_path, fix="re-run the bake.") from exc
    for key, spec in _require(manifest, "tensors", manifest_path).items():
        if key not in tensors:
            raise BundleError("tensor listed in the manifest is missing from the weights.", path=weights_path, field=key, fix="re-run the bake.")
        if list(tensors[key].shape) != list(spec["shape"]):
            raise BundleError(
                f"tensor has shape {list(tensors[key].shape)} but the manifest records {spec['shape']}.",
                path=weights_path,
                field=key,
                fix="the weights and manifest come from different bakes; copy a matching pair.",
            )
    return Bundle(tensors=tensors, manifest=manifest, directory=directory)


def read_device_layout(bundle: Bundle, precision: str) -> tuple[bytes, list[LayerTensors]]:
    """Read, verify and unpack one of the bundle's device-layout buffers."""
    layouts = bundle.manifest.get("device_layouts", {})
    if precision not in layouts:
        raise BundleError(
            f"no {precision} device layout in this bundle (it has: {sorted(layouts) or 'none'}).",
            path=bundle.directory,
            field="device_layouts",
            fix="re-export the bundle.",
        )
    layout = layouts[precision]
    path = _check_file(bundle.directory, layout, bundle.directory, f"device_layouts.{precision}")
    buffer = path.read_bytes()
    return buffer, unpack_device_layout(buffer, layout["layers"], precision)
