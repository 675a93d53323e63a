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
