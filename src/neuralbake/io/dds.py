"""DDS files of block-compressed (BCn) textures with every mip level: what an engine loads at startup.

The header is written here, from Microsoft's documented layout (``DDS_HEADER``, ``DDS_PIXELFORMAT``
and ``DDS_HEADER_DXT10``, "Programming Guide for DDS" in the Direct3D 11 documentation), because no
maintained Python library writes what an engine needs: Pillow's DDS writer (13.0) stores one level
only, writes BC5/BC3 as ``*_TYPELESS`` and has no BC4, BC7 or sRGB formats; ``pyktx`` 4.4.2 (KTX2)
is a source distribution on PyPI that builds only against an installed KTX-Software C library
(``pip`` cannot build it on a plain machine), and etcpak and texture2ddecoder handle blocks only.
Every file carries the DX10 extension header, so the format (``DXGI_FORMAT``) is explicit,
including the sRGB variants of BC1, BC3 and BC7 that tell the sampler to convert colour to linear.

Layout written (all little-endian ``uint32``): ``"DDS "``, the 124-byte ``DDS_HEADER`` (flags
``CAPS | HEIGHT | WIDTH | PIXELFORMAT | MIPMAPCOUNT | LINEARSIZE``, the size of level 0's blocks as
the linear size, ``DDSCAPS_TEXTURE`` plus ``COMPLEX | MIPMAP`` when there is more than one level,
a pixel format of ``DDPF_FOURCC`` with ``"DX10"``), the 20-byte ``DDS_HEADER_DXT10`` (the DXGI
format, ``D3D10_RESOURCE_DIMENSION_TEXTURE2D``, array size 1, alpha mode) and then the levels'
blocks from the largest to 1x1, each level's 4x4 blocks row by row (a level smaller than 4 texels
a side still takes one whole block per side, as GPUs store it).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.io.files import atomic_write_bytes

__all__ = ["DDS_FORMATS", "DdsFormat", "DdsInfo", "dds_bytes", "mip_sizes", "read_dds_info", "write_dds"]

MAGIC = b"DDS "
HEADER_SIZE = 124
PIXEL_FORMAT_SIZE = 32
DX10_SIZE = 20

DDSD_CAPS, DDSD_HEIGHT, DDSD_WIDTH, DDSD_PIXELFORMAT = 0x1, 0x2, 0x4, 0x1000
DDSD_MIPMAPCOUNT, DDSD_LINEARSIZE = 0x20000, 0x80000
DDPF_FOURCC = 0x4
DDSCAPS_COMPLEX, DDSCAPS_TEXTURE, DDSCAPS_MIPMAP = 0x8, 0x1000, 0x400000
RESOURCE_DIMENSION_TEXTURE2D = 3
ALPHA_MODE_UNKNOWN, ALPHA_MODE_STRAIGHT, ALPHA_MODE_OPAQUE = 0, 1, 3
_NO_ALPHA_CHANNEL = ("bc4", "bc5")


@dataclass(frozen=True)
class DdsFormat:
    """One BCn format: its bytes per 4x4 block and its ``DXGI_FORMAT`` values (linear, sRGB if the format has one)."""

    block_bytes: int
    dxgi_linear: int
    dxgi_srgb: int | None


DDS_FORMATS = {
    "bc1": DdsFormat(8, 71, 72),  # DXGI_FORMAT_BC1_UNORM, _UNORM_SRGB
    "bc3": DdsFormat(16, 77, 78),  # DXGI_FORMAT_BC3_UNORM, _UNORM_SRGB
    "bc4": DdsFormat(8, 80, None),  # DXGI_FORMAT_BC4_UNORM
    "bc5": DdsFormat(16, 83, None),  # DXGI_FORMAT_BC5_UNORM
    "bc7": DdsFormat(16, 98, 99),  # DXGI_FORMAT_BC7_UNORM, _UNORM_SRGB
}
"""The block-compressed formats written, by name."""
_BY_DXGI = {dxgi: (name, dxgi == fmt.dxgi_srgb) for name, fmt in DDS_FORMATS.items() for dxgi in (fmt.dxgi_linear, fmt.dxgi_srgb) if dxgi is not None}


def mip_sizes(width: int, height: int) -> list[tuple[int, int]]:
    """``(width, height)`` of every level of a full chain, halving (rounding down, at least 1) down to 1x1."""
    sizes = [(width, height)]
    while sizes[-1] != (1, 1):
        w, h = sizes[-1]
        sizes.append((max(1, w // 2), max(1, h // 2)))
    return sizes


def _level_bytes(width: int, height: int, fmt: DdsFormat) -> int:
    return max(1, (width + 3) // 4) * max(1, (height + 3) // 4) * fmt.block_bytes


def _format(name: str) -> DdsFormat:
    if name not in DDS_FORMATS:
        raise ConfigError(f"unknown block-compression format {name!r}.", field="format", fix=f"use one of {', '.join(DDS_FORMATS)}.")
    return DDS_FORMATS[name]


def dds_bytes(width: int, height: int, fmt: str, levels: Sequence[bytes], *, srgb: bool = False, alpha: bool = False) -> bytes:
    """The bytes of a DDS file holding ``levels`` (the blocks of mip 0, 1, ... in order) of a ``width x height`` texture.

    ``srgb`` picks the ``*_UNORM_SRGB`` format (colour stored sRGB-encoded; only bc1, bc3 and bc7
    have one); ``alpha`` marks the fourth channel as straight alpha, otherwise a format with an
    alpha channel is declared opaque (bc4 and bc5 have none: alpha mode unknown, as DirectXTex
    writes them). Each level must hold exactly its block count, and the levels must be a
    prefix of the full chain (:func:`mip_sizes`), so a reader computes the same offsets.
    """
    spec = _format(fmt)
    if alpha and fmt not in ("bc3", "bc7"):
        raise ConfigError(f"{fmt} stores no alpha here.", field="format", fix="store a texture with alpha as bc3 or bc7.")
    if srgb and spec.dxgi_srgb is None:
        raise ConfigError(f"{fmt} has no sRGB variant.", field="format", fix="store colour textures as bc1, bc3 or bc7.")
    if not 1 <= width <= 1 << 16 or not 1 <= height <= 1 << 16:
        raise InputError(f"{width}x{height} is not a texture size DDS can hold.", field="size", fix="use sides from 1 to 65536.")
    chain = mip_sizes(width, height)
    if not 1 <= len(levels) <= len(chain):
        raise InputError(f"{len(levels)} levels given; a {width}x{height} texture has 1 to {len(chain)}.", field="levels", fix="pass its mip chain.")
    for index, (data, (w, h)) in enumerate(zip(levels, chain)):
        expected = _level_bytes(w, h, spec)
        if len(data) != expected:
            raise InputError(f"level {index} ({w}x{h}) holds {len(data)} bytes; {fmt} stores {expected}.", field=f"levels[{index}]", fix="pass the level's blocks.")
    mips = len(levels)
    flags = DDSD_CAPS | DDSD_HEIGHT | DDSD_WIDTH | DDSD_PIXELFORMAT | DDSD_MIPMAPCOUNT | DDSD_LINEARSIZE
    caps = DDSCAPS_TEXTURE | (DDSCAPS_COMPLEX | DDSCAPS_MIPMAP if mips > 1 else 0)
    pixel_format = struct.pack("<II4sIIIII", PIXEL_FORMAT_SIZE, DDPF_FOURCC, b"DX10", 0, 0, 0, 0, 0)
    header = struct.pack("<7I", HEADER_SIZE, flags, height, width, len(levels[0]), 0, mips) + bytes(44) + pixel_format
    header += struct.pack("<5I", caps, 0, 0, 0, 0)
    dxgi = spec.dxgi_srgb if srgb else spec.dxgi_linear
    dx10 = struct.pack("<5I", dxgi, RESOURCE_DIMENSION_TEXTURE2D, 0, 1, _alpha_mode(fmt, alpha))
    assert len(header) == HEADER_SIZE and len(dx10) == DX10_SIZE
    return b"".join([MAGIC, header, dx10, *levels])


def _alpha_mode(fmt: str, alpha: bool) -> int:
    if alpha:
        return ALPHA_MODE_STRAIGHT
    return ALPHA_MODE_UNKNOWN if fmt in _NO_ALPHA_CHANNEL else ALPHA_MODE_OPAQUE


def write_dds(path: str | Path, width: int, height: int, fmt: str, levels: Sequence[bytes], *, srgb: bool = False, alpha: bool = False) -> int:
    """Write :func:`dds_bytes` to ``path`` atomically; returns the file's size in bytes."""
    data = dds_bytes(width, height, fmt, levels, srgb=srgb, alpha=alpha)
    atomic_write_bytes(path, data)
    return len(data)


@dataclass(frozen=True)
class DdsInfo:
    """What a DDS file written by :func:`write_dds` declares: size, format, colour space and each level's byte range."""

    width: int
    height: int
    format: str
    srgb: bool
    dxgi_format: int
    levels: list[tuple[int, int]]
    """``(offset, length)`` of every level's blocks in the file."""


def read_dds_info(data: bytes, *, path: Path | None = None) -> DdsInfo:
    """Parse the header of a BCn DDS file with a DX10 header (the files :func:`write_dds` writes); ``BundleError`` if it is not one."""

    def fail(problem: str) -> BundleError:
        return BundleError(problem, path=path, fix="write the file again (neuralbake ntc transcode).")

    if len(data) < 4 + HEADER_SIZE + DX10_SIZE or data[:4] != MAGIC:
        raise fail("not a DDS file with a DX10 header (too short or wrong magic).")
    size, _flags, height, width, _linear, _depth, mips = struct.unpack_from("<7I", data, 4)
    pf_size, pf_flags, fourcc = struct.unpack_from("<II4s", data, 4 + 72)
    if size != HEADER_SIZE or pf_size != PIXEL_FORMAT_SIZE or not pf_flags & DDPF_FOURCC or fourcc != b"DX10":
        raise fail("the header is not a DDS_HEADER with a DX10 pixel format.")
    dxgi, dimension, _misc, array_size, _alpha = struct.unpack_from("<5I", data, 4 + HEADER_SIZE)
    if dxgi not in _BY_DXGI or dimension != RESOURCE_DIMENSION_TEXTURE2D or array_size != 1:
        raise fail(f"DXGI format {dxgi} (dimension {dimension}, array size {array_size}) is not a 2D BCn texture.")
    name, srgb = _BY_DXGI[dxgi]
    chain = mip_sizes(max(width, 1), max(height, 1))
    if not 1 <= max(mips, 1) <= len(chain) or width == 0 or height == 0:
        raise fail(f"{width}x{height} with {mips} levels is not a valid mip chain.")
    offset, levels = 4 + HEADER_SIZE + DX10_SIZE, []
    for w, h in chain[: max(mips, 1)]:
        length = _level_bytes(w, h, DDS_FORMATS[name])
        levels.append((offset, length))
        offset += length
    if offset != len(data):
        raise fail(f"the file has {len(data)} bytes; its header describes {offset} (truncated or padded).")
    return DdsInfo(width, height, name, srgb, dxgi, levels)
