"""Image-quality metrics shared by every bake's report: MSE, PSNR and (differentiable) SSIM."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from neuralbake.errors import InputError

__all__ = ["mse", "psnr", "ssim"]


def mse(prediction: torch.Tensor, reference: torch.Tensor) -> float:
    """Mean squared error over all elements, computed in float64."""
    if prediction.shape != reference.shape:
        raise ValueError(f"mse: shapes differ, {tuple(prediction.shape)} vs {tuple(reference.shape)}")
    diff = prediction.detach().double() - reference.detach().double()
    return float(torch.mean(diff * diff))


def psnr(prediction: torch.Tensor, reference: torch.Tensor, *, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB, ``10 log10(peak^2 / MSE)``; ``inf`` for identical inputs."""
    error = mse(prediction, reference)
    if error == 0.0:
        return math.inf
    return 10.0 * math.log10(peak * peak / error)


def _gaussian_window(size: int, sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Normalised 1-D Gaussian weights ``[size]`` of ``dtype`` centred on the middle tap."""
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2.0
    g = torch.exp(-(x * x) / (2.0 * sigma * sigma))
    return g / g.sum()


def ssim(x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None, *, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Structural similarity of two images in [0, 1] (Wang et al. 2004).

    Gaussian window ``window`` / ``sigma``, ``K1 = 0.01``, ``K2 = 0.03``, 'valid' borders; averaged
    over channels and over the window centres where ``mask`` is true (all when ``None``).

    Parameters
    ----------
    x, y : torch.Tensor
        Float images ``[H, W, C]`` of one shape and dtype; ``H, W >= window``.
    mask : torch.Tensor, optional
        Bool (or 0/1) ``[H, W]``: the pixels whose windows count.

    Returns
    -------
    torch.Tensor
        0-d tensor of ``x``'s dtype, 1 for identical images; differentiable in both images.
    """
    if x.shape != y.shape or x.dim() != 3:
        raise InputError(f"ssim needs two [H, W, C] images of one shape, got {tuple(x.shape)} and {tuple(y.shape)}.", field="image", fix="pass matching images.")
    if min(x.shape[0], x.shape[1]) < window:
        raise InputError(f"images of {x.shape[1]}x{x.shape[0]} are smaller than the {window}-pixel SSIM window.", field="image", fix="use larger images.")
    c = x.shape[2]
    g = _gaussian_window(window, sigma, x.dtype, x.device)
    kernel = (g[:, None] * g[None, :]).expand(c, 1, window, window).contiguous()
    blur = lambda t: F.conv2d(t, kernel, groups=c)
    a, b = x.permute(2, 0, 1)[None], y.permute(2, 0, 1)[None]
    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a * mu_a
    var_b = blur(b * b) - mu_b * mu_b
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = 0.01**2, 0.03**2
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a * mu_a + mu_b * mu_b + c1) * (var_a + var_b + c2))
    s = s[0].mean(0)
    if mask is None:
        return s.mean()
    r = window // 2
    m = mask[r : mask.shape[0] - r, r : mask.shape[1] - r].to(s.dtype)
    return (s * m).sum() / torch.clamp(m.sum(), min=1.0)
