"""Shader export of an NTC texture set: decode any texel, and filtered samples, where the texture is sampled.

A set compressed by ``neuralbake ntc compress`` is bit-packed latent grids plus a small int8 decoder
(:mod:`neuralbake.bakes.ntc`). This module turns one into a Slang module and an HLSL file that decode
it on the GPU, the two buffers they bind, and ``<name>.json``, a manifest telling an engine how to
bind and dispatch them. It takes the set as plain data (:class:`NTCShaderSet`; the NTC bake builds
one from its container, :mod:`neuralbake.bakes.ntc.export`), since ``export`` sits below ``bakes``.

Buffers (both ``ByteAddressBuffer``, little-endian; their byte counts are in the manifest):

- ``ntc_<name>_latents`` (``<name>.latents.bin``): the container's two latent code streams, copied
  unchanged: every mip pair's high-resolution grid one after another (row-major cells, each cell's
  ``features`` codes together), then at the next 16-byte boundary the low-resolution grids. Code
  ``i`` of a stream (``i = cell * features + f``) takes bits ``i * bits`` to ``(i + 1) * bits - 1``,
  least significant first (:func:`neuralbake.nn.quantize.pack_codes`); its value is
  ``code * 2 / (2^bits - 1) - 1``. Cell ``(x, y)`` of pair ``p``'s grid is cell ``offset[p] + y *
  width[p] + x``; offsets and sizes are compiled in and listed in the manifest. So the latents take
  on the GPU what they take in the file (plus at most 30 bytes of alignment).
- ``ntc_<name>_weights`` (``<name>.weights.int8.bin``): the decoder in the int8 device layout of
  :mod:`neuralbake.io.device_layout` (per layer the int8 codes row-major, fp32 biases, then the
  layer's fp32 scale): the container's own bytes, aligned.

What the code computes (:mod:`neuralbake.export.ntc_codegen` lists every function) is the PyTorch
decode of :mod:`neuralbake.bakes.ntc.decode`: texels, bilinear and trilinear filtering of decoded
texels (repeat wrap) and stochastic filtering. The Slang module also has a tensor-core batch kernel
(:mod:`neuralbake.export.ntc_tensor`).

Hand-written, as the neural material export is: no tool emits shader code for this latent layout and
decoder; the buffers are the container's bytes, so nothing is re-encoded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from neuralbake.errors import ConfigError
from neuralbake.export.ntc_codegen import FILTER_MODES, SAMPLE_FLOATS, TEXEL_UINTS, generate_ntc_shader, group_fields
from neuralbake.export.ntc_tensor import tensor_kernel_entries
from neuralbake.export.slang import SHADER_ACTIVATIONS, THREADS_PER_GROUP
from neuralbake.io.device_layout import INT8, LayerTensors, align, pack_device_layout
from neuralbake.io.files import atomic_write_bytes, atomic_write_json, atomic_write_text, prepare_output_dir, sha256_file
from neuralbake.nn.quantize import pack_codes

__all__ = ["SHADER_FORMAT", "NTCGroup", "NTCShaderExport", "NTCShaderSet", "export_ntc_shader", "pack_latent_buffer", "shader_identifier"]

SHADER_FORMAT = "neuralbake.ntc_shader"
SHADER_FORMAT_VERSION = 1
STREAM_ALIGNMENT = 16
"""Byte alignment of the low-resolution stream in the latent buffer (and of the buffer's end)."""
MAX_STREAM_BITS = 1 << 32
"""The shader addresses latent bits with 32-bit integers."""
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]{0,47}")


@dataclass(frozen=True)
class NTCGroup:
    """One channel group of the set (a texture: base colour, normal XY, ...)."""

    name: str
    channels: tuple[str, ...]
    kind: str
    """``color``, ``normal_xy`` (X and Y stored as ``0.5 + 0.5 n``) or ``data``."""


@dataclass(frozen=True)
class NTCShaderSet:
    """A compressed NTC set as plain data: sizes, grids, latent codes and the int8 decoder."""

    groups: tuple[NTCGroup, ...]
    level_sizes: tuple[tuple[int, int], ...]
    """``(width, height)`` of every mip level, 0 to 1x1."""
    high_dims: tuple[tuple[int, int], ...]
    """``(width, height)`` in cells of each mip pair's high-resolution grid (pair ``p`` serves levels ``2p`` and ``2p + 1``)."""
    low_dims: tuple[tuple[int, int], ...]
    """The same for the low-resolution grids."""
    features: int
    bits: int
    high_codes: np.ndarray
    """Integer codes ``[high cells, features]``, every pair's grid row-major, one after another."""
    low_codes: np.ndarray
    """The same for the low-resolution grids."""
    pe_frequencies: int
    activation: str
    leak: float
    layers: tuple[LayerTensors, ...]
    """The decoder: int8 codes ``[outputs, inputs]`` with their ``scale``, fp32 biases."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """What the manifest says about where the set came from (folder, container bytes and sha256, latent shape)."""

    @property
    def channels(self) -> int:
        return sum(len(group.channels) for group in self.groups)

    @property
    def inputs(self) -> int:
        """Decoder inputs: four high-resolution cells, the low-resolution sample, the encoded position, the level in the pair."""
        return 5 * self.features + 4 * self.pe_frequencies + 1

    def cell_offsets(self, dims: tuple[tuple[int, int], ...]) -> list[int]:
        """First cell of each pair's grid in its stream."""
        return [0, *np.cumsum([w * h for w, h in dims])[:-1].tolist()]


@dataclass(frozen=True)
class NTCShaderExport:
    """The files :func:`export_ntc_shader` wrote."""

    slang: Path
    hlsl: Path
    weights: Path
    latents: Path
    manifest: Path
    name: str
    """The set's shader name: every function, binding and constant starts with ``ntc_<name>_`` / ``NTC_<NAME>_``."""


def shader_identifier(text: str) -> str:
    """A shader name from any text (a folder name): lower case, runs of other characters as ``_``, starting with a letter."""
    name = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "set"
    return name if name[0].isalpha() else f"t_{name}"


def _check(data: NTCShaderSet, name: str) -> None:
    if not _IDENTIFIER.fullmatch(name):
        raise ConfigError(
            f"{name!r} is not a usable shader name.",
            field="name",
            fix="use lower-case letters, digits and underscores, starting with a letter.",
        )
    if data.activation not in SHADER_ACTIVATIONS:
        raise ConfigError(
            f"the decoder's activation {data.activation!r} has no shader form.",
            field="activation",
            fix=f"use one of {sorted(SHADER_ACTIVATIONS)}.",
        )
    if data.pe_frequencies < 1:
        raise ConfigError(
            "the decoder has no positional encoding (0 frequencies); the NTC decode needs at least one.",
            field="pe_frequencies",
            fix="compress again.",
        )
    pairs = (len(data.level_sizes) + 1) // 2
    for label, dims, codes in (("high", data.high_dims, data.high_codes), ("low", data.low_dims, data.low_codes)):
        cells = sum(w * h for w, h in dims)
        if len(dims) != pairs or codes.shape != (cells, data.features):
            raise ConfigError(
                f"the {label}-resolution codes are {codes.shape}, the grids need ({cells}, {data.features}).",
                field=f"{label}_codes",
                fix="pass the codes of every pair's grid.",
            )
        if codes.size and (codes.min() < 0 or codes.max() >= 1 << data.bits):
            raise ConfigError(
                f"the {label}-resolution codes do not fit {data.bits} bits.", field=f"{label}_codes", fix="pass the container's codes."
            )
        if codes.size * data.bits >= MAX_STREAM_BITS:
            raise ConfigError(
                f"the {label}-resolution latents take {codes.size * data.bits / 8 / 2**20:.0f} MiB, past the shader's 32-bit bit addresses.",
                field=f"{label}_codes",
                fix="compress a smaller set or at a lower rate.",
            )
    widths = [data.inputs] + [int(layer.weight.shape[0]) for layer in data.layers]
    if int(data.layers[0].weight.shape[1]) != data.inputs or widths[-1] != data.channels:
        raise ConfigError(
            f"the decoder maps {int(data.layers[0].weight.shape[1])} inputs to {widths[-1]}; the set needs {data.inputs} to {data.channels}.",
            field="layers",
            fix="pass the container's decoder.",
        )
    group_fields([group.name for group in data.groups])  # field names must come out distinct


def pack_latent_buffer(data: NTCShaderSet) -> tuple[bytes, dict[str, int]]:
    """The latent buffer (module docstring) and its stream offsets and byte counts: ``high_offset``, ``high_bytes``, ``low_offset``, ``low_bytes``."""
    high = pack_codes(data.high_codes, data.bits)
    low = pack_codes(data.low_codes, data.bits)
    low_offset = align(len(high), STREAM_ALIGNMENT)
    buffer = bytearray(align(low_offset + len(low), STREAM_ALIGNMENT))
    buffer[: len(high)] = high
    buffer[low_offset : low_offset + len(low)] = low
    return bytes(buffer), {"high_offset": 0, "high_bytes": len(high), "low_offset": low_offset, "low_bytes": len(low)}


def _grids(data: NTCShaderSet, dims: tuple[tuple[int, int], ...]) -> list[dict[str, Any]]:
    offsets = data.cell_offsets(dims)
    last = len(data.level_sizes) - 1
    return [
        {"pair": p, "levels": [2 * p, min(2 * p + 1, last)], "width": w, "height": h, "cell_offset": int(offsets[p])}
        for p, (w, h) in enumerate(dims)
    ]


def _manifest(
    written: NTCShaderExport,
    data: NTCShaderSet,
    streams: dict[str, int],
    layer_table: list[dict[str, Any]],
    measurements: Mapping[str, Any],
) -> dict[str, Any]:
    n = written.name
    width, height = data.level_sizes[0]
    files = {
        key: {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
        for key, path in (("slang", written.slang), ("hlsl", written.hlsl), ("weights", written.weights), ("latents", written.latents))
    }
    gpu = files["weights"]["bytes"] + files["latents"]["bytes"]
    fields = group_fields([group.name for group in data.groups])
    groups, offset = [], 0
    for group, field_name in zip(data.groups, fields, strict=True):
        count = len(group.channels)
        groups.append(
            {
                "name": group.name,
                "field": field_name,
                "type": "float" if count == 1 else f"float{count}",
                "kind": group.kind,
                "channels": list(group.channels),
                "offset": offset,
            }
        )
        offset += count
    return {
        "format": SHADER_FORMAT,
        "format_version": SHADER_FORMAT_VERSION,
        "name": n,
        "source": dict(data.info),
        "files": files,
        "gpu_bytes": {
            "weights": files["weights"]["bytes"],
            "latents": files["latents"]["bytes"],
            "total": gpu,
            "bpp": round(8.0 * gpu / (width * height), 4),
            "counts": "the two buffers an engine uploads, alignment included; bpp is their bits per texel of mip 0 (every mip level is in them)",
        },
        "set": {
            "width": width,
            "height": height,
            "levels": [list(size) for size in data.level_sizes],
            "channels": data.channels,
            "groups": groups,
            "struct": f"ntc_{n}_channels",
            "normal_xy": "X and Y stored as 0.5 + 0.5 n, decoded values in [0, 1]; ntc_<name>_unpack_normal gives the unit normal",
        },
        "bindings": {
            f"ntc_{n}_weights": {"type": "ByteAddressBuffer", "file": files["weights"]["file"], "bytes": files["weights"]["bytes"]},
            f"ntc_{n}_latents": {"type": "ByteAddressBuffer", "file": files["latents"]["file"], "bytes": files["latents"]["bytes"]},
            f"ntc_{n}_texel_queries": {
                "type": "StructuredBuffer<uint>",
                "per_query": TEXEL_UINTS,
                "layout": "level, x, y",
                "used_by": ["texel kernels"],
            },
            f"ntc_{n}_sample_queries": {
                "type": "StructuredBuffer<float>",
                "per_query": SAMPLE_FLOATS,
                "layout": "u, v, lod, random (stochastic: uniform in [0, 1))",
                "used_by": ["sample kernels"],
            },
            f"ntc_{n}_values": {
                "type": "RWStructuredBuffer<float>",
                "per_query": data.channels,
                "layout": "every channel of the set in group order (set.groups[].offset)",
            },
            f"ntc_{n}_constants": {
                "type": "cbuffer",
                "fields": {f"ntc_{n}_count": "uint: queries", f"ntc_{n}_filter": f"uint: sample kernels' filter, {FILTER_MODES}"},
            },
        },
        "entry_points": [
            {
                "name": f"ntc_{n}_texel_kernel",
                "kind": "scalar",
                "languages": ["slang", "hlsl"],
                "threads_per_group": [THREADS_PER_GROUP, 1, 1],
                "dispatch": f"ceil(count / {THREADS_PER_GROUP}) groups, one thread per texel",
                "reads": f"ntc_{n}_texel_queries",
                "writes": f"ntc_{n}_values",
            },
            {
                "name": f"ntc_{n}_sample_kernel",
                "kind": "scalar",
                "languages": ["slang", "hlsl"],
                "threads_per_group": [THREADS_PER_GROUP, 1, 1],
                "dispatch": f"ceil(count / {THREADS_PER_GROUP}) groups, one thread per sample",
                "reads": f"ntc_{n}_sample_queries",
                "writes": f"ntc_{n}_values",
            },
            *tensor_kernel_entries(n, layer_table),
        ],
        "functions": {
            "texel": f"ntc_{n}_channels ntc_{n}_texel(uint level, uint x, uint y)",
            "sample": f"ntc_{n}_channels ntc_{n}_sample(float2 uv, float lod)",
            "sample_bilinear": f"ntc_{n}_channels ntc_{n}_sample_bilinear(float2 uv, float lod)",
            "sample_stochastic": f"ntc_{n}_channels ntc_{n}_sample_stochastic(float2 uv, float lod, float random)",
            "lod": f"float ntc_{n}_lod(float2 duv_dx, float2 duv_dy)",
            "arrays": f"ntc_{n}_texel_values, ntc_{n}_sample_values, ntc_{n}_sample_bilinear_values, ntc_{n}_sample_stochastic_values: the same into float[{data.channels}]",
        },
        "filtering": {
            "wrap": "repeat (every level)",
            "texel_centres": "(i + 0.5) / size",
            "bilinear": "the 4 decoded texels around uv in the level nearest lod (floor(lod + 0.5), clamped to the chain), blended",
            "trilinear": "bilinear in the levels floor(lod) and floor(lod) + 1 (lod clamped to [0, levels - 1]), blended by the fraction: 8 decodes, 4 at a whole lod",
            "stochastic": "one of the trilinear filter's texels, tap i chosen with probability weight[i] by the caller's uniform random number (first i with random < weight[0] + ... + weight[i]): one decode per sample; unbiased, noisy (see stochastic)",
            "lod": "log2 of the longer uv derivative in texels of level 0 (ntc_<name>_lod)",
            "decoded_values": "each texel's decoder outputs clamped to [0, 1] before blending",
        },
        "latents": {
            "features": data.features,
            "bits": data.bits,
            "value": f"code * 2 / {2**data.bits - 1} - 1",
            "layout": "bit-packed codes, code i (= cell * features + f) at bits i * bits ... (i + 1) * bits - 1 of its stream, least significant first; cells row-major per grid",
            "high": {"offset": streams["high_offset"], "bytes": streams["high_bytes"], "grids": _grids(data, data.high_dims)},
            "low": {"offset": streams["low_offset"], "bytes": streams["low_bytes"], "grids": _grids(data, data.low_dims)},
        },
        "decoder": {
            "widths": [data.inputs] + [int(layer.weight.shape[0]) for layer in data.layers],
            "inputs": f"4 high-resolution cells x {data.features}, the low-resolution bilinear sample ({data.features}), sin/cos of the position in the high cell ({4 * data.pe_frequencies}), the level within the pair (1)",
            "activation": data.activation,
            "leak": data.leak,
            "output": "linear, clamped to [0, 1]",
            "layout": "int8 device layout: per layer int8 codes [outputs, inputs] row-major (64-byte aligned), fp32 biases (16-byte aligned), then the fp32 scale; weight = code * scale",
            "layers": layer_table,
            "arithmetic": "scalar kernels: fp32 (scale * sum(code * input) + bias); tensor kernels: fp16 weights and activations, fp32 sums",
        },
        **({"stochastic": dict(measurements["stochastic"])} if "stochastic" in measurements else {}),
    }


def export_ntc_shader(
    data: NTCShaderSet, out_dir: str | Path, *, name: str, measurements: Mapping[str, Any] | None = None
) -> NTCShaderExport:
    """Write ``<name>.slang``, ``<name>.hlsl``, ``<name>.weights.int8.bin``, ``<name>.latents.bin`` and ``<name>.json`` into ``out_dir``.

    Parameters
    ----------
    data:
        The set (:class:`NTCShaderSet`).
    out_dir:
        Output folder (created).
    name:
        Shader name (``[a-z][a-z0-9_]*``): the functions are ``ntc_<name>_texel``, ``ntc_<name>_sample`` ...
    measurements:
        Figures measured by the caller that the manifest carries (``stochastic``: the stochastic filter's bias and noise).

    Raises
    ------
    ConfigError
        On a bad name, or a set the shader cannot decode (names the field).
    """
    _check(data, name)
    weights, layer_table = pack_device_layout(list(data.layers), INT8)
    latents, streams = pack_latent_buffer(data)
    sources = {language: generate_ntc_shader(language, data, name, layer_table, streams) for language in ("slang", "hlsl")}
    out = prepare_output_dir(out_dir)
    written = NTCShaderExport(
        slang=out / f"{name}.slang",
        hlsl=out / f"{name}.hlsl",
        weights=out / f"{name}.weights.int8.bin",
        latents=out / f"{name}.latents.bin",
        manifest=out / f"{name}.json",
        name=name,
    )
    atomic_write_bytes(written.weights, weights)
    atomic_write_bytes(written.latents, latents)
    atomic_write_text(written.slang, sources["slang"])
    atomic_write_text(written.hlsl, sources["hlsl"])
    atomic_write_json(written.manifest, _manifest(written, data, streams, layer_table, measurements or {}))
    return written
