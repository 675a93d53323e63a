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
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file as load_numpy_file
from safetensors.torch import load_file, save

from neuralbake.errors import BundleError, InputError
from neuralbake.io.files import atomic_write_bytes, atomic_write_json
from neuralbake.io.limits import load_json_file
from neuralbake.io.refs import resolve_reference

__all__ = [
    "BIAS_ALIGNMENT",
    "BUNDLE_FORMAT",
    "BUNDLE_FORMAT_VERSION",
    "WEIGHT_ALIGNMENT",
    "Bundle",
    "LayerTensors",
    "bundle_file_path",
    "check_mlp_tensors",
    "manifest_float",
    "manifest_int",
    "manifest_key",
    "manifest_list",
    "manifest_object",
    "manifest_sha256",
    "manifest_str",
    "pack_device_layout",
    "read_bundle",
    "read_bundle_tensors",
    "read_device_layout",
    "sha256_file",
    "unpack_device_layout",
    "validate_manifest",
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
    name: str = "network"
    """The bundle's name: the manifest is ``<name>.json``."""

    @property
    def manifest_path(self) -> Path:
        """``<directory>/<name>.json``, the file every manifest error names."""
        return self.directory / f"{self.name}.json"


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
    extra_files: Mapping[str, str] = {},  # noqa: B006 - read only
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
    extra_files:
        Other files the caller already wrote into ``directory`` (key -> plain file name, e.g.
        ``{"latents_fp16": "latents.fp16.safetensors"}``); their size and sha256 go into the
        manifest's ``files`` so readers (:func:`read_bundle_tensors`) can verify them.

    The manifest is written last, so a folder with a manifest always has complete weight files.
    Returns the manifest path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights_path = directory / f"{name}.safetensors"
    cpu_tensors = {key: value.detach().to("cpu", torch.float32).contiguous() for key, value in tensors.items()}
    atomic_write_bytes(weights_path, save(cpu_tensors, metadata={"format": BUNDLE_FORMAT}))
    files = {"weights": _file_entry(weights_path)}
    for key, file_name in extra_files.items():
        if key in files or not _is_plain_name(file_name):
            raise ValueError(f"extra_files: {key!r} -> {file_name!r} must be a new key and a plain file name")
        files[key] = _file_entry(directory / file_name)
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


# -- typed access to manifest fields -----------------------------------------------------------------
#
# A manifest is untrusted input: every field is checked for its type and range before it is used,
# so a damaged or hostile manifest gives a BundleError naming the file and the field, never a
# TypeError from deep inside a loader.

_REEXPORT = "re-export the bundle with neuralbake, or copy the bundle folder again from its source."
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    kinds = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}
    text = repr(value)
    return f"{kinds.get(type(value), type(value).__name__)} ({text[:40]}{'...' if len(text) > 40 else ''})"


def _error(problem: str, path: Path | str, field: str | None, fix: str = _REEXPORT) -> BundleError:
    return BundleError(problem, path=path, field=field, fix=fix)


def manifest_key(mapping: Mapping[str, Any], key: str, *, path: Path | str, field: str | None) -> Any:
    """``mapping[key]``, or a BundleError naming ``field`` (the dotted field of ``mapping``; ``None`` at the top) when it is missing."""
    if key not in mapping:
        where = f"{field}.{key}" if field else key
        raise _error(f"the manifest has no {key!r} field{f' in {field}' if field else ''}.", path, where)
    return mapping[key]


def manifest_object(value: Any, *, path: Path | str, field: str) -> dict[str, Any]:
    """``value`` if it is a JSON object (with string keys), else a BundleError naming ``field``."""
    if not isinstance(value, dict):
        raise _error(f"must be an object, not {_describe(value)}.", path, field)
    return value


def manifest_list(value: Any, *, path: Path | str, field: str) -> list[Any]:
    """``value`` if it is a JSON list, else a BundleError naming ``field``."""
    if not isinstance(value, list):
        raise _error(f"must be a list, not {_describe(value)}.", path, field)
    return value


def manifest_str(value: Any, *, path: Path | str, field: str, choices: Sequence[str] | None = None) -> str:
    """``value`` if it is a string (one of ``choices`` when given), else a BundleError naming ``field``."""
    if not isinstance(value, str):
        raise _error(f"must be a string, not {_describe(value)}.", path, field)
    if choices is not None and value not in choices:
        raise _error(f"{value[:60]!r} is not one of {list(choices)}.", path, field)
    return value


def manifest_int(value: Any, *, path: Path | str, field: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is an integer in ``[minimum, maximum]``, else a BundleError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _error(f"must be an integer, not {_describe(value)}.", path, field)
    if minimum is not None and value < minimum:
        raise _error(f"must be at least {minimum}, got {value}.", path, field)
    if maximum is not None and value > maximum:
        raise _error(f"must be at most {maximum}, got {value}.", path, field)
    return value


def manifest_float(value: Any, *, path: Path | str, field: str) -> float:
    """``value`` as a float if it is a finite JSON number, else a BundleError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _error(f"must be a finite number, not {_describe(value)}.", path, field)
    return float(value)


def manifest_sha256(value: Any, *, path: Path | str, field: str) -> str:
    """``value`` if it is 64 lower-case hex digits, else a BundleError naming ``field``."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise _error(f"must be a sha256 (64 lower-case hex digits), not {_describe(value)}.", path, field)
    return value


def _is_plain_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and name not in (".", "..")
        and not any(char in name for char in "/\\:\x00")
        and name == name.strip()
    )


def bundle_file_path(manifest_path: Path, name: Any, *, field: str) -> Path:
    """The file a manifest names, confined to the manifest's folder.

    Bundle entries are always plain file names (``network.fp16.bin``): a name with a path
    separator, a drive, ``..`` or a NUL is refused, and so is a symlink that resolves outside the
    folder (:func:`neuralbake.io.refs.resolve_reference`, which honours the CLI's
    ``--allow-outside-refs``). Whether the file exists is the caller's check.
    """
    if not _is_plain_name(name):
        raise _error(
            f"names the file {_describe(name)}; a bundle names its files by plain file name, inside the bundle folder.",
            manifest_path,
            field,
            fix="re-export the bundle; neuralbake never writes paths into a manifest.",
        )
    try:
        return resolve_reference(manifest_path, name, field=field, what="bundle file")
    except InputError as exc:
        raise BundleError(exc.problem, path=manifest_path, field=field, fix=exc.fix) from exc


def _validate_file_entry(entry: Any, path: Path, field: str) -> dict[str, Any]:
    entry = manifest_object(entry, path=path, field=field)
    bundle_file_path(path, manifest_key(entry, "file", path=path, field=field), field=f"{field}.file")
    manifest_int(manifest_key(entry, "bytes", path=path, field=field), path=path, field=f"{field}.bytes", minimum=0)
    manifest_sha256(manifest_key(entry, "sha256", path=path, field=field), path=path, field=f"{field}.sha256")
    return entry


def _validate_layout(layout: Any, precision: str, tensor_specs: Mapping[str, Any], path: Path) -> None:
    field = f"device_layouts.{precision}"
    layout = _validate_file_entry(layout, path, field)
    for key, expected in (("weight_alignment", WEIGHT_ALIGNMENT), ("bias_alignment", BIAS_ALIGNMENT)):
        if key in layout and manifest_int(layout[key], path=path, field=f"{field}.{key}") != expected:
            raise _error(f"is {layout[key]}; format version {BUNDLE_FORMAT_VERSION} aligns to {expected} bytes.", path, f"{field}.{key}")
    if "matrix_layout" in layout:
        manifest_str(layout["matrix_layout"], path=path, field=f"{field}.matrix_layout", choices=("row_major",))
    layers = manifest_list(manifest_key(layout, "layers", path=path, field=field), path=path, field=f"{field}.layers")
    if not layers:
        raise _error("the device layout has no layers.", path, f"{field}.layers")
    size = layout["bytes"]
    element = _DEVICE_DTYPES[precision][1].itemsize
    end, names, previous_outputs = 0, set(), None
    for index, entry in enumerate(layers):
        where = f"{field}.layers[{index}]"
        entry = manifest_object(entry, path=path, field=where)
        name = manifest_str(manifest_key(entry, "name", path=path, field=where), path=path, field=f"{where}.name")
        if name in names:
            raise _error(f"layer name {name!r} appears twice.", path, f"{where}.name")
        names.add(name)
        inputs, outputs, weight_offset, bias_offset = (
            manifest_int(manifest_key(entry, key, path=path, field=where), path=path, field=f"{where}.{key}", minimum=minimum)
            for key, minimum in (("inputs", 1), ("outputs", 1), ("weight_offset", 0), ("bias_offset", 0))
        )
        if weight_offset % WEIGHT_ALIGNMENT:
            raise _error(f"{weight_offset} is not a multiple of {WEIGHT_ALIGNMENT} bytes.", path, f"{where}.weight_offset")
        if bias_offset % BIAS_ALIGNMENT:
            raise _error(f"{bias_offset} is not a multiple of {BIAS_ALIGNMENT} bytes.", path, f"{where}.bias_offset")
        if weight_offset < end:
            raise _error(f"the weights start at byte {weight_offset}, inside the layer before (which ends at {end}).", path, f"{where}.weight_offset")
        weight_end = weight_offset + inputs * outputs * element
        if bias_offset < weight_end:
            raise _error(f"the bias starts at byte {bias_offset}, inside the weights (which end at {weight_end}).", path, f"{where}.bias_offset")
        end = bias_offset + outputs * element
        if end > size:
            raise _error(f"the layer ends at byte {end}, past the end of the {size}-byte buffer.", path, where)
        if previous_outputs is not None and inputs != previous_outputs:
            raise _error(f"takes {inputs} inputs but the layer before it has {previous_outputs} outputs.", path, f"{where}.inputs")
        previous_outputs = outputs
        for suffix, shape in (("weight", [outputs, inputs]), ("bias", [outputs])):
            spec = tensor_specs.get(f"{name}.{suffix}")
            if spec is not None and spec["shape"] != shape:
                raise _error(
                    f"the layer is {outputs}x{inputs} but tensor {name}.{suffix} has shape {spec['shape']}.",
                    path,
                    where,
                    fix="the device layout and the weights come from different bakes; re-export the bundle.",
                )


def validate_manifest(manifest: Any, path: Path) -> dict[str, Any]:
    """Check the structure and types of everything :func:`write_bundle` writes into a manifest.

    Format and version, ``kind``, every ``files`` entry (a plain file name, a byte count, a
    sha256), the ``tensors`` table (integer shapes, ``float32``) and every device layout (known
    precision, file entry, alignments, and a layer table whose offsets are aligned, in order,
    inside the buffer, chained input to output and in agreement with the tensor shapes). The
    fields owned by the code that made the network (``architecture``...) are its reader's to check.

    Returns the manifest; raises BundleError naming ``path`` and the field.
    """
    if not isinstance(manifest, dict):
        raise _error(f"the manifest must be a JSON object, not {_describe(manifest)}.", path, None)
    if manifest_key(manifest, "format", path=path, field=None) != BUNDLE_FORMAT:
        raise _error(f"format is {_describe(manifest['format'])}, expected {BUNDLE_FORMAT!r}.", path, "format", fix="pass a neuralbake network bundle.")
    version = manifest_key(manifest, "format_version", path=path, field=None)
    if version != BUNDLE_FORMAT_VERSION or isinstance(version, bool):
        raise _error(
            f"format_version {version} is not supported (this neuralbake reads version {BUNDLE_FORMAT_VERSION}).",
            path,
            "format_version",
            fix="use the neuralbake version that wrote the bundle, or re-run the bake.",
        )
    manifest_str(manifest_key(manifest, "kind", path=path, field=None), path=path, field="kind")
    files = manifest_object(manifest_key(manifest, "files", path=path, field=None), path=path, field="files")
    manifest_key(files, "weights", path=path, field="files")
    for key, entry in files.items():
        _validate_file_entry(entry, path, f"files.{key}")
    specs = manifest_object(manifest_key(manifest, "tensors", path=path, field=None), path=path, field="tensors")
    for key, spec in specs.items():
        where = f"tensors.{key}"
        spec = manifest_object(spec, path=path, field=where)
        shape = manifest_list(manifest_key(spec, "shape", path=path, field=where), path=path, field=f"{where}.shape")
        if len(shape) > 8:
            raise _error(f"a shape of {len(shape)} dimensions is not a network tensor.", path, f"{where}.shape")
        for axis, extent in enumerate(shape):
            manifest_int(extent, path=path, field=f"{where}.shape[{axis}]", minimum=0)
        if "dtype" in spec:
            manifest_str(spec["dtype"], path=path, field=f"{where}.dtype", choices=("float32",))
    layouts = manifest_object(manifest.get("device_layouts", {}), path=path, field="device_layouts")
    for precision, layout in layouts.items():
        if precision not in _DEVICE_DTYPES:
            raise _error(f"unknown device-layout precision {precision!r} (this neuralbake knows {sorted(_DEVICE_DTYPES)}).", path, f"device_layouts.{precision}")
        _validate_layout(layout, precision, specs, path)
    return manifest


def _verify_file(path: Path, entry: Mapping[str, Any], manifest_path: Path, field: str) -> None:
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


def _existing(path: Path, field: str) -> Path:
    if not path.is_file():
        raise BundleError(
            "the file named by the manifest is missing.",
            path=path,
            field=field,
            fix="copy the whole bundle folder, not only some of its files.",
        )
    return path


def _check_file(entry: Mapping[str, Any], manifest_path: Path, field: str) -> Path:
    """The (validated) file entry's path, after checking that it exists and matches its size and sha256."""
    path = _existing(bundle_file_path(manifest_path, entry["file"], field=f"{field}.file"), field)
    _verify_file(path, entry, manifest_path, field)
    return path


def read_bundle(directory: str | Path, *, kind: str | None = None, name: str = "network") -> Bundle:
    """Read and verify a bundle written by :func:`write_bundle`.

    Checks the manifest's structure and types (:func:`validate_manifest`), the kind, the weight
    file's size and sha256, and that the tensors have the shapes the manifest records.

    Raises
    ------
    BundleError
        On any missing, truncated, corrupt, mismatched or mistyped part (the message names the
        file and field).
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
        raw = load_json_file(manifest_path, what="bundle manifest", fix="re-export the bundle.")
    except InputError as exc:
        raise BundleError(exc.problem, path=manifest_path, field=exc.field, fix=exc.fix) from exc
    manifest = validate_manifest(raw, manifest_path)
    if kind is not None and manifest["kind"] != kind:
        raise BundleError(
            f"this bundle holds a {manifest['kind']!r}, not a {kind!r}.", path=manifest_path, field="kind", fix="pass a bundle of the right kind."
        )
    weights_path = _check_file(manifest["files"]["weights"], manifest_path, "files.weights")
    try:
        tensors = load_file(str(weights_path))
    except Exception as exc:  # noqa: BLE001 - any failure to parse the file is a damaged file
        raise BundleError(f"the weight file cannot be read ({_reason(exc)}).", path=weights_path, field="files.weights", fix="re-run the bake.") from exc
    specs = manifest["tensors"]
    for key, spec in specs.items():
        if key not in tensors:
            raise BundleError("tensor listed in the manifest is missing from the weights.", path=weights_path, field=key, fix="re-run the bake.")
        if list(tensors[key].shape) != list(spec["shape"]):
            raise BundleError(
                f"tensor has shape {list(tensors[key].shape)} but the manifest records {spec['shape']}.",
                path=weights_path,
                field=key,
                fix="the weights and manifest come from different bakes; copy a matching pair.",
            )
        if tensors[key].dtype != torch.float32:
            raise BundleError(f"tensor is {tensors[key].dtype}, the format stores float32.", path=weights_path, field=key, fix="re-run the bake.")
    unlisted = sorted(set(tensors) - set(specs))
    if unlisted:
        raise BundleError(f"the weights hold tensors the manifest does not list: {unlisted[:5]}.", path=weights_path, field="tensors", fix="re-run the bake.")
    return Bundle(tensors=tensors, manifest=manifest, directory=directory, name=name)


def read_device_layout(bundle: Bundle, precision: str) -> tuple[bytes, list[LayerTensors]]:
    """Read, verify and unpack one of the bundle's device-layout buffers."""
    layouts = bundle.manifest.get("device_layouts", {})
    if precision not in layouts or precision not in _DEVICE_DTYPES:
        raise BundleError(
            f"no {precision} device layout in this bundle (it has: {sorted(layouts) or 'none'}).",
            path=bundle.directory,
            field="device_layouts",
            fix="re-export the bundle.",
        )
    layout = layouts[precision]
    path = _check_file(layout, bundle.manifest_path, f"device_layouts.{precision}")
    buffer = path.read_bytes()
    return buffer, unpack_device_layout(buffer, layout["layers"], precision)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def read_bundle_tensors(
    bundle: Bundle,
    file_name: Any,
    *,
    field: str,
    what: str = "tensor file",
    framework: str = "numpy",
    check: Callable[[dict[str, Any], Path], None] | None = None,
) -> dict[str, Any]:
    """Load a safetensors file the manifest names (e.g. the latent textures), confined and verified.

    ``file_name`` is the name as the manifest writes it (``field`` says where). The file must lie
    in the bundle folder (:func:`bundle_file_path`); any failure to parse it is a BundleError
    naming the file. ``check(tensors, path)`` validates the contents; afterwards, if the
    manifest's ``files`` records this file, its size and sha256 are verified (the content check
    runs first because it says more when a file from another bake was copied in; older bundles
    without such an entry are read unverified).
    """
    path = _existing(bundle_file_path(bundle.manifest_path, file_name, field=field), field)
    loader = load_numpy_file if framework == "numpy" else load_file
    try:
        tensors = dict(loader(str(path)))
    except Exception as exc:  # noqa: BLE001 - any failure to parse the file is a damaged file
        raise BundleError(
            f"the {what} cannot be read; it is truncated or damaged ({_reason(exc)}).",
            path=path,
            field=field,
            fix="copy the bundle folder again from its source, or re-run the bake.",
        ) from exc
    if check is not None:
        check(tensors, path)
    for key, entry in bundle.manifest.get("files", {}).items():
        if entry["file"] == file_name:
            _verify_file(path, entry, bundle.manifest_path, f"files.{key}")
    return tensors


def check_mlp_tensors(bundle: Bundle, *, prefix: str, inputs: int, hidden: int, layers: int, outputs: int, field: str) -> None:
    """Check that the bundle's MLP (``<prefix>layers.<i>.weight/bias``) and its device layouts have the stated shape.

    ``inputs``, ``hidden``, ``layers`` (hidden layers) and ``outputs`` are what the manifest
    states under ``field`` (e.g. ``architecture``); a mismatch is a BundleError naming
    ``<field>.<which>``, raised before anything is allocated for the network.
    """
    path = bundle.manifest_path
    pattern = re.compile(re.escape(prefix) + r"layers\.(\d+)\.weight")
    present = sorted(int(match.group(1)) for key in bundle.tensors if (match := pattern.fullmatch(key)))
    fix = "the weights and manifest come from different bakes; copy a matching pair, or re-run the bake."
    if len(present) != layers + 1 or present != list(range(len(present))):
        raise _error(
            f"the weights do not fit the architecture in the manifest: it states {layers} hidden layers ({layers + 1} linear layers) but the "
            f"weights hold {len(present)} ({prefix}layers.N).",
            path,
            f"{field}.layers",
            fix,
        )
    widths = [inputs] + [hidden] * layers + [outputs]
    for index in range(layers + 1):
        expected = {"weight": [widths[index + 1], widths[index]], "bias": [widths[index + 1]]}
        for suffix, shape in expected.items():
            key = f"{prefix}layers.{index}.{suffix}"
            actual = list(bundle.tensors[key].shape) if key in bundle.tensors else None
            if actual == shape:
                continue
            if actual is not None and suffix == "weight" and index == 0 and len(actual) == 2 and actual[1] != inputs:
                which = "inputs"
            elif actual is not None and index == layers and actual[0] != outputs:
                which = "outputs"
            else:
                which = "hidden"
            raise _error(
                f"the weights do not fit the architecture in the manifest: {key} has shape {actual} but {inputs} inputs, "
                f"{layers} hidden layers of {hidden} and {outputs} outputs need {shape}.",
                path,
                f"{field}.{which}",
                fix,
            )
    for precision, layout in bundle.manifest.get("device_layouts", {}).items():
        table = layout["layers"]
        shapes = [(entry["inputs"], entry["outputs"]) for entry in table]
        if shapes != list(zip(widths[:-1], widths[1:])):
            raise _error(
                f"the device layout's layers are {shapes} (inputs, outputs) but the architecture states {list(zip(widths[:-1], widths[1:]))}.",
                path,
                f"device_layouts.{precision}.layers",
                fix,
            )
