"""Fresnel reflectance for the material lobes: exact conductor and dielectric equations, Schlick's
approximation, RGB complex indices of refraction for common metals, and Gulbrandsen's
artist-friendly mapping from a metal's colours to its complex index.

Both exact forms give the unpolarised reflectance (mean of the s and p terms) of light arriving
from a medium of index 1 (air) at a surface whose relative index is ``eta`` (dielectric) or
``eta + i k`` (conductor). They are written for autograd: every square root goes through
:func:`~neuralbake.material.frame.safe_sqrt`, so gradients with respect to ``eta``, ``k`` and the
angle stay finite at normal incidence and at ``k = 0``.
"""

from __future__ import annotations

import torch

from neuralbake.errors import InputError
from neuralbake.material.frame import safe_sqrt

__all__ = [
    "CONDUCTOR_IOR",
    "artistic_ior",
    "conductor_ior",
    "fresnel_conductor",
    "fresnel_dielectric",
    "fresnel_schlick",
]

# RGB (eta, k) of metals, relative to air.
# Cu, Au, Al, Ag: the values Mitsuba 3.9.1 uses in its RGB variants for `material="Cu"` etc.
# (its bundled spectral n, k data integrated to linear sRGB; read from the `eta`/`k` parameters
# of `roughconductor` in `scalar_rgb`), so cross-checks against Mitsuba use the same numbers.
# Fe: Mitsuba ships no iron data; these are n, k of iron at 650 / 550 / 450 nm as tabulated in
# Chaos Group's "Understanding metalness" (V-Ray blog), from refractiveindex.info.
CONDUCTOR_IOR: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "Cu": ((0.2010054737, 0.9237495065, 1.1022154093), (3.9132621288, 2.4530451298, 2.1420898438)),
    "Au": ((0.1430359781, 0.3753070831, 1.4420453310), (3.9829969406, 2.3855564594, 1.6033592224)),
    "Al": ((1.6575008631, 0.8804047107, 0.5212444663), (9.2238111496, 6.2695021629, 4.8370041847)),
    "Ag": ((0.1552761942, 0.1167279556, 0.1383876354), (4.8283543587, 3.1222224236, 2.1469011307)),
    "Fe": ((2.9114, 2.9497, 2.5845), (3.0893, 2.9318, 2.7670)),
}


def conductor_ior(
    name: str, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """RGB ``(eta, k)`` of a named metal (a key of :data:`CONDUCTOR_IOR`), each of shape ``[3]``."""
    if name not in CONDUCTOR_IOR:
        raise InputError(
            f"unknown conductor {name!r}.", field="material", fix=f"use one of {sorted(CONDUCTOR_IOR)} or pass eta and k yourself."
        )
    eta, k = CONDUCTOR_IOR[name]
    return torch.tensor(eta, dtype=dtype, device=device), torch.tensor(k, dtype=dtype, device=device)


def fresnel_conductor(cos_i: torch.Tensor, eta: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Unpolarised reflectance of a conductor of complex index ``eta + i k``.

    Parameters
    ----------
    cos_i:
        Cosine between the incident direction and the (micro)normal, ``[N, 1]`` or broadcastable;
        taken in absolute value (a conductor reflects the same from either side).
    eta, k:
        Real and imaginary parts of the relative index, e.g. ``[N, 3]``.

    Returns
    -------
    Reflectance in ``[0, 1]``, the broadcast shape of the inputs.
    """
    c2 = torch.clamp(cos_i * cos_i, max=1.0)
    s2 = 1.0 - c2
    eta2, k2 = eta * eta, k * k
    # |eta_c^2 - sin^2| and its real square root a; the s and p amplitudes follow in real arithmetic
    # (the standard closed form of the complex Fresnel equations, e.g. PBR book 3rd ed. 8.2.1).
    t0 = eta2 - k2 - s2
    a2_plus_b2 = safe_sqrt(t0 * t0 + 4.0 * eta2 * k2)
    a = safe_sqrt(0.5 * (a2_plus_b2 + t0))
    t1 = a2_plus_b2 + c2
    t2 = 2.0 * torch.abs(cos_i) * a
    r_s = (t1 - t2) / (t1 + t2)
    t3 = c2 * a2_plus_b2 + s2 * s2
    t4 = t2 * s2
    r_p = r_s * (t3 - t4) / (t3 + t4)
    return 0.5 * (r_s + r_p)


def fresnel_dielectric(cos_i: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
    """Unpolarised reflectance at a dielectric boundary of relative index ``eta`` (real).

    ``cos_i`` (broadcastable with ``eta``) is the cosine on the incident side, taken in absolute
    value; light arrives from the side of index 1, so ``eta < 1`` can give total internal
    reflection (reflectance 1). Returns the broadcast shape of the inputs.
    """
    c_i = torch.abs(cos_i)
    s2_t = (1.0 - c_i * c_i) / (eta * eta)
    c_t = safe_sqrt(1.0 - s2_t)
    r_s = (c_i - eta * c_t) / (c_i + eta * c_t)
    r_p = (eta * c_i - c_t) / (eta * c_i + c_t)
    r = 0.5 * (r_s * r_s + r_p * r_p)
    return torch.where(s2_t >= 1.0, torch.ones_like(r), r)


def fresnel_schlick(cos_i: torch.Tensor, f0: torch.Tensor) -> torch.Tensor:
    """Schlick's approximation ``f0 + (1 - f0) (1 - |cos_i|)^5``, broadcast shape of the inputs."""
    w = torch.clamp(1.0 - torch.abs(cos_i), min=0.0)
    w2 = w * w
    return f0 + (1.0 - f0) * (w2 * w2 * w)


def artistic_ior(reflectivity: torch.Tensor, edge_color: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Complex index ``(n, k)`` of a metal from its reflectivity ``r`` and edge tint ``g``, RGB each.

    Gulbrandsen, "Artist Friendly Metallic Fresnel", JCGT 3(4), 2014: with ``r`` clamped to
    ``[0, 0.99]``, ``n = g (1 - r)/(1 + r) + (1 - g)(1 + sqrt r)/(1 - sqrt r)`` and
    ``k = sqrt((r (n + 1)^2 - (n - 1)^2) / (1 - r))``, so the normal-incidence Fresnel
    ``((n - 1)^2 + k^2) / ((n + 1)^2 + k^2)`` is exactly ``r``. Shapes broadcast.
    """
    r = torch.clamp(reflectivity, 0.0, 0.99)
    r_sqrt = safe_sqrt(r)
    n_min = (1.0 - r) / (1.0 + r)
    n_max = (1.0 + r_sqrt) / (1.0 - r_sqrt)
    n = edge_color * n_min + (1.0 - edge_color) * n_max
    k2 = ((n + 1.0) ** 2 * r - (n - 1.0) ** 2) / (1.0 - r)
    return n, safe_sqrt(torch.clamp(k2, min=0.0))
