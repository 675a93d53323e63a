import math

import numpy as np
import pytest

from neuralbake.errors import ConfigError, InputError
from neuralbake.io.bcn import BC_BITS_PER_PIXEL, bc_mip_chain_roundtrip, bc_roundtrip, mip_chain_bytes, pad_to_blocks

from ..conftest import make_test_pattern


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10.0 * np.log10(1.0 / mse) if mse > 0 else float("inf")


def _smooth(size: int, channels: int) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    planes = [0.2 + 0.6 * x, 0.8 - 0.5 * y, 0.3 + 0.4 * x * y, 0.5 + 0.3 * np.sin(3 * x)]
    return np.stack(planes[:channels], axis=-1).astype(np.float32)


def _normal_xy(size: int) -> np.ndarray:
    # Gentle bumps encoded as 0.5 n + 0.5, X and Y only (what BC5 stores).
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    nx, ny = 0.3 * np.sin(6 * x) * np.cos(4 * y), 0.3 * np.cos(5 * y)
    return np.stack((0.5 * nx + 0.5, 0.5 * ny + 0.5), axis=-1).astype(np.float32)


@pytest.mark.parametrize(
    ("fmt", "channels", "bound"),
    [("bc1", 3, 34.0), ("bc7", 3, 40.0), ("bc7", 4, 40.0), ("bc5", 2, 45.0), ("bc3", 4, 34.0), ("bc4", 1, 45.0)],
)
def test_smooth_image_round_trips_well(fmt, channels, bound):
    image = _normal_xy(32) if fmt == "bc5" else _normal_xy(32)[..., :1] if fmt == "bc4" else _smooth(32, channels)
    decoded, size = bc_roundtrip(image, fmt)
    assert decoded.shape == image.shape and decoded.dtype == np.float32
    assert size == 32 * 32 * BC_BITS_PER_PIXEL[fmt] // 8
    assert _psnr(decoded, image) > bound


def test_bc7_search_effort_does_not_lose_quality():
    image = _smooth(32, 3)
    fast, _ = bc_roundtrip(image, "bc7", bc7_uber_level=0)
    best, _ = bc_roundtrip(image, "bc7", bc7_uber_level=4)
    assert _psnr(best, image) >= _psnr(fast, image) > 40.0


def test_test_pattern_quality_orders_the_formats():
    image = make_test_pattern(32, 32, 3, seed=1)
    bc1, bytes1 = bc_roundtrip(image, "bc1")
    bc7, bytes7 = bc_roundtrip(image, "bc7")
    assert (bytes1, bytes7) == (32 * 32 // 2, 32 * 32)
    # The noisy pattern costs BC1 (two 565 endpoints + 2-bit indices) far more than BC7.
    assert 20.0 < _psnr(bc1, image) < _psnr(bc7, image) - 4.0
    assert _psnr(bc7, image) > 28.0


@pytest.mark.parametrize("fmt", ["bc1", "bc7"])
def test_channel_order_is_rgba(fmt):
    # Distinct flat colours per block: any swap of R and B (etcpak reads RGBA, texture2ddecoder
    # writes BGRA) would show up as a large error.
    image = np.zeros((8, 8, 3), dtype=np.float32)
    image[:4, :4] = (0.9, 0.1, 0.2)
    image[:4, 4:] = (0.1, 0.8, 0.3)
    image[4:, :4] = (0.2, 0.3, 0.95)
    image[4:, 4:] = (1.0, 1.0, 0.0)
    decoded, _ = bc_roundtrip(image, fmt)
    assert np.max(np.abs(decoded - image)) < 0.04


def test_bc5_keeps_x_and_y_apart():
    image = np.zeros((4, 8, 2), dtype=np.float32)
    image[:, :4] = (0.9, 0.1)
    image[:, 4:] = (0.2, 0.7)
    decoded, size = bc_roundtrip(image, "bc5")
    assert size == 32
    assert np.max(np.abs(decoded - image)) < 0.01


def test_bc7_and_bc3_keep_alpha_bc1_drops_it():
    image = _smooth(16, 4)
    image[..., 3] = np.where(np.arange(16)[None, :] < 8, 0.25, 0.75)
    bc7, _ = bc_roundtrip(image, "bc7")
    bc3, _ = bc_roundtrip(image, "bc3")
    bc1, _ = bc_roundtrip(image, "bc1")
    assert np.max(np.abs(bc7[..., 3] - image[..., 3])) < 0.02
    assert np.max(np.abs(bc3[..., 3] - image[..., 3])) < 0.01
    assert np.all(bc1[..., 3] == 1.0)


def test_mip_chain_pads_small_levels_to_a_block():
    base = _smooth(16, 3)
    levels = [base, base[::2, ::2], base[::4, ::4], base[::8, ::8], base[::16, ::16]]
    decoded, sizes = bc_mip_chain_roundtrip(levels, "bc7")
    assert [d.shape for d in decoded] == [lv.shape for lv in levels]
    assert sizes == [256, 64, 16, 16, 16]  # 4x4 and below: one 16-byte block each
    for original, result in zip(levels, decoded):
        assert _psnr(result, original) > 25.0  # a steep 2-D gradient in one 4x4 block is hard for BC7


def test_errors_name_the_problem():
    with pytest.raises(ConfigError, match="unknown block-compression format 'bc2'"):
        bc_roundtrip(_smooth(8, 3), "bc2")
    with pytest.raises(InputError, match="bc4 takes 1 channels, got 3"):
        bc_roundtrip(_smooth(8, 3), "bc4")
    with pytest.raises(InputError, match="multiples of 4; got 6x8"):
        bc_roundtrip(_smooth(8, 3)[:, :6], "bc1")
    with pytest.raises(InputError, match="bc5 takes 2 channels, got 3"):
        bc_roundtrip(_smooth(8, 3), "bc5")
    with pytest.raises(InputError, match="bc7 takes 3 or 4 channels, got 2"):
        bc_roundtrip(_smooth(8, 2), "bc7")
    with pytest.raises(InputError, match=r"shape \[H, W, C\]"):
        bc_roundtrip(np.zeros((8, 8), np.float32), "bc1")
    with pytest.raises(InputError, match="dtype uint8"):
        bc_roundtrip(np.zeros((8, 8, 3), np.uint8), "bc1")
    bad = _smooth(8, 3)
    bad[0, 0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        bc_roundtrip(bad, "bc7")
    with pytest.raises(ConfigError, match="bc7_uber_level"):
        bc_roundtrip(_smooth(8, 3), "bc7", bc7_uber_level=5)
    with pytest.raises(InputError, match="empty"):
        bc_mip_chain_roundtrip([], "bc1")


def test_mip_chain_bytes_counts_whole_blocks_down_to_one_texel() -> None:
    assert mip_chain_bytes(256, 256, "bc7") == sum(max(1, math.ceil(s / 4)) ** 2 * 16 for s in (256, 128, 64, 32, 16, 8, 4, 2, 1))
    assert mip_chain_bytes(4, 8, "bc1") == 2 * 8 + 8 + 8 + 8
    assert mip_chain_bytes(5, 5, "bc5") == 4 * 16 + 16 + 16


def test_mip_chain_bytes_matches_the_round_trip_count() -> None:
    """Level 0's share of the chain is what bc_roundtrip writes for it, padded to whole blocks."""
    for fmt, channels in (("bc1", 3), ("bc5", 2), ("bc7", 4)):
        image = np.full((6, 10, channels), 0.5, np.float32)
        _, size = bc_roundtrip(pad_to_blocks(image), fmt)
        assert mip_chain_bytes(6, 10, fmt) - mip_chain_bytes(3, 5, fmt) == size
