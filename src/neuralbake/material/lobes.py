"""The reflection lobes that layered materials are built from: Lambert, GGX conductor and GGX
dielectric coating here; sheen and the glTF metal/rough model in their own modules; and the
:class:`Lobe` record that gives all five the same ``eval`` / ``sample`` / ``pdf`` interface.

Each lobe is three plain batched functions taking the same keyword parameters:
``<lobe>_eval(wi, wo, **params) -> [N, 3]`` is the cosine-weighted BSDF ``f(wi, wo) cos(theta_i)``,
``<lobe>_sample(wo, u, **params) -> (wi, pdf)`` draws ``wi`` given ``wo`` from ``[N, 2]``
uniforms, and ``<lobe>_pdf(wi, wo, **params) -> [N]`` is the solid-angle density of that sampler.
Parameters a sampler does not need are still accepted, so a lobe can be driven from one parameter
dictionary (see :data:`LOBES`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from neuralbake.errors import InputError
from neuralbake.material.frame import (
    as_colour,
    as_scalar,
    check_direction_pair,
    check_directions,
    check_uniforms,
    cos_theta,
    cosine_hemisphere_pdf,
    dot,
    square_to_cosine_hemisphere,
)
from neuralbake.material.fresnel import fresnel_conductor, fresnel_dielectric
from neuralbake.material.gltf import gltf_eval, gltf_pdf, gltf_sample
from neuralbake.material.microfacet import clamp_alpha, ggx_reflection, ggx_reflection_pdf, ggx_reflection_sample
from neuralbake.material.sheen import sheen_eval, sheen_pdf, sheen_sample
from neuralbake.material.thin_film import ior_from_f0, thin_film_reflectance

__all__ = [
    "LOBES",
    "Lobe",
    "coating_eval",
    "coating_pdf",
    "coating_sample",
    "conductor_eval",
    "conductor_pdf",
    "conductor_sample",
    "filmed",
    "lambert_eval",
    "lambert_pdf",
    "lambert_sample",
]

Param = torch.Tensor | float


def _alphas(alpha_x: Param, alpha_y: Param | None, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ax = clamp_alpha(as_scalar("alpha_x", alpha_x, like))
    ay = ax if alpha_y is None else clamp_alpha(as_scalar("alpha_y", alpha_y, like))
    return ax, ay


def _has_film(weight: Param) -> bool:
    return isinstance(weight, torch.Tensor) or weight != 0.0


def filmed(fresnel: torch.Tensor, cos: torch.Tensor, f0: torch.Tensor, weight: Param, thickness: Param, ior: Param) -> torch.Tensor:
    """``fresnel`` ``[N, 3]`` where a thin film covers a ``weight`` share of the surface, at the cosine ``cos`` ``[N]`` to
    the microfacet normal; ``thickness`` in nanometres.

    The film model (:func:`~neuralbake.material.thin_film.thin_film_reflectance`) sees the base as the dielectric of
    the same normal-incidence reflectance ``f0``; what the film adds is its reflectance minus that dielectric's own,
    added to the base's exact ``fresnel``: so a film of zero thickness or weight leaves a metal's Fresnel exactly as
    it was, and over a dielectric it is the film model itself."""
    w = as_scalar("film_weight", weight, cos)[:, None]
    film = thin_film_reflectance(cos, as_scalar("film_ior", ior, cos), as_scalar("film_thickness", thickness, cos), f0)
    bare = fresnel_dielectric(torch.abs(cos)[:, None], ior_from_f0(f0))
    return torch.clamp(fresnel + w * (film - bare), 0.0, 1.0)


# --- Lambert ------------------------------------------------------------------------------------


def lambert_eval(wi: torch.Tensor, wo: torch.Tensor, *, albedo: Param) -> torch.Tensor:
    """Lambertian ``albedo / pi * cos_i``, ``[N, 3]``; zero unless both directions are above.

    ``wi``, ``wo``: ``[N, 3]``; ``albedo``: RGB, broadcastable to ``[N, 3]``.
    """
    wi, wo = check_direction_pair(wi, wo)
    albedo = as_colour("albedo", albedo, wi)
    cos_i, cos_o = cos_theta(wi), cos_theta(wo)
    weight = torch.where((cos_i > 0.0) & (cos_o > 0.0), cos_i / math.pi, torch.zeros_like(cos_i))
    return albedo * weight[:, None]


def lambert_pdf(wi: torch.Tensor, wo: torch.Tensor, *, albedo: Param | None = None) -> torch.Tensor:
    """Cosine-weighted hemisphere density ``cos_i / pi`` (0 unless both are above), ``[N]``."""
    wi, wo = check_direction_pair(wi, wo)
    return torch.where(cos_theta(wo) > 0.0, cosine_hemisphere_pdf(wi), torch.zeros_like(wi[:, 2]))


def lambert_sample(wo: torch.Tensor, u: torch.Tensor, *, albedo: Param | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine-weighted ``wi`` ``[N, 3]`` and its pdf ``[N]`` (0 where ``wo`` is below)."""
    wo = check_directions("wo", wo)
    wi = square_to_cosine_hemisphere(check_uniforms(u, wo))
    return wi, lambert_pdf(wi, wo)


# --- GGX conductor ------------------------------------------------------------------------------


def conductor_eval(
    wi: torch.Tensor, wo: torch.Tensor, *, eta: Param, k: Param, alpha_x: Param, alpha_y: Param | None = None,
    film_weight: Param = 0.0, film_thickness: Param = 0.0, film_ior: Param = 1.5,
) -> torch.Tensor:
    """Rough conductor: ``F(wo.h; eta + i k) D(h) G1(wi) G1(wo) / (4 cos_o)``, ``[N, 3]``.

    The same model as Mitsuba 3's ``roughconductor`` with ``distribution="ggx"``: anisotropic GGX,
    separable Smith masking-shadowing, exact conductor Fresnel per RGB channel.

    Parameters
    ----------
    wi, wo:
        Light and view directions, ``[N, 3]``, local frame.
    eta, k:
        Real and imaginary parts of the metal's index, RGB, broadcastable to ``[N, 3]``
        (:func:`~neuralbake.material.fresnel.conductor_ior` gives presets).
    alpha_x, alpha_y:
        GGX roughness along the tangent (x) and bitangent (y), broadcastable to ``[N]``;
        ``alpha_y=None`` means isotropic.
    film_weight, film_thickness, film_ior:
        A thin film over the metal (:func:`filmed`): the share of the surface it covers, its thickness in
        nanometres and its index; weight 0 (the default) is no film.
    """
    wi, wo = check_direction_pair(wi, wo)
    eta, k = as_colour("eta", eta, wi), as_colour("k", k, wi)
    ax, ay = _alphas(alpha_x, alpha_y, wi)
    value, h, _ = ggx_reflection(wi, wo, ax, ay)
    cos = dot(wo, h)
    fresnel = fresnel_conductor(cos[:, None], eta, k)
    if _has_film(film_weight):
        f0 = fresnel_conductor(torch.ones_like(cos)[:, None], eta, k)
        fresnel = filmed(fresnel, cos, f0, film_weight, film_thickness, film_ior)
    return fresnel * value[:, None]


def conductor_pdf(
    wi: torch.Tensor, wo: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, eta: Param | None = None, k: Param | None = None,
    film_weight: Param = 0.0, film_thickness: Param = 0.0, film_ior: Param = 1.5,
) -> torch.Tensor:
    """Visible-normal sampling density ``G1(wo) D(h) / (4 cos_o)``, ``[N]``."""
    wi, wo = check_direction_pair(wi, wo)
    return ggx_reflection_pdf(wi, wo, *_alphas(alpha_x, alpha_y, wi))


def conductor_sample(
    wo: torch.Tensor, u: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, eta: Param | None = None, k: Param | None = None,
    film_weight: Param = 0.0, film_thickness: Param = 0.0, film_ior: Param = 1.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Visible-normal GGX sample: ``wi`` ``[N, 3]`` and pdf ``[N]`` (0 for invalid samples)."""
    wo = check_directions("wo", wo)
    return ggx_reflection_sample(wo, check_uniforms(u, wo), *_alphas(alpha_x, alpha_y, wo))


# --- GGX dielectric coating (reflection only) ---------------------------------------------------


def coating_eval(
    wi: torch.Tensor, wo: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5,
    film_weight: Param = 0.0, film_thickness: Param = 0.0, film_ior: Param = 1.5,
) -> torch.Tensor:
    """Top reflection of a rough varnish / clear coat, ``[N, 3]`` (grey).

    ``F_dielectric(wo.h; ior) D(h) G1(wi) G1(wo) / (4 cos_o)``: the reflection part of Mitsuba 3's
    ``roughdielectric`` (and the specular part of ``roughplastic``). Light entering the coating is
    not modelled here; layering the lobes is a later step. ``ior`` (real, relative to air) is
    broadcastable to ``[N]``; ``alpha_x``/``alpha_y`` and the thin film as in :func:`conductor_eval`
    (with a film the reflection is coloured).
    """
    wi, wo = check_direction_pair(wi, wo)
    ior = as_scalar("ior", ior, wi)
    ax, ay = _alphas(alpha_x, alpha_y, wi)
    value, h, _ = ggx_reflection(wi, wo, ax, ay)
    cos = dot(wo, h)
    fresnel = fresnel_dielectric(cos, ior)[:, None].expand(-1, 3)
    if _has_film(film_weight):
        f0 = (((ior - 1.0) / (ior + 1.0)) ** 2)[:, None].expand(-1, 3)
        fresnel = filmed(fresnel, cos, f0, film_weight, film_thickness, film_ior)
    return fresnel * value[:, None]


def coating_pdf(
    wi: torch.Tensor, wo: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param | None = None,
    film_weight: Param = 0.0, film_thickness: Param = 0.0, film_ior: Param = 1.5,
) -> torch.Tensor:
    """Visible-normal sampling density, as :func:`conductor_pdf`, ``[N]``."""
    wi, wo = check_direction_pair(wi, wo)
    return ggx_reflection_pdf(wi, wo, *_alphas(alpha_x, alpha_y, wi))


def coating_sample(
    wo: torch.Tensor, u: torch.Tensor, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param | None = None,
    film_weight: Param = 0.0, film_thickness: Param = 0.0, film_ior: Param = 1.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Visible-normal GGX sample, as :func:`conductor_sample`."""
    wo = check_directions("wo", wo)
    return ggx_reflection_sample(wo, check_uniforms(u, wo), *_alphas(alpha_x, alpha_y, wo))


# --- one interface for all lobes ----------------------------------------------------------------


def _keyword_parameters(fn: Callable[..., object], *, required_only: bool = False) -> tuple[str, ...]:
    params = inspect.signature(fn).parameters.values()
    return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY and (not required_only or p.default is p.empty))


@dataclass(frozen=True)
class Lobe:
    """One lobe's three operations behind the ``(directions, params)`` interface.

    ``params`` maps parameter names (:attr:`parameters` lists them) to tensors or floats
    broadcastable to ``[N, ...]``, e.g.
    ``LOBES["conductor"].eval(wi, wo, {"eta": eta, "k": k, "alpha_x": 0.3})``.
    """

    name: str
    eval_fn: Callable[..., torch.Tensor]
    sample_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    pdf_fn: Callable[..., torch.Tensor]

    @property
    def parameters(self) -> tuple[str, ...]:
        """Names of the lobe's parameters (the keyword-only arguments of its ``eval``)."""
        return _keyword_parameters(self.eval_fn)

    def _checked(self, fn: Callable[..., object], params: Mapping[str, Param]) -> Mapping[str, Param]:
        # Turn the TypeErrors of a wrong dictionary into errors that name the field.
        accepted = self.parameters
        for key in params:
            if key not in accepted:
                raise InputError(f"the {self.name} lobe has no parameter {key!r}.", field=key, fix=f"use only {', '.join(accepted)}.")
        for key in _keyword_parameters(fn, required_only=True):
            if key not in params:
                raise InputError(f"the {self.name} lobe needs parameter {key!r}.", field=key, fix=f"add {key!r} to the parameters.")
        return params

    def eval(self, wi: torch.Tensor, wo: torch.Tensor, params: Mapping[str, Param]) -> torch.Tensor:
        """``f(wi, wo) cos_i``, ``[N, 3]``."""
        return self.eval_fn(wi, wo, **self._checked(self.eval_fn, params))

    def sample(self, wo: torch.Tensor, u: torch.Tensor, params: Mapping[str, Param]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(wi [N, 3], pdf [N])`` from uniforms ``u`` ``[N, 2]``; ``pdf == 0`` marks an invalid sample."""
        return self.sample_fn(wo, u, **self._checked(self.sample_fn, params))

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor, params: Mapping[str, Param]) -> torch.Tensor:
        """Solid-angle density of ``sample``, ``[N]``."""
        return self.pdf_fn(wi, wo, **self._checked(self.pdf_fn, params))


LOBES: dict[str, Lobe] = {
    "lambert": Lobe("lambert", lambert_eval, lambert_sample, lambert_pdf),
    "conductor": Lobe("conductor", conductor_eval, conductor_sample, conductor_pdf),
    "coating": Lobe("coating", coating_eval, coating_sample, coating_pdf),
    "sheen": Lobe("sheen", sheen_eval, sheen_sample, sheen_pdf),
    "gltf": Lobe("gltf", gltf_eval, gltf_sample, gltf_pdf),
}
"""Every lobe by name: ``lambert``, ``conductor``, ``coating``, ``sheen``, ``gltf``."""
