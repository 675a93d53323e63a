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

The device layout is :mod:`neuralbake.io.device_layout`; the manifest's format, typed field access
and structural check are :mod:`neuralbake.io.bundle_manifest`. This module writes bundles and reads
them back verified: the manifest, the weights, the device layouts and the other files a manifest
lists with their sha256 (e.g. a neural material's latent textures, :func:`read_latent_textures`).

This module knows tensors and dicts only; turning a bundle back into a model is the job of
``neuralbake.nn.serialize`` (``io`` sits below ``nn`` and does not import it).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file as load_numpy_file
from safetensors.torch import load_file, save

from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.io.bundle_manifest import BUNDLE_FORMAT, BUNDLE_FORMAT_VERSION, bundle_file_path, is_plain_name, validate_manifest
from neuralbake.io.device_layout import (
    BIAS_ALIGNMENT,
    DEVICE_DTYPES,
    WEIGHT_ALIGNMENT,
    LayerTensors,
    pack_device_layout,
    unpack_device_layout,
)
from neuralbake.io.files import atomic_write_bytes, atomic_write_json, sha256_file
from neuralbake.io.limits import load_json_file
from neuralbake.io.manifest import verify_bake_folder

__all__ = [
    "LATENT_FORMATS",
    "Bundle",
    "LatentLevel",
    "check_mlp_tensors",
    "read_bundle",
    "read_bundle_tensors",
    "read_device_layout",
    "read_latent_textures",
    "write_bundle",
]

LATENT_FORMATS = ("fp16", "u8")
"""How a latent texture file stores latents: halfs, or bytes with a per-level, per-channel scale and offset."""


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


def write_bundle(
    directory: str | Path,
    tensors: Mapping[str, torch.Tensor],
    *,
    kind: str,
    metadata: Mapping[str, Any],
    layers: Sequence[LayerTensors] = (),
    name: str = "network",
    extra_files: Mapping[str, str] = {},
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
        if key in files or not is_plain_name(file_name):
            raise ValueError(f"extra_files: {key!r} -> {file_name!r} must be a new key and a plain file name")
        files[key] = _file_entry(directory / file_name)
    device_layouts = {}
    for precision in DEVICE_DTYPES:
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

    First every file of the bake folder against its ``bake.json`` (size and sha256, see
    :mod:`neuralbake.io.manifest`), then the manifest's structure and types
    (:func:`validate_manifest`), the kind, the weight file's size and sha256, and that the tensors
    have the shapes the manifest records.

    Raises
    ------
    BundleError
        On any missing, truncated, corrupt, mismatched or mistyped part (the message names the
        file and field).
    """
    directory = Path(directory)
    manifest_path = directory / f"{name}.json"
    verify_bake_folder(directory)  # every file the bake wrote, latents and manifests included
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
    except Exception as exc:
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
    if precision not in layouts or precision not in DEVICE_DTYPES:
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
    except Exception as exc:
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


LatentLevel = tuple[np.ndarray, "np.ndarray | None", "np.ndarray | None"]
"""One mip level as stored: the data ``[height, width, channels]`` (fp16, or u8 codes) and, for u8,
fp32 ``scale[channels]`` and ``offset[channels]`` (the value is ``code * scale[c] + offset[c]``)."""


def read_latent_textures(
    bundle: Bundle,
    file_name: Any,
    *,
    latent_format: str,
    channels: int,
    mip_levels: int | None,
    field: str,
    fix: str = "re-run the bake that wrote this bundle.",
) -> list[LatentLevel]:
    """Read and check a latent mip pyramid file the manifest names (``fp16`` or ``u8``), confined and verified.

    The file holds ``latent.mip<k>`` (fp16, ``[height, width, channels]``) or, for ``u8``,
    ``latent.mip<k>.codes`` (uint8) with ``latent.mip<k>.scale`` and ``.offset`` (``channels``
    floats each). Through :func:`read_bundle_tensors`: the file must lie in the bundle folder and
    parse as safetensors; every level (``mip_levels`` of them, or as many as the file holds when
    ``None``) must be there with that shape and dtype, finite, each at most the size of the one
    above; then the file's size and sha256 are checked against the manifest's ``files`` entry, so
    a flipped byte is refused. Every problem is a BundleError naming the file and the field or
    tensor (``fix`` says what to do, e.g. which bake to re-run). Returns the levels, largest first,
    little-endian and contiguous.
    """
    if latent_format not in LATENT_FORMATS:
        raise ConfigError(f"unknown latent format {latent_format!r}.", field="latent_format", fix=f"use one of {list(LATENT_FORMATS)}.")
    levels: list[LatentLevel] = []

    def error(problem: str, path: Path, where: str, fix: str = fix) -> BundleError:
        return BundleError(problem, path=path, field=where, fix=fix)

    def check(tensors: dict[str, Any], path: Path) -> None:
        count = mip_levels
        if count is None:
            count = sum(1 for key in tensors if re.fullmatch(r"latent\.mip\d+", key.removesuffix(".codes")))
        if count < 1:
            raise error("the latent texture file holds no mip levels.", path, "latent.mip_levels")
        expected_dtype = np.dtype(np.float16) if latent_format == "fp16" else np.dtype(np.uint8)
        previous: tuple[int, int] | None = None
        for k in range(count):
            key = f"latent.mip{k}"
            data_key = key if latent_format == "fp16" else f"{key}.codes"
            needed = [data_key] if latent_format == "fp16" else [data_key, f"{key}.scale", f"{key}.offset"]
            missing = [name for name in needed if name not in tensors]
            if missing:
                raise error(f"the tensors {missing} are missing.", path, key)
            data = tensors[data_key]
            if data.ndim != 3 or data.shape[2] != channels or data.dtype != expected_dtype or 0 in data.shape:
                raise error(
                    f"has shape {list(data.shape)} ({data.dtype}); expected [height, width, {channels}] {expected_dtype}.",
                    path,
                    data_key,
                    fix="the latents and the decoder come from different bakes; copy a matching bake folder.",
                )
            size = (int(data.shape[0]), int(data.shape[1]))
            if previous is not None and (size[0] > previous[0] or size[1] > previous[1]):
                raise error(f"level {k} is {size[1]}x{size[0]}, larger than level {k - 1} ({previous[1]}x{previous[0]}).", path, data_key)
            previous = size
            scale = offset = None
            if latent_format == "u8":
                parts = []
                for part in ("scale", "offset"):
                    value = tensors[f"{key}.{part}"]
                    if value.dtype.kind != "f" or value.size != channels:
                        raise error(f"must hold {channels} floating-point values, not {list(value.shape)} ({value.dtype}).", path, f"{key}.{part}")
                    value = np.ascontiguousarray(value, dtype="<f4").reshape(-1)
                    if not np.isfinite(value).all():
                        raise error("holds non-finite values.", path, f"{key}.{part}")
                    parts.append(value)
                scale, offset = parts
            elif not np.isfinite(data).all():
                raise error("holds non-finite values.", path, data_key)
            levels.append((np.ascontiguousarray(data.astype(data.dtype.newbyteorder("<"))), scale, offset))

    read_bundle_tensors(bundle, file_name, field=field, what="latent texture file", framework="numpy", check=check)
    return levels


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
        raise BundleError(
            f"the weights do not fit the architecture in the manifest: it states {layers} hidden layers ({layers + 1} linear layers) but the "
            f"weights hold {len(present)} ({prefix}layers.N).",
            path=path,
            field=f"{field}.layers",
            fix=fix,
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
            raise BundleError(
                f"the weights do not fit the architecture in the manifest: {key} has shape {actual} but {inputs} inputs, "
                f"{layers} hidden layers of {hidden} and {outputs} outputs need {shape}.",
                path=path,
                field=f"{field}.{which}",
                fix=fix,
            )
    for precision, layout in bundle.manifest.get("device_layouts", {}).items():
        table = layout["layers"]
        shapes = [(entry["inputs"], entry["outputs"]) for entry in table]
        if shapes != list(itertools.pairwise(widths)):
            raise BundleError(
                f"the device layout's layers are {shapes} (inputs, outputs) but the architecture states {list(itertools.pairwise(widths))}.",
                path=path,
                field=f"device_layouts.{precision}.layers",
                fix=fix,
            )
