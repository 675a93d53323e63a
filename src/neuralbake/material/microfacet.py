"""Anisotropic GGX (Trowbridge-Reitz) microfacet building blocks: the normal distribution, Smith
masking-shadowing (separable and height-correlated), visible-normal sampling and its density.

Roughness is the GGX ``alpha`` along the frame's x (``alpha_x``) and y (``alpha_y``) axes, as
``[N]`` tensors; it is clamped to at least ``1e-4`` (as Mitsuba 3 does) because ``alpha -> 0``
turns the distribution into a Dirac delta that a pointwise ``eval`` cannot represent. Sampling is
Heitz's visible-normal method ("Sampling the GGX Distribution of Visible Normals", JCGT 7(4),
2018): microfacet normals are drawn in proportion to ``G1(wo, m) max(wo.m, 0) D(m) / cos_o``, so
after mirroring ``wo`` the density of ``wi`` is ``G1(wo) D(h) / (4 cos_o)``; with the separable
Smith term the sample weight ``f cos_i / pdf`` is just ``F * G1(wi)``.
"""

from __future__ import annotations

import math

import torch

from neuralbake.material.frame import cos_theta, dot, half_vector, normalize, reflect, safe_sqrt, upper_pair

__all__ = [
    "MIN_ALPHA",
    "clamp_alpha",
    "ggx_d",
    "ggx_g1",
    "ggx_lambda",
    "ggx_reflection",
    "ggx_reflection_pdf",
    "ggx_reflection_sample",
    "ggx_sample_visible_normal",
    "roughness_anisotropy",
    "smith_g_height_correlated",
    "smith_g_separable",
]

MIN_ALPHA = 1e-4


def clamp_alpha(alpha: torch.Tensor) -> torch.Tensor:
    """GGX ``alpha`` clamped to ``[MIN_ALPHA, inf)`` (same shape)."""
    return torch.clamp(alpha, min=MIN_ALPHA)


def ggx_d(m: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor) -> torch.Tensor:
    """GGX normal distribution ``D(m)`` per unit solid angle, ``[N]`` (zero for ``m.z <= 0``).

    ``m``: unit microfacet normals ``[N, 3]``; ``alpha_x``, ``alpha_y``: ``[N]``.
    """
    x, y = m[:, 0] / alpha_x, m[:, 1] / alpha_y
    q = x * x + y * y + m[:, 2] * m[:, 2]
    d = 1.0 / (math.pi * alpha_x * alpha_y * q * q)
    return torch.where(m[:, 2] > 0.0, d, torch.zeros_like(d))


def ggx_lambda(v: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor) -> torch.Tensor:
    """Smith ``Lambda(v)`` of GGX, ``[N]``, for directions ``v`` ``[N, 3]`` above the surface."""
    z2 = torch.clamp(v[:, 2] * v[:, 2], min=torch.finfo(v.dtype).tiny)
    ax, ay = alpha_x * v[:, 0], alpha_y * v[:, 1]
    tan2_alpha = (ax * ax + ay * ay) / z2
    return 0.5 * (safe_sqrt(1.0 + tan2_alpha) - 1.0)


def ggx_g1(v: torch.Tensor, m: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor) -> torch.Tensor:
    """Smith masking ``G1(v, m) = chi+(v.m / v.n) / (1 + Lambda(v))``, ``[N]``."""
    g1 = 1.0 / (1.0 + ggx_lambda(v, alpha_x, alpha_y))
    return torch.where(dot(v, m) * cos_theta(v) > 0.0, g1, torch.zeros_like(g1))


def smith_g_separable(wi: torch.Tensor, wo: torch.Tensor, m: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor) -> torch.Tensor:
    """Separable Smith shadowing-masking ``G1(wi, m) G1(wo, m)`` (Mitsuba 3's choice), ``[N]``."""
    return ggx_g1(wi, m, alpha_x, alpha_y) * ggx_g1(wo, m, alpha_x, alpha_y)


def smith_g_height_correlated(wi: torch.Tensor, wo: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor) -> torch.Tensor:
    """Height-correlated Smith ``1 / (1 + Lambda(wi) + Lambda(wo))`` (Heitz 2014), ``[N]``.

    Valid for reflection with both directions above the surface (callers mask the rest).
    """
    return 1.0 / (1.0 + ggx_lambda(wi, alpha_x, alpha_y) + ggx_lambda(wo, alpha_x, alpha_y))


def ggx_sample_visible_normal(wo: torch.Tensor, u: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor) -> torch.Tensor:
    """Draw microfacet normals ``[N, 3]`` visible from ``wo`` (``[N, 3]``, above the surface).

    ``u``: ``[N, 2]`` uniforms in ``[0, 1)``. Differentiable in ``alpha`` and ``wo``
    (reparameterised), which lets gradients flow through sampled directions.
    """
    # Stretch the view so the ellipsoid of normals becomes the unit hemisphere.
    vh = normalize(torch.stack((alpha_x * wo[:, 0], alpha_y * wo[:, 1], wo[:, 2]), dim=-1))
    len2 = vh[:, 0] * vh[:, 0] + vh[:, 1] * vh[:, 1]
    inv_len = torch.rsqrt(torch.clamp(len2, min=torch.finfo(wo.dtype).tiny))
    zero, one = torch.zeros_like(len2), torch.ones_like(len2)
    # Orthonormal basis around vh; at normal incidence any tangent does.
    t1 = torch.where(
        (len2 > 0.0)[:, None],
        torch.stack((-vh[:, 1] * inv_len, vh[:, 0] * inv_len, zero), dim=-1),
        torch.stack((one, zero, zero), dim=-1),
    )
    t2 = torch.linalg.cross(vh, t1, dim=-1)
    # Uniform point on the disc, then squash its lower half onto the visible projected area.
    r = safe_sqrt(u[:, 0])
    phi = (2.0 * math.pi) * u[:, 1]
    p1 = r * torch.cos(phi)
    p2 = r * torch.sin(phi)
    s = 0.5 * (1.0 + vh[:, 2])
    p2 = (1.0 - s) * safe_sqrt(1.0 - p1 * p1) + s * p2
    p3 = safe_sqrt(1.0 - p1 * p1 - p2 * p2)
    nh = p1[:, None] * t1 + p2[:, None] * t2 + p3[:, None] * vh
    # Unstretch back to the ellipsoid configuration.
    return normalize(torch.stack((alpha_x * nh[:, 0], alpha_y * nh[:, 1], torch.clamp(nh[:, 2], min=0.0)), dim=-1))


def ggx_reflection(
    wi: torch.Tensor, wo: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresnel-free GGX reflection, cosine-weighted: ``D(h) G(wi, wo, h) / (4 cos_o)``.

    Uses the separable Smith term (as Mitsuba 3's ``roughconductor``). Multiply by a Fresnel term
    evaluated at ``dot(wo, h)`` to get ``f(wi, wo) cos_i``.

    Returns
    -------
    value:
        ``[N]``, zero unless both directions are above the surface.
    h:
        Half vectors ``[N, 3]``.
    valid:
        ``[N]`` bool, both directions above the surface.
    """
    valid, wi, wo = upper_pair(wi, wo)
    h = half_vector(wi, wo)
    d = ggx_d(h, alpha_x, alpha_y)
    g = smith_g_separable(wi, wo, h, alpha_x, alpha_y)
    value = d * g / (4.0 * cos_theta(wo))
    return torch.where(valid, value, torch.zeros_like(value)), h, valid


def ggx_reflection_pdf(wi: torch.Tensor, wo: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor) -> torch.Tensor:
    """Solid-angle density ``G1(wo) D(h) / (4 cos_o)`` of :func:`ggx_reflection_sample`, ``[N]``.

    Zero unless both directions are above the surface (samples below it are discarded).
    """
    valid, wi, wo = upper_pair(wi, wo)
    h = half_vector(wi, wo)
    pdf = ggx_g1(wo, h, alpha_x, alpha_y) * ggx_d(h, alpha_x, alpha_y) / (4.0 * cos_theta(wo))
    return torch.where(valid, pdf, torch.zeros_like(pdf))


def ggx_reflection_sample(
    wo: torch.Tensor, u: torch.Tensor, alpha_x: torch.Tensor, alpha_y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``wi`` by mirroring ``wo`` about a visible GGX normal.

    Returns ``(wi [N, 3], pdf [N])``; ``pdf`` is 0 where ``wo`` or the reflected ``wi`` lies below
    the surface (an invalid sample: weight it 0).
    """
    wo_up = torch.where((cos_theta(wo) > 0.0)[:, None], wo, torch.tensor([0.0, 0.0, 1.0], dtype=wo.dtype, device=wo.device))
    m = ggx_sample_visible_normal(wo_up, u, alpha_x, alpha_y)
    wi = reflect(wo, m)
    return wi, ggx_reflection_pdf(wi, wo, alpha_x, alpha_y)


def roughness_anisotropy(roughness: torch.Tensor, anisotropy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GGX ``(alpha_x, alpha_y)`` from artist roughness and anisotropy, as MaterialX's ``roughness_anisotropy`` node.

    ``a = clamp(r^2, eps, 1)``, and for anisotropy ``t > 0``: ``s = sqrt(1 - min(t, 0.98))``,
    ``alpha_x = min(a / s, 1)``, ``alpha_y = a s`` (tangent = +x of the local frame). ``roughness``,
    ``anisotropy`` and both results: ``[N]``.
    """
    alpha = torch.clamp(roughness * roughness, torch.finfo(roughness.dtype).eps, 1.0)
    aspect = torch.sqrt(1.0 - torch.clamp(anisotropy, 0.0, 0.98))
    stretched = anisotropy > 0.0
    return torch.where(stretched, torch.clamp(alpha / aspect, max=1.0), alpha), torch.where(stretched, alpha * aspect, alpha)
