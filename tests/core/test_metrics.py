"""Image metrics: SSIM is 1 for identical images, orders degradations and is differentiable."""

from __future__ import annotations

import pytest
import torch

from neuralbake.core.metrics import ssim


def test_ssim_identity_ordering_and_gradcheck() -> None:
    g = torch.Generator().manual_seed(3)
    a = torch.rand(24, 24, 3, generator=g)
    assert float(ssim(a, a)) == pytest.approx(1.0, abs=1e-6)
    slightly = torch.clamp(a + 0.03 * torch.randn(24, 24, 3, generator=g), 0, 1)
    very = torch.clamp(a + 0.3 * torch.randn(24, 24, 3, generator=g), 0, 1)
    assert float(ssim(slightly, a)) > float(ssim(very, a))
    x = torch.rand(12, 12, 1, dtype=torch.float64, generator=g).requires_grad_()
    y = torch.rand(12, 12, 1, dtype=torch.float64, generator=g)
    assert torch.autograd.gradcheck(lambda t: ssim(t, y, window=5), (x,))


def test_float_rounding_is_exact_and_a_real_8_bit_error_is_not() -> None:
    """A lossless round trip reported 171.57 dB (float rounding); that is inf now, while an error an 8-bit
    result can show (one value half a step off) stays finite whatever the image's size."""
    import math

    from neuralbake.core.metrics import is_exact, psnr, psnr_from_mse

    reference = torch.full((512, 512, 2), 128 / 255)
    rounded = reference.clone()
    rounded[::7, ::5] = torch.nextafter(rounded[::7, ::5], torch.tensor(1.0))  # a float32 step on some values
    assert 150 < 10 * math.log10(1 / float(((rounded.double() - reference.double()) ** 2).mean())) < 200  # was reported
    assert psnr(rounded, reference) == math.inf and psnr(reference, reference) == math.inf
    one_step = reference.clone()
    one_step[3, 4, 1] += 1 / 255  # one value one 8-bit step off: MSE 2.9e-11, below 1e-10 alone
    assert 100 < psnr(one_step, reference) < math.inf
    half_step = reference.clone()
    half_step[0, 0, 0] += 0.5 / 255
    assert psnr(half_step, reference) < math.inf
    small = torch.full((4, 4, 3), 0.5)
    assert psnr(small + 1e-4, small) < math.inf  # a small image's error counts unless it is rounding
    assert not is_exact(float("nan"), 10) and not is_exact(1e-20, 0)
    assert psnr_from_mse(0.0, 1) == math.inf and psnr_from_mse(1e-4, 100) == 40.0
    assert is_exact(1e-12, 10**5) and not is_exact(1e-12, 10**7)  # the same mean: exact over few values, not over many
