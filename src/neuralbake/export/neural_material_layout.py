"""Buffer layouts of an exported neural material shader: the shared weight buffer and the latent buffer.

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

from neuralbake.io.device_layout import BIAS_ALIGNMENT, WEIGHT_ALIGNMENT, align

__all__ = ["ELEMENT_BYTES", "LATENT_ALIGNMENT", "ExportMaterial", "LatentBufferLevel", "pack_latents", "pack_weights"]

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

