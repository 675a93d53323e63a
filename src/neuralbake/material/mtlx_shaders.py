"""What each MaterialX surface shader gives the material compiler: the inputs it reads and the
inputs it refuses.

:data:`SHADERS` maps ``standard_surface`` and ``open_pbr_surface`` to a :class:`ShaderModel`: the
colour and scalar inputs the closure (:mod:`~neuralbake.material.surfaces`) is built from, the
geometry inputs that must not be driven by a node, and the refusals. Refused with an
:class:`~neuralbake.errors.InputError` naming the input (:func:`refuse_unsupported_inputs`):
a transmission volume (``transmission_depth`` > 0 or a ``transmission_scatter`` colour where the
surface transmits), emission (``emission`` /
``emission_luminance`` > 0 with a non-black colour), cut-outs (``opacity`` / ``geometry_opacity``
< 1), a tinted dielectric specular (``specular_color`` not white where the dielectric is
visible), thin-walled subsurface, ``coat_darkening`` other than 1, and normal or tangent inputs
driven by a node (normal maps). Inputs that only matter for refused features
are not read. Transmission (``transmission`` / ``transmission_weight``, ``transmission_color``,
Standard Surface's ``transmission_extra_roughness``) is the rough dielectric boundary of
:mod:`~neuralbake.material.dielectric`, or its thin-walled slab where ``thin_walled`` /
``geometry_thin_walled`` is set (:data:`ShaderModel.thin_walled`, a compile-time constant); OpenPBR's dispersion is ignored (one index for all
wavelengths). Thin film (``thin_film_*``) is read: it colours the
specular and metal Fresnel (:func:`~neuralbake.material.lobes.filmed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from neuralbake.errors import InputError
from neuralbake.io.materialx import DefaultGeomProp, MaterialXConnection, MaterialXNode
from neuralbake.material.layering import Layer
from neuralbake.material.surfaces import open_pbr_surface_layers, standard_surface_layers

__all__ = ["SHADERS", "ShaderModel", "refuse_unsupported_inputs"]


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


def _transmits(weight: str, constant_of: Callable[[str], Any]) -> bool:
    w = constant_of(weight)
    return w is None or w > 0.0


def _volume(weight: str) -> Callable[[Any, Callable[[str], Any]], bool]:
    return lambda value, constant_of: value > 0.0 and _transmits(weight, constant_of)


def _scatters(weight: str) -> Callable[[Any, Callable[[str], Any]], bool]:
    return lambda value, constant_of: not _black(value) and _transmits(weight, constant_of)


_NOT_YET = "is not supported by the material compiler yet"


@dataclass(frozen=True)
class ShaderModel:
    """What the compiler reads from one surface shader category, and what it refuses."""

    build: Callable[..., Layer]
    """``build(inputs, thin_walled=False)``: the layer tree from the shader inputs at N points."""
    colours: tuple[str, ...]
    scalars: tuple[str, ...]
    refusals: tuple[_Refusal, ...]
    geometry_inputs: tuple[str, ...]
    thin_walled: str
    """The boolean input that makes the surface a thin wall (read at compile time; a node may not drive it)."""


SHADERS: dict[str, ShaderModel] = {
    "standard_surface": ShaderModel(
        build=standard_surface_layers,
        colours=("base_color", "specular_color", "subsurface_color", "sheen_color", "coat_color", "transmission_color"),
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
            "thin_film_thickness",
            "thin_film_IOR",
            "transmission",
            "transmission_extra_roughness",
        ),
        refusals=(
            _Refusal("transmission_depth", _volume("transmission"), f"a transmission volume (absorption and scattering inside) {_NOT_YET}",
                     "set transmission_depth to 0 (transmission_color then tints at the surface)."),
            _Refusal("transmission_scatter", _scatters("transmission"), f"scattering inside a transmissive volume {_NOT_YET}",
                     "set transmission_scatter to 0, 0, 0."),
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
        thin_walled="thin_walled",
    ),
    "open_pbr_surface": ShaderModel(
        build=open_pbr_surface_layers,
        colours=("base_color", "specular_color", "subsurface_color", "coat_color", "fuzz_color", "transmission_color"),
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
            "thin_film_weight",
            "thin_film_thickness",
            "thin_film_ior",
            "transmission_weight",
        ),
        refusals=(
            _Refusal("transmission_depth", _volume("transmission_weight"), f"a transmission volume (absorption and scattering inside) {_NOT_YET}",
                     "set transmission_depth to 0 (transmission_color then tints at the surface)."),
            _Refusal("transmission_scatter", _scatters("transmission_weight"), f"scattering inside a transmissive volume {_NOT_YET}",
                     "set transmission_scatter to 0, 0, 0."),
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
        thin_walled="geometry_thin_walled",
    ),
}


def refuse_unsupported_inputs(
    fail: Callable[[str, str, str], InputError], shader: MaterialXNode, model: ShaderModel, params: Mapping[str, Any]
) -> None:
    """Raise ``fail(where, problem, fix)`` for the first refused input of ``shader`` (``params``: its inputs, defaults filled in).

    A refused input connected to a node graph is refused too (its value is unknown until
    evaluation); so is a normal or tangent input driven by a node.
    """

    def constant_of(name: str) -> Any:
        value = params.get(name)
        return None if isinstance(value, (MaterialXConnection, DefaultGeomProp)) else value

    for rule in model.refusals:
        value = params.get(rule.name)
        where = f"{shader.path}/{rule.name}"
        if isinstance(value, MaterialXConnection):
            raise fail(where, f"'{rule.name}' is driven by a node graph, and {rule.feature}.", rule.fix)
        if value is not None and rule.changes_look(value, constant_of):
            raise fail(where, f"'{rule.name}' is {value}: {rule.feature}.", rule.fix)
    for name in model.geometry_inputs:
        if isinstance(params.get(name), MaterialXConnection):
            raise fail(
                f"{shader.path}/{name}", f"'{name}' is driven by a node (normal or tangent mapping) {_NOT_YET}.", f"disconnect '{name}'."
            )
