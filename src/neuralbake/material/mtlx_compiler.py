"""Compile a MaterialX document into a differentiable PyTorch material: a function from shading
points (uv, normal, position) to a :class:`~neuralbake.material.layering.Layer` tree, whose every
constant is a leaf tensor an optimiser can move.

:func:`compile_materialx` reads the document with :func:`~neuralbake.io.materialx.load_materialx`,
refuses node categories it cannot evaluate (listing all of them with their node paths), turns
every numeric constant (shader inputs with the library defaults filled in, node-graph interface
inputs, node inputs, image texels) into a leaf tensor in :attr:`CompiledMaterial.parameters`, and
returns a :class:`CompiledMaterial`. Calling it evaluates the node graphs feeding the shader
(:mod:`~neuralbake.material.mtlx_nodes`, batched over the N points, in dependency order) and
builds the layers below.

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
    specular = mix(diffuse, coat(diffuse, spec alphas, ior=specular_ior), specular_weight)
    metal    = conductor(artistic_ior(base_weight base_color, specular_weight specular_color), spec alphas)
    base     = mix(specular, metal, base_metalness)
    coated   = mix(base, coat(base, coat alphas, ior=coat_ior, coat_color absorption), coat_weight)
    surface  = SheenLayer(coated, fuzz_weight, fuzz_color, fuzz_roughness)

Standard Surface's ``specular_rotation`` / ``coat_rotation`` turn the anisotropy's tangent
counter-clockwise about the normal by 360 degrees per unit, as its graph's ``rotate3d`` does.
Roughness to GGX alpha is MaterialX's ``roughness_anisotropy`` node: ``a = clamp(r^2, eps, 1)``,
and for anisotropy ``t > 0``: ``s = sqrt(1 - min(t, 0.98))``, ``alpha_x = min(a / s, 1)``,
``alpha_y = a s`` (tangent = +x of the local frame). Standard Surface's specular roughness is
first pulled towards 1 by ``coat_affect_roughness * coat * coat_roughness``; OpenPBR's by the coat
as ``mix(r, min(1, 2 r_coat^4 + r^4)^(1/4), coat_weight)``, both as in the MaterialX graphs. The
metal's complex index comes from Gulbrandsen's artist-friendly mapping (:func:`artistic_ior`).
Weights are clamped to ``[0, 1]`` and indices of refraction to at least 1.

Sheen / fuzz is layered by albedo scaling (:class:`SheenLayer`): the lobe, times its weight, plus
the base scaled by ``(1 - a_i)(1 - a_o)`` where ``a = weight max(color) E_sheen`` (a tabulated
directional albedo), the reciprocal form of Standard Surface's sheen layer.

Approximations (documented, not silent): a weight below 1 on the specular and coat layers is a
linear :func:`~neuralbake.material.layering.mix` with the layer below (MaterialX scales the lobe
and its albedo instead); the coat colour is a Beer-Lambert absorption of unit thickness,
``sigma = -log(coat_color) / 2`` (exactly ``coat_color`` at normal incidence, darker at grazing
angles); ``diffuse_roughness`` / ``base_diffuse_roughness`` (Oren-Nayar) is rendered as Lambert;
subsurface scattering is a Lambert lobe of ``subsurface_color`` (radius, scale and anisotropy
unused); OpenPBR's F82-tint metal uses the same Gulbrandsen conductor with ``specular_color`` as
edge tint; OpenPBR's ``coat_darkening`` (1) is the coat's own albedo scaling; the sheen albedo
table is clamped to 1 where the Charlie lobe itself exceeds it (grazing, low roughness).
Colour constants in ``srgb_texture`` are decoded to linear; other colour spaces than
``lin_rec709`` are refused.

Refused with an :class:`~neuralbake.errors.InputError` naming the input: transmission
(``transmission`` / ``transmission_weight`` > 0), thin film (``thin_film_thickness`` > 0 /
``thin_film_weight`` > 0), emission (``emission`` / ``emission_luminance`` > 0 with a non-black
colour), cut-outs (``opacity`` / ``geometry_opacity`` < 1), a tinted dielectric specular
(``specular_color`` not white where the dielectric is visible), thin-walled subsurface,
``coat_darkening`` other than 1, and normal or tangent inputs driven by a node (normal maps). A
refused input that is connected to a node graph is refused too (its value is unknown until
evaluation). Inputs that only matter for refused features (``transmission_color``,
``thin_film_IOR``, ...) are not read and not in :attr:`CompiledMaterial.parameters`.

Also refused, because the document is untrusted input: a chain of connections longer than
:data:`MAX_NODE_DEPTH` (compiling and evaluating recurse along it), non-finite constants, and
image files outside the document's folder (see :func:`~neuralbake.material.mtlx_nodes.load_image_node`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from neuralbake.errors import InputError
from neuralbake.io.materialx import (
    DefaultGeomProp,
    MaterialXConnection,
    MaterialXDocument,
    MaterialXNode,
    MaterialXNodeGraph,
    load_materialx,
    node_parameters,
    require_supported,
    surface_parameters,
)
from neuralbake.material.frame import (
    check_direction_pair,
    check_directions,
    check_uniforms,
    cos_theta,
    safe_sqrt,
    square_to_cosine_hemisphere,
)
from neuralbake.material.layering import Layer, coat, layer, mix
from neuralbake.material.mtlx_nodes import CHANNELS, SUPPORTED_NODES, Geometry, evaluate_node, load_image_node
from neuralbake.material.sheen import sheen_eval, sheen_pdf
from neuralbake.material.texture import srgb_to_linear

__all__ = ["MAX_NODE_DEPTH", "CompiledMaterial", "SheenLayer", "artistic_ior", "compile_materialx", "roughness_anisotropy", "sheen_albedo"]

MAX_NODE_DEPTH = 128
"""Longest chain of connections from a shader input back to a constant (nodes, graph outputs,
interface inputs). Compiling and evaluating recurse once per link; real graphs are a few dozen
deep, and a chain of a thousand exhausts Python's stack."""

_Source = Callable[["_Frame"], Any]
_GEOMETRY = {"UV0": "uv", "Pobject": "position", "Pworld": "position", "Nobject": "normal", "Nworld": "normal"}


# --- shading formulas ---------------------------------------------------------------------------


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


def roughness_anisotropy(roughness: torch.Tensor, anisotropy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GGX ``(alpha_x, alpha_y)`` as MaterialX's ``roughness_anisotropy`` node (see the module docstring), ``[N]`` each."""
    alpha = torch.clamp(roughness * roughness, torch.finfo(roughness.dtype).eps, 1.0)
    aspect = torch.sqrt(1.0 - torch.clamp(anisotropy, 0.0, 0.98))
    stretched = anisotropy > 0.0
    return torch.where(stretched, torch.clamp(alpha / aspect, max=1.0), alpha), torch.where(stretched, alpha * aspect, alpha)


# --- sheen layered by albedo scaling -------------------------------------------------------------

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
    """Directional albedo of the white sheen lobe (:func:`~neuralbake.material.sheen_eval`), ``[N]``.

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
        scale = (1.0 - self._albedo(cos_theta(wi))) * (1.0 - self._albedo(cos_theta(wo)))
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
class _RotatedLayer:
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


def _standard_surface(v: Mapping[str, torch.Tensor]) -> Layer:
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
    dielectric = coat(sheened, alpha_x=ax, alpha_y=ay, ior=torch.clamp(v["specular_IOR"], min=1.0))
    specular = mix(sheened, dielectric, _unit(v["specular"]))
    eta, k = artistic_ior(v["base"][:, None] * v["base_color"], v["specular"][:, None] * v["specular_color"])
    metal = layer("conductor", {"eta": eta, "k": k, "alpha_x": ax, "alpha_y": ay})
    base = mix(specular, metal, _unit(v["metalness"]))
    # specular_rotation / coat_rotation turn the tangents by 360 degrees per unit (MaterialX's rotate3d).
    turn_specular, turn_coat = (2.0 * math.pi) * v["specular_rotation"], (2.0 * math.pi) * v["coat_rotation"]
    cx, cy = roughness_anisotropy(v["coat_roughness"], v["coat_anisotropy"])
    coated = coat(
        _RotatedLayer(base, turn_specular - turn_coat),
        alpha_x=cx,
        alpha_y=cy,
        ior=torch.clamp(v["coat_IOR"], min=1.0),
        absorption=_coat_absorption(v["coat_color"]),
        thickness=1.0,
    )
    return mix(_RotatedLayer(base, turn_specular), _RotatedLayer(coated, turn_coat), coat_w)


def _open_pbr_surface(v: Mapping[str, torch.Tensor]) -> Layer:
    subsurface = _unit(v["subsurface_weight"])[:, None]
    albedo = (1.0 - subsurface) * v["base_weight"][:, None] * v["base_color"] + subsurface * v["subsurface_color"]
    diffuse = layer("lambert", {"albedo": albedo})
    coat_w = _unit(v["coat_weight"])
    r, r_coat = v["specular_roughness"], v["coat_roughness"]
    coated_r = torch.clamp(2.0 * r_coat**4 + r**4, torch.finfo(r.dtype).tiny, 1.0) ** 0.25
    ax, ay = roughness_anisotropy(r + coat_w * (coated_r - r), v["specular_roughness_anisotropy"])
    dielectric = coat(diffuse, alpha_x=ax, alpha_y=ay, ior=torch.clamp(v["specular_ior"], min=1.0))
    specular = mix(diffuse, dielectric, _unit(v["specular_weight"]))
    eta, k = artistic_ior(v["base_weight"][:, None] * v["base_color"], v["specular_weight"][:, None] * v["specular_color"])
    metal = layer("conductor", {"eta": eta, "k": k, "alpha_x": ax, "alpha_y": ay})
    base = mix(specular, metal, _unit(v["base_metalness"]))
    cx, cy = roughness_anisotropy(r_coat, v["coat_roughness_anisotropy"])
    coated = coat(
        base, alpha_x=cx, alpha_y=cy, ior=torch.clamp(v["coat_ior"], min=1.0), absorption=_coat_absorption(v["coat_color"]), thickness=1.0
    )
    return SheenLayer(mix(base, coated, coat_w), _unit(v["fuzz_weight"]), v["fuzz_color"], v["fuzz_roughness"])


# --- what each shader reads and refuses ---------------------------------------------------------


def _white(value: Any) -> bool:
    return all(abs(c - 1.0) < 1e-6 for c in value)


def _black(value: Any) -> bool:
    return all(abs(c) < 1e-12 for c in value)


@dataclass(frozen=True)
class _Refusal:
    name: str
    """The input whose non-default value is refused."""
    changes_look: Callable[[Any, Callable[[str], Any]], bool]
    """``(value, constant_of) -> bool``; ``constant_of(name)`` is another input's constant (None if connected)."""
    feature: str
    fix: str


def _positive(value: Any, _: Any) -> bool:
    return value > 0.0


def _dielectric_visible(weight: str, metalness: str) -> Callable[[Any, Callable[[str], Any]], bool]:
    def check(value: Any, constant_of: Callable[[str], Any]) -> bool:
        w, m = constant_of(weight), constant_of(metalness)
        visible = (w is None or w > 0.0) and (m is None or m < 1.0)
        return visible and not _white(value)

    return check


def _emits(colour: str) -> Callable[[Any, Callable[[str], Any]], bool]:
    def check(value: Any, constant_of: Callable[[str], Any]) -> bool:
        c = constant_of(colour)
        return value > 0.0 and (c is None or not _black(c))

    return check


def _thin_subsurface(weight: str) -> Callable[[Any, Callable[[str], Any]], bool]:
    def check(value: Any, constant_of: Callable[[str], Any]) -> bool:
        w = constant_of(weight)
        return bool(value) and (w is None or w > 0.0)

    return check


_NOT_YET = "is not supported by the material compiler yet"


@dataclass(frozen=True)
class _ShaderModel:
    build: Callable[[Mapping[str, torch.Tensor]], Layer]
    colours: tuple[str, ...]
    scalars: tuple[str, ...]
    refusals: tuple[_Refusal, ...]
    geometry_inputs: tuple[str, ...]


_SHADERS = {
    "standard_surface": _ShaderModel(
        build=_standard_surface,
        colours=("base_color", "specular_color", "subsurface_color", "sheen_color", "coat_color"),
        scalars=(
            "base",
            "metalness",
            "specular",
            "specular_roughness",
            "specular_IOR",
            "specular_anisotropy",
            "subsurface",
            "sheen",
            "sheen_roughness",
            "coat",
            "coat_roughness",
            "coat_anisotropy",
            "coat_IOR",
            "coat_affect_color",
            "coat_affect_roughness",
            "specular_rotation",
            "coat_rotation",
        ),
        refusals=(
            _Refusal("transmission", _positive, f"transmission {_NOT_YET} (the layers are reflection-only)", "set transmission to 0."),
            _Refusal("thin_film_thickness", _positive, f"thin-film iridescence {_NOT_YET}", "set thin_film_thickness to 0."),
            _Refusal("emission", _emits("emission_color"), f"emission {_NOT_YET} (a BSDF layer emits nothing)", "set emission to 0."),
            _Refusal("opacity", lambda v, _: not _white(v), f"opacity below 1 (cut-outs) {_NOT_YET}", "set opacity to 1, 1, 1."),
            _Refusal(
                "specular_color",
                _dielectric_visible("specular", "metalness"),
                f"a tinted dielectric specular {_NOT_YET} (specular_color is used as the metal's edge tint only)",
                "set specular_color to 1, 1, 1, or metalness to 1.",
            ),
            _Refusal(
                "thin_walled",
                _thin_subsurface("subsurface"),
                f"thin-walled subsurface (translucency) {_NOT_YET}",
                "set thin_walled to false.",
            ),
        ),
        geometry_inputs=("normal", "tangent", "coat_normal"),
    ),
    "open_pbr_surface": _ShaderModel(
        build=_open_pbr_surface,
        colours=("base_color", "specular_color", "subsurface_color", "coat_color", "fuzz_color"),
        scalars=(
            "base_weight",
            "base_metalness",
            "specular_weight",
            "specular_roughness",
            "specular_ior",
            "specular_roughness_anisotropy",
            "subsurface_weight",
            "coat_weight",
            "coat_roughness",
            "coat_roughness_anisotropy",
            "coat_ior",
            "fuzz_weight",
            "fuzz_roughness",
        ),
        refusals=(
            _Refusal(
                "transmission_weight",
                _positive,
                f"transmission {_NOT_YET} (the layers are reflection-only)",
                "set transmission_weight to 0.",
            ),
            _Refusal("thin_film_weight", _positive, f"thin-film iridescence {_NOT_YET}", "set thin_film_weight to 0."),
            _Refusal(
                "emission_luminance",
                _emits("emission_color"),
                f"emission {_NOT_YET} (a BSDF layer emits nothing)",
                "set emission_luminance to 0.",
            ),
            _Refusal("geometry_opacity", lambda v, _: v < 1.0, f"opacity below 1 (cut-outs) {_NOT_YET}", "set geometry_opacity to 1."),
            _Refusal(
                "specular_color",
                _dielectric_visible("specular_weight", "base_metalness"),
                f"a tinted dielectric specular {_NOT_YET} (specular_color is used as the metal's edge tint only)",
                "set specular_color to 1, 1, 1, or base_metalness to 1.",
            ),
            _Refusal(
                "coat_darkening",
                lambda v, c: v != 1.0 and (c("coat_weight") is None or c("coat_weight") > 0.0),
                f"a coat_darkening other than 1 {_NOT_YET} (the coat's albedo scaling darkens the base physically)",
                "set coat_darkening to 1.",
            ),
            _Refusal(
                "geometry_thin_walled",
                _thin_subsurface("subsurface_weight"),
                f"thin-walled subsurface (translucency) {_NOT_YET}",
                "set geometry_thin_walled to false.",
            ),
        ),
        geometry_inputs=("geometry_normal", "geometry_coat_normal", "geometry_tangent", "geometry_coat_tangent"),
    ),
}


# --- evaluation ---------------------------------------------------------------------------------


class _Frame:
    """One evaluation: the geometry, the parameter values in use and a cache of node outputs."""

    def __init__(self, program: _Program, geometry: Geometry, parameters: Mapping[str, torch.Tensor]) -> None:
        self.program = program
        self.geometry = geometry
        self.parameters = parameters
        self._outputs: dict[str, torch.Tensor] = {}

    def node(self, path: str) -> torch.Tensor:
        if path not in self._outputs:
            node, sources = self.program.nodes[path]
            args = {name: source(self) for name, source in sources.items()}
            self._outputs[path] = evaluate_node(node, args, self.geometry)
        return self._outputs[path]


@dataclass
class _Program:
    document: MaterialXDocument
    dtype: torch.dtype
    device: torch.device
    parameters: dict[str, torch.Tensor] = field(default_factory=dict)
    nodes: dict[str, tuple[MaterialXNode, dict[str, _Source]]] = field(default_factory=dict)

    def fail(self, where: str, problem: str, fix: str) -> InputError:
        return InputError(problem, path=self.document.path, field=where, fix=fix)

    def constant(self, key: str, type_name: str, value: Any, colorspace: str | None) -> _Source:
        """A leaf tensor for a numeric constant (``[1, C]`` when read), or the Python value for others."""
        if type_name not in CHANNELS:
            return lambda frame: value
        if key not in self.parameters:
            values = (value,) if isinstance(value, (int, float)) else tuple(value)
            try:
                tensor = torch.tensor(values, dtype=self.dtype, device=self.device)
            except (TypeError, ValueError, OverflowError, RuntimeError) as error:
                raise self.fail(key, f"the value {values!r:.80} is not a list of numbers ({error}).", f"write a {type_name} value.") from error
            if tensor.numel() not in (1, CHANNELS[type_name]):
                raise self.fail(key, f"a {type_name} needs {CHANNELS[type_name]} components, got {tensor.numel()}.", f"write a {type_name} value.")
            if not torch.isfinite(tensor).all():
                raise self.fail(key, f"the value {values!r:.80} is not finite (NaN or infinity).", "write finite numbers.")
            self.parameters[key] = tensor
        if colorspace not in (None, "", "lin_rec709", "srgb_texture") and type_name.startswith("color"):
            raise self.fail(key, f"the colour space '{colorspace}' is not supported.", "state colours in lin_rec709 or srgb_texture.")
        decode = colorspace == "srgb_texture" and type_name.startswith("color")

        def read(frame: _Frame) -> torch.Tensor:
            v = frame.parameters[key].reshape(1, -1)
            return torch.cat((srgb_to_linear(v[:, :3]), v[:, 3:]), dim=-1) if decode else v

        return read

    def geometric(self, where: str, prop: str) -> _Source:
        if prop not in _GEOMETRY:
            raise self.fail(
                where, f"the geometric property '{prop}' is not available to compiled materials.", "connect the input explicitly."
            )
        attribute = _GEOMETRY[prop]
        return lambda frame: getattr(frame.geometry, attribute)

    def connection(self, where: str, connection: MaterialXConnection, graph: MaterialXNodeGraph | None, depth: int = 0) -> _Source:
        if depth > MAX_NODE_DEPTH:
            raise self.fail(
                where,
                f"the chain of connections feeding this input is more than {MAX_NODE_DEPTH} links long.",
                f"shorten the graph (at most {MAX_NODE_DEPTH} nodes in a row), or bake part of it into a texture.",
            )
        if connection.nodegraph is not None:
            target = next((g for g in self.document.node_graphs if g.name == connection.nodegraph), None)
            if target is None:
                raise self.fail(where, f"the node graph '{connection.nodegraph}' does not exist.", "connect an existing node graph.")
            outputs = {o.name: o for o in target.outputs}
            name = connection.output or (target.outputs[0].name if len(target.outputs) == 1 else None)
            if name not in outputs or outputs[name].connection is None:
                raise self.fail(where, f"the node graph '{target.name}' has no connected output '{name}'.", "name one of its outputs.")
            return self.connection(f"{target.path}/{name}", outputs[name].connection, target, depth + 1)
        if connection.interfacename is not None:
            port = next((p for p in graph.inputs if p.name == connection.interfacename), None) if graph else None
            if port is None:
                raise self.fail(where, f"the interface input '{connection.interfacename}' does not exist.", "declare it on the node graph.")
            if port.connection is not None:
                return self.connection(f"{graph.path}/{port.name}", port.connection, None, depth + 1)
            return self.constant(f"{graph.name}/{port.name}", port.type, port.value, port.colorspace)
        if connection.output is not None:
            raise self.fail(where, "connections to named outputs of multi-output nodes are not supported.", "connect a single-output node.")
        scope = graph.nodes if graph is not None else self.document.nodes
        node = next((n for n in scope if n.name == connection.nodename), None)
        if node is None:
            raise self.fail(where, f"the node '{connection.nodename}' does not exist here.", "connect a node of the same scope.")
        self.add_node(node, graph, depth + 1)
        return lambda frame: frame.node(node.path)

    def add_node(self, node: MaterialXNode, graph: MaterialXNodeGraph | None, depth: int = 0) -> None:
        if node.path in self.nodes:
            return
        types = {p.name: p for p in node.nodedef_inputs} | {p.name: p for p in node.inputs}
        sources: dict[str, _Source] = {}
        self.nodes[node.path] = (node, sources)
        for name, value in node_parameters(node).items():
            where = f"{node.path}/{name}"
            port = types[name]
            if node.category in ("image", "tiledimage") and name == "file":
                sources[name] = self.texture(node, port, graph)
            elif isinstance(value, MaterialXConnection):
                sources[name] = self.connection(where, value, graph, depth)
            elif isinstance(value, DefaultGeomProp):
                sources[name] = self.geometric(where, value.name)
            elif value is None:
                raise self.fail(where, "the input has neither a value nor a connection.", "set a value.")
            else:
                sources[name] = self.constant(where, port.type, value, port.colorspace)

    def texture(self, node: MaterialXNode, port: Any, graph: MaterialXNodeGraph | None) -> _Source:
        if port.connection is not None and port.connection.interfacename is not None and graph is not None:
            port = next((p for p in graph.inputs if p.name == port.connection.interfacename), port)
        if port.connection is not None:
            raise self.fail(f"{node.path}/file", "an image file name driven by a node is not supported.", "give the file name as a value.")
        key = f"{node.path}/file"
        texels = load_image_node(node, port.value or "", port.colorspace, document=self.document.path, dtype=self.dtype, device=self.device)
        self.parameters[key] = texels
        return lambda frame: frame.parameters[key]


@dataclass(eq=False)
class CompiledMaterial:
    """A MaterialX material as a differentiable function of the shading point.

    ``material(uv, normal, position=None) -> Layer`` (see :meth:`__call__`). Every numeric
    constant the material reads is a leaf tensor in :attr:`parameters`; call ``requires_grad_()``
    on any of them to differentiate renders with respect to what the artist set.
    """

    name: str
    """The material's name in the document, e.g. ``Copper``."""
    source: str
    """The ``.mtlx`` file it was compiled from."""
    shader: str
    """``standard_surface`` or ``open_pbr_surface``."""
    parameters: dict[str, torch.Tensor]
    """Leaf tensors, ``[C]`` each (``[H, W, C]`` for image texels), keyed ``"<shader>/<input>"``
    for shader inputs, ``"<graph>/<input>"`` for node-graph interface inputs and
    ``"<node path>/<input>"`` for node inputs (``.../file`` holds an image node's texels).
    Integer, boolean and string inputs (e.g. ``fractal3d``'s ``octaves``) stay Python values,
    fixed at compile time; so do the shader inputs checked by the refusals."""
    _program: _Program = field(repr=False)
    _inputs: dict[str, _Source] = field(repr=False)

    def __call__(
        self,
        uv: torch.Tensor,
        normal: torch.Tensor,
        position: torch.Tensor | None = None,
        *,
        parameters: Mapping[str, torch.Tensor] | None = None,
    ) -> Layer:
        """The material's layer tree at N shading points.

        Parameters
        ----------
        uv:
            ``[N, 2]`` texture coordinates (UV0), MaterialX convention: ``v`` points up the image.
        normal:
            ``[N, 3]`` geometric normal in world space (what the ``normal`` node returns).
        position:
            ``[N, 3]`` object-space position (what ``position`` and 3D noise read); ``None`` uses
            ``(u, v, 0)``, so 3D patterns lie flat in the uv plane.
        parameters:
            Replacements for entries of :attr:`parameters` in this call only (e.g. for
            ``torch.autograd.gradcheck``).

        Returns
        -------
        A :class:`~neuralbake.material.layering.Layer` whose ``eval``/``sample``/``pdf`` take
        ``[N, 3]`` directions in the local shading frame (normal +z, tangent +x).
        """
        return _SHADERS[self.shader].build(self.shader_inputs(uv, normal, position, parameters=parameters))

    def layer_and_inputs(self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None = None) -> tuple[Layer, torch.Tensor]:
        """The layer tree and every shader input at the N points (sorted by name, ``[N, K]``), from one
        evaluation of the node graph: what a neural material's sampler and encoder read."""
        inputs = self.shader_inputs(uv, normal, position)
        n = uv.shape[0]
        features = torch.cat([value.reshape(n, -1) for _, value in sorted(inputs.items())], dim=1)
        return _SHADERS[self.shader].build(inputs), features

    def shader_inputs(
        self,
        uv: torch.Tensor,
        normal: torch.Tensor,
        position: torch.Tensor | None = None,
        *,
        parameters: Mapping[str, torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """The shader inputs the layers are built from, evaluated at the N points (arguments as :meth:`__call__`).

        Colours are ``[N, 3]``, scalars ``[N]``, keyed by the shader's input names (e.g.
        ``base_color``, ``specular_roughness``); useful to bake or inspect a node graph's output.
        """
        uv, normal, position = self._check(uv, normal, position)
        values = dict(self.parameters)
        if parameters:
            unknown = sorted(set(parameters) - set(values))
            if unknown:
                raise InputError(f"unknown parameters {unknown}.", path=self.source, field="parameters", fix="use keys of .parameters.")
            values.update(parameters)
        frame = _Frame(self._program, Geometry(uv, normal, position), values)
        n = uv.shape[0]
        model = _SHADERS[self.shader]
        shading: dict[str, torch.Tensor] = {}
        for name in model.colours:
            value = self._inputs[name](frame)
            value = value.expand(n, -1) if value.shape[-1] >= 3 else value[:, :1].expand(n, 3)
            shading[name] = value[:, :3]
        for name in model.scalars:
            shading[name] = self._inputs[name](frame)[:, 0].expand(n)
        return shading

    def _check(
        self, uv: torch.Tensor, normal: torch.Tensor, position: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        def bad(name: str, t: Any, channels: int) -> bool:
            return not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[1] != channels or not t.is_floating_point()

        if bad("uv", uv, 2):
            raise InputError("uv must be a float tensor [N, 2].", path=self.source, field="uv", fix="pass one (u, v) per shading point.")
        if bad("normal", normal, 3) or normal.shape[0] != uv.shape[0]:
            raise InputError(
                "normal must be a float tensor [N, 3] with N of uv.", path=self.source, field="normal", fix="pass one normal per point."
            )
        if position is None:
            position = torch.cat((uv, torch.zeros_like(uv[:, :1])), dim=-1)
        elif bad("position", position, 3) or position.shape[0] != uv.shape[0]:
            raise InputError(
                "position must be a float tensor [N, 3] with N of uv.",
                path=self.source,
                field="position",
                fix="pass one position per point.",
            )
        to = {"dtype": self._program.dtype, "device": self._program.device}
        return uv.to(**to), normal.to(**to), position.to(**to)


def _refuse_unsupported_inputs(program: _Program, shader: MaterialXNode, model: _ShaderModel, params: Mapping[str, Any]) -> None:
    def constant_of(name: str) -> Any:
        value = params.get(name)
        return None if isinstance(value, (MaterialXConnection, DefaultGeomProp)) else value

    for rule in model.refusals:
        value = params.get(rule.name)
        where = f"{shader.path}/{rule.name}"
        if isinstance(value, MaterialXConnection):
            raise program.fail(where, f"'{rule.name}' is driven by a node graph, and {rule.feature}.", rule.fix)
        if value is not None and rule.changes_look(value, constant_of):
            raise program.fail(where, f"'{rule.name}' is {value}: {rule.feature}.", rule.fix)
    for name in model.geometry_inputs:
        if isinstance(params.get(name), MaterialXConnection):
            raise program.fail(
                f"{shader.path}/{name}", f"'{name}' is driven by a node (normal or tangent mapping) {_NOT_YET}.", f"disconnect '{name}'."
            )


def compile_materialx(
    path_or_document: str | Path | MaterialXDocument,
    *,
    material: str | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> CompiledMaterial:
    """Compile one material of a MaterialX document into a :class:`CompiledMaterial`.

    Parameters
    ----------
    path_or_document:
        A ``.mtlx`` file or a document already read with :func:`~neuralbake.io.materialx.load_materialx`.
    material:
        The name of the ``surfacematerial`` to compile; ``None`` takes the first in document order.
    device, dtype:
        Where the parameters live and the precision of evaluation (float32 or float64).

    Raises
    ------
    InputError
        The document cannot be read; it uses node categories outside
        :data:`~neuralbake.material.mtlx_nodes.SUPPORTED_NODES` (all listed with their node
        paths); a shader input is refused (see the module docstring); an image file is missing.
    """
    document = path_or_document if isinstance(path_or_document, MaterialXDocument) else load_materialx(path_or_document)
    require_supported(document, SUPPORTED_NODES)
    if material is None:
        chosen = document.materials[0]
    else:
        chosen = next((m for m in document.materials if m.name == material), None)
        if chosen is None:
            names = ", ".join(m.name for m in document.materials)
            raise InputError(
                f"the document has no material '{material}'.", path=document.path, field="material", fix=f"use one of: {names}."
            )
    shader = chosen.shader
    model = _SHADERS[shader.category]
    program = _Program(document, dtype, torch.device(device))
    params = surface_parameters(chosen)
    _refuse_unsupported_inputs(program, shader, model, params)
    ports = {p.name: p for p in shader.nodedef_inputs} | {p.name: p for p in shader.inputs}
    inputs: dict[str, _Source] = {}
    for name in (*model.colours, *model.scalars):
        value, where = params.get(name), f"{shader.path}/{name}"
        if isinstance(value, MaterialXConnection):
            inputs[name] = program.connection(where, value, None)
        elif value is None or isinstance(value, DefaultGeomProp):
            raise program.fail(where, "the shader input has no value.", "set a value or connect a node graph.")
        else:
            inputs[name] = program.constant(f"{shader.name}/{name}", ports[name].type, value, ports[name].colorspace)
    return CompiledMaterial(chosen.name, document.path, shader.category, program.parameters, program, inputs)
