"""The uber-shader closures of MaterialX, built from the lobes: Standard Surface and OpenPBR as
:class:`~neuralbake.material.layering.Layer` trees, plus the two layer kinds they need beyond
:mod:`~neuralbake.material.layering` (a sheen over a base by albedo scaling, and a lobe whose
tangent is turned about the normal).

:func:`standard_surface_layers` and :func:`open_pbr_surface_layers` take the shader's inputs
evaluated at N shading points (colours ``[N, 3]``, scalars ``[N]``, keyed by the shader's input
names) and return the layer tree; :mod:`~neuralbake.material.mtlx_compiler` evaluates the inputs
from a MaterialX document and calls them.

**standard_surface** (following MaterialX's ``NG_standard_surface_surfaceshader_100``)::

    diffuse  = lambert((1 - subsurface) base base_color^g + subsurface subsurface_color^g)
               with g = 1 + coat coat_affect_color (Standard Surface's "coat gamma")
    sheened  = SheenLayer(diffuse, sheen, sheen_color, sheen_roughness)
    specular = mix(sheened, coat(sheened, spec alphas, ior=specular_IOR), specular)
    metal    = conductor(eta, k = artistic_ior(base base_color, specular specular_color), spec alphas)
    base     = mix(specular, metal, metalness)
    surface  = mix(base, coat(base, coat alphas, ior=coat_IOR, coat_color absorption), coat)

**open_pbr_surface** (the same structure; fuzz sits on top, as in OpenPBR)::

    diffuse  = lambert((1 - subsurface_weight) base_weight base_color + subsurface_weight subsurface_color)
    specular = mix(diffuse, coat(diffuse, spec alphas, ior=eta_s), specular_weight)
    metal    = conductor(artistic_ior(base_weight base_color, specular_weight specular_color), spec alphas)
    base     = mix(specular, metal, base_metalness)
    coated   = mix(base, coat(base, coat alphas, ior=coat_ior, coat_color absorption), coat_weight)
    surface  = SheenLayer(coated, fuzz_weight, fuzz_color, fuzz_roughness)

Standard Surface's ``specular_rotation`` / ``coat_rotation`` turn the anisotropy's tangent
counter-clockwise about the normal by 360 degrees per unit, as its graph's ``rotate3d`` does.
Roughness to GGX alpha is MaterialX's ``roughness_anisotropy`` node
(:func:`~neuralbake.material.microfacet.roughness_anisotropy`). Standard Surface's specular
roughness is first pulled towards 1 by ``coat_affect_roughness * coat * coat_roughness``;
OpenPBR's by the coat as ``mix(r, min(1, 2 r_coat^4 + r^4)^(1/4), coat_weight)``, both as in the
MaterialX graphs. OpenPBR's specular index under the coat is relative to the coat, as in the
MaterialX graph: ``eta_s = mix(specular_ior, max(r, 1/r), coat_weight)`` with
``r = specular_ior / coat_ior`` (the inversion where ``r < 1`` stands in for total internal
reflection). The metal's complex index comes from Gulbrandsen's artist-friendly mapping
(:func:`~neuralbake.material.fresnel.artistic_ior`). Weights are clamped to ``[0, 1]`` and
indices of refraction to at least 1.

Sheen / fuzz is layered by albedo scaling (:class:`SheenLayer`): the lobe, times its weight, plus
the base scaled by ``(1 - a_i)(1 - a_o)`` where ``a = weight max(color) E_sheen`` (a tabulated
directional albedo, :func:`~neuralbake.material.sheen.sheen_albedo`), the reciprocal form of
Standard Surface's sheen layer.

Approximations (documented, not silent): a weight below 1 on the specular and coat layers is a
linear :func:`~neuralbake.material.layering.mix` with the layer below (MaterialX scales the lobe
and its albedo instead); the coat colour is a Beer-Lambert absorption of unit thickness,
``sigma = -log(coat_color) / 2`` (exactly ``coat_color`` at normal incidence, darker at grazing
angles); ``diffuse_roughness`` / ``base_diffuse_roughness`` (Oren-Nayar) is rendered as Lambert;
subsurface scattering is a Lambert lobe of ``subsurface_color`` (radius, scale and anisotropy
unused); OpenPBR's F82-tint metal uses the same Gulbrandsen conductor with ``specular_color`` as
edge tint; OpenPBR's ``coat_darkening`` (1) is the coat's own albedo scaling; the sheen albedo
table is clamped to 1 where the Charlie lobe itself exceeds it (grazing, low roughness).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from neuralbake.material.dielectric import DIELECTRIC, THIN_DIELECTRIC
from neuralbake.material.frame import check_direction_pair, check_directions, check_uniforms, cos_theta, square_to_cosine_hemisphere
from neuralbake.material.fresnel import artistic_ior
from neuralbake.material.layering import Layer, coat, layer, mix
from neuralbake.material.microfacet import roughness_anisotropy
from neuralbake.material.sheen import sheen_albedo, sheen_eval, sheen_pdf

__all__ = ["RotatedLayer", "SheenLayer", "open_pbr_surface_layers", "standard_surface_layers"]


@dataclass(frozen=True, eq=False)
class SheenLayer:
    """A sheen (fuzz) lobe over ``base``, the base scaled by what the sheen does not reflect.

    ``f cos_i = w f_sheen cos_i + f_base cos_i (1 - a(cos_i)) (1 - a(cos_o))`` with
    ``a = w max(color) E(cos)`` (:func:`sheen_albedo`): the albedo scaling of Standard Surface's
    sheen layer, taken on both directions as the coat of :mod:`~neuralbake.material.layering` is,
    so it stays reciprocal and conserves energy. Sampling picks the sheen with probability
    ``a(cos_o)``, else the base. ``weight``, ``roughness``: ``[N]``; ``color``: ``[N, 3]``.
    """

    base: Layer
    weight: torch.Tensor
    color: torch.Tensor
    roughness: torch.Tensor

    def _albedo(self, cos: torch.Tensor) -> torch.Tensor:
        peak = self.weight * self.color.max(dim=-1).values
        return torch.clamp(peak * sheen_albedo(cos, self.roughness), 0.0, 1.0)

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``w f_sheen cos_i + f_base cos_i (1 - a_i)(1 - a_o)``, ``[N, 3]``."""
        wi, wo = check_direction_pair(wi, wo)
        top = self.weight[:, None] * sheen_eval(wi, wo, color=self.color, roughness=self.roughness)
        # light from below the surface (a transmissive base) meets the sheen once, on the way out
        through_i = torch.where(cos_theta(wi) < 0.0, torch.ones_like(wi[:, 2]), 1.0 - self._albedo(torch.clamp(cos_theta(wi), min=0.0)))
        scale = through_i * (1.0 - self._albedo(cos_theta(wo)))
        return top + self.base.eval(wi, wo) * scale[:, None]

    def sample_direction(self, wo: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """A light direction ``[N, 3]``: cosine-weighted with probability ``a(cos_o)``, else from the base."""
        wo = check_directions("wo", wo)
        u = check_uniforms(u, wo)
        p = self._albedo(cos_theta(wo))
        below = 1.0 - torch.finfo(u.dtype).eps
        pick = u[:, 0] < p
        u_top = torch.clamp(u[:, 0] / torch.where(p > 0.0, p, torch.ones_like(p)), max=below)
        u_base = torch.clamp((u[:, 0] - p) / torch.where(p < 1.0, 1.0 - p, torch.ones_like(p)), min=0.0, max=below)
        wi_top = square_to_cosine_hemisphere(torch.stack((u_top, u[:, 1]), dim=-1))
        u_base = torch.stack((u_base, u[:, 1]), dim=-1)
        direction = getattr(self.base, "sample_direction", None)
        wi_base = direction(wo, u_base) if direction is not None else self.base.sample(wo, u_base)[0]
        return torch.where(pick[:, None], wi_top, wi_base)

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(wi [N, 3], pdf [N])``; the pdf is the mixture's."""
        wi = self.sample_direction(wo, u)
        return wi, self.pdf(wi, wo)

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``a_o pdf_cosine + (1 - a_o) pdf_base``, ``[N]``."""
        wi, wo = check_direction_pair(wi, wo)
        p = self._albedo(cos_theta(wo))
        return p * sheen_pdf(wi, wo) + (1.0 - p) * self.base.pdf(wi, wo)


@dataclass(frozen=True, eq=False)
class RotatedLayer:
    """``inner`` with its tangent turned by ``angle`` (radians, ``[N]``) counter-clockwise about the normal.

    Directions are expressed in the turned frame before ``inner`` sees them; rotations keep solid
    angle, so densities carry over unchanged. Isotropic lobes are unaffected.
    """

    inner: Layer
    angle: torch.Tensor

    def _turn(self, w: torch.Tensor, sign: float) -> torch.Tensor:
        c, s = torch.cos(self.angle), sign * torch.sin(self.angle)
        return torch.stack((c * w[:, 0] + s * w[:, 1], c * w[:, 1] - s * w[:, 0], w[:, 2]), dim=-1)

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        return self.inner.eval(self._turn(wi, 1.0), self._turn(wo, 1.0))

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        return self.inner.pdf(self._turn(wi, 1.0), self._turn(wo, 1.0))

    def sample_direction(self, wo: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        direction = getattr(self.inner, "sample_direction", None)
        turned = self._turn(check_directions("wo", wo), 1.0)
        wi = direction(turned, u) if direction is not None else self.inner.sample(turned, u)[0]
        return self._turn(wi, -1.0)

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wi = self.sample_direction(wo, u)
        return wi, self.pdf(wi, wo)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, 0.0, 1.0)


def _coat_absorption(colour: torch.Tensor) -> torch.Tensor:
    # Unit thickness; in and out at normal incidence gives exp(-2 sigma) = colour.
    return -0.5 * torch.log(torch.clamp(colour, 1e-4, 1.0))


def _film(covered: torch.Tensor, thickness_nm: torch.Tensor, ior: torch.Tensor) -> dict[str, torch.Tensor] | None:
    """The thin film's lobe parameters (weight: where ``covered``, as a float), or None where no point has one."""
    weight = covered.to(thickness_nm.dtype) if covered.dtype == torch.bool else _unit(covered)
    if not bool((weight > 0.0).any()):
        return None
    return {"film_weight": weight, "film_thickness": torch.clamp(thickness_nm, min=0.0), "film_ior": torch.clamp(ior, min=1.0)}


def _transmissive(
    opaque: Layer, weight: torch.Tensor, roughness: torch.Tensor, anisotropy: torch.Tensor, ior: torch.Tensor, tint: torch.Tensor, thin: bool
) -> Layer:
    """``opaque`` blended by ``weight`` with the rough dielectric boundary (reflection and refraction, the refraction
    tinted by ``tint``), or with the thin-walled slab (``thin``: light passes straight); ``opaque`` itself where no
    point transmits."""
    w = _unit(weight)
    if not bool((w > 0.0).any()):
        return opaque
    ax, ay = roughness_anisotropy(roughness, anisotropy)
    # an index of exactly 1 has no refraction half vector (wi = -wo): keep it just above (OpenPBR's glass under a coat of
    # the same index gives eta_s = 1), which is visually the same
    ior = torch.clamp(ior, min=1.0 + 1e-3)
    glass = layer(THIN_DIELECTRIC if thin else DIELECTRIC, {"alpha_x": ax, "alpha_y": ay, "ior": ior, "color": torch.clamp(tint, 0.0, 1.0)})
    return mix(opaque, glass, w)


def standard_surface_layers(v: Mapping[str, torch.Tensor], *, thin_walled: bool = False) -> Layer:
    """The layer tree of a Standard Surface from its inputs at N points (colours ``[N, 3]``, scalars ``[N]``); see the module docstring."""
    coat_w = _unit(v["coat"])
    gamma = (1.0 + coat_w * v["coat_affect_color"])[:, None]
    subsurface = _unit(v["subsurface"])[:, None]
    albedo = (1.0 - subsurface) * v["base"][:, None] * torch.clamp(v["base_color"], min=0.0) ** gamma
    albedo = albedo + subsurface * torch.clamp(v["subsurface_color"], min=0.0) ** gamma
    diffuse = layer("lambert", {"albedo": albedo})
    sheened = SheenLayer(diffuse, _unit(v["sheen"]), v["sheen_color"], v["sheen_roughness"])
    pull = v["coat_affect_roughness"] * coat_w * v["coat_roughness"]
    rough = v["specular_roughness"] + pull * (1.0 - v["specular_roughness"])
    ax, ay = roughness_anisotropy(rough, v["specular_anisotropy"])
    film = _film(v["thin_film_thickness"] > 0.0, v["thin_film_thickness"], v["thin_film_IOR"])
    dielectric = coat(sheened, alpha_x=ax, alpha_y=ay, ior=torch.clamp(v["specular_IOR"], min=1.0), film=film)
    specular = mix(sheened, dielectric, _unit(v["specular"]))
    rough_t = torch.clamp(rough + v["transmission_extra_roughness"], 0.0, 1.0)
    specular = _transmissive(specular, v["transmission"], rough_t, v["specular_anisotropy"], v["specular_IOR"], v["transmission_color"], thin_walled)
    eta, k = artistic_ior(v["base"][:, None] * v["base_color"], v["specular"][:, None] * v["specular_color"])
    metal = layer("conductor", {"eta": eta, "k": k, "alpha_x": ax, "alpha_y": ay, **(film or {})})
    base = mix(specular, metal, _unit(v["metalness"]))
    # specular_rotation / coat_rotation turn the tangents by 360 degrees per unit (MaterialX's rotate3d).
    turn_specular, turn_coat = (2.0 * math.pi) * v["specular_rotation"], (2.0 * math.pi) * v["coat_rotation"]
    cx, cy = roughness_anisotropy(v["coat_roughness"], v["coat_anisotropy"])
    coated = coat(
        RotatedLayer(base, turn_specular - turn_coat),
        alpha_x=cx,
        alpha_y=cy,
        ior=torch.clamp(v["coat_IOR"], min=1.0),
        absorption=_coat_absorption(v["coat_color"]),
        thickness=1.0,
    )
    return mix(RotatedLayer(base, turn_specular), RotatedLayer(coated, turn_coat), coat_w)


def open_pbr_surface_layers(v: Mapping[str, torch.Tensor], *, thin_walled: bool = False) -> Layer:
    """The layer tree of an OpenPBR surface from its inputs at N points (colours ``[N, 3]``, scalars ``[N]``); see the module docstring."""
    subsurface = _unit(v["subsurface_weight"])[:, None]
    albedo = (1.0 - subsurface) * v["base_weight"][:, None] * v["base_color"] + subsurface * v["subsurface_color"]
    diffuse = layer("lambert", {"albedo": albedo})
    coat_w = _unit(v["coat_weight"])
    r, r_coat = v["specular_roughness"], v["coat_roughness"]
    coated_r = torch.clamp(2.0 * r_coat**4 + r**4, torch.finfo(r.dtype).tiny, 1.0) ** 0.25
    ax, ay = roughness_anisotropy(r + coat_w * (coated_r - r), v["specular_roughness_anisotropy"])
    # Under the coat the specular interface is base-to-coat (MaterialX's eta_s; see the module docstring).
    ratio = v["specular_ior"] / torch.clamp(v["coat_ior"], min=1.0)
    eta_s = v["specular_ior"] + coat_w * (torch.maximum(ratio, 1.0 / ratio) - v["specular_ior"])
    # OpenPBR's film thickness is in micrometres
    film = _film(v["thin_film_weight"], 1000.0 * v["thin_film_thickness"], v["thin_film_ior"])
    dielectric = coat(diffuse, alpha_x=ax, alpha_y=ay, ior=torch.clamp(eta_s, min=1.0), film=film)
    specular = mix(diffuse, dielectric, _unit(v["specular_weight"]))
    rough_t = r + coat_w * (coated_r - r)
    specular = _transmissive(specular, v["transmission_weight"], rough_t, v["specular_roughness_anisotropy"], eta_s, v["transmission_color"], thin_walled)
    eta, k = artistic_ior(v["base_weight"][:, None] * v["base_color"], v["specular_weight"][:, None] * v["specular_color"])
    metal = layer("conductor", {"eta": eta, "k": k, "alpha_x": ax, "alpha_y": ay, **(film or {})})
    base = mix(specular, metal, _unit(v["base_metalness"]))
    cx, cy = roughness_anisotropy(r_coat, v["coat_roughness_anisotropy"])
    coated = coat(
        base, alpha_x=cx, alpha_y=cy, ior=torch.clamp(v["coat_ior"], min=1.0), absorption=_coat_absorption(v["coat_color"]), thickness=1.0
    )
    return SheenLayer(mix(base, coated, coat_w), _unit(v["fuzz_weight"]), v["fuzz_color"], v["fuzz_roughness"])
