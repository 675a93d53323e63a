"""Rough dielectric interface: GGX reflection and refraction through a boundary between air and a
medium of index ``ior`` (Walter et al. 2007, "Microfacet Models for Refraction through Rough
Surfaces"), for glass, water, gems and the transmission lobes of Standard Surface and OpenPBR.

Unlike the reflection lobes of :mod:`~neuralbake.material.lobes`, directions may lie on either side
of the surface: the local frame's +z points into the air, so ``wo.z < 0`` is a viewer inside the
medium and ``wi.z * wo.z < 0`` a pair joined by refraction. The model is Mitsuba 3's
``roughdielectric`` with ``distribution="ggx"`` (anisotropic GGX, separable Smith masking with the
microfacet side test, exact unpolarised Fresnel, visible-normal sampling), evaluated for radiance:

- reflection: ``F(wo.m) D(m) G(wi, wo, m) / (4 |cos_o|)`` with ``m`` the half vector;
- refraction: ``(1 - F(wo.m)) D(m) G |wi.m| |wo.m| / (|cos_o| (wo.m + eta wi.m)^2)`` with
  ``m = normalize(wo + eta wi)`` and ``eta`` the index ratio from the viewer's side to the light's
  (``ior`` for a viewer in the air, ``1 / ior`` inside). The ``eta^2`` of Walter's BTDF is cancelled
  by the ``1 / eta^2`` by which radiance shrinks as it leaves the denser medium (Veach 1997, 5.2), so
  the pair is not reciprocal; a light-tracing estimator would need the adjoint (the ``eta^2`` kept).

All functions return the cosine-weighted BSDF ``f(wi, wo) |cos_i|`` like the other lobes, take
``alpha_x``/``alpha_y``/``ior`` broadcastable to ``[N]``, and are differentiable in the directions
and the parameters. Sampling picks reflection with probability ``F`` and refraction otherwise,
from the low digits of ``u[:, 1]`` (two uniforms per sample, as every lobe here takes).
"""

from __future__ import annotations

import torch

from neuralbake.material.frame import as_colour, as_scalar, check_direction_pair, check_directions, check_uniforms, dot, normalize, reflect
from neuralbake.material.fresnel import fresnel_dielectric
from neuralbake.material.lobes import Lobe, Param, _alphas
from neuralbake.material.microfacet import ggx_d, ggx_g1, ggx_sample_visible_normal

__all__ = [
    "BRANCH_DIGITS",
    "DIELECTRIC",
    "THIN_DIELECTRIC",
    "dielectric_eval",
    "dielectric_pdf",
    "dielectric_sample",
    "fresnel_signed",
    "refract",
    "slab_reflectance",
    "thin_dielectric_eval",
    "thin_dielectric_pdf",
    "thin_dielectric_sample",
]


BRANCH_DIGITS = 4096
""":func:`dielectric_sample` draws reflection or refraction with ``frac(u1 * BRANCH_DIGITS)``."""


def fresnel_signed(cos_i: torch.Tensor, ior: torch.Tensor) -> torch.Tensor:
    """Unpolarised reflectance for light meeting a microfacet at signed cosine ``cos_i`` (positive: from the air side,
    relative index ``ior``; negative: from inside, ``1 / ior``), ``[N]``; 1 under total internal reflection."""
    return fresnel_dielectric(cos_i, torch.where(cos_i >= 0.0, ior, 1.0 / ior))


def refract(w: torch.Tensor, m: torch.Tensor, ior: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Refraction of ``w`` (``[N, 3]``, pointing away from the surface) through microfacet normal ``m``: the
    transmitted direction on the other side and whether it exists (False under total internal reflection)."""
    cos_i = dot(w, m)
    eta_ti = torch.where(cos_i >= 0.0, 1.0 / ior, ior)  # index ratio incident side / transmitted side, inverted
    cos_t2 = 1.0 - eta_ti * eta_ti * (1.0 - cos_i * cos_i)
    exists = cos_t2 > 0.0
    cos_t = -torch.sign(cos_i) * torch.sqrt(torch.clamp(cos_t2, min=0.0))
    return m * (cos_i * eta_ti + cos_t)[:, None] - w * eta_ti[:, None], exists


def _microfacet(wi: torch.Tensor, wo: torch.Tensor, ior: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pair's microfacet normal (upper side), whether it is a reflection, the viewer-to-light index ratio ``eta``
    and whether the micro- and macro-surface agree on the sides (pairs they do not are zero)."""
    cos_i, cos_o = wi[:, 2], wo[:, 2]
    reflected = cos_i * cos_o > 0.0
    eta = torch.where(cos_o > 0.0, ior, 1.0 / ior)
    m = normalize(wo + wi * torch.where(reflected, torch.ones_like(eta), eta)[:, None])
    m = m * torch.where(m[:, 2] < 0.0, -1.0, 1.0)[:, None]
    agree = (dot(wo, m) * cos_o > 0.0) & (dot(wi, m) * cos_i > 0.0) & (cos_o != 0.0) & (cos_i != 0.0)
    return m, reflected, eta, agree


def dielectric_eval(
    wi: torch.Tensor, wo: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5, color: Param = 1.0
) -> torch.Tensor:
    """``f(wi, wo) |cos_i|`` of the rough dielectric boundary, ``[N, 3]``: reflection where ``wi`` and ``wo`` are on
    one side, refraction where they are on opposite sides (module docstring), the refraction tinted by ``color``
    (RGB, broadcastable to ``[N, 3]``: a surface tint such as Standard Surface's ``transmission_color``)."""
    wi, wo = check_direction_pair(wi, wo)
    ior = as_scalar("ior", ior, wi)
    ax, ay = _alphas(alpha_x, alpha_y, wi)
    m, reflected, eta, agree = _microfacet(wi, wo, ior)
    d = ggx_d(m, ax, ay)
    f = fresnel_signed(dot(wo, m), ior)
    g = ggx_g1(wi, m, ax, ay) * ggx_g1(wo, m, ax, ay)
    abs_cos_o = torch.abs(wo[:, 2]).clamp(min=torch.finfo(wo.dtype).tiny)
    reflection = f * d * g / (4.0 * abs_cos_o)
    denominator = (dot(wo, m) + eta * dot(wi, m)) ** 2
    refraction = torch.abs((1.0 - f) * d * g * dot(wi, m) * dot(wo, m) / (abs_cos_o * denominator.clamp(min=torch.finfo(wo.dtype).tiny)))
    tint = torch.where(reflected[:, None], torch.ones_like(wo), as_colour("color", color, wi))
    value = torch.where(agree, torch.where(reflected, reflection, refraction), torch.zeros_like(reflection))
    return value[:, None] * tint


def dielectric_pdf(
    wi: torch.Tensor, wo: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5, color: Param | None = None
) -> torch.Tensor:
    """Solid-angle density of :func:`dielectric_sample`, ``[N]``: the visible-normal density of ``m`` seen from
    ``wo``, times the branch's probability (``F`` or ``1 - F``) and the Jacobian from ``m`` to ``wi``."""
    wi, wo = check_direction_pair(wi, wo)
    ior = as_scalar("ior", ior, wi)
    ax, ay = _alphas(alpha_x, alpha_y, wi)
    m, reflected, eta, agree = _microfacet(wi, wo, ior)
    tiny = torch.finfo(wo.dtype).tiny
    wo_up = wo * torch.where(wo[:, 2] < 0.0, -1.0, 1.0)[:, None]
    visible = ggx_g1(wo_up, m, ax, ay) * ggx_d(m, ax, ay) * torch.abs(dot(wo, m)) / torch.abs(wo[:, 2]).clamp(min=tiny)
    f = fresnel_signed(dot(wo, m), ior)
    jacobian = torch.where(
        reflected,
        1.0 / (4.0 * torch.abs(dot(wi, m)).clamp(min=tiny)),
        eta * eta * torch.abs(dot(wi, m)) / ((dot(wo, m) + eta * dot(wi, m)) ** 2).clamp(min=tiny),
    )
    pdf = visible * torch.where(reflected, f, 1.0 - f) * jacobian
    return torch.where(agree, pdf, torch.zeros_like(pdf))


def dielectric_sample(
    wo: torch.Tensor, u: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5, color: Param | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A visible GGX normal seen from ``wo``, then reflection (probability ``F``) or refraction: ``(wi [N, 3], pdf [N])``;
    ``pdf`` is 0 for a sample the model gives no value (the side tests)."""
    wo = check_directions("wo", wo)
    u = check_uniforms(u, wo)
    ior = as_scalar("ior", ior, wo)
    ax, ay = _alphas(alpha_x, alpha_y, wo)
    side = torch.where(wo[:, 2] < 0.0, -1.0, 1.0).to(wo.dtype)
    m = ggx_sample_visible_normal(wo * side[:, None], u, ax, ay)
    f = fresnel_signed(dot(wo, m), ior)
    # the branch needs a third uniform, independent of m: the digits of u1 below its first 12 bits (u1's top bits
    # place the normal's azimuth; the two share nothing coarser than 2 pi / 4096 of it)
    choose = torch.remainder(u[:, 1] * float(BRANCH_DIGITS), 1.0)
    reflected = choose < f
    through, exists = refract(wo, m, ior)
    mirror = reflected | ~exists
    wi = torch.where(mirror[:, None], reflect(wo, m), through)
    # a reflection that leaves through the surface, or a refraction that stays on the viewer's side, is no sample
    # (its density belongs to the other branch)
    same_side = wi[:, 2] * wo[:, 2] > 0.0
    pdf = dielectric_pdf(wi, wo, alpha_x=ax, alpha_y=ay, ior=ior)
    return wi, torch.where(mirror == same_side, pdf, torch.zeros_like(pdf))


DIELECTRIC = Lobe("dielectric", dielectric_eval, dielectric_sample, dielectric_pdf)
"""The rough dielectric behind the common lobe interface, for ``layer(DIELECTRIC, params)``: the transmissive part
of Standard Surface and OpenPBR (:mod:`~neuralbake.material.surfaces`). Not in :data:`~neuralbake.material.lobes.LOBES`
(the lobes a JSON material graph names): the neural-material bake and the deferred renderer shade reflection only."""


# --- thin-walled: a slab too thin to see, both faces rough -------------------------------------------------------


def slab_reflectance(f: torch.Tensor) -> torch.Tensor:
    """Reflectance of a clear slab whose faces each reflect ``f``, summed over its internal bounces:
    ``f + (1 - f)^2 f / (1 - f^2) = 2 f / (1 + f)``; the slab transmits the rest, ``(1 - f) / (1 + f)``."""
    return 2.0 * f / (1.0 + f)


def _mirror(w: torch.Tensor) -> torch.Tensor:
    return w * torch.tensor([1.0, 1.0, -1.0], dtype=w.dtype, device=w.device)


def thin_dielectric_eval(
    wi: torch.Tensor, wo: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5, color: Param = 1.0
) -> torch.Tensor:
    """``f(wi, wo) |cos_i|`` of a thin-walled dielectric (a soap bubble, a window pane seen as a surface), ``[N, 3]``.

    Light does not bend: what the slab transmits leaves on the far side along the direction it came in. Each face
    reflects ``F(wo.m)`` (index ``ior``); summed over the bounces inside, the slab reflects ``R = 2F / (1 + F)`` and
    transmits ``T = (1 - F) / (1 + F)`` (:func:`slab_reflectance`: no absorption, so ``R + T = 1``). Reflection is
    the GGX reflection lobe ``R D G / (4 |cos_o|)`` about the half vector of ``wi`` and ``wo``; transmission is the
    same lobe for ``wi`` mirrored through the surface plane, times ``T`` and the tint ``color``, so a smooth slab
    passes light straight through and roughness blurs it as it blurs the reflection. Both sides of the surface are
    alike (a viewer below sees the same slab). Smooth limit: Mitsuba 3's ``thindielectric``.
    """
    wi, wo = check_direction_pair(wi, wo)
    ior = as_scalar("ior", ior, wi)
    ax, ay = _alphas(alpha_x, alpha_y, wi)
    side = torch.where(wo[:, 2] < 0.0, -1.0, 1.0).to(wo.dtype)[:, None]
    up_o = wo * side  # the viewer's side as the upper one
    up_i = wi * side
    through = up_i[:, 2] < 0.0
    lobe_i = torch.where(through[:, None], _mirror(up_i), up_i)
    m = normalize(lobe_i + up_o)
    d = ggx_d(m, ax, ay)
    g = ggx_g1(lobe_i, m, ax, ay) * ggx_g1(up_o, m, ax, ay)
    f = fresnel_dielectric(torch.abs(dot(up_o, m)), ior)
    share = torch.where(through, 1.0 - slab_reflectance(f), slab_reflectance(f))
    tiny = torch.finfo(wo.dtype).tiny
    value = share * d * g / (4.0 * torch.abs(up_o[:, 2]).clamp(min=tiny))
    value = torch.where((up_o[:, 2] > 0.0) & (lobe_i[:, 2] > 0.0), value, torch.zeros_like(value))
    tint = torch.where(through[:, None], as_colour("color", color, wi), torch.ones_like(wo))
    return value[:, None] * tint


def thin_dielectric_pdf(
    wi: torch.Tensor, wo: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5, color: Param | None = None
) -> torch.Tensor:
    """Density of :func:`thin_dielectric_sample`: visible-normal GGX about the (mirrored) half vector, times the
    branch's probability ``R`` or ``T``, ``[N]``."""
    wi, wo = check_direction_pair(wi, wo)
    ior = as_scalar("ior", ior, wi)
    ax, ay = _alphas(alpha_x, alpha_y, wi)
    side = torch.where(wo[:, 2] < 0.0, -1.0, 1.0).to(wo.dtype)[:, None]
    up_o, up_i = wo * side, wi * side
    through = up_i[:, 2] < 0.0
    lobe_i = torch.where(through[:, None], _mirror(up_i), up_i)
    m = normalize(lobe_i + up_o)
    tiny = torch.finfo(wo.dtype).tiny
    reflected = ggx_g1(up_o, m, ax, ay) * ggx_d(m, ax, ay) / (4.0 * torch.abs(up_o[:, 2]).clamp(min=tiny))
    f = fresnel_dielectric(torch.abs(dot(up_o, m)), ior)
    share = torch.where(through, 1.0 - slab_reflectance(f), slab_reflectance(f))
    pdf = reflected * share
    return torch.where((up_o[:, 2] > 0.0) & (lobe_i[:, 2] > 0.0), pdf, torch.zeros_like(pdf))


def thin_dielectric_sample(
    wo: torch.Tensor, u: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5, color: Param | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A visible GGX normal, the mirror direction, and with probability ``T`` that direction passed through the slab
    (mirrored through the surface plane); ``(wi [N, 3], pdf [N])``, the branch drawn from ``u1``'s low digits."""
    wo = check_directions("wo", wo)
    u = check_uniforms(u, wo)
    ior = as_scalar("ior", ior, wo)
    ax, ay = _alphas(alpha_x, alpha_y, wo)
    side = torch.where(wo[:, 2] < 0.0, -1.0, 1.0).to(wo.dtype)[:, None]
    up_o = wo * side
    m = ggx_sample_visible_normal(up_o, u, ax, ay)
    f = fresnel_dielectric(torch.abs(dot(up_o, m)), ior)
    through = torch.remainder(u[:, 1] * float(BRANCH_DIGITS), 1.0) >= slab_reflectance(f)
    up_i = reflect(up_o, m)
    valid = up_i[:, 2] > 0.0
    wi = torch.where(through[:, None], _mirror(up_i), up_i) * side
    pdf = thin_dielectric_pdf(wi, wo, alpha_x=ax, alpha_y=ay, ior=ior)
    return wi, torch.where(valid, pdf, torch.zeros_like(pdf))


THIN_DIELECTRIC = Lobe("thin_dielectric", thin_dielectric_eval, thin_dielectric_sample, thin_dielectric_pdf)
"""The thin-walled dielectric behind the common lobe interface (Standard Surface ``thin_walled`` and OpenPBR
``geometry_thin_walled`` transmission)."""
