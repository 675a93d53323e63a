"""The bundle manifest as untrusted input: the format's name and version, typed access to its
fields, confinement of the file names it gives, and the structural check of everything
:func:`~neuralbake.io.bundle.write_bundle` writes into it.

Every field is checked for its type and range before it is used, so a damaged or hostile
manifest gives a :class:`~neuralbake.errors.BundleError` naming the file and the field, never a
``TypeError`` from deep inside a loader. The fields owned by the code that made the network
(``architecture``...) are checked by their readers with the ``manifest_*`` accessors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from neuralbake.errors import BundleError, InputError
from neuralbake.io.device_layout import BIAS_ALIGNMENT, DEVICE_DTYPES, WEIGHT_ALIGNMENT
from neuralbake.io.refs import resolve_reference

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_FORMAT_VERSION",
    "bundle_file_path",
    "is_plain_name",
    "manifest_float",
    "manifest_int",
    "manifest_key",
    "manifest_list",
    "manifest_object",
    "manifest_sha256",
    "manifest_str",
    "validate_manifest",
]

BUNDLE_FORMAT = "neuralbake.network"
"""The manifest's ``format``."""
BUNDLE_FORMAT_VERSION = 1
"""The manifest's ``format_version`` this neuralbake reads and writes."""

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


def is_plain_name(name: Any) -> bool:
    """A file name without folders, drive, ``..``, NUL or surrounding blanks (what a manifest may name)."""
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
    if not is_plain_name(name):
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
    element = DEVICE_DTYPES[precision][1].itemsize
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
        if precision not in DEVICE_DTYPES:
            raise _error(f"unknown device-layout precision {precision!r} (this neuralbake knows {sorted(DEVICE_DTYPES)}).", path, f"device_layouts.{precision}")
        _validate_layout(layout, precision, specs, path)
    return manifest
