"""Thin-film interference: the iridescent reflectance of a film (soap, oil, oxide, a lacquer's top coat) of
index ``film_ior`` and thickness ``thickness`` (nanometres) over a base, as an RGB Fresnel term that replaces
the plain one where the film covers (OpenPBR ``thin_film_*``, standard_surface ``thin_film_*``, glTF
``KHR_materials_iridescence``).

Method (Belcour and Barla 2017, "A Practical Extension to Microfacet Theory for the Modeling of Varying
Iridescence"): light bouncing inside the film adds up as an Airy series, whose reflectance at wavelength
``lambda`` is a Fourier series in the optical path difference ``OPD = 2 film_ior d cos(theta_film)``:

    R(lambda) = C0 + sum_m 2 C_m cos(2 pi m OPD / lambda + m phi)

with ``C0 = R12 + T12^2 R23 / (1 - R12 R23)``, ``C_m = (T12^2 R23 / (1 - R12 R23) - T12) sqrt(R12 R23)^m``
(``R12``, ``R23``: the two interfaces' unpolarised reflectances, ``T12 = 1 - R12``) and ``phi`` the phase
changes at the two reflections (``pi`` where light reflects off a lower index inside the film, the
convention that goes with the negative ``C_m``). Integrating a cosine term against the colour matching
functions has a closed form once they are fitted with Gaussians in wavenumber, so each term costs one
evaluation per channel instead of a spectral integral. The DC term is taken as a grey reflectance (a flat
spectrum counts as white), the oscillating ones go from XYZ to linear Rec.709. Two terms of the series are
kept (``m <= 2``): the third is below 1 % for any base that is not a mirror.

Interfaces use the exact unpolarised dielectric Fresnel (:func:`~neuralbake.material.fresnel.fresnel_dielectric`);
a coloured base is given by its normal-incidence reflectance ``base_f0`` (RGB) and treated as a dielectric of
the index that reflectance implies, as glTF's iridescence does. The Gaussian fits of the CIE 1931 2-degree
sensitivities in wavenumber (XYZ, with x's second lobe) are Belcour and Barla's published constants.

Hand-written because no Python library evaluates thin-film colour in PyTorch with gradients.
"""

from __future__ import annotations

import math

import torch

from neuralbake.material.fresnel import fresnel_dielectric

__all__ = ["THIN_FILM_TERMS", "XYZ_TO_REC709", "ior_from_f0", "thin_film_reflectance", "thin_film_sensitivity"]

THIN_FILM_TERMS = 2
"""Oscillating terms of the Airy series kept (``m = 1 .. THIN_FILM_TERMS``)."""

XYZ_TO_REC709 = (
    (3.2404542, -1.5371385, -0.4985314),
    (-0.9692660, 1.8760108, 0.0415560),
    (0.0556434, -0.2040259, 1.0572252),
)
"""CIE XYZ to linear Rec.709 / sRGB primaries (D65), rows = R, G, B."""

# Gaussian fits of the XYZ sensitivities in wavenumber (per metre): amplitude, centre, variance; x has a second lobe.
_AMPLITUDE = (5.4856e-13, 4.4201e-13, 5.2481e-13)
_CENTRE = (1.6810e06, 1.7953e06, 2.2084e06)
_VARIANCE = (4.3278e09, 9.3046e09, 6.6121e09)
_X_LOBE = (9.7470e-14, 2.2399e06, 4.5282e09)
_Y_INTEGRAL = 1.0685e-07  # the fitted y sensitivity's integral: a flat spectrum has Y = 1


def thin_film_sensitivity(opd_nm: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Linear Rec.709 response ``[N, 3]`` to the spectrum ``cos(2 pi opd / lambda + shift)`` (``opd_nm`` ``[N]``
    in nanometres, ``shift`` ``[N, 3]`` per channel), normalised so a flat spectrum has ``Y = 1``."""
    phase = (2.0 * math.pi * 1e-9) * opd_nm[:, None]
    tensor = lambda values: torch.tensor(values, dtype=opd_nm.dtype, device=opd_nm.device)  # noqa: E731
    amplitude, centre, variance = tensor(_AMPLITUDE), tensor(_CENTRE), tensor(_VARIANCE)
    xyz = amplitude * torch.sqrt(2.0 * math.pi * variance) * torch.cos(centre * phase + shift) * torch.exp(-(phase**2) * variance)
    a, c, v = _X_LOBE
    extra = a * math.sqrt(2.0 * math.pi * v) * torch.cos(c * phase[:, 0] + shift[:, 0]) * torch.exp(-(phase[:, 0] ** 2) * v)
    xyz = torch.cat((xyz[:, :1] + extra[:, None], xyz[:, 1:]), 1) / _Y_INTEGRAL
    return xyz @ tensor(XYZ_TO_REC709).T


def ior_from_f0(f0: torch.Tensor) -> torch.Tensor:
    """The dielectric index (against air) whose normal-incidence reflectance is ``f0`` (clamped below 1)."""
    root = torch.sqrt(torch.clamp(f0, 0.0, 0.9999))
    return (1.0 + root) / (1.0 - root)


def thin_film_reflectance(
    cos_theta: torch.Tensor,
    film_ior: torch.Tensor | float,
    thickness: torch.Tensor | float,
    base_f0: torch.Tensor,
    outside_ior: float = 1.0,
) -> torch.Tensor:
    """RGB reflectance ``[N, 3]`` of a thin film over a base, seen at ``cos_theta`` ``[N]`` (cosine between the
    direction and the microfacet normal, outside the film).

    ``film_ior``, ``thickness`` (nm): broadcastable to ``[N]``; ``base_f0``: the base's normal-incidence
    reflectance, broadcastable to ``[N, 3]``; ``outside_ior``: the medium above (1: air). A vanishing film
    (thickness towards 0) fades to the base's own reflectance through a film index blended towards the outside
    medium over the first 30 nm, as glTF specifies, so there is no jump. Differentiable in every input.
    """
    cos1 = torch.clamp(torch.abs(cos_theta), 0.0, 1.0)
    like = cos1
    film = torch.as_tensor(film_ior, dtype=like.dtype, device=like.device).expand_as(like)
    d = torch.as_tensor(thickness, dtype=like.dtype, device=like.device).expand_as(like)
    fade = torch.clamp(d / 30.0, 0.0, 1.0)
    fade = fade * fade * (3.0 - 2.0 * fade)  # smoothstep
    n2 = outside_ior + (film - outside_ior) * fade
    sin2_sq = (outside_ior / n2) ** 2 * (1.0 - cos1 * cos1)
    tir = sin2_sq >= 1.0
    cos2 = torch.sqrt(torch.clamp(1.0 - sin2_sq, min=0.0))
    r12 = fresnel_dielectric(cos1, n2 / outside_ior)[:, None]
    t12 = 1.0 - r12
    base = torch.as_tensor(base_f0, dtype=like.dtype, device=like.device).expand(like.shape[0], 3)
    n3 = ior_from_f0(base)
    r23 = fresnel_dielectric(cos2[:, None], n3 / n2[:, None])
    # phase changes on reflection: pi off a lower index, for the film's inside (phi21) and the base (phi23)
    phi21 = torch.where(n2 < outside_ior, 0.0, math.pi).to(like.dtype)[:, None]
    phi23 = torch.where(n3 < n2[:, None], math.pi, 0.0).to(like.dtype)
    r123 = torch.clamp(r12 * r23, 1e-12, 0.9999)  # no film: r12 = 0, and the series is the base alone
    through = t12 * t12 * r23 / (1.0 - r123)
    out = r12 + through
    term = through - t12
    opd = 2.0 * n2 * d * cos2
    for m in range(1, THIN_FILM_TERMS + 1):
        term = term * torch.sqrt(r123)
        out = out + term * 2.0 * thin_film_sensitivity(m * opd, m * (phi21 + phi23))
    out = torch.clamp(out, min=0.0)  # colours outside Rec.709 are clipped
    return torch.where(tir[:, None], torch.ones_like(out), out)
