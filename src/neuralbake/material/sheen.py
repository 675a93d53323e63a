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
visible-normal sampler).
"""

from __future__ import annotations

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
    square_to_cosine_hemisphere,
    upper_pair,
)

__all__ = ["MIN_SHEEN_ALPHA", "charlie_d", "charlie_lambda", "sheen_eval", "sheen_pdf", "sheen_sample"]

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
