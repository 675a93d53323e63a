"""Shader export of baked neural materials: latent texture lookup + decoder MLP as Slang and HLSL.

A neural material bundle (``neuralbake material bake``) ships a latent mip pyramid and a decoder
MLP. This module turns one bundle, or a *pack* of bundles for one scene, into a Slang module and
an HLSL file that evaluate ``f(wi, wo) cos(theta_i)`` on the GPU, plus the two binary buffers
they bind and a JSON manifest describing both. The decoder code comes from
:mod:`neuralbake.export.slang` (the same generator that exports every other MLP); this module adds
the latent fetch, the decoder's input assembly, the output transform and the material switch.

Generated functions (``<m>`` a material name, ``<module>`` the module name; for a single
material they are the same):

- ``float3 nb_<m>_eval(float2 uv, float3 wi, float3 wo, uint mip)``: bilinear, repeat-wrapped
  latent lookup at ``uv`` in mip ``mip`` (clamped to the last level), decoder input
  ``[latent, direction features...]`` (``wi``, ``wo`` and/or ``half = normalize(wi + wo)``, in the
  order of the manifest's ``architecture.direction_inputs``; local frame, normal +z), decoder,
  then ``max(exp(y) - 1, 0)``; zero unless ``wi.z > 0`` and ``wo.z > 0``. Exactly
  ``NeuralMaterial.latent_at`` followed by ``NeuralMaterial.evaluate``.
- pack only: ``float3 nb_<module>_eval(uint material_id, float2 uv, float3 wi, float3 wo, uint
  mip)``, a ``switch (material_id)`` over the packed materials (ids in the order given, also as
  ``NB_<MODULE>_ID_<M>`` constants); unknown ids give black.
- ``nb_<module>_kernel``: a 64-thread compute entry point for batch use and testing. Point ``p``
  reads ``u, v, wi.xyz, wo.xyz`` from ``StructuredBuffer<float> nb_<module>_points[p * 8 + k]``,
  its mip from ``StructuredBuffer<uint> nb_<module>_mips[p]`` (and in a pack its material from
  ``nb_<module>_material_ids[p]``) and writes ``RWStructuredBuffer<float> nb_<module>_values[p * 3
  + c]``; the point count is ``cbuffer nb_<module>_constants { uint nb_<module>_point_count; }``.

Bindings: ``ByteAddressBuffer nb_<module>_weights`` (``<module>.weights.<precision>.bin``) and
``ByteAddressBuffer nb_<module>_latents`` (``<module>.latents.<format>.bin``).

Weight buffer: every decoder's layers in the neuralbake device layout (row-major ``[outputs,
inputs]`` matrix on a 64-byte boundary, then the bias on a 16-byte boundary, fp32 or fp16
little-endian), decoder after decoder. A layer whose shape and stored bytes equal a layer already
in the buffer (a decoder part shared between materials) is stored once; every decoder using it
gets the same offsets, which are compiled into the shader as constants.

Latent buffer: per material, per mip level ``k`` (largest first), starting on a 16-byte
boundary, the texels row by row (row 0 = ``v`` near 0), each texel's ``L`` channels together:
channel ``c`` of texel ``(row, column)`` is element ``(row * width + column) * L + c``. With the
``fp16`` format the elements are little-endian halfs; with ``u8`` they are bytes ``code`` and the
level is followed (16-byte aligned) by fp32 ``scale[L]`` then fp32 ``offset[L]``, the value being
``code * scale[c] + offset[c]`` (decoded per tap, before filtering, as the PyTorch material does).
The per-material tables of level offsets, widths and heights (and the u8 scale tables) are
compiled into the shader as ``static const`` arrays and written to the manifest.

A hand-written generator rather than a library: there is no maintained tool that emits shader
code for a given latent layout and MLP; the layout follows the bundle's own device layout so no
weight is repacked beyond copying. Buffers rather than textures so the code runs unchanged on
slangpy's CPU device, where it is parity-tested; engines that prefer ``Texture2DArray`` latents
with hardware filtering can upload the same levels (channels as slices) and replace
``nb_<m>_latent``. Arithmetic is fp32 in every format.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from neuralbake.errors import BundleError, ConfigError
from neuralbake.export.slang import SHADER_ACTIVATIONS, THREADS_PER_GROUP, generate_mlp_hlsl, generate_mlp_slang
from neuralbake.io.bundle import (
    BIAS_ALIGNMENT,
    WEIGHT_ALIGNMENT,
    Bundle,
    bundle_file_path,
    check_mlp_tensors,
    manifest_float,
    manifest_int,
    manifest_key,
    manifest_list,
    manifest_object,
    manifest_sha256,
    manifest_str,
    read_bundle,
    read_bundle_tensors,
    read_device_layout,
    sha256_file,
)
from neuralbake.io.files import atomic_write_bytes, atomic_write_json, atomic_write_text, prepare_output_dir
from neuralbake.nn.activations import DEFAULT_LEAK

__all__ = [
    "DIRECTION_INPUTS",
    "LATENT_FORMATS",
    "PACK_COMPATIBILITY_FIELDS",
    "NeuralMaterialManifest",
    "NeuralMaterialShaderExport",
    "export_material_pack_shader",
    "export_neural_material_shader",
    "read_latent_levels",
    "read_neural_material_manifest",
]

SHADER_FORMAT = "neuralbake.neural_material_shader"
SHADER_FORMAT_VERSION = 1
LATENT_FORMATS = ("fp16", "u8")
"""How the latent buffer stores latents: little-endian halfs, or bytes with a per-level, per-channel scale and offset."""
DIRECTION_INPUTS = ("wi", "wo", "half")
"""Direction features a decoder may read after its latent (manifest ``architecture.direction_inputs``)."""
PACK_COMPATIBILITY_FIELDS = (
    "latent.channels",
    "architecture.direction_inputs",
    "architecture.inputs",
    "architecture.hidden",
    "architecture.layers",
    "architecture.outputs",
    "architecture.hidden_activation",
    "architecture.output_activation",
    "architecture.leak",
)
"""Manifest fields every material of a pack must share: one decoder shape and one latent size per
scene keep the switch's branches the same cost and let engines keep the latents in one array."""
LATENT_ALIGNMENT = 16
"""Byte alignment of every latent level and u8 scale table in the latent buffer."""
POINT_FLOATS = 8
"""Floats per point in the compute entry point's input buffer: u, v, wi.xyz, wo.xyz."""

_ELEMENT_BYTES = {"fp32": 4, "fp16": 2}
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
_KIND = "neural_material"


@dataclass(frozen=True)
class NeuralMaterialShaderExport:
    """The files an export wrote, and what the shader calls things."""

    slang: Path
    """``<module>.slang``."""
    hlsl: Path
    """``<module>.hlsl``."""
    weights: Path
    """``<module>.weights.<precision>.bin``, bound as ``nb_<module>_weights``."""
    latents: Path
    """``<module>.latents.<format>.bin``, bound as ``nb_<module>_latents``."""
    manifest: Path
    """``<module>.json``: bindings, buffer layout, per-material tables."""
    module: str
    """The module name (prefix of every binding and of the kernel ``nb_<module>_kernel``)."""
    materials: tuple[str, ...]
    """Material names in id order; ``nb_<name>_eval`` evaluates each."""


@dataclass(frozen=True)
class _Level:
    width: int
    height: int
    data: bytes
    """fp16 halfs or u8 codes, texel-major."""
    scale: np.ndarray | None
    """u8 only: fp32 [L]."""
    offset: np.ndarray | None


@dataclass(frozen=True)
class _Material:
    name: str
    directory: Path
    manifest_path: Path
    fields: dict[str, Any]
    """The values of :data:`PACK_COMPATIBILITY_FIELDS`."""
    layers: list[dict[str, Any]]
    """The bundle's device-layout layer table for the chosen precision."""
    weights: bytes
    levels: list[_Level]


# -- reading bundles --------------------------------------------------------------------------------


def _identifier(text: str) -> str:
    name = _NOT_IDENTIFIER.sub("_", text).strip("_").lower() or "material"
    return name if not name[0].isdigit() else f"m_{name}"


def _material_name(manifest: NeuralMaterialManifest, directory: Path) -> str:
    return _identifier(Path(manifest.source).stem if manifest.source else directory.resolve().name)


def _bundle_error(problem: str, path: Path, field: str, fix: str = "re-run `neuralbake material bake` for this material.") -> BundleError:
    return BundleError(problem, path=path, field=field, fix=fix)


MAX_DECODER_LAYERS = 64
"""Most hidden layers a neural material decoder may state (the paper's is 3)."""
MAX_MIP_LEVELS = 32
"""Most latent mip levels (a 2^31-texel side)."""


@dataclass(frozen=True)
class NeuralMaterialManifest:
    """The neural-material fields of a bundle's manifest, checked (types, ranges, agreement with the weights)."""

    fields: dict[str, Any]
    """The values of :data:`PACK_COMPATIBILITY_FIELDS` (``architecture.*``, ``latent.channels``)."""
    mip_levels: int | None
    """``latent.mip_levels``, or ``None`` where an older manifest does not record it."""
    latent_files: dict[str, str]
    """Latent format (``fp16``, ``u8``) -> the file name the manifest gives (checked to be a plain name)."""
    source: str | None
    """``material.source``: the path of the material the bundle was baked from, as recorded."""
    source_sha256: str | None
    """``material.sha256``: its sha256 at bake time (bundles from before it was recorded: ``None``)."""
    baked_normal: tuple[float, float, float] | None
    """``material.baked_normal``: the world normal the orientation masks were baked for."""


def read_neural_material_manifest(bundle: Bundle) -> NeuralMaterialManifest:
    """Check the neural-material part of a bundle's manifest once, before anything uses it.

    ``architecture`` (integer sizes, known activations and direction inputs, RGB output, no
    encoding), ``latent`` (channels agreeing with the decoder's inputs, mip count, plain file
    names) and ``material`` (source path, sha256, baked normal); then that the decoder's weights
    and device layouts have the shape the architecture states. Every problem is a BundleError
    naming the manifest and the field. :func:`neuralbake.bakes.neural_material.load_neural_material`
    and the shader export both read bundles through this.
    """
    path = bundle.manifest_path
    manifest = bundle.manifest
    architecture = manifest_object(manifest_key(manifest, "architecture", path=path, field=None), path=path, field="architecture")

    def integer(key: str, minimum: int, maximum: int | None = None) -> int:
        value = manifest_key(architecture, key, path=path, field="architecture")
        return manifest_int(value, path=path, field=f"architecture.{key}", minimum=minimum, maximum=maximum)

    inputs, hidden, layers, outputs = integer("inputs", 1), integer("hidden", 1), integer("layers", 0, MAX_DECODER_LAYERS), integer("outputs", 1)
    if outputs != 3:
        raise _bundle_error(f"the decoder has {outputs} outputs; a neural material decodes RGB (3).", path, "architecture.outputs")
    activations = {
        key: manifest_str(manifest_key(architecture, key, path=path, field="architecture"), path=path, field=f"architecture.{key}", choices=sorted(SHADER_ACTIVATIONS))
        for key in ("hidden_activation", "output_activation")
    }
    leak = manifest_float(architecture.get("leak", DEFAULT_LEAK), path=path, field="architecture.leak")
    directions = manifest_list(architecture.get("direction_inputs", ["wi", "wo"]), path=path, field="architecture.direction_inputs")
    if not directions or any(not isinstance(name, str) or name not in DIRECTION_INPUTS for name in directions):
        raise _bundle_error(
            f"unknown or no direction inputs {directions!r:.80}.", path, "architecture.direction_inputs", fix=f"use some of {list(DIRECTION_INPUTS)}."
        )
    if manifest.get("encoding") is not None:
        raise _bundle_error("a neural material decoder takes its inputs unencoded, but the manifest names an encoding.", path, "encoding")
    latent = manifest_object(manifest.get("latent", {}), path=path, field="latent")
    channels = inputs - 3 * len(directions)
    declared = manifest_int(latent.get("channels", channels), path=path, field="latent.channels", minimum=1)
    if declared != channels or channels < 1:
        raise _bundle_error(
            f"the decoder takes {inputs} inputs, which with {len(directions)} direction features leaves {channels} latent "
            f"channels, but the manifest records {declared}.",
            path,
            "latent.channels",
        )
    mip_levels = None
    if "mip_levels" in latent:
        mip_levels = manifest_int(latent["mip_levels"], path=path, field="latent.mip_levels", minimum=1, maximum=MAX_MIP_LEVELS)
    latent_files = {}
    for latent_format in LATENT_FORMATS:
        name = latent.get(latent_format, f"latents.{latent_format}.safetensors")
        bundle_file_path(path, name, field=f"latent.{latent_format}")  # a plain name inside the folder, or a BundleError
        latent_files[latent_format] = name
    material = manifest_object(manifest.get("material", {}), path=path, field="material")
    source = manifest_str(material["source"], path=path, field="material.source") if material.get("source") is not None else None
    source_sha256 = manifest_sha256(material["sha256"], path=path, field="material.sha256") if material.get("sha256") is not None else None
    baked_normal = None
    if "baked_normal" in material:
        normal = manifest_list(material["baked_normal"], path=path, field="material.baked_normal")
        values = tuple(manifest_float(value, path=path, field=f"material.baked_normal[{index}]") for index, value in enumerate(normal))
        if len(values) != 3 or not any(values):
            raise _bundle_error(f"must be a non-zero 3-vector, not {normal!r:.80}.", path, "material.baked_normal")
        baked_normal = values  # type: ignore[assignment]
    check_mlp_tensors(bundle, prefix="decoder.", inputs=inputs, hidden=hidden, layers=layers, outputs=outputs, field="architecture")
    unexpected = sorted(key for key in bundle.tensors if not key.startswith("decoder.layers."))
    if unexpected:
        raise _bundle_error(f"the weights hold tensors that are no part of the decoder: {unexpected[:5]}.", path, "tensors")
    fields = {"architecture.inputs": inputs, "architecture.hidden": hidden, "architecture.layers": layers, "architecture.outputs": outputs, **{f"architecture.{k}": v for k, v in activations.items()}}
    fields["architecture.leak"] = leak
    fields["architecture.direction_inputs"] = list(directions)
    fields["latent.channels"] = channels
    return NeuralMaterialManifest(fields, mip_levels, latent_files, source, source_sha256, baked_normal)


LatentLevel = tuple[np.ndarray, "np.ndarray | None", "np.ndarray | None"]
"""One mip level as stored: the data ``[height, width, channels]`` (fp16, or u8 codes) and, for u8, fp32 ``scale[channels]`` and ``offset[channels]``."""


def read_latent_levels(bundle: Bundle, manifest: NeuralMaterialManifest, latent_format: str) -> list[LatentLevel]:
    """Read and check one of a neural material's latent files (``fp16`` or ``u8``).

    The file must lie in the bundle folder and parse as safetensors; every level the manifest
    counts must be there with shape ``[height, width, channels]`` and the format's dtype, each
    level at most the size of the one above; then the file's size and sha256 are checked against
    the manifest where it records them. Every problem is a BundleError naming the file and the
    field or tensor.
    """
    if latent_format not in LATENT_FORMATS:
        raise ConfigError(f"unknown latent format {latent_format!r}.", field="latent_format", fix=f"use one of {list(LATENT_FORMATS)}.")
    channels = manifest.fields["latent.channels"]
    field = f"latent.{latent_format}"
    levels: list[LatentLevel] = []

    def check(tensors: dict[str, Any], path: Path) -> None:
        count = manifest.mip_levels
        if count is None:
            count = sum(1 for key in tensors if re.fullmatch(r"latent\.mip\d+", key.removesuffix(".codes")))
        if count < 1:
            raise _bundle_error("the latent texture file holds no mip levels.", path, "latent.mip_levels")
        expected_dtype = np.dtype(np.float16) if latent_format == "fp16" else np.dtype(np.uint8)
        previous: tuple[int, int] | None = None
        for k in range(count):
            key = f"latent.mip{k}"
            data_key = key if latent_format == "fp16" else f"{key}.codes"
            needed = [data_key] if latent_format == "fp16" else [data_key, f"{key}.scale", f"{key}.offset"]
            missing = [name for name in needed if name not in tensors]
            if missing:
                raise _bundle_error(f"the tensors {missing} are missing.", path, key)
            data = tensors[data_key]
            if data.ndim != 3 or data.shape[2] != channels or data.dtype != expected_dtype or 0 in data.shape:
                raise _bundle_error(
                    f"has shape {list(data.shape)} ({data.dtype}); expected [height, width, {channels}] {expected_dtype}.",
                    path,
                    data_key,
                    fix="the latents and the decoder come from different bakes; copy a matching bake folder.",
                )
            size = (int(data.shape[0]), int(data.shape[1]))
            if previous is not None and (size[0] > previous[0] or size[1] > previous[1]):
                raise _bundle_error(f"level {k} is {size[1]}x{size[0]}, larger than level {k - 1} ({previous[1]}x{previous[0]}).", path, data_key)
            previous = size
            scale = offset = None
            if latent_format == "u8":
                parts = []
                for part in ("scale", "offset"):
                    value = tensors[f"{key}.{part}"]
                    if value.dtype.kind != "f" or value.size != channels:
                        raise _bundle_error(f"must hold {channels} floating-point values, not {list(value.shape)} ({value.dtype}).", path, f"{key}.{part}")
                    value = np.ascontiguousarray(value, dtype="<f4").reshape(-1)
                    if not np.isfinite(value).all():
                        raise _bundle_error("holds non-finite values.", path, f"{key}.{part}")
                    parts.append(value)
                scale, offset = parts
            elif not np.isfinite(data).all():
                raise _bundle_error("holds non-finite values.", path, data_key)
            levels.append((np.ascontiguousarray(data.astype(data.dtype.newbyteorder("<"))), scale, offset))

    read_bundle_tensors(bundle, manifest.latent_files[latent_format], field=field, what="latent texture file", framework="numpy", check=check)
    return levels


def _read_material(bundle_dir: str | Path, precision: str, latent_format: str) -> _Material:
    directory = Path(bundle_dir)
    if not directory.is_dir():
        raise BundleError("the neural material folder does not exist.", path=directory, fix="pass the folder `neuralbake material bake --out` wrote.")
    bundle = read_bundle(directory, kind=_KIND)
    info = read_neural_material_manifest(bundle)
    weights, _ = read_device_layout(bundle, precision)
    layers = [dict(layer) for layer in bundle.manifest["device_layouts"][precision]["layers"]]
    levels = [
        _Level(int(data.shape[1]), int(data.shape[0]), data.tobytes(), scale, offset)
        for data, scale, offset in read_latent_levels(bundle, info, latent_format)
    ]
    return _Material(_material_name(info, directory), directory, bundle.manifest_path, info.fields, layers, weights, levels)


def _check_options(precision: str, latent_format: str) -> None:
    if precision not in _ELEMENT_BYTES:
        raise ConfigError(f"unknown weight precision {precision!r}.", field="precision", fix=f"use one of {sorted(_ELEMENT_BYTES)}.")
    if latent_format not in LATENT_FORMATS:
        raise ConfigError(f"unknown latent format {latent_format!r}.", field="latent_format", fix=f"use one of {list(LATENT_FORMATS)}.")


def _check_pack(materials: Sequence[_Material]) -> None:
    first = materials[0]
    for material in materials[1:]:
        for field in PACK_COMPATIBILITY_FIELDS:
            if material.fields[field] != first.fields[field]:
                raise BundleError(
                    f"{field} is {material.fields[field]!r} here but {first.fields[field]!r} in {first.directory}; a pack holds materials "
                    "with one decoder shape and latent size.",
                    path=material.manifest_path,
                    field=field,
                    fix="bake every material of the pack with the same --latent and decoder settings, or export it on its own.",
                )


# -- buffers ----------------------------------------------------------------------------------------


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment


def _place(buffer: bytearray, data: bytes, alignment: int) -> int:
    start = _align(len(buffer), alignment)
    buffer.extend(bytes(start - len(buffer)))
    buffer.extend(data)
    return start


def _pack_weights(materials: Sequence[_Material], precision: str) -> tuple[bytes, list[list[dict[str, Any]]], int]:
    """One device-layout buffer for every decoder, identical layers once. Returns (buffer, tables, layers stored)."""
    element = _ELEMENT_BYTES[precision]
    buffer = bytearray()
    stored: dict[tuple[int, int, bytes, bytes], tuple[int, int]] = {}
    tables = []
    for material in materials:
        table = []
        for layer in material.layers:
            inputs, outputs = int(layer["inputs"]), int(layer["outputs"])
            weight = material.weights[layer["weight_offset"] : layer["weight_offset"] + inputs * outputs * element]
            bias = material.weights[layer["bias_offset"] : layer["bias_offset"] + outputs * element]
            key = (inputs, outputs, weight, bias)
            if key not in stored:
                weight_offset = _place(buffer, weight, WEIGHT_ALIGNMENT)
                stored[key] = (weight_offset, _place(buffer, bias, BIAS_ALIGNMENT))
            weight_offset, bias_offset = stored[key]
            table.append({"name": layer["name"], "inputs": inputs, "outputs": outputs, "weight_offset": weight_offset, "bias_offset": bias_offset})
        tables.append(table)
    buffer.extend(bytes(_align(len(buffer), WEIGHT_ALIGNMENT) - len(buffer)))
    return bytes(buffer), tables, len(stored)


def _pack_latents(materials: Sequence[_Material], latent_format: str) -> tuple[bytes, list[list[dict[str, int]]]]:
    buffer = bytearray()
    tables = []
    for material in materials:
        table = []
        for level in material.levels:
            entry = {"offset": _place(buffer, level.data, LATENT_ALIGNMENT), "width": level.width, "height": level.height}
            if latent_format == "u8":
                assert level.scale is not None and level.offset is not None
                entry["scale_offset"] = _place(buffer, level.scale.tobytes() + level.offset.tobytes(), LATENT_ALIGNMENT)
            table.append(entry)
        tables.append(table)
    buffer.extend(bytes(_align(len(buffer), LATENT_ALIGNMENT) - len(buffer)))
    return bytes(buffer), tables


# -- code generation --------------------------------------------------------------------------------


def _decoder_code(language: str, material: _Material, table: list[dict[str, Any]], precision: str, module: str) -> str:
    """The decoder function ``nb_<m>_decoder`` from the MLP generator, without its test kernel and bindings."""
    function = f"nb_{material.name}_decoder"
    generate = generate_mlp_slang if language == "slang" else generate_mlp_hlsl
    source = generate(
        table,
        hidden_activation=material.fields["architecture.hidden_activation"],
        output_activation=material.fields["architecture.output_activation"],
        leak=material.fields["architecture.leak"],
        precision=precision,
        function_name=function,
    )
    # The generator ends every module with its own bindings and compute kernel; a material module
    # binds one weight buffer for all its decoders and has its own kernel, so cut them off.
    marker = f"\nByteAddressBuffer {function}_weights;"
    if source.count(marker) != 1:
        raise RuntimeError(f"the MLP generator's output no longer has one {marker.strip()!r} line to cut at")
    # Its header tells users to bind the bundle's own buffer; here the offsets are into the shared one.
    lines = [line for line in source.split(marker)[0].rstrip().splitlines() if not line.startswith("// Bind the bundle's")]
    return "\n".join([*lines, f"// The offsets above are bytes into nb_{module}_weights.", ""])


def _uint_array(name: str, values: Sequence[int]) -> str:
    return f"static const uint {name}[{len(values)}] = {{ {', '.join(str(int(v)) for v in values)} }};"


def _latent_code(material: _Material, table: list[dict[str, int]], module: str, latent_format: str) -> list[str]:
    m, M = material.name, material.name.upper()
    channels = material.fields["latent.channels"]
    lines = [
        f"static const uint NB_{M}_CHANNELS = {channels};",
        f"static const uint NB_{M}_MIP_LEVELS = {len(table)};",
        f"// Byte offsets into nb_{module}_latents of each mip level's texels, and the level sizes.",
        _uint_array(f"NB_{M}_MIP_OFFSET", [entry["offset"] for entry in table]),
        _uint_array(f"NB_{M}_MIP_WIDTH", [entry["width"] for entry in table]),
        _uint_array(f"NB_{M}_MIP_HEIGHT", [entry["height"] for entry in table]),
    ]
    if latent_format == "u8":
        lines += [
            "// Byte offsets of each level's fp32 scale[CHANNELS] then offset[CHANNELS].",
            _uint_array(f"NB_{M}_MIP_SCALE_OFFSET", [entry["scale_offset"] for entry in table]),
        ]
    lines += ["", f"float nb_{m}_latent_value(uint level, uint texel, uint channel)", "{"]
    if latent_format == "fp16":
        lines.append(f"    return nb_{module}_load_half(NB_{M}_MIP_OFFSET[level] + (texel * NB_{M}_CHANNELS + channel) * 2u);")
    else:
        lines += [
            f"    float code = float(nb_{module}_load_byte(NB_{M}_MIP_OFFSET[level] + texel * NB_{M}_CHANNELS + channel));",
            f"    uint table = NB_{M}_MIP_SCALE_OFFSET[level];",
            f"    return code * asfloat(nb_{module}_latents.Load(table + channel * 4u))"
            f" + asfloat(nb_{module}_latents.Load(table + (NB_{M}_CHANNELS + channel) * 4u));",
        ]
    lines += [
        "}",
        "",
        "// Bilinear, repeat-wrapped, texel centres at (i + 0.5) / size; mip clamped to the last level.",
        f"void nb_{m}_latent(float2 uv, uint mip, out float latent[{channels}])",
        "{",
        f"    uint level = min(mip, NB_{M}_MIP_LEVELS - 1u);",
        f"    int width = int(NB_{M}_MIP_WIDTH[level]);",
        f"    int height = int(NB_{M}_MIP_HEIGHT[level]);",
        "    float x = uv.x * float(width) - 0.5f;",
        "    float y = uv.y * float(height) - 0.5f;",
        "    float x_floor = floor(x);",
        "    float y_floor = floor(y);",
        "    float tx = x - x_floor;",
        "    float ty = y - y_floor;",
        f"    uint column0 = nb_{module}_wrap(int(x_floor), width);",
        f"    uint column1 = nb_{module}_wrap(int(x_floor) + 1, width);",
        f"    uint row0 = nb_{module}_wrap(int(y_floor), height) * uint(width);",
        f"    uint row1 = nb_{module}_wrap(int(y_floor) + 1, height) * uint(width);",
        f"    for (uint c = 0; c < NB_{M}_CHANNELS; ++c)",
        "    {",
        f"        float top = nb_{m}_latent_value(level, row0 + column0, c) * (1.0f - tx) + nb_{m}_latent_value(level, row0 + column1, c) * tx;",
        f"        float bottom = nb_{m}_latent_value(level, row1 + column0, c) * (1.0f - tx) + nb_{m}_latent_value(level, row1 + column1, c) * tx;",
        "        latent[c] = top * (1.0f - ty) + bottom * ty;",
        "    }",
        "}",
    ]
    return lines


def _eval_code(material: _Material, module: str) -> list[str]:
    m = material.name
    channels = material.fields["latent.channels"]
    inputs = material.fields["architecture.inputs"]
    directions = material.fields["architecture.direction_inputs"]
    lines = [
        "",
        f"// f(wi, wo) cos(theta_i) of material {m}; wi, wo in the local shading frame (normal +z).",
        f"float3 nb_{m}_eval(float2 uv, float3 wi, float3 wo, uint mip)",
        "{",
        "    if (wi.z <= 0.0f || wo.z <= 0.0f)",
        "        return float3(0.0f, 0.0f, 0.0f);",
        f"    float latent[{channels}] = {{ {', '.join(['0.0f'] * channels)} }};",
        f"    nb_{m}_latent(uv, mip, latent);",
        f"    float inputs[{inputs}] = {{ {', '.join(['0.0f'] * inputs)} }};",
        f"    for (uint c = 0; c < {channels}u; ++c)",
        "        inputs[c] = latent[c];",
    ]
    if "half" in directions:
        lines.append(f"    float3 halfway = nb_{module}_halfway(wi, wo);")
    vectors = {"wi": "wi", "wo": "wo", "half": "halfway"}
    for index, name in enumerate(directions):
        for axis, component in enumerate("xyz"):
            lines.append(f"    inputs[{channels + 3 * index + axis}] = {vectors[name]}.{component};")
    lines += [
        "    float y[3] = { 0.0f, 0.0f, 0.0f };",
        f"    nb_{m}_decoder(nb_{module}_weights, inputs, y);",
        "    // The decoder predicts log(1 + f cos).",
        "    return max(exp(float3(y[0], y[1], y[2])) - 1.0f, float3(0.0f, 0.0f, 0.0f));",
        "}",
    ]
    return lines


def _preamble(module: str, latent_format: str, materials: Sequence[_Material], precision: str, language: str) -> list[str]:
    names = ", ".join(material.name for material in materials)
    lines = [
        f"// Generated by neuralbake ({language}): neural material shader {module!r} for {names}.",
        f"// Bind {module}.weights.{precision}.bin as nb_{module}_weights and {module}.latents.{latent_format}.bin as nb_{module}_latents;",
        f"// {module}.json describes both buffers. Arithmetic is fp32.",
        "",
        f"ByteAddressBuffer nb_{module}_weights;",
        f"ByteAddressBuffer nb_{module}_latents;",
        "",
        f"uint nb_{module}_wrap(int i, int n)",
        "{",
        "    int m = i % n;",
        "    return uint(m < 0 ? m + n : m);",
        "}",
        "",
        f"float3 nb_{module}_halfway(float3 wi, float3 wo)",
        "{",
        "    float3 h = wi + wo;",
        "    return h / max(length(h), 1e-8f);",
        "}",
        "",
    ]
    if latent_format == "fp16":
        lines += [
            f"float nb_{module}_load_half(uint address)",
            "{",
            f"    uint word = nb_{module}_latents.Load(address & ~3u);",
            "    return f16tof32((address & 2u) != 0u ? word >> 16 : word);",
            "}",
        ]
    else:
        lines += [
            f"uint nb_{module}_load_byte(uint address)",
            "{",
            f"    uint word = nb_{module}_latents.Load(address & ~3u);",
            "    return (word >> ((address & 3u) * 8u)) & 0xFFu;",
            "}",
        ]
    return lines


def _switch_code(module: str, materials: Sequence[_Material]) -> list[str]:
    lines = [""]
    lines += [f"static const uint NB_{module.upper()}_ID_{material.name.upper()} = {index};" for index, material in enumerate(materials)]
    lines += [
        "",
        f"float3 nb_{module}_eval(uint material_id, float2 uv, float3 wi, float3 wo, uint mip)",
        "{",
        "    switch (material_id)",
        "    {",
    ]
    for index, material in enumerate(materials):
        lines.append(f"    case {index}: return nb_{material.name}_eval(uv, wi, wo, mip);")
    lines += ["    default: return float3(0.0f, 0.0f, 0.0f);", "    }", "}"]
    return lines


def _kernel_code(language: str, module: str, materials: Sequence[_Material], pack: bool) -> list[str]:
    call = f"nb_{module}_eval(nb_{module}_material_ids[p], uv, wi, wo, nb_{module}_mips[p])" if pack else f"nb_{materials[0].name}_eval(uv, wi, wo, nb_{module}_mips[p])"
    return [
        "",
        f"StructuredBuffer<float> nb_{module}_points;   // point p: u, v, wi.xyz, wo.xyz at [p * {POINT_FLOATS} + k]",
        f"StructuredBuffer<uint> nb_{module}_mips;      // point p's mip level",
        *([f"StructuredBuffer<uint> nb_{module}_material_ids; // point p's material id"] if pack else []),
        f"RWStructuredBuffer<float> nb_{module}_values; // point p's f cos at [p * 3 + c]",
        f"cbuffer nb_{module}_constants",
        "{",
        f"    uint nb_{module}_point_count;",
        "};",
        "",
        *(['[shader("compute")]'] if language == "slang" else []),
        f"[numthreads({THREADS_PER_GROUP}, 1, 1)]",
        f"void nb_{module}_kernel(uint3 thread_id : SV_DispatchThreadID)",
        "{",
        "    uint p = thread_id.x;",
        f"    if (p >= nb_{module}_point_count)",
        "        return;",
        f"    uint base = p * {POINT_FLOATS}u;",
        f"    float2 uv = float2(nb_{module}_points[base], nb_{module}_points[base + 1u]);",
        f"    float3 wi = float3(nb_{module}_points[base + 2u], nb_{module}_points[base + 3u], nb_{module}_points[base + 4u]);",
        f"    float3 wo = float3(nb_{module}_points[base + 5u], nb_{module}_points[base + 6u], nb_{module}_points[base + 7u]);",
        f"    float3 value = {call};",
        f"    nb_{module}_values[p * 3u] = value.x;",
        f"    nb_{module}_values[p * 3u + 1u] = value.y;",
        f"    nb_{module}_values[p * 3u + 2u] = value.z;",
        "}",
    ]


def _generate(language: str, module: str, materials: Sequence[_Material], weight_tables: list, latent_tables: list, precision: str, latent_format: str, pack: bool) -> str:
    lines = _preamble(module, latent_format, materials, precision, language)
    for material, weight_table, latent_table in zip(materials, weight_tables, latent_tables, strict=True):
        lines += ["", f"// ---- material {material.name} " + "-" * max(0, 80 - len(material.name)), ""]
        lines.append(_decoder_code(language, material, weight_table, precision, module))
        lines += _latent_code(material, latent_table, module, latent_format)
        lines += _eval_code(material, module)
    if pack:
        lines += _switch_code(module, materials)
    lines += _kernel_code(language, module, materials, pack)
    return "\n".join(lines) + "\n"


# -- export -----------------------------------------------------------------------------------------


def _unique_names(materials: list[_Material], reserved: set[str]) -> list[_Material]:
    """Materials renamed ``<name>_2``, ``<name>_3`` ... where two would share a name (or take a reserved one)."""
    used = set(reserved)
    renamed = []
    for material in materials:
        name, k = material.name, 2
        while name in used:
            name, k = f"{material.name}_{k}", k + 1
        used.add(name)
        renamed.append(replace(material, name=name))
    return renamed


def _shader_manifest(
    written: NeuralMaterialShaderExport,
    pack: bool,
    precision: str,
    latent_format: str,
    stored_layers: int,
    materials: Sequence[_Material],
    weight_tables: list[list[dict[str, Any]]],
    latent_tables: list[list[dict[str, int]]],
) -> dict[str, Any]:
    """``<module>.json``: the files with their sha256, the bindings, both buffer layouts and the per-material tables."""
    module = written.module
    return {
        "format": SHADER_FORMAT,
        "format_version": SHADER_FORMAT_VERSION,
        "module": module,
        "pack": pack,
        "files": {
            key: {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
            for key, path in (("slang", written.slang), ("hlsl", written.hlsl), ("weights", written.weights), ("latents", written.latents))
        },
        "bindings": {
            f"nb_{module}_weights": "ByteAddressBuffer: files.weights",
            f"nb_{module}_latents": "ByteAddressBuffer: files.latents",
        },
        "functions": {
            "eval": f"float3 nb_{module}_eval(uint material_id, float2 uv, float3 wi, float3 wo, uint mip)" if pack else f"float3 nb_{module}_eval(float2 uv, float3 wi, float3 wo, uint mip)",
            "kernel": f"nb_{module}_kernel ({THREADS_PER_GROUP} threads per group)",
            "kernel_buffers": {
                f"nb_{module}_points": f"StructuredBuffer<float>: u, v, wi.xyz, wo.xyz per point ({POINT_FLOATS} floats)",
                f"nb_{module}_mips": "StructuredBuffer<uint>: mip level per point",
                **({f"nb_{module}_material_ids": "StructuredBuffer<uint>: material id per point"} if pack else {}),
                f"nb_{module}_values": "RWStructuredBuffer<float>: f cos, 3 per point",
                f"nb_{module}_constants": f"cbuffer {{ uint nb_{module}_point_count; }}",
            },
        },
        "weights": {
            "precision": precision,
            "layout": "neuralbake device layout: per layer a row-major [outputs, inputs] matrix (64-byte aligned) then the bias (16-byte aligned), little-endian",
            "layers_stored": stored_layers,
            "layers_referenced": sum(len(table) for table in weight_tables),
        },
        "latents": {
            "format": latent_format,
            "layout": "per material, per mip level (16-byte aligned): texels row by row, the channels of a texel together; element "
            "(row * width + column) * channels + c. fp16: little-endian halfs. u8: bytes, value = code * scale[c] + offset[c] with fp32 "
            "scale[channels] then offset[channels] at scale_offset (16-byte aligned).",
            "filter": "bilinear, repeat wrap, texel centres at (i + 0.5) / size; mip clamped to the last level",
        },
        "output": "f(wi, wo) cos = max(exp(y) - 1, 0) of the decoder output y; zero unless wi.z > 0 and wo.z > 0 (local frame, normal +z)",
        "materials": [
            {
                "id": index,
                "name": material.name,
                "function": f"nb_{material.name}_eval",
                "bundle": str(material.directory),
                "channels": material.fields["latent.channels"],
                "direction_inputs": material.fields["architecture.direction_inputs"],
                "decoder_layers": weight_table,
                "mips": latent_table,
            }
            for index, (material, weight_table, latent_table) in enumerate(zip(materials, weight_tables, latent_tables, strict=True))
        ],
    }


def _export(
    bundle_dirs: Sequence[str | Path], out_dir: str | Path, module: str | None, precision: str, latent_format: str, pack: bool
) -> NeuralMaterialShaderExport:
    _check_options(precision, latent_format)
    if module is not None and (not module or _identifier(module) != module):
        raise ConfigError(f"{module!r} is not a usable shader name.", field="name", fix="use lower-case letters, digits and underscores, starting with a letter.")
    if not bundle_dirs:
        raise ConfigError("no neural material bundles given.", field="bundle_dirs", fix="pass one or more folders written by `neuralbake material bake`.")
    resolved = [Path(path).resolve() for path in bundle_dirs]
    for index, path in enumerate(resolved):
        if path in resolved[:index]:
            raise ConfigError("the same bundle is given twice.", field=f"bundle_dirs[{index}]", fix=f"name {bundle_dirs[index]} once; each material gets one id.")
    materials = [_read_material(path, precision, latent_format) for path in bundle_dirs]
    if pack:
        _check_pack(materials)
        module = module or "material_pack"
        materials = _unique_names(materials, {module})
    else:
        # One material: the module and the material share the name (nb_<name>_eval, nb_<name>_weights ...).
        module = module or materials[0].name
        materials = [replace(materials[0], name=module)]
    weights, weight_tables, stored_layers = _pack_weights(materials, precision)
    latents, latent_tables = _pack_latents(materials, latent_format)
    sources = {language: _generate(language, module, materials, weight_tables, latent_tables, precision, latent_format, pack) for language in ("slang", "hlsl")}

    out = prepare_output_dir(out_dir)
    written = NeuralMaterialShaderExport(
        slang=out / f"{module}.slang",
        hlsl=out / f"{module}.hlsl",
        weights=out / f"{module}.weights.{precision}.bin",
        latents=out / f"{module}.latents.{latent_format}.bin",
        manifest=out / f"{module}.json",
        module=module,
        materials=tuple(material.name for material in materials),
    )
    atomic_write_bytes(written.weights, weights)
    atomic_write_bytes(written.latents, latents)
    atomic_write_text(written.slang, sources["slang"])
    atomic_write_text(written.hlsl, sources["hlsl"])
    atomic_write_json(written.manifest, _shader_manifest(written, pack, precision, latent_format, stored_layers, materials, weight_tables, latent_tables))
    return written


def export_neural_material_shader(
    bundle_dir: str | Path,
    out_dir: str | Path,
    *,
    precision: str = "fp32",
    latent_format: str = "fp16",
    name: str | None = None,
) -> NeuralMaterialShaderExport:
    """Write ``<name>.slang``, ``<name>.hlsl``, their weight and latent buffers and ``<name>.json``.

    Parameters
    ----------
    bundle_dir:
        A folder written by ``neuralbake material bake`` (manifest kind ``neural_material``).
    out_dir:
        Output folder (created; may be the bundle folder).
    precision:
        ``"fp32"`` or ``"fp16"``: which of the bundle's device layouts the weight buffer holds.
    latent_format:
        ``"fp16"`` or ``"u8"`` (see the module docstring for both layouts).
    name:
        Shader name (identifier); default: the baked material's file stem, e.g. ``antique_copper_tray``,
        giving ``nb_antique_copper_tray_eval``.

    Raises
    ------
    BundleError
        When the bundle is missing, corrupt or inconsistent (names the file and the field).
    ConfigError
        On an unknown precision, latent format or a bad name.
    """
    return _export([bundle_dir], out_dir, name, precision, latent_format, pack=False)


def export_material_pack_shader(
    bundle_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    precision: str = "fp32",
    latent_format: str = "fp16",
    name: str = "material_pack",
) -> NeuralMaterialShaderExport:
    """One shader for exactly the given neural materials, dispatched by ``switch (material_id)``.

    Material ids follow the order of ``bundle_dirs``. Every material's decoder is generated (and
    only those); their layers share one weight buffer in which byte-identical layers are stored
    once, and their latents share one latent buffer with per-material tables of level offsets
    and sizes. Writes ``<name>.slang``, ``<name>.hlsl``, ``<name>.weights.<precision>.bin``,
    ``<name>.latents.<latent_format>.bin`` and ``<name>.json``.

    Raises
    ------
    BundleError
        When a bundle is missing or corrupt, or when materials differ in a field of
        :data:`PACK_COMPATIBILITY_FIELDS` (the error names the bundle and the field).
    ConfigError
        On no bundles, a bundle given twice, an unknown precision or latent format, or a bad name.
    """
    return _export(list(bundle_dirs), out_dir, name, precision, latent_format, pack=True)
