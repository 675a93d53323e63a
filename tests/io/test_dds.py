"""DDS writer: the header fields an engine reads (checked at their documented byte offsets), every level's blocks in order, refusals."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.io.bcn import bc_encode_mip_chain
from neuralbake.io.dds import dds_bytes, mip_sizes, read_dds_info, write_dds

from ..conftest import make_test_pattern

# DXGI_FORMAT values from Microsoft's dxgiformat.h, written out here rather than taken from the module under test.
DXGI = {("bc1", False): 71, ("bc1", True): 72, ("bc3", False): 77, ("bc3", True): 78, ("bc4", False): 80, ("bc5", False): 83, ("bc7", False): 98, ("bc7", True): 99}
CHANNELS = {"bc1": 3, "bc3": 4, "bc4": 1, "bc5": 2, "bc7": 4}


def _chain(width: int, height: int, channels: int) -> list[np.ndarray]:
    base = make_test_pattern(width, height, channels, seed=4)
    return [np.ascontiguousarray(base[:: height // h, :: width // w]) for w, h in mip_sizes(width, height)]


def test_mip_sizes_halve_each_side_down_to_one() -> None:
    assert mip_sizes(16, 4) == [(16, 4), (8, 2), (4, 1), (2, 1), (1, 1)]
    assert mip_sizes(1, 1) == [(1, 1)]


@pytest.mark.parametrize(("fmt", "srgb"), sorted(DXGI))
def test_header_fields_and_levels(fmt: str, srgb: bool, tmp_path: Path) -> None:
    width, height = 16, 8
    _, blocks = bc_encode_mip_chain(_chain(width, height, CHANNELS[fmt]), fmt)
    size = write_dds(tmp_path / "t.dds", width, height, fmt, blocks, srgb=srgb, alpha=CHANNELS[fmt] == 4)
    data = (tmp_path / "t.dds").read_bytes()
    assert size == len(data) == 4 + 124 + 20 + sum(map(len, blocks))
    assert data[:4] == b"DDS "
    header_size, flags, h, w, linear_size, _depth, mips = struct.unpack_from("<7I", data, 4)
    assert (header_size, h, w, mips, linear_size) == (124, height, width, 5, len(blocks[0]))
    assert flags == 0x1 | 0x2 | 0x4 | 0x1000 | 0x20000 | 0x80000
    pf_size, pf_flags, fourcc = struct.unpack_from("<II4s", data, 4 + 72)
    assert (pf_size, pf_flags, fourcc) == (32, 0x4, b"DX10")
    (caps,) = struct.unpack_from("<I", data, 4 + 104)
    assert caps == 0x1000 | 0x8 | 0x400000
    dxgi, dimension, _misc, array_size, alpha_mode = struct.unpack_from("<5I", data, 128)
    assert (dxgi, dimension, array_size) == (DXGI[(fmt, srgb)], 3, 1)
    assert alpha_mode == (1 if CHANNELS[fmt] == 4 else 0 if fmt in ("bc4", "bc5") else 3)  # straight, unknown, opaque
    assert data[148:] == b"".join(blocks)
    info = read_dds_info(data)
    assert (info.format, info.srgb, info.width, info.height) == (fmt, srgb, width, height)
    assert [data[o : o + n] for o, n in info.levels] == blocks


def test_pillow_reads_level_zero() -> None:
    chain = _chain(8, 8, 4)
    decoded, blocks = bc_encode_mip_chain(chain, "bc7")
    with Image.open(io.BytesIO(dds_bytes(8, 8, "bc7", blocks, alpha=True))) as image:
        assert image.size == (8, 8) and image.format == "DDS"
        pixels = np.asarray(image.convert("RGBA"), dtype=np.float32) / 255.0
    assert np.max(np.abs(pixels - decoded[0])) <= 1.0 / 255.0 + 1e-6


def test_refusals(tmp_path: Path) -> None:
    _, blocks = bc_encode_mip_chain(_chain(8, 8, 2), "bc5")
    with pytest.raises(ConfigError, match="bc5 stores no alpha"):
        dds_bytes(8, 8, "bc5", blocks, alpha=True)
    with pytest.raises(ConfigError, match="no sRGB"):
        dds_bytes(8, 8, "bc5", blocks, srgb=True)
    with pytest.raises(ConfigError, match="unknown block-compression format 'bc6'"):
        dds_bytes(8, 8, "bc6", blocks)
    with pytest.raises(InputError, match=r"level 1 \(4x4\) holds 3 bytes; bc5 stores 16"):
        dds_bytes(8, 8, "bc5", [blocks[0], b"abc"])
    with pytest.raises(InputError, match="5 levels given; a 8x8 texture has 1 to 4"):
        dds_bytes(8, 8, "bc5", [*blocks, blocks[-1]])
    data = dds_bytes(8, 8, "bc5", blocks)
    with pytest.raises(BundleError, match="truncated or padded"):
        read_dds_info(data[:-1])
    with pytest.raises(BundleError, match="wrong magic"):
        read_dds_info(b"XXXX" + data[4:])
