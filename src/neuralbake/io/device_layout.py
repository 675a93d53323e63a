"""The device layout of a network: every linear layer's weight matrix and bias packed into one
contiguous little-endian buffer that a shader binds as a ``ByteAddressBuffer`` /
``StructuredBuffer``, and back.

Format version 1, the analog of RTX Neural Shaders' host vs device-optimal layout: layers follow
each other in network order; each layer stores its weight matrix row-major (``[outputs,
inputs]``, element ``(o, i)`` at ``weight_offset + (o * inputs + i) * elem_size``), then its bias
vector. Every weight matrix starts on a :data:`WEIGHT_ALIGNMENT` (64-byte) boundary and every
bias vector on a :data:`BIAS_ALIGNMENT` (16-byte) boundary (the alignments cooperative-vector
matrix loads and 16-byte vector loads want); the gaps are zero. Offsets are in bytes from the
start of the buffer. Bundles (:mod:`neuralbake.io.bundle`) store one such buffer per precision.

Precision ``int8`` (:data:`INT8`; not a bundle precision, used by exports of int8-trained networks
such as NTC decoders) stores each weight matrix as signed bytes ``codes`` (same row-major order)
with one float32 ``scale`` per layer, ``weight = codes * scale``: the bias vector (float32, at a
16-byte boundary) is followed directly by the scale at ``scale_offset``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from neuralbake.errors import BundleError

__all__ = ["BIAS_ALIGNMENT", "DEVICE_DTYPES", "INT8", "WEIGHT_ALIGNMENT", "LayerTensors", "align", "pack_device_layout", "unpack_device_layout"]

WEIGHT_ALIGNMENT = 64
"""Byte alignment of every weight matrix in the device layout."""
BIAS_ALIGNMENT = 16
"""Byte alignment of every bias vector in the device layout."""

DEVICE_DTYPES = {"fp16": (torch.float16, np.dtype("<f2")), "fp32": (torch.float32, np.dtype("<f4"))}
"""Device-layout precision -> (torch dtype, little-endian numpy dtype) of its elements."""
INT8 = "int8"
"""The int8 device layout's precision name: signed byte weights, a float32 scale per layer, float32 biases."""


@dataclass(frozen=True)
class LayerTensors:
    """One linear layer as it goes into the device layout."""

    name: str
    """Layer name, e.g. ``layers.0``."""
    weight: torch.Tensor
    """Weight matrix, shape ``[outputs, inputs]``."""
    bias: torch.Tensor
    """Bias vector, shape ``[outputs]``."""
    scale: float | None = None
    """int8 layouts only: the weight matrix holds integer codes in [-127, 127] and ``weight = codes * scale``."""


def align(offset: int, alignment: int) -> int:
    """``offset`` rounded up to a multiple of ``alignment`` (bytes)."""
    return (offset + alignment - 1) // alignment * alignment


def pack_device_layout(layers: Sequence[LayerTensors], precision: str) -> tuple[bytes, list[dict[str, Any]]]:
    """Pack layers into one contiguous buffer (see the module docstring for the layout).

    ``precision``: ``fp16``, ``fp32`` or ``int8`` (every layer then carries its ``scale`` and integer codes as its weight).

    Returns
    -------
    buffer, layer_table
        The bytes, and per layer ``name``, ``inputs``, ``outputs``, ``weight_offset``,
        ``bias_offset`` (bytes), and for int8 ``scale_offset``.
    """
    if precision not in DEVICE_DTYPES and precision != INT8:
        raise ValueError(f"precision must be one of {sorted([*DEVICE_DTYPES, INT8])}, got {precision!r}")
    table: list[dict[str, Any]] = []
    chunks: list[tuple[int, bytes]] = []
    offset = 0
    for layer in layers:
        outputs, inputs = layer.weight.shape
        if layer.bias.shape != (outputs,):
            raise ValueError(f"layer {layer.name}: bias shape {tuple(layer.bias.shape)} does not match {outputs} outputs")
        weight_offset = align(offset, WEIGHT_ALIGNMENT)
        if precision == INT8:
            weight_bytes, bias_bytes = _int8_layer_bytes(layer)
        else:
            torch_dtype, np_dtype = DEVICE_DTYPES[precision]
            weight_bytes = layer.weight.detach().to("cpu", torch_dtype).contiguous().numpy().astype(np_dtype).tobytes()
            bias_bytes = layer.bias.detach().to("cpu", torch_dtype).contiguous().numpy().astype(np_dtype).tobytes()
        bias_offset = align(weight_offset + len(weight_bytes), BIAS_ALIGNMENT)
        chunks += [(weight_offset, weight_bytes), (bias_offset, bias_bytes)]
        offset = bias_offset + len(bias_bytes)
        entry = {"name": layer.name, "inputs": int(inputs), "outputs": int(outputs), "weight_offset": weight_offset, "bias_offset": bias_offset}
        if precision == INT8:
            entry["scale_offset"] = bias_offset + 4 * int(outputs)  # the scale follows the biases
        table.append(entry)
    buffer = bytearray(align(offset, WEIGHT_ALIGNMENT))
    for start, data in chunks:
        buffer[start : start + len(data)] = data
    return bytes(buffer), table


def _int8_layer_bytes(layer: LayerTensors) -> tuple[bytes, bytes]:
    """The int8 codes of ``layer``, and its float32 biases followed by its float32 scale."""
    if layer.scale is None:
        raise ValueError(f"layer {layer.name}: an int8 layout needs the layer's scale")
    codes = layer.weight.detach().to("cpu")
    if (codes.is_floating_point() and not torch.equal(codes, codes.round())) or codes.abs().max() > 127:
        raise ValueError(f"layer {layer.name}: int8 weights must be integer codes in [-127, 127]")
    weight_bytes = codes.to(torch.int8).contiguous().numpy().tobytes()
    bias_bytes = layer.bias.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4").tobytes() + np.float32(layer.scale).astype("<f4").tobytes()
    return weight_bytes, bias_bytes


def unpack_device_layout(buffer: bytes, layer_table: Sequence[Mapping[str, Any]], precision: str) -> list[LayerTensors]:
    """Inverse of :func:`pack_device_layout`; returns fp32 tensors (int8: the dequantised weights ``codes * scale``, and the scale)."""
    int8 = precision == INT8
    np_dtype = np.dtype("i1") if int8 else DEVICE_DTYPES[precision][1]
    bias_dtype = np.dtype("<f4") if int8 else np_dtype
    layers = []
    for entry in layer_table:
        outputs, inputs = int(entry["outputs"]), int(entry["inputs"])
        weight_end = entry["weight_offset"] + outputs * inputs * np_dtype.itemsize
        bias_end = entry["bias_offset"] + outputs * bias_dtype.itemsize + (4 if int8 else 0)
        if max(weight_end, bias_end) > len(buffer):
            raise BundleError(
                f"the device buffer ends at byte {len(buffer)} but layer {entry['name']} needs {max(weight_end, bias_end)}.",
                field=entry["name"],
                fix="re-export the bundle; the file is truncated.",
            )
        weight = np.frombuffer(buffer, dtype=np_dtype, count=outputs * inputs, offset=entry["weight_offset"]).astype(np.float32)
        bias = np.frombuffer(buffer, dtype=bias_dtype, count=outputs, offset=entry["bias_offset"])
        scale = float(np.frombuffer(buffer, dtype="<f4", count=1, offset=entry["scale_offset"])[0]) if int8 else None
        layers.append(
            LayerTensors(
                name=entry["name"],
                weight=torch.from_numpy(weight.reshape(outputs, inputs) * np.float32(scale if int8 else 1.0)),
                bias=torch.from_numpy(bias.astype(np.float32)),
                scale=scale,
            )
        )
    return layers
