"""A neural material's bundle: its manifest, checked once, its decoder's input layout and its device buffers.

The bake writes these files and the shader export reads them, so the format lives here, below both.

The neural-material part of a bundle's manifest, checked once, and the latent textures it names.

:func:`read_neural_material_manifest` checks ``architecture``, ``latent`` and ``material`` of a
bundle read with :func:`neuralbake.io.bundle.read_bundle` (types, ranges, agreement with the
decoder's weights) and :func:`read_latent_levels` reads one of its latent files through
:func:`neuralbake.io.bundle.read_latent_textures` (confined, shape-checked and verified against the
manifest's sha256). The shader export and :func:`neuralbake.bakes.neural_material.load_neural_material`
both read neural material bundles through these.

The decoder's input layout (:class:`DecoderInputLayout`) is the one description of what the
decoder reads, in which order and width: the PyTorch model assembles its inputs from it and the
Slang/HLSL generators emit their input code from it.

Buffer layouts of an exported neural material shader: the shared weight buffer and the latent buffer.

Weight buffer: every decoder's layers in the neuralbake device layout (row-major ``[outputs,
inputs]`` matrix on a 64-byte boundary, then the bias on a 16-byte boundary, fp32 or fp16
little-endian), decoder after decoder, then the sampling heads of the materials that have one. A layer whose shape and stored bytes equal a layer already
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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load

from neuralbake.errors import BundleError
from neuralbake.io.bundle import LATENT_FORMATS, Bundle, LatentLevel, check_mlp_tensors, read_latent_textures
from neuralbake.io.bundle_manifest import (
    bundle_file_path,
    manifest_float,
    manifest_int,
    manifest_key,
    manifest_list,
    manifest_object,
    manifest_sha256,
    manifest_str,
)
from neuralbake.io.device_layout import BIAS_ALIGNMENT, WEIGHT_ALIGNMENT, align

__all__ = [
    "MAX_PROBES",
    "MAX_TILT",
    "MAX_W",
    "MIN_ALPHA",
    "SAMPLER_FILE",
    "read_sampler_weights",
    "DEFAULT_LEAK",
    "DIRECTION_INPUTS",
    "ELEMENT_BYTES",
    "LATENT_ALIGNMENT",
    "MANIFEST_ACTIVATIONS",
    "MAX_DECODER_LAYERS",
    "MAX_MIP_LEVELS",
    "PACK_COMPATIBILITY_FIELDS",
    "DecoderInputLayout",
    "ExportMaterial",
    "InputSegment",
    "LatentBufferLevel",
    "NeuralMaterialManifest",
    "decoder_input_layout",
    "pack_latents",
    "pack_weights",
    "read_latent_levels",
    "read_neural_material_manifest",
]


MAX_PROBES = 8
"""Most trilinear probes an anisotropic footprint is covered with (as a GPU's 8x anisotropic filtering); the
PyTorch decode and the exported shaders both use it."""
SAMPLER_FILE = "sampler.safetensors"
"""The importance-sampling head's weights in a bundle baked with ``--sampling-steps``."""
MIN_ALPHA = 0.02
"""Narrowest proxy lobe (GGX alpha): the head cannot chase a delta it would rarely sample."""
MAX_W = 0.9
"""Largest weight of the GGX lobe: the cosine lobe keeps at least a tenth, so a latent the head never saw (a filtered
level) or light outside the proxy lobe still gets sampled (a defensive mixture)."""
MAX_TILT = 0.8
"""Largest tangential component of the (unnormalised) tilted normal ``(tx, ty, 1)``."""


def read_sampler_weights(bundle: Bundle, latent: int) -> tuple[int, dict[str, Any]] | None:
    """The bundle's importance-sampling head as ``(hidden width, its state dict)``, checked against its manifest
    entry and for finite values; ``None`` for a bundle without one."""
    meta = bundle.manifest.get("sampler")
    if meta is None:
        return None
    fix = "re-run `neuralbake material bake` for this material."
    hidden = meta.get("hidden") if isinstance(meta, dict) else None
    if (not isinstance(meta, dict) or meta.get("file") != SAMPLER_FILE or meta.get("latent") != latent
            or isinstance(hidden, bool) or not isinstance(hidden, int) or not 1 <= hidden <= 4096
            or meta.get("min_alpha") != MIN_ALPHA or meta.get("max_tilt") != MAX_TILT or meta.get("max_w") != MAX_W):
        raise BundleError(f"the sampler entry {str(meta)[:120]!r} does not describe a sampling head this neuralbake reads.",
                          path=bundle.manifest_path, field="sampler", fix=fix)
    path = bundle_file_path(bundle.manifest_path, SAMPLER_FILE, field="sampler.file")
    shapes = {"mlp.layers.0.weight": (hidden, latent), "mlp.layers.0.bias": (hidden,), "mlp.layers.1.weight": (4, hidden), "mlp.layers.1.bias": (4,)}
    try:
        state = load(path.read_bytes())
    except Exception as exc:  # safetensors' own errors are no ValueError
        raise BundleError(f"the sampling head cannot be read ({type(exc).__name__}: {str(exc)[:120]}).", path=path, field="sampler", fix=fix) from exc
    if {k: tuple(v.shape) for k, v in state.items()} != shapes:
        raise BundleError(f"the sampling head's tensors are not those of a {latent} -> {hidden} -> 4 head.", path=path, field="sampler", fix=fix)
    if not all(bool(torch.isfinite(v).all()) for v in state.values()):
        raise BundleError("the sampling head holds non-finite weights.", path=path, field="sampler", fix=fix)
    return hidden, state

MANIFEST_ACTIVATIONS = ("none", "relu", "leaky_relu", "tanh", "exp", "sigmoid", "clamped_gelu")
"""Activation names a manifest may state (``neuralbake.nn.activations`` computes them, the shader export writes them)."""
DEFAULT_LEAK = 0.01
"""LeakyReLU's slope where a manifest states none (``neuralbake.nn.activations.DEFAULT_LEAK``; a test keeps them equal)."""


# -- the decoder's input layout -------------------------------------------------------------------

DIRECTION_ENCODINGS = {"wi": "identity", "wo": "identity", "half": "halfway"}
"""Direction feature -> how it is computed from ``(wi, wo)``: ``identity`` (the direction itself) or
``halfway`` (``normalize(wi + wo)``). Every consumer of :class:`DecoderInputLayout` implements both."""
DIRECTION_INPUTS = tuple(DIRECTION_ENCODINGS)
"""Direction features a decoder may read after its latent (manifest ``architecture.direction_inputs``)."""


@dataclass(frozen=True)
class InputSegment:
    """A run of consecutive decoder inputs: the latent's channels or one direction feature's xyz."""

    name: str
    """``latent``, or the direction feature's name (``wi``, ``wo``, ``half``)."""
    offset: int
    """Index of its first input."""
    width: int
    source: str
    """``latent`` (the filtered latent texels) or ``direction`` (from the local ``wi``, ``wo``)."""
    encoding: str
    """``identity`` or ``halfway`` (:data:`DIRECTION_ENCODINGS`); ``identity`` for the latent."""


@dataclass(frozen=True)
class DecoderInputLayout:
    """What a neural material's decoder reads, in order: the one description the PyTorch model and
    the Slang/HLSL generators (scalar and tensor-core) all build their decoder inputs from."""

    segments: tuple[InputSegment, ...]

    @property
    def width(self) -> int:
        """Number of decoder inputs."""
        return sum(segment.width for segment in self.segments)

    @property
    def latent(self) -> InputSegment:
        """The latent's segment."""
        return next(segment for segment in self.segments if segment.source == "latent")

    @property
    def directions(self) -> tuple[InputSegment, ...]:
        """The direction features' segments, in order."""
        return tuple(segment for segment in self.segments if segment.source == "direction")


def decoder_input_layout(channels: int, direction_inputs: Sequence[str]) -> DecoderInputLayout:
    """The decoder's inputs for ``channels`` latent channels and the named direction features:
    ``[latent, feature(wi, wo) for each name]`` (what bundles record as ``latent.channels`` and
    ``architecture.direction_inputs``)."""
    unknown = [name for name in direction_inputs if name not in DIRECTION_ENCODINGS]
    if unknown:
        raise ValueError(f"unknown direction inputs {unknown}; use some of {list(DIRECTION_INPUTS)}")
    segments = [InputSegment("latent", 0, channels, "latent", "identity")]
    for name in direction_inputs:
        segments.append(InputSegment(name, segments[-1].offset + segments[-1].width, 3, "direction", DIRECTION_ENCODINGS[name]))
    return DecoderInputLayout(tuple(segments))
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
_REBAKE = "re-run `neuralbake material bake` for this material."


def _bundle_error(problem: str, path: Path, field: str, fix: str = _REBAKE) -> BundleError:
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
    name: str | None = None
    """``material.name``: the glTF material's name where the bundle was baked from an asset (names its shader functions)."""

    @property
    def inputs(self) -> DecoderInputLayout:
        """The decoder's input layout the manifest states."""
        return decoder_input_layout(self.fields["latent.channels"], self.fields["architecture.direction_inputs"])


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
        key: manifest_str(manifest_key(architecture, key, path=path, field="architecture"), path=path, field=f"architecture.{key}", choices=sorted(MANIFEST_ACTIVATIONS))
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
    channels = inputs - decoder_input_layout(0, directions).width  # what the direction features leave to the latent
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
    name = manifest_str(material["name"], path=path, field="material.name") if material.get("name") is not None else None
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
    return NeuralMaterialManifest(fields, mip_levels, latent_files, source, source_sha256, baked_normal, name)



def read_latent_levels(bundle: Bundle, manifest: NeuralMaterialManifest, latent_format: str) -> list[LatentLevel]:
    """Read and check one of a neural material's latent files (``fp16`` or ``u8``).

    :func:`neuralbake.io.bundle.read_latent_textures` with the channels, mip count and file name
    the manifest states: the file must lie in the bundle folder and parse as safetensors; every
    level must be there with shape ``[height, width, channels]`` and the format's dtype, each level
    at most the size of the one above; then the file's size and sha256 are checked against the
    manifest. Every problem is a BundleError naming the file and the field or tensor.
    """
    return read_latent_textures(  # an unknown latent_format is a ConfigError there, before any file is read
        bundle,
        manifest.latent_files.get(latent_format),
        latent_format=latent_format,
        channels=manifest.fields["latent.channels"],
        mip_levels=manifest.mip_levels,
        field=f"latent.{latent_format}",
        fix=_REBAKE,
    )


# -- device buffers of an exported shader ----------------------------------------

LATENT_ALIGNMENT = 16
"""Byte alignment of every latent level and u8 scale table in the latent buffer."""
ELEMENT_BYTES = {"fp32": 4, "fp16": 2}
"""Bytes per weight element of each device-layout precision."""


@dataclass(frozen=True)
class LatentBufferLevel:
    """One latent mip level as it goes into the latent buffer."""

    width: int
    height: int
    data: bytes
    """fp16 halfs or u8 codes, texel-major."""
    scale: np.ndarray | None
    """u8 only: fp32 [L]."""
    offset: np.ndarray | None


@dataclass(frozen=True)
class ExportMaterial:
    """One neural material read from its bundle, ready to be packed and generated."""

    name: str
    directory: Path
    manifest_path: Path
    fields: dict[str, Any]
    """The values of :data:`PACK_COMPATIBILITY_FIELDS`."""
    layers: list[dict[str, Any]]
    """The bundle's device-layout layer table for the chosen precision."""
    weights: bytes
    levels: list[LatentBufferLevel]
    sampler_layers: list[dict[str, Any]] | None = None
    """The sampling head's device-layout layer table (same precision), or ``None``: the bundle has no head."""
    sampler_weights: bytes = b""

    @property
    def inputs(self) -> DecoderInputLayout:
        """The decoder's input layout (from the manifest's ``latent.channels`` and ``architecture.direction_inputs``)."""
        return decoder_input_layout(self.fields["latent.channels"], self.fields["architecture.direction_inputs"])



def _place(buffer: bytearray, data: bytes, alignment: int) -> int:
    start = align(len(buffer), alignment)
    buffer.extend(bytes(start - len(buffer)))
    buffer.extend(data)
    return start


def pack_weights(
    materials: Sequence[ExportMaterial], precision: str
) -> tuple[bytes, list[list[dict[str, Any]]], int, list[list[dict[str, Any]] | None]]:
    """One device-layout buffer for every decoder, then every sampling head, identical layers once.

    Returns (buffer, decoder tables, layers stored, sampling-head tables (``None`` for a material without a head)).
    """
    element = ELEMENT_BYTES[precision]
    buffer = bytearray()
    stored: dict[tuple[int, int, bytes, bytes], tuple[int, int]] = {}

    def place(layers: list[dict[str, Any]], data: bytes) -> list[dict[str, Any]]:
        table = []
        for layer in layers:
            inputs, outputs = int(layer["inputs"]), int(layer["outputs"])
            weight = data[layer["weight_offset"] : layer["weight_offset"] + inputs * outputs * element]
            bias = data[layer["bias_offset"] : layer["bias_offset"] + outputs * element]
            key = (inputs, outputs, weight, bias)
            if key not in stored:
                weight_offset = _place(buffer, weight, WEIGHT_ALIGNMENT)
                stored[key] = (weight_offset, _place(buffer, bias, BIAS_ALIGNMENT))
            weight_offset, bias_offset = stored[key]
            table.append({"name": layer["name"], "inputs": inputs, "outputs": outputs, "weight_offset": weight_offset, "bias_offset": bias_offset})
        return table

    tables = [place(material.layers, material.weights) for material in materials]
    sampler_tables = [None if m.sampler_layers is None else place(m.sampler_layers, m.sampler_weights) for m in materials]
    buffer.extend(bytes(align(len(buffer), WEIGHT_ALIGNMENT) - len(buffer)))
    return bytes(buffer), tables, len(stored), sampler_tables


def pack_latents(materials: Sequence[ExportMaterial], latent_format: str) -> tuple[bytes, list[list[dict[str, int]]]]:
    """One latent buffer for every material's mip levels. Returns (buffer, per-material tables of level offsets and sizes)."""
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
    buffer.extend(bytes(align(len(buffer), LATENT_ALIGNMENT) - len(buffer)))
    return bytes(buffer), tables

