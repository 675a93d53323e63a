"""Sheen lobe for dust and velvet: the glTF ``KHR_materials_sheen`` model, i.e. Estevez & Kulla's
"Charlie" fibre distribution with their fitted Smith-like visibility.

``f = color * D(h) * V(wi, wo)`` with ``alpha = roughness^2`` (as the glTF sample renderer maps
``sheenRoughness``), ``D = (2 + 1/alpha) sin(theta_h)^(1/alpha) / (2 pi)`` and
``V = 1 / ((1 + Lambda(cos_o) + Lambda(cos_i)) 4 cos_o cos_i)``, where ``Lambda`` is the
exponential fit ``l(x)`` published in "Production Friendly Microfacet Sheen BRDF" (Estevez & Kulla,
SIGGRAPH 2017) with the coefficients listed in the KHR_materials_sheen extension. No Fresnel
(``F = 1``). Unlike some real-time implementations, ``V`` is not clamped to 1: that clamp is a
shader safeguard, not part of the published model. ``alpha`` is clamped to at
least ``1e-3`` (roughness ~0.03), below which ``sin^(1/alpha)`` underflows everywhere.
Sampling is cosine-weighted over the hemisphere (the Charlie distribution has no simple
visible-normal sampler). :func:`sheen_albedo` tabulates the lobe's directional albedo, which
layering the sheen over a base by albedo scaling needs (:class:`~neuralbake.material.surfaces.SheenLayer`).
"""

from __future__ import annotations

import functools
import math

import torch

from neuralbake.material.frame import (
    as_colour,
    as_scalar,
    check_direction_pair,
    check_directions,
    check_uniforms,
    cos_theta,
    cosine_hemisphere_pdf,
    half_vector,
    safe_sqrt,
    square_to_cosine_hemisphere,
    upper_pair,
)

__all__ = ["MIN_SHEEN_ALPHA", "charlie_d", "charlie_lambda", "sheen_albedo", "sheen_eval", "sheen_pdf", "sheen_sample"]

MIN_SHEEN_ALPHA = 1e-3

# Coefficients (a, b, c, d, e) of Estevez & Kulla's fit l(x) = a / (1 + b x^c) + d x + e, at
# alpha = 0 and alpha = 1 (KHR_materials_sheen); they are interpolated with (1 - alpha)^2.
_FIT_ALPHA_1 = (21.5473, 3.82987, 0.19823, -1.97760, -4.32054)
_FIT_ALPHA_0 = (25.3245, 3.32435, 0.16801, -1.27393, -4.85967)


def charlie_d(cos_h: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Charlie distribution ``(2 + 1/alpha) sin^(1/alpha)(theta_h) / (2 pi)``, shape of ``cos_h``."""
    sin2 = torch.clamp(1.0 - cos_h * cos_h, min=torch.finfo(cos_h.dtype).tiny)
    inv_alpha = 1.0 / alpha
    # exp(log) instead of pow: finite gradient where sin(theta_h) = 0.
    return (2.0 + inv_alpha) * torch.exp(0.5 * inv_alpha * torch.log(sin2)) / (2.0 * math.pi)


def _fit_l(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    t = (1.0 - alpha) ** 2
    a, b, c, d, e = (lo + (hi - lo) * t for lo, hi in zip(_FIT_ALPHA_1, _FIT_ALPHA_0, strict=True))
    x_pow_c = torch.exp(c * torch.log(torch.clamp(x, min=torch.finfo(x.dtype).tiny)))
    return a / (1.0 + b * x_pow_c) + d * x + e


def charlie_lambda(cos_v: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Estevez & Kulla's fitted ``Lambda(cos_v)`` for the Charlie distribution (``cos_v`` in ``(0, 1]``)."""
    half = torch.full_like(cos_v, 0.5)
    # The fit is made for cos < 0.5 and mirrored about 0.5 for the rest.
    low = torch.exp(_fit_l(cos_v, alpha))
    high = torch.exp(2.0 * _fit_l(half, alpha) - _fit_l(1.0 - cos_v, alpha))
    return torch.where(cos_v < 0.5, low, high)


def _alpha(roughness: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    r = as_scalar("roughness", roughness, like)
    return torch.clamp(r * r, min=MIN_SHEEN_ALPHA)


def sheen_eval(wi: torch.Tensor, wo: torch.Tensor, *, color: torch.Tensor | float, roughness: torch.Tensor | float) -> torch.Tensor:
    """Cosine-weighted sheen ``color * D(h) / ((1 + Lambda_i + Lambda_o) 4 cos_o)``, ``[N, 3]``.

    ``color``: RGB sheen colour, broadcastable to ``[N, 3]``; ``roughness``: sheen roughness
    (``alpha = roughness^2``), broadcastable to ``[N]``. Zero unless both directions are above.
    """
    wi, wo = check_direction_pair(wi, wo)
    color = as_colour("color", color, wi)
    alpha = _alpha(roughness, wi)
    valid, wi_s, wo_s = upper_pair(wi, wo)
    cos_i, cos_o = cos_theta(wi_s), cos_theta(wo_s)
    d = charlie_d(cos_theta(half_vector(wi_s, wo_s)), alpha)
    value = d / ((1.0 + charlie_lambda(cos_i, alpha) + charlie_lambda(cos_o, alpha)) * 4.0 * cos_o)
    return color * torch.where(valid, value, torch.zeros_like(value))[:, None]


def sheen_pdf(
    wi: torch.Tensor, wo: torch.Tensor, *, color: torch.Tensor | float | None = None, roughness: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Cosine-weighted hemisphere density (0 unless both directions are above), ``[N]``."""
    wi, wo = check_direction_pair(wi, wo)
    return torch.where(cos_theta(wo) > 0.0, cosine_hemisphere_pdf(wi), torch.zeros_like(wi[:, 2]))


def sheen_sample(
    wo: torch.Tensor, u: torch.Tensor, *, color: torch.Tensor | float | None = None, roughness: torch.Tensor | float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine-weighted ``wi`` ``[N, 3]`` and its pdf ``[N]``."""
    wo = check_directions("wo", wo)
    wi = square_to_cosine_hemisphere(check_uniforms(u, wo))
    return wi, sheen_pdf(wi, wo)


# --- directional albedo, for layering the sheen over a base by albedo scaling ----------------------

_SHEEN_TABLE = 17  # nodes along sqrt(cos theta) and along sheen roughness, both on [0, 1]
_SHEEN_STRATA = 16  # 16 x 16 stratified cosine-weighted directions per entry


@functools.lru_cache(maxsize=1)
def _sheen_table_cpu64() -> torch.Tensor:
    # E(mu, r) = E_wi[f cos_i / pdf] with cosine-weighted wi, the sampler of the sheen lobe itself.
    s = _SHEEN_STRATA
    grid = (torch.arange(s, dtype=torch.float64) + 0.5) / s
    wi = square_to_cosine_hemisphere(torch.stack(torch.meshgrid(grid, grid, indexing="ij"), dim=-1).reshape(-1, 2))
    axis = torch.linspace(0.0, 1.0, _SHEEN_TABLE, dtype=torch.float64)
    mu, rough = torch.meshgrid(torch.clamp(axis**2, min=1e-3), axis, indexing="ij")
    mu, rough = mu.reshape(-1, 1).expand(-1, len(wi)).reshape(-1), rough.reshape(-1, 1).expand(-1, len(wi)).reshape(-1)
    wo = torch.stack((torch.sqrt(1.0 - mu * mu), torch.zeros_like(mu), mu), dim=-1)
    wi = wi.repeat(_SHEEN_TABLE * _SHEEN_TABLE, 1)
    ratio = sheen_eval(wi, wo, color=1.0, roughness=rough)[:, 0] / torch.clamp(sheen_pdf(wi, wo), min=1e-300)
    # Clamped: Charlie sheen with the fitted visibility exceeds 1 at grazing angles and low roughness.
    return torch.clamp(ratio.reshape(_SHEEN_TABLE, _SHEEN_TABLE, -1).mean(dim=-1), 0.0, 1.0)


@functools.lru_cache(maxsize=8)
def _sheen_table(dtype: torch.dtype, device: str) -> torch.Tensor:
    return _sheen_table_cpu64().to(dtype=dtype, device=device)


def sheen_albedo(cos_theta_o: torch.Tensor, roughness: torch.Tensor) -> torch.Tensor:
    """Directional albedo of the white sheen lobe (:func:`sheen_eval`), ``[N]``.

    Bilinear in a 17 x 17 table over ``sqrt(cos)`` and roughness (both ``[0, 1]``, clamped),
    integrated once (float64, 16 x 16 strata) and clamped to 1; differentiable (piecewise linear)
    in both arguments. ``cos_theta_o`` and ``roughness``: ``[N]``.
    """
    table = _sheen_table(cos_theta_o.dtype, str(cos_theta_o.device))
    n = _SHEEN_TABLE - 1
    x = torch.clamp(safe_sqrt(torch.clamp(cos_theta_o, 0.0, 1.0)), 0.0, 1.0) * n
    y = torch.clamp(roughness, 0.0, 1.0) * n
    i = torch.clamp(x.detach().floor().long(), max=n - 1)
    j = torch.clamp(y.detach().floor().long(), max=n - 1)
    tx, ty = x - i, y - j
    top = table[i, j] * (1.0 - ty) + table[i, j + 1] * ty
    bottom = table[i + 1, j] * (1.0 - ty) + table[i + 1, j + 1] * ty
    return top * (1.0 - tx) + bottom * tx
