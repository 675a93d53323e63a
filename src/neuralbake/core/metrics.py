"""Image-quality metrics shared by every bake's report: MSE, PSNR and (differentiable) SSIM."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from neuralbake.errors import InputError

__all__ = ["EXACT_MSE", "is_exact", "mse", "psnr", "psnr_from_mse", "ssim"]

EXACT_MSE = 1e-10
"""Mean squared error (at peak 1) below which a result can count as its reference: float rounding's level
(a float32 result carries about 1e-7 of it per value, 1e-14 squared), an RMS error of 0.0026 of an 8-bit step."""


def is_exact(error: float, count: int, *, peak: float = 1.0) -> bool:
    """Whether a mean squared error ``error`` over ``count`` values is float noise, not an error: then a PSNR is
    reported as ``inf`` ("inf dB (exact)"), not as the 150-170 dB that rounding in a lossless round trip gives.

    Both must hold: the mean is below :data:`EXACT_MSE` ``* peak^2`` (far below 8-bit quantisation's own noise,
    ``(peak / 255)^2 / 12 = 1.3e-6``), and the squared errors of all ``count`` values *together* are below one
    value half an 8-bit step off, ``(0.5 peak / 255)^2 = 3.8e-6``. The second is what keeps the threshold from
    hiding a real error: no value can differ from its reference by half an 8-bit step (the smallest difference
    an 8-bit result can show) and still count as exact, whatever the image's size (a mean alone would hide one
    texel a whole step off in an image of more than 150,000 values). The first keeps a small image's error
    finite unless it is rounding.
    """
    if not math.isfinite(error) or count < 1:
        return False
    scale = peak * peak
    return error < EXACT_MSE * scale and error * count < (0.5 / 255.0) ** 2 * scale


def psnr_from_mse(error: float, count: int, *, peak: float = 1.0) -> float:
    """``10 log10(peak^2 / error)`` in dB for a mean squared error over ``count`` values; ``inf`` where the
    error is float noise (:func:`is_exact`, zero included)."""
    if error <= 0.0 or is_exact(error, count, peak=peak):
        return math.inf
    return 10.0 * math.log10(peak * peak / error)


def mse(prediction: torch.Tensor, reference: torch.Tensor) -> float:
    """Mean squared error over all elements, computed in float64."""
    if prediction.shape != reference.shape:
        raise ValueError(f"mse: shapes differ, {tuple(prediction.shape)} vs {tuple(reference.shape)}")
    diff = prediction.detach().double() - reference.detach().double()
    return float(torch.mean(diff * diff))


def psnr(prediction: torch.Tensor, reference: torch.Tensor, *, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB, ``10 log10(peak^2 / MSE)``; ``inf`` for identical inputs and for an
    error that is float rounding only (:func:`is_exact`)."""
    return psnr_from_mse(mse(prediction, reference), prediction.numel(), peak=peak)


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
