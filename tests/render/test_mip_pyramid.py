"""The one mip-chain builder: box averages at every level, batched and channels-last, power-of-two
and odd sides (floor and ceil rounding), float64 accumulation, and a level cap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralbake.errors import InputError
from neuralbake.render.mip import box_downsample, build_mip_pyramid, is_power_of_two


def test_levels_are_footprint_averages_down_to_one_texel() -> None:
    texture = torch.rand(4, 8, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    chain = build_mip_pyramid(texture)
    assert [tuple(level.shape[:2]) for level in chain] == [(4, 8), (2, 4), (1, 2), (1, 1)]
    torch.testing.assert_close(chain[1][0, 0], texture[:2, :2].mean(dim=(0, 1)))
    torch.testing.assert_close(chain[3][0, 0], texture.mean(dim=(0, 1)))
    torch.testing.assert_close(box_downsample(texture, 4)[0, 0], texture[:, :4].mean(dim=(0, 1)))


def test_batched_capped_and_float64_accumulated() -> None:
    batch = torch.rand(3, 16, 16, 2, generator=torch.Generator().manual_seed(1))
    chain = build_mip_pyramid(batch, levels=3)
    assert [tuple(level.shape) for level in chain] == [(3, 16, 16, 2), (3, 8, 8, 2), (3, 4, 4, 2)]
    torch.testing.assert_close(chain[2][1], build_mip_pyramid(batch[1])[2], rtol=0, atol=0)
    wide = build_mip_pyramid(batch[0], compute_dtype=torch.float64)
    assert all(level.dtype == torch.float32 for level in wide)
    torch.testing.assert_close(wide[-1][0, 0], batch[0].double().mean(dim=(0, 1)).float(), rtol=0, atol=1e-6)


def test_odd_sides_floor_and_ceil() -> None:
    texture = torch.arange(25, dtype=torch.float32).reshape(5, 5, 1)
    assert [level.shape[0] for level in build_mip_pyramid(texture)] == [5, 2, 1]
    ceil = build_mip_pyramid(texture, odd="ceil")
    assert [level.shape[0] for level in ceil] == [5, 3, 2, 1]
    assert float(ceil[1][2, 2, 0]) == 24.0  # the last row and column average on their own
    with pytest.raises(InputError, match="odd-size"):
        build_mip_pyramid(texture, odd="round")
    with pytest.raises(InputError, match="texture"):
        build_mip_pyramid(torch.zeros(4, 4))


def test_is_power_of_two() -> None:
    assert [n for n in range(-2, 18) if is_power_of_two(n)] == [1, 2, 4, 8, 16]
    assert not is_power_of_two(True) and not is_power_of_two(4.0)  # type: ignore[arg-type]
    assert np.all([is_power_of_two(1 << k) for k in range(20)])
