"""Layered materials from the single lobes: a rough dielectric coat over any base, and masks that
blend whole layers, so the antique copper tray (copper, patina in the recesses, varnish, dust on
up-facing areas, scratches through everything) is one small tree of layers.

A *layer* is anything with the three operations of a lobe with its parameters already bound:
``eval(wi, wo) -> [N, 3]`` (``f cos_i``), ``sample(wo, u) -> (wi [N, 3], pdf [N])`` and
``pdf(wi, wo) -> [N]`` (see :class:`Layer`). :func:`layer` binds a lobe to its parameters,
:func:`coat` puts a coat over a layer and :func:`mix` blends two layers by a mask; all three
return layers, so they nest. Parameters and masks are tensors (or floats) broadcastable to ``[N]``
/ ``[N, 3]``; gradients flow to all of them.

The coat follows the albedo-scaling idea of Autodesk Standard Surface / OpenPBR, made reciprocal::

    f cos_i = f_coat cos_i + f_base cos_i * (1 - E(cos_i)) (1 - E(cos_o)) * exp(-sigma d (1/cos_ti + 1/cos_to))

``E(mu)`` is the directional albedo of the coat lobe (:func:`coat_albedo`, from a table, see
there); ``sigma`` the coat's RGB absorption coefficient, ``d`` its thickness, ``cos_t`` the
cosines of the in/out directions refracted into the coat (index ``ior``), so the last factor is
Beer-Lambert along the two straight paths through the coat. Standard Surface scales by
``1 - E(cos_o)`` only; scaling by both directions keeps ``f`` symmetric in ``wi`` and ``wo``
(Helmholtz reciprocity) and provably conserves energy for any energy-conserving base:
``E_total(wo) <= E(wo) + (1 - E(wo)) E_base(wo) <= 1`` (up to the table's interpolation error,
below 0.006, and for ``ior <= 3``, the end of the table). The price is that light reflected back
down by the underside of the coat is lost rather than given another bounce: a clear, smooth coat
(``ior`` 1.5) over a white Lambert base returns ``E(1) + (1 - E(1)) (1 - E_avg) = 0.912`` at normal
incidence instead of 1, where ``E_avg = 2 int E(mu) mu dmu`` is the coat's hemispherical albedo.
The base is evaluated at the outside directions (no refraction of the base lobe), as in Standard
Surface.

Layers nest at most :data:`MAX_LAYER_DEPTH` deep: evaluating a layer recurses once per level, so
a tree of hundreds of levels would run for minutes and then exhaust Python's stack; :func:`coat`
and :func:`mix` refuse it when the tree is built (material compilers check it earlier still, with
the field that nests too deep).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from neuralbake.errors import InputError
from neuralbake.material.frame import (
    as_colour,
    as_scalar,
    check_direction_pair,
    check_directions,
    check_uniforms,
    cos_theta,
    reflect,
    safe_sqrt,
)
from neuralbake.material.fresnel import fresnel_dielectric
from neuralbake.material.lobes import LOBES, Lobe, coating_eval, coating_pdf, coating_sample
from neuralbake.material.microfacet import MIN_ALPHA, ggx_g1, ggx_sample_visible_normal

__all__ = [
    "ALBEDO_TABLE_ALPHA",
    "ALBEDO_TABLE_COS",
    "ALBEDO_TABLE_IOR",
    "MAX_LAYER_DEPTH",
    "CoatLayer",
    "Layer",
    "LobeLayer",
    "MixLayer",
    "coat",
    "coat_albedo",
    "coat_albedo_table",
    "coat_transmittance",
    "layer",
    "mix",
]

Param = torch.Tensor | float

MAX_LAYER_DEPTH = 32
"""Deepest nesting of layers (a lobe is 1 deep, a coat or mix one more than its deepest part)."""

ALBEDO_TABLE_COS = (0.0, 1.0, 33)
"""Axis of the coat-albedo table in ``sqrt(cos(theta))``: ``(first, last, count)``, uniform (the
square root puts more nodes at grazing angles, where a smooth coat's albedo rises steeply)."""
ALBEDO_TABLE_ALPHA = (0.0, 1.0, 17)
"""Axis in ``sqrt(alpha)`` of GGX (``alpha`` 0 stands for :data:`MIN_ALPHA`; grazing albedo changes
fastest for nearly smooth coats); rougher coats than ``alpha`` 1 use ``alpha`` 1."""
ALBEDO_TABLE_IOR = (1.0, 3.0, 17)
"""Axis in the coat's ``ior``; indices outside ``[1, 3]`` are clamped to it."""

_TABLE_STRATA = 48  # 48 x 48 stratified visible normals per entry: table error ~1e-4 (see tests)
_FRESNEL_NODES = 512  # grid in cos(wo.m) on which Fresnel is evaluated while integrating the table


@runtime_checkable
class Layer(Protocol):
    """A BSDF with its parameters bound: the interface of every node of a layer tree.

    Composite layers also have ``sample_direction(wo, u) -> wi``, :meth:`sample` without the pdf,
    which a parent mixture calls so that the tree's pdf is computed once, at the top.
    """

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``f(wi, wo) cos_i``, ``[N, 3]``, for ``[N, 3]`` directions in the local frame."""
        ...

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(wi [N, 3], pdf [N])`` from uniforms ``u`` ``[N, 2]``; ``pdf == 0`` marks an invalid sample."""
        ...

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """Solid-angle density of :meth:`sample`, ``[N]``."""
        ...


# --- the coat's directional albedo --------------------------------------------------------------


def _axis(spec: tuple[float, float, int]) -> torch.Tensor:
    lo, hi, n = spec
    return torch.linspace(lo, hi, n, dtype=torch.float64)


@functools.lru_cache(maxsize=1)
def _table_cpu64() -> torch.Tensor:
    # E(mu, alpha, ior) = E_m[F(wo.m) G1(wi)] over visible normals m (the weight f cos_i / pdf of
    # visible-normal sampling with the separable Smith term), on a stratified grid of uniforms.
    # The geometry does not depend on ior, so it is computed once and reused for every ior.
    mu = torch.clamp(_axis(ALBEDO_TABLE_COS) ** 2, min=1e-4)
    alpha = torch.clamp(_axis(ALBEDO_TABLE_ALPHA) ** 2, min=MIN_ALPHA)
    ior = _axis(ALBEDO_TABLE_IOR)
    s = _TABLE_STRATA
    grid = (torch.arange(s, dtype=torch.float64) + 0.5) / s
    u = torch.stack(torch.meshgrid(grid, grid, indexing="ij"), dim=-1).reshape(-1, 2)
    n_mu, n_alpha, n_u = len(mu), len(alpha), len(u)
    mu_b = mu[:, None, None].expand(n_mu, n_alpha, n_u).reshape(-1)
    a_b = alpha[None, :, None].expand(n_mu, n_alpha, n_u).reshape(-1)
    # A plain sqrt: exactly 0 at mu = 1 (a sin of 1e-154 upsets the sampler's tangent frame).
    wo = torch.stack((torch.sqrt(1.0 - mu_b * mu_b), torch.zeros_like(mu_b), mu_b), dim=-1)
    m = ggx_sample_visible_normal(wo, u.repeat(n_mu * n_alpha, 1), a_b, a_b)
    wi = reflect(wo, m)
    weight = torch.where(wi[:, 2] > 0.0, ggx_g1(wi, m, a_b, a_b), torch.zeros_like(a_b))
    # Fresnel for every sample and every ior is the expensive part, so the weights are first
    # splatted linearly onto a fine grid in cos(wo.m) (second-order accurate in the grid step).
    pos = torch.clamp((wo * m).sum(dim=-1), 0.0, 1.0) * _FRESNEL_NODES
    i0 = torch.clamp(pos.floor().long(), max=_FRESNEL_NODES - 1)
    t = pos - i0
    group = torch.arange(n_mu * n_alpha).repeat_interleave(n_u) * (_FRESNEL_NODES + 1)
    splat = torch.zeros(n_mu * n_alpha * (_FRESNEL_NODES + 1), dtype=torch.float64)
    splat.index_add_(0, group + i0, weight * (1.0 - t))
    splat.index_add_(0, group + i0 + 1, weight * t)
    cos_nodes = torch.linspace(0.0, 1.0, _FRESNEL_NODES + 1, dtype=torch.float64)
    fresnel = fresnel_dielectric(cos_nodes[:, None], ior[None, :])  # [nodes, n_ior]
    return (splat.reshape(n_mu * n_alpha, -1) @ fresnel / n_u).reshape(n_mu, n_alpha, len(ior))


def coat_albedo_table(dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
    """The coat lobe's directional albedo ``E(sqrt(mu), sqrt(alpha), ior)``, ``[33, 17, 17]`` in ``dtype``.

    Axes: :data:`ALBEDO_TABLE_COS`, :data:`ALBEDO_TABLE_ALPHA`, :data:`ALBEDO_TABLE_IOR`. A table
    over ``ior`` too (rather than one at a fixed index) lets a textured or optimised ``ior`` move
    the albedo scaling with it. It is integrated on first use (about 0.5 s, float64, CPU) with
    stratified visible-normal sampling of exactly :func:`~neuralbake.material.coating_eval`, and
    cached (per dtype and device, so a GPU batch does not copy it each call).
    """
    return _table_on(dtype, None if device is None else str(torch.device(device)))


@functools.lru_cache(maxsize=16)
def _table_on(dtype: torch.dtype, device: str | None) -> torch.Tensor:
    return _table_cpu64().to(dtype=dtype, device=device)


def _lerp_index(x: torch.Tensor, spec: tuple[float, float, int]) -> tuple[torch.Tensor, torch.Tensor]:
    lo, hi, n = spec
    pos = torch.clamp((x - lo) * ((n - 1) / (hi - lo)), 0.0, n - 1.0)
    i0 = torch.clamp(pos.detach().floor().long(), max=n - 2)
    return i0, pos - i0.to(pos.dtype)


def coat_albedo(cos_theta: Param, alpha: Param, ior: Param, *, like: torch.Tensor | None = None) -> torch.Tensor:
    """Directional albedo ``E`` of the coat lobe (GGX, dielectric Fresnel), ``[N]``.

    Trilinear interpolation of :func:`coat_albedo_table`, differentiable in all three arguments
    (piecewise linear). ``cos_theta`` (clamped to ``[0, 1]``), ``alpha`` and ``ior``: broadcastable
    to ``[N]``; ``like`` (``[N, 3]``) sets N, dtype and device when none of them is a ``[N]``
    tensor. For an anisotropic coat pass ``sqrt(alpha_x alpha_y)`` (an approximation).
    """
    if like is None:
        tensors = [t for t in (cos_theta, alpha, ior) if isinstance(t, torch.Tensor)]
        if not tensors:
            raise InputError(
                "coat_albedo got only floats, so the batch size is unknown.", field="like", fix="pass cos_theta as a tensor or give like=."
            )
        like = tensors[0].reshape(-1, 1).expand(-1, 3)
    mu = torch.clamp(as_scalar("cos_theta", cos_theta, like), 0.0, 1.0)
    a = as_scalar("alpha", alpha, like)
    eta = as_scalar("ior", ior, like)
    table = coat_albedo_table(like.dtype, like.device)
    _, n_alpha, n_ior = table.shape
    flat = table.reshape(-1)
    i, ti = _lerp_index(safe_sqrt(mu), ALBEDO_TABLE_COS)
    j, tj = _lerp_index(safe_sqrt(a), ALBEDO_TABLE_ALPHA)
    k, tk = _lerp_index(eta, ALBEDO_TABLE_IOR)
    base = (i * n_alpha + j) * n_ior + k
    out = torch.zeros_like(mu)
    for di, wi_ in ((0, 1.0 - ti), (n_alpha * n_ior, ti)):
        for dj, wj in ((0, 1.0 - tj), (n_ior, tj)):
            w = wi_ * wj
            lo = flat[base + (di + dj)]
            hi = flat[base + (di + dj + 1)]
            out = out + w * (lo + tk * (hi - lo))
    return out


def coat_transmittance(cos_i: torch.Tensor, cos_o: torch.Tensor, ior: Param, absorption: Param, thickness: Param) -> torch.Tensor:
    """Beer-Lambert transmittance ``exp(-sigma d (1/cos_ti + 1/cos_to))`` through the coat, ``[N, 3]``.

    ``cos_i``, ``cos_o``: ``[N]`` cosines outside the coat; ``cos_t = sqrt(1 - (1 - cos^2) / ior^2)``
    by Snell's law. ``absorption`` (RGB ``sigma`` per unit thickness) broadcastable to ``[N, 3]``;
    ``thickness`` and ``ior`` (``>= 1``) to ``[N]``.
    """
    like = cos_i[:, None].expand(-1, 3)
    eta = as_scalar("ior", ior, like)
    sigma = as_colour("absorption", absorption, like)
    d = as_scalar("thickness", thickness, like)

    def inv_cos_t(c: torch.Tensor) -> torch.Tensor:
        sin2_t = (1.0 - torch.clamp(c, 0.0, 1.0) ** 2) / (eta * eta)
        # Clamped because an ior of 1 makes grazing paths infinitely long (the exp is then 0 anyway).
        return 1.0 / torch.clamp(safe_sqrt(1.0 - sin2_t), min=1e-4)

    return torch.exp(-sigma * (d * (inv_cos_t(cos_i) + inv_cos_t(cos_o)))[:, None])


# --- layers -------------------------------------------------------------------------------------


def _mixture_sample(p_b: torch.Tensor, u: torch.Tensor, a: Layer, b: Layer, wo: torch.Tensor) -> torch.Tensor:
    """Pick ``b`` where ``u0 < p_b`` (else ``a``), reuse ``u0`` rescaled to ``[0, 1)``, return ``wi``."""
    u0 = u[:, 0]
    pick_b = u0 < p_b
    one = torch.ones_like(p_b)
    below = 1.0 - torch.finfo(u.dtype).eps
    u_b = torch.clamp(u0 / torch.where(p_b > 0.0, p_b, one), max=below)
    u_a = torch.clamp((u0 - p_b) / torch.where(p_b < 1.0, 1.0 - p_b, one), min=0.0, max=below)
    wi_a = _sample_direction(a, wo, torch.stack((u_a, u[:, 1]), dim=-1))
    wi_b = _sample_direction(b, wo, torch.stack((u_b, u[:, 1]), dim=-1))
    return torch.where(pick_b[:, None], wi_b, wi_a)


def _checked_depth(*parts: Layer) -> int:
    """Depth of a layer built over ``parts``; refused beyond :data:`MAX_LAYER_DEPTH`."""
    depth = 1 + max(getattr(part, "layer_depth", 1) for part in parts)
    if depth > MAX_LAYER_DEPTH:
        raise InputError(
            f"layers nest {depth} deep; at most {MAX_LAYER_DEPTH} are evaluated.",
            field="layers",
            fix=f"flatten the layer tree (at most {MAX_LAYER_DEPTH} nested coat/mix layers).",
        )
    return depth


def _sample_direction(bsdf: Layer, wo: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    # Composite layers can skip their own mixture pdf here: the caller computes the whole
    # tree's pdf once at the end.
    direction = getattr(bsdf, "sample_direction", None)
    return direction(wo, u) if direction is not None else bsdf.sample(wo, u)[0]


@dataclass(frozen=True, eq=False)
class LobeLayer:
    """One lobe of :data:`~neuralbake.material.LOBES` with its parameters (see :func:`layer`)."""

    lobe: Lobe
    params: Mapping[str, Param]

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``f(wi, wo) cos_i``, ``[N, 3]``."""
        return self.lobe.eval(wi, wo, self.params)

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The lobe's own sampler: ``(wi [N, 3], pdf [N])``."""
        return self.lobe.sample(wo, u, self.params)

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """The lobe's own density, ``[N]``."""
        return self.lobe.pdf(wi, wo, self.params)


@dataclass(frozen=True, eq=False)
class CoatLayer:
    """A rough dielectric coat over ``base`` (see :func:`coat` and the module docstring)."""

    base: Layer
    alpha_x: Param
    alpha_y: Param | None = None
    ior: Param = 1.5
    absorption: Param = 0.0
    thickness: Param = 0.0
    film: Mapping[str, Param] | None = None
    """A thin film on the coat's surface: ``{"film_weight", "film_thickness" (nm), "film_ior"}`` of
    :func:`~neuralbake.material.lobes.coating_eval` (None: none). Its albedo scaling stays the clear coat's."""
    _coat_params: dict = field(init=False, repr=False)
    layer_depth: int = field(init=False, repr=False)
    """Levels of layers in this tree (see :data:`MAX_LAYER_DEPTH`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_coat_params", {"alpha_x": self.alpha_x, "alpha_y": self.alpha_y, "ior": self.ior, **(self.film or {})})
        object.__setattr__(self, "layer_depth", _checked_depth(self.base))

    def _albedo(self, cos: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        ax = as_scalar("alpha_x", self.alpha_x, like)
        alpha = ax if self.alpha_y is None else safe_sqrt(ax * as_scalar("alpha_y", self.alpha_y, like))
        return coat_albedo(cos, torch.clamp(alpha, min=MIN_ALPHA), self.ior, like=like)

    def base_weight(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """What reaches the base and comes back out: ``(1 - E_i)(1 - E_o) T_absorption``, ``[N, 3]``. Light from
        below the surface (a transmissive base) crosses the coat once, on the way out: ``(1 - E_o) sqrt(T(o, o))``."""
        below = cos_theta(wi) < 0.0
        cos_i, cos_o = torch.clamp(cos_theta(wi), 0.0, 1.0), torch.clamp(cos_theta(wo), 0.0, 1.0)
        cos_i = torch.where(below, cos_o, cos_i)
        through_i = torch.where(below, torch.ones_like(cos_i), 1.0 - self._albedo(cos_i, wi))
        scale = through_i * (1.0 - self._albedo(cos_o, wi))
        absorbed = coat_transmittance(cos_i, cos_o, self.ior, self.absorption, self.thickness)
        one_way = torch.sqrt(torch.clamp(absorbed, min=torch.finfo(absorbed.dtype).tiny))  # clamped: no NaN gradient at 0
        return scale[:, None] * torch.where(below[:, None], one_way, absorbed)

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``f_coat cos_i + f_base cos_i (1 - E_i)(1 - E_o) T``, ``[N, 3]``."""
        wi, wo = check_direction_pair(wi, wo)
        return coating_eval(wi, wo, **self._coat_params) + self.base.eval(wi, wo) * self.base_weight(wi, wo)

    def coat_probability(self, wo: torch.Tensor) -> torch.Tensor:
        """Probability of sampling the coat lobe given ``wo``, ``[N]``.

        ``E_o / (E_o + (1 - E_o) t_o)``: the coat's albedo against the light that enters and
        would leave again along ``wo`` through a clear base (``t_o`` is the mean over RGB of the
        absorption there and back along ``wo``). The base's own albedo is unknown here, so a dark
        base is sampled more often than its share; this only costs variance.
        """
        cos_o = torch.clamp(cos_theta(wo), 0.0, 1.0)
        e_o = self._albedo(cos_o, wo)
        t_o = coat_transmittance(cos_o, cos_o, self.ior, self.absorption, self.thickness).mean(dim=-1)
        return e_o / torch.clamp(e_o + (1.0 - e_o) * t_o, min=torch.finfo(wo.dtype).tiny)

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample the coat with :meth:`coat_probability`, else the base; ``pdf`` is the mixture's."""
        wi = self.sample_direction(wo, u)
        return wi, self.pdf(wi, wo)

    def sample_direction(self, wo: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The ``wi`` of :meth:`sample` without its pdf, ``[N, 3]``."""
        wo = check_directions("wo", wo)
        return _mixture_sample(self.coat_probability(wo), check_uniforms(u, wo), self.base, _BoundCoat(self._coat_params), wo)

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``p_coat pdf_coat + (1 - p_coat) pdf_base``, ``[N]``."""
        wi, wo = check_direction_pair(wi, wo)
        p = self.coat_probability(wo)
        return p * coating_pdf(wi, wo, **self._coat_params) + (1.0 - p) * self.base.pdf(wi, wo)


@dataclass(frozen=True, eq=False)
class _BoundCoat:
    params: dict

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return coating_sample(wo, u, **self.params)


@dataclass(frozen=True, eq=False)
class MixLayer:
    """``(1 - mask) a + mask b`` (see :func:`mix`)."""

    a: Layer
    b: Layer
    mask: Param
    layer_depth: int = field(init=False, repr=False)
    """Levels of layers in this tree (see :data:`MAX_LAYER_DEPTH`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer_depth", _checked_depth(self.a, self.b))

    def _mask(self, like: torch.Tensor) -> torch.Tensor:
        return as_scalar("mask", self.mask, like)

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``(1 - mask) f_a cos_i + mask f_b cos_i``, ``[N, 3]``."""
        m = self._mask(wi)[:, None]
        return (1.0 - m) * self.a.eval(wi, wo) + m * self.b.eval(wi, wo)

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``b`` with probability ``mask``, else ``a``; ``pdf`` is the mixture's."""
        wi = self.sample_direction(wo, u)
        return wi, self.pdf(wi, wo)

    def sample_direction(self, wo: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The ``wi`` of :meth:`sample` without its pdf, ``[N, 3]``."""
        wo = check_directions("wo", wo)
        return _mixture_sample(self._mask(wo), check_uniforms(u, wo), self.a, self.b, wo)

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``(1 - mask) pdf_a + mask pdf_b``, ``[N]``."""
        m = self._mask(wi)
        return (1.0 - m) * self.a.pdf(wi, wo) + m * self.b.pdf(wi, wo)


def layer(lobe: str | Lobe, params: Mapping[str, Param]) -> LobeLayer:
    """Bind a lobe (a name in :data:`~neuralbake.material.LOBES`, or a :class:`Lobe`) to its parameters.

    ``params`` as for :class:`Lobe`, e.g. ``layer("conductor", {"eta": eta, "k": k, "alpha_x": 0.3})``.
    """
    if isinstance(lobe, str):
        if lobe not in LOBES:
            raise InputError(f"unknown lobe {lobe!r}.", field="lobe", fix=f"use one of {', '.join(LOBES)}.")
        lobe = LOBES[lobe]
    return LobeLayer(lobe, dict(params))


def coat(
    base: Layer, *, alpha_x: Param, alpha_y: Param | None = None, ior: Param = 1.5, absorption: Param = 0.0, thickness: Param = 0.0,
    film: Mapping[str, Param] | None = None,
) -> CoatLayer:
    """Put a rough dielectric coat (varnish) over ``base``.

    Parameters
    ----------
    base:
        Any layer.
    alpha_x, alpha_y:
        The coat's GGX roughness, broadcastable to ``[N]`` (``alpha_y=None``: isotropic). The
        albedo table stops at ``alpha`` 1.
    ior:
        The coat's index of refraction relative to air, broadcastable to ``[N]``; the table covers
        ``[1, 3]``.
    absorption:
        RGB absorption coefficient ``sigma`` per unit thickness, broadcastable to ``[N, 3]``;
        0 is a clear coat. A tint of transmittance ``c`` at normal incidence for thickness ``d``
        is ``sigma = -log(c) / (2 d)`` (in and out).
    thickness:
        Coat thickness ``d`` in the same unit, broadcastable to ``[N]``.
    film:
        A thin film on top (see :class:`CoatLayer`), or None.
    """
    return CoatLayer(base, alpha_x, alpha_y, ior, absorption, thickness, film)


def mix(a: Layer, b: Layer, mask: Param) -> MixLayer:
    """Blend two whole layers: ``(1 - mask) a + mask b``, sampled as a mixture.

    ``mask`` in ``[0, 1]``, broadcastable to ``[N]`` (per shading point: a cavity mask for patina,
    up-facing orientation for dust, a scratch mask). Sampling picks ``b`` with probability
    ``mask``; the density is ``(1 - mask) pdf_a + mask pdf_b``. Because the mask depends on the
    surface point only, the blend is as reciprocal and energy conserving as its two layers.
    """
    return MixLayer(a, b, mask)
