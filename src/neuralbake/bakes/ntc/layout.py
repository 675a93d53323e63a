"""NTC rate control: the latent grid shapes, the container's exact size, and the pick for a ``--bpp`` budget.

:class:`NTCLayout` is everything about a compressed set except the trained numbers; its byte
count is computed from the same header and sections the container writer emits, so the rate
controller's count is the file's.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from neuralbake.bakes.ntc.texture_set import ChannelGroup
from neuralbake.errors import ConfigError
from neuralbake.nn.activations import DEFAULT_LEAK

__all__ = [
    "BPP_RANGE",
    "CONTAINER_VERSION",
    "LATENT_SHAPES",
    "MAGIC",
    "MAX_HIDDEN_LAYERS",
    "MAX_HIDDEN_WIDTH",
    "MAX_PE_FREQUENCIES",
    "LatentShape",
    "NTCLayout",
    "check_bpp",
    "choose_layout",
]

BPP_RANGE = (0.5, 48.0)
"""Accepted ``--bpp`` values for the whole set (inclusive)."""
MAGIC = b"NBNTC\r\n\x1a"
"""First 8 bytes of a ``texture.ntc`` file (a CR-LF and ^Z catch text-mode mangling, as in PNG)."""
CONTAINER_VERSION = 1
"""Container format version (the header and the prefix carry it)."""
PREFIX = struct.Struct("<8sHI")
"""Magic, version and header length at the start of a ``texture.ntc``."""

MAX_HIDDEN_LAYERS = 16
"""Most hidden layers in the decoder MLP (compress refuses more; decompress refuses a header with more)."""
MAX_HIDDEN_WIDTH = 1024
"""Widest hidden layer of the decoder MLP (same bound on compress and decompress)."""
MAX_PE_FREQUENCIES = 16
"""Most positional-encoding octaves (same bound on compress and decompress)."""


@dataclass(frozen=True)
class LatentShape:
    """Grid resolution, feature count and bit depth of the latents (one entry of the rate table)."""

    high_div: int
    """Texels per high-resolution cell side (at the finer level of each mip pair)."""
    features: int
    """Features per cell, in both grids."""
    bits: int
    """Bits per stored latent feature (2-8)."""

    @property
    def low_div(self) -> int:
        """Texels per low-resolution cell side: twice ``high_div``."""
        return 2 * self.high_div

    @property
    def nominal_bpp(self) -> float:
        """Latent bits per texel of a large texture, mip pairs included (``x 16/15``); no decoder."""
        per_texel = self.features * self.bits * (1.0 / self.high_div**2 + 1.0 / self.low_div**2)
        return per_texel * 16.0 / 15.0

    @property
    def name(self) -> str:
        return f"h{self.high_div}f{self.features}b{self.bits}"


LATENT_SHAPES: tuple[LatentShape, ...] = (
    LatentShape(8, 8, 2),  # 0.33 bpp of latents on a large texture
    LatentShape(8, 8, 4),  # 0.67
    LatentShape(8, 12, 4),  # 1.0
    LatentShape(4, 8, 2),  # 1.33
    LatentShape(4, 10, 2),  # 1.67
    LatentShape(4, 12, 2),  # 2.0
    LatentShape(4, 8, 4),  # 2.67
    LatentShape(4, 10, 4),  # 3.33
    LatentShape(4, 11, 4),  # 3.67: the best of four shapes near 3.7 bpp on DamagedHelmet (f22b2 tied; docs/benchmarks.md)
    LatentShape(4, 12, 4),  # 4.0
    LatentShape(4, 14, 4),  # 4.67
    LatentShape(4, 16, 4),  # 5.33
    LatentShape(4, 20, 4),  # 6.67
    LatentShape(2, 6, 4),  # 8.0
    LatentShape(2, 8, 4),  # 10.67
    LatentShape(2, 12, 4),  # 16.0
    LatentShape(2, 12, 5),  # 20.0
    LatentShape(2, 16, 5),  # 26.67, about the BC1 set's rate (BC1 + BC5 normals, full mip chains)
    LatentShape(2, 16, 6),  # 32.0
    LatentShape(1, 6, 5),  # 40.0: one high-resolution cell per texel
    LatentShape(1, 8, 4),  # 42.67, about the BC7 set's rate
)
"""The rate table, in increasing size, in steps of a third or less from 1 to 8 bpp, so that a
budget is mostly used (4 bpp on DamagedHelmet: 3.69 bpp, where the old table's gap left 2.69). ``--bpp`` takes the last entry whose whole file fits; on
small textures the decoder's weights take a large share, so the entry chosen is lower than the
nominal latent rate suggests (the report gives both)."""


@dataclass(frozen=True)
class NTCLayout:
    """Everything about a compressed set except the trained numbers: sizes, groups, grids, decoder shape."""

    width: int
    height: int
    groups: tuple[ChannelGroup, ...]
    shape: LatentShape
    hidden: tuple[int, ...] = (64, 48, 32)
    pe_frequencies: int = 3
    activation: str = "leaky_relu"
    leak: float = DEFAULT_LEAK

    @property
    def channels(self) -> int:
        return sum(len(g.channels) for g in self.groups)

    @property
    def level_sizes(self) -> list[tuple[int, int]]:
        """``(width, height)`` of every mip level, 0 to 1x1."""
        sizes = [(self.width, self.height)]
        while max(sizes[-1]) > 1:
            w, h = sizes[-1]
            sizes.append((max(1, w // 2), max(1, h // 2)))
        return sizes

    @property
    def levels(self) -> int:
        return len(self.level_sizes)

    def _grid_dims(self, div: int) -> list[tuple[int, int]]:
        sizes = self.level_sizes
        return [(max(1, sizes[g][0] // div), max(1, sizes[g][1] // div)) for g in range(0, self.levels, 2)]

    @property
    def high_dims(self) -> list[tuple[int, int]]:
        """``(width, height)`` in cells of each mip pair's high-resolution grid."""
        return self._grid_dims(self.shape.high_div)

    @property
    def low_dims(self) -> list[tuple[int, int]]:
        """``(width, height)`` in cells of each mip pair's low-resolution grid."""
        return self._grid_dims(self.shape.low_div)

    @property
    def mlp_inputs(self) -> int:
        return 5 * self.shape.features + 4 * self.pe_frequencies + 1

    @property
    def layer_widths(self) -> list[int]:
        return [self.mlp_inputs, *self.hidden, self.channels]

    def header(self) -> dict[str, Any]:
        return {
            "format": "neuralbake.ntc",
            "version": CONTAINER_VERSION,
            "width": self.width,
            "height": self.height,
            "groups": [{"name": g.name, "channels": list(g.channels), "kind": g.kind} for g in self.groups],
            "latents": {"high_div": self.shape.high_div, "features": self.shape.features, "bits": self.shape.bits, "range": [-1, 1]},
            "decoder": {"hidden": list(self.hidden), "pe_frequencies": self.pe_frequencies, "activation": self.activation, "leak": self.leak},
            "weights": "int8, per-layer float32 scale; float32 biases",
        }

    def header_bytes(self) -> bytes:
        return json.dumps(self.header(), separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> NTCLayout:
        latents, decoder = header["latents"], header["decoder"]
        return cls(
            width=int(header["width"]),
            height=int(header["height"]),
            groups=tuple(ChannelGroup(g["name"], tuple(g["channels"]), g["kind"]) for g in header["groups"]),
            shape=LatentShape(int(latents["high_div"]), int(latents["features"]), int(latents["bits"])),
            hidden=tuple(int(h) for h in decoder["hidden"]),
            pe_frequencies=int(decoder["pe_frequencies"]),
            activation=str(decoder["activation"]),
            leak=float(decoder["leak"]),
        )

    def latent_cells(self) -> tuple[int, int]:
        """Cells in all high-resolution grids, and in all low-resolution grids."""
        return sum(w * h for w, h in self.high_dims), sum(w * h for w, h in self.low_dims)

    def section_bytes(self) -> dict[str, int]:
        """Bytes of each part of the container file."""
        high, low = self.latent_cells()
        features, bits = self.shape.features, self.shape.bits
        widths = self.layer_widths
        weights = sum(a * b for a, b in itertools.pairwise(widths))
        layers = len(widths) - 1
        return {
            "prefix": PREFIX.size,
            "header": len(self.header_bytes()),
            "latents_high": math.ceil(high * features * bits / 8),
            "latents_low": math.ceil(low * features * bits / 8),
            "weights_int8": weights,
            "weight_scales": 4 * layers,
            "biases_fp32": 4 * sum(widths[1:]),
        }

    def file_bytes(self) -> int:
        return sum(self.section_bytes().values())

    def bpp(self) -> float:
        """Bits per texel of mip 0 for the whole file (every mip level is inside it)."""
        return 8.0 * self.file_bytes() / (self.width * self.height)


def choose_layout(
    width: int,
    height: int,
    groups: Sequence[ChannelGroup],
    bpp: float,
    *,
    hidden: Sequence[int] = (64, 48, 32),
    pe_frequencies: int = 3,
) -> NTCLayout:
    """The richest rate-table entry whose whole container fits ``bpp`` bits per texel of mip 0."""
    check_bpp(bpp)
    layouts = [NTCLayout(width, height, tuple(groups), shape, tuple(hidden), pe_frequencies) for shape in LATENT_SHAPES]
    fitting = [layout for layout in layouts if layout.bpp() <= bpp + 1e-9]
    if not fitting:
        smallest = min(layouts, key=NTCLayout.bpp)
        section = smallest.section_bytes()
        decoder_bpp = 8.0 * (section["weights_int8"] + section["weight_scales"] + section["biases_fp32"]) / (width * height)
        raise ConfigError(
            f"{bpp:g} bpp is below the smallest file for this {width}x{height} set ({smallest.bpp():.2f} bpp; "
            f"the decoder's weights alone take {decoder_bpp:.2f} bpp at this size).",
            field="bpp",
            fix="raise --bpp, compress larger textures, or use a smaller decoder (--hidden).",
        )
    return max(fitting, key=NTCLayout.bpp)


def check_bpp(bpp: float) -> None:
    if not (isinstance(bpp, (int, float)) and math.isfinite(bpp) and BPP_RANGE[0] <= bpp <= BPP_RANGE[1]):
        raise ConfigError(
            f"{bpp!r} bits per pixel is out of range.", field="bpp", fix=f"use {BPP_RANGE[0]:g} to {BPP_RANGE[1]:g} bpp for the whole set."
        )

