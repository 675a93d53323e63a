"""The glTF 2.0 metallic-roughness BRDF exactly as the specification's Appendix B writes it.

From "Appendix B: BRDF Implementation" (Specification.adoc, section "Metal BRDF and Dielectric
BRDF", the "full code"), with ``V = wo`` (view), ``L = wi`` (light), ``H = normalize(L + V)``::

    alpha           = roughness^2
    fresnel_w       = (1 - |V.H|)^5
    specular_brdf   = D(alpha) * Vis(alpha)          # GGX D, height-correlated Smith Vis
    diffuse_brdf    = baseColor / pi
    dielectric_brdf = mix(diffuse_brdf, specular_brdf, 0.04 + 0.96 * fresnel_w)   # fresnel_mix, ior 1.5
    metal_brdf      = (baseColor + (1 - baseColor) * fresnel_w) * specular_brdf   # conductor_fresnel
    f               = mix(dielectric_brdf, metal_brdf, metallic)

so the diffuse term is ``(1 - metallic) (1 - F_dielectric(V.H)) baseColor / pi``: the
``mix(baseColor, black, metallic) / pi`` of the spec, weighted by ``fresnel_mix``. This is *not*
the shorter ``(1 - F) c_diff / pi`` with ``F = mix(0.04, baseColor, metallic)`` Schlick that some
renderers use; the two differ when ``0 < metallic < 1``. ``Vis`` is the spec's height-correlated
``1 / (2 (|N.V| sqrt(a^2 + (1 - a^2)(N.L)^2) + |N.L| sqrt(a^2 + (1 - a^2)(N.V)^2)))``.
``alpha`` is clamped to at least ``1e-4`` (the spec's ``D`` is undefined at ``alpha = 0``).

As the spec itself notes, ``fresnel_mix`` is not energy conserving: it dims the diffuse lobe by
``1 - F(V.H)`` per light direction, which is small away from the mirror direction, instead of by
the specular lobe's whole albedo, so a bright dielectric seen at oblique angles (where the
specular albedo is large) reflects more than it receives (white base colour: directional
albedo 1.13 at ``cos_o = 0.05`` for roughness 0.5, 1.30 at ``cos_o = 0.2`` and 1.68 at 0.05 for
roughness 0.1). Metals (``metallic = 1``) stay below 1. Sampling mixes visible-normal
GGX (probability ``(1 + metallic) / 2``) with cosine-weighted hemisphere sampling; ``pdf`` is the
mixture density.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from neuralbake.material.frame import (
    as_colour,
    as_scalar,
    check_direction_pair,
    check_directions,
    check_uniforms,
    cos_theta,
    cosine_hemisphere_pdf,
    dot,
    half_vector,
    normalize,
    orthonormal_basis,
    safe_sqrt,
    square_to_cosine_hemisphere,
    upper_pair,
)
from neuralbake.material.fresnel import fresnel_schlick
from neuralbake.material.microfacet import clamp_alpha, ggx_d, ggx_reflection_pdf, ggx_reflection_sample
from neuralbake.material.sheen import sheen_albedo, sheen_eval
from neuralbake.material.thin_film import thin_film_reflectance

__all__ = ["DIELECTRIC_F0", "BrdfExtensions", "dielectric_f0", "dielectric_reflectance", "gltf_eval", "gltf_pdf", "gltf_sample", "gltf_visibility"]

DIELECTRIC_F0 = 0.04
"""Normal-incidence reflectance of the spec's fixed dielectric ``ior = 1.5``: ``((1 - 1.5) / (1 + 1.5))^2``."""

Param = torch.Tensor | float


@dataclasses.dataclass(eq=False)
class BrdfExtensions:
    """The glTF BRDF's inputs beyond base colour, metallic and roughness (the ``KHR_materials_*`` extensions), as
    :func:`gltf_eval` takes them: each per point (a tensor, one row per point) or one value for every point. A
    renderer's hits (:class:`~neuralbake.render.gbuffer.SurfaceParameters`) and a neural material bake's reference
    layer (``GltfLayer``) carry one; the defaults are a plain metal/rough material's."""

    f0: Param = DIELECTRIC_F0
    """The dielectric's normal-incidence reflectance (``KHR_materials_ior`` and ``_specular``), ``[N, 3]``."""
    f90: Param = 1.0
    """Its grazing reflectance (``KHR_materials_specular``'s factor), ``[N]``."""
    iridescence: Param = 0.0
    """``KHR_materials_iridescence``'s factor, ``[N]`` (0: no film)."""
    iridescence_ior: Param = 1.3
    """The film's index, ``[N]``."""
    iridescence_thickness: Param = 400.0
    """The film's thickness in nanometres, ``[N]``."""
    clearcoat: Param = 0.0
    """``KHR_materials_clearcoat``'s factor, ``[N]`` (0: no coat)."""
    clearcoat_roughness: Param = 0.0
    """The coat's roughness, ``[N]``."""
    sheen_color: Param = 0.0
    """``KHR_materials_sheen``'s colour, ``[N, 3]`` (0: no sheen)."""
    sheen_roughness: Param = 0.0
    """The sheen's roughness, ``[N]``."""

    def keywords(self) -> dict[str, Param]:
        """:func:`gltf_eval`'s keywords for these inputs."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def coat(self) -> dict[str, Param]:
        """What :func:`gltf_sample` and :func:`gltf_pdf` read of them: the coat (with the caller's ``clearcoat_normal``)."""
        return {"clearcoat": self.clearcoat, "clearcoat_roughness": self.clearcoat_roughness}

    @property
    def coated(self) -> bool:
        """Whether some point has a coat."""
        return isinstance(self.clearcoat, torch.Tensor) or self.clearcoat != 0.0

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> BrdfExtensions:
        """These inputs with ``fn`` applied to each per-point one (rows picked, repeated, detached); one values kept."""
        return BrdfExtensions(**{k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in self.keywords().items()})


def gltf_visibility(cos_i: torch.Tensor, cos_o: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The spec's height-correlated ``Vis = G / (4 |N.L| |N.V|)`` for GGX, shape of the inputs."""
    a2 = alpha * alpha
    lam_i = safe_sqrt(a2 + (1.0 - a2) * cos_i * cos_i)
    lam_o = safe_sqrt(a2 + (1.0 - a2) * cos_o * cos_o)
    return 1.0 / (2.0 * (torch.abs(cos_o) * lam_i + torch.abs(cos_i) * lam_o))


def _alpha(roughness: Param, like: torch.Tensor) -> torch.Tensor:
    r = as_scalar("roughness", roughness, like)
    return clamp_alpha(r * r)


def dielectric_f0(ior: Param) -> Param:
    """Normal-incidence reflectance ``((ior - 1) / (ior + 1))^2`` of a dielectric (``KHR_materials_ior``)."""
    return ((ior - 1.0) / (ior + 1.0)) ** 2


def dielectric_reflectance(ior: float = 1.5, specular: float = 1.0, specular_color: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> tuple[tuple[float, float, float], float]:
    """``(f0 RGB, f90)`` of a glTF dielectric: ``KHR_materials_specular`` scales :func:`dielectric_f0` of
    ``KHR_materials_ior`` by its colour (capped at 1) and both ends by its factor."""
    base = dielectric_f0(ior)
    return tuple(min(base * c, 1.0) * specular for c in specular_color), specular  # type: ignore[return-value]


def gltf_eval(
    wi: torch.Tensor, wo: torch.Tensor, *, base_color: Param, metallic: Param, roughness: Param, f0: Param = DIELECTRIC_F0, f90: Param = 1.0,
    iridescence: Param = 0.0, iridescence_ior: Param = 1.3, iridescence_thickness: Param = 400.0,
    clearcoat: Param = 0.0, clearcoat_roughness: Param = 0.0, clearcoat_normal: torch.Tensor | None = None, sheen_color: Param = 0.0,
    sheen_roughness: Param = 0.0,
) -> torch.Tensor:
    """Cosine-weighted glTF metal/rough BRDF ``f(wi, wo) cos_i``, ``[N, 3]``.

    ``base_color``: linear RGB, broadcastable to ``[N, 3]``; ``metallic``, ``roughness``
    (perceptual, ``alpha = roughness^2``): broadcastable to ``[N]``. Zero unless both directions
    are above the surface. ``f0``, ``f90``: the dielectric's reflectance at normal and grazing incidence
    (:func:`dielectric_reflectance`: ``KHR_materials_ior`` and ``_specular``; the spec's 0.04 and 1 by default), ``f0``
    broadcastable to ``[N, 3]`` and ``f90`` to ``[N]``. ``iridescence`` (``KHR_materials_iridescence``'s factor, 0: none),
    ``iridescence_ior`` and ``iridescence_thickness`` (nm), broadcastable to ``[N]``: a thin film whose reflectance
    (:func:`~neuralbake.material.thin_film.thin_film_reflectance` over the dielectric's ``f0``, or the metal's base
    colour) replaces both Fresnel terms in proportion to the factor, as the extension specifies. ``clearcoat`` and
    ``clearcoat_roughness`` (``KHR_materials_clearcoat``, broadcastable to ``[N]``): a clear GGX layer of index 1.5
    on top, ``f = (1 - c F_c) f_base + c F_c D_c Vis_c`` with the extension's ``F_c`` (Schlick at ``N.V``), about
    ``clearcoat_normal`` (``[N, 3]`` unit, in the same local frame; ``None``: the shading normal +z): the extension
    does not normal-map the coat unless it has its own normal texture, so a renderer passes the vertex normal.
    ``sheen_color`` (RGB, broadcastable to ``[N, 3]``) and ``sheen_roughness`` (``KHR_materials_sheen``): the Charlie
    sheen lobe (:func:`~neuralbake.material.sheen.sheen_eval`) over the rest, which is scaled by the extension's
    ``min(1 - max(color) E(N.V), 1 - max(color) E(N.L))`` (``E``: the sheen's directional albedo), under the coat.
    """
    wi, wo = check_direction_pair(wi, wo)
    base = as_colour("base_color", base_color, wi)
    metallic = as_scalar("metallic", metallic, wi)[:, None]
    alpha = _alpha(roughness, wi)
    valid, wi_s, wo_s = upper_pair(wi, wo)
    cos_i, cos_o = cos_theta(wi_s), cos_theta(wo_s)
    h = half_vector(wi_s, wo_s)
    specular = (ggx_d(h, alpha, alpha) * gltf_visibility(cos_i, cos_o, alpha))[:, None]
    v_dot_h = dot(wo_s, h)[:, None]
    f0_rgb, f90_n = as_colour("f0", f0, wi), as_scalar("f90", f90, wi)[:, None]
    grazing = torch.clamp(1.0 - torch.abs(v_dot_h), min=0.0) ** 5
    dielectric_fresnel = f0_rgb + (f90_n - f0_rgb) * grazing
    metal_fresnel = fresnel_schlick(v_dot_h, base)
    if isinstance(iridescence, torch.Tensor) or iridescence != 0.0:
        factor = as_scalar("iridescence", iridescence, wi)[:, None]
        film_ior, thickness = as_scalar("iridescence_ior", iridescence_ior, wi), as_scalar("iridescence_thickness", iridescence_thickness, wi)
        cos = torch.abs(v_dot_h[:, 0])
        dielectric_fresnel = torch.lerp(dielectric_fresnel, thin_film_reflectance(cos, film_ior, thickness, f0_rgb), factor)
        metal_fresnel = torch.lerp(metal_fresnel, thin_film_reflectance(cos, film_ior, thickness, base), factor)
    dielectric = torch.lerp(base / math.pi, specular.expand_as(base), dielectric_fresnel)
    metal = metal_fresnel * specular
    f = dielectric + (metal - dielectric) * metallic
    if _coated(sheen_color):
        colour, sheen_r = as_colour("sheen_color", sheen_color, wi), as_scalar("sheen_roughness", sheen_roughness, wi)
        peak = colour.max(dim=-1).values
        scale = torch.minimum(1.0 - peak * sheen_albedo(torch.clamp(cos_o, 0.0, 1.0), sheen_r), 1.0 - peak * sheen_albedo(torch.clamp(cos_i, 0.0, 1.0), sheen_r))
        cos_safe = torch.where(valid, cos_i, torch.ones_like(cos_i)).clamp(min=torch.finfo(cos_i.dtype).tiny)
        f = f * scale[:, None] + sheen_eval(wi_s, wo_s, color=colour, roughness=sheen_r) / cos_safe[:, None]
    value = f * torch.where(valid, cos_i, torch.zeros_like(cos_i))[:, None]
    if not _coated(clearcoat):
        return value
    to_coat, _ = _coat_frame(clearcoat_normal, wi)
    coat_valid, wi_c, wo_c = upper_pair(to_coat(wi), to_coat(wo))
    cos_ic, cos_oc = cos_theta(wi_c), cos_theta(wo_c)
    weight = (as_scalar("clearcoat", clearcoat, wi) * _coat_fresnel(torch.where(coat_valid, cos_oc, torch.ones_like(cos_oc))))[:, None]
    coat_alpha = _alpha(clearcoat_roughness, wi)
    coat = ggx_d(half_vector(wi_c, wo_c), coat_alpha, coat_alpha) * gltf_visibility(cos_ic, cos_oc, coat_alpha) * cos_ic
    return value * (1.0 - weight) + (torch.where(coat_valid, coat, torch.zeros_like(coat))[:, None] * weight)


def _coat_frame(normal: torch.Tensor | None, like: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    """Maps from the local frame into the coat's (its normal +z) and back; the identity without a coat normal."""
    if normal is None:
        return (lambda w: w), (lambda w: w)
    n = normalize(torch.as_tensor(normal, dtype=like.dtype, device=like.device).expand_as(like))
    t, b = orthonormal_basis(n)
    return (lambda w: torch.stack(((w * t).sum(-1), (w * b).sum(-1), (w * n).sum(-1)), dim=-1),
            lambda w: w[:, 0:1] * t + w[:, 1:2] * b + w[:, 2:3] * n)


def _coated(clearcoat: Param) -> bool:
    return isinstance(clearcoat, torch.Tensor) or clearcoat != 0.0


def _coat_fresnel(cos_o: torch.Tensor) -> torch.Tensor:
    """The clear coat's Fresnel of ``KHR_materials_clearcoat``: Schlick for index 1.5 at the view angle, ``[N]``."""
    return DIELECTRIC_F0 + (1.0 - DIELECTRIC_F0) * torch.clamp(1.0 - torch.abs(cos_o), min=0.0) ** 5


def _coat_probability(clearcoat: Param, wo: torch.Tensor) -> torch.Tensor:
    # sample the coat lobe as often as it weighs, at least a quarter of the time where there is a coat (its
    # highlight is sharp, the base's sampler would rarely find it)
    c = torch.clamp(as_scalar("clearcoat", clearcoat, wo), 0.0, 1.0)
    return torch.where(c > 0.0, torch.clamp(c * _coat_fresnel(cos_theta(wo)), min=0.25), torch.zeros_like(c)).detach()


def _specular_probability(metallic: Param, like: torch.Tensor) -> torch.Tensor:
    # A metal has no diffuse term, so it samples GGX only; a dielectric splits evenly.
    return 0.5 * (1.0 + torch.clamp(as_scalar("metallic", metallic, like), 0.0, 1.0))


def gltf_pdf(
    wi: torch.Tensor, wo: torch.Tensor, *, base_color: Param | None = None, metallic: Param, roughness: Param, f0: Param = DIELECTRIC_F0, f90: Param = 1.0,
    iridescence: Param = 0.0, iridescence_ior: Param = 1.3, iridescence_thickness: Param = 400.0,
    clearcoat: Param = 0.0, clearcoat_roughness: Param = 0.0, clearcoat_normal: torch.Tensor | None = None, sheen_color: Param = 0.0,
    sheen_roughness: Param = 0.0,
) -> torch.Tensor:
    """Mixture density ``p_spec * pdf_GGX + (1 - p_spec) * cos_i / pi``, ``[N]`` (``base_color``, ``f0`` and ``f90`` do
    not change it, nor do the iridescence and the sheen (the base's cosine lobe and MIS with the light cover the
    sheen); they are accepted so every lobe operation takes the same parameters). With a clear coat, its GGX lobe
    about ``clearcoat_normal`` is mixed in."""
    wi, wo = check_direction_pair(wi, wo)
    p_spec = _specular_probability(metallic, wi)
    alpha = _alpha(roughness, wi)
    diffuse = torch.where(cos_theta(wo) > 0.0, cosine_hemisphere_pdf(wi), torch.zeros_like(p_spec))
    base = p_spec * ggx_reflection_pdf(wi, wo, alpha, alpha) + (1.0 - p_spec) * diffuse
    if not _coated(clearcoat):
        return base
    to_coat, _ = _coat_frame(clearcoat_normal, wi)
    wi_c, wo_c = to_coat(wi), to_coat(wo)
    p_coat = _coat_probability(clearcoat, wo_c)
    coat_alpha = _alpha(clearcoat_roughness, wi)
    return p_coat * ggx_reflection_pdf(wi_c, wo_c, coat_alpha, coat_alpha) + (1.0 - p_coat) * base


def gltf_sample(
    wo: torch.Tensor, u: torch.Tensor, *, base_color: Param | None = None, metallic: Param, roughness: Param, f0: Param = DIELECTRIC_F0,
    f90: Param = 1.0, iridescence: Param = 0.0, iridescence_ior: Param = 1.3, iridescence_thickness: Param = 400.0, clearcoat: Param = 0.0,
    clearcoat_roughness: Param = 0.0, clearcoat_normal: torch.Tensor | None = None, sheen_color: Param = 0.0, sheen_roughness: Param = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick GGX or cosine sampling with ``u[:, 0]``, reuse it rescaled; ``(wi [N, 3], pdf [N])`` (``base_color``,
    ``f0`` and ``f90`` do not change it)."""
    wo = check_directions("wo", wo)
    u = check_uniforms(u, wo)
    coated = _coated(clearcoat)
    if coated:  # the coat lobe first, with u0 rescaled for the rest
        to_coat, from_coat = _coat_frame(clearcoat_normal, wo)
        wo_c = to_coat(wo)
        p_coat = _coat_probability(clearcoat, wo_c)
        use_coat = u[:, 0] < p_coat
        u0 = torch.where(use_coat, u[:, 0] / p_coat.clamp(min=torch.finfo(wo.dtype).eps), (u[:, 0] - p_coat) / torch.clamp(1.0 - p_coat, min=torch.finfo(wo.dtype).eps))
        u = torch.stack((torch.clamp(u0, 0.0, 1.0 - torch.finfo(wo.dtype).eps), u[:, 1]), dim=-1)
    # The lobe choice is discrete, so it carries no gradient; detaching also keeps the rescaling's
    # division away from autograd where p_spec = 1.
    p = _specular_probability(metallic, wo).detach()
    use_specular = u[:, 0] < p
    u0 = torch.where(use_specular, u[:, 0] / p, (u[:, 0] - p) / torch.clamp(1.0 - p, min=torch.finfo(wo.dtype).eps))
    u_rescaled = torch.stack((torch.clamp(u0, 0.0, 1.0), u[:, 1]), dim=-1)
    alpha = _alpha(roughness, wo)
    wi_specular, _ = ggx_reflection_sample(wo, u_rescaled, alpha, alpha)
    wi_diffuse = square_to_cosine_hemisphere(u_rescaled)
    wi = torch.where(use_specular[:, None], wi_specular, wi_diffuse)
    if coated:
        coat_alpha = _alpha(clearcoat_roughness, wo)
        wi = torch.where(use_coat[:, None], from_coat(ggx_reflection_sample(wo_c, u, coat_alpha, coat_alpha)[0]), wi)
    return wi, gltf_pdf(wi, wo, metallic=metallic, roughness=roughness, clearcoat=clearcoat, clearcoat_roughness=clearcoat_roughness,
                        clearcoat_normal=clearcoat_normal)
