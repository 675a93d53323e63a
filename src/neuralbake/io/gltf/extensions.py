"""The factors of the glTF material extensions the renderer shades (``KHR_materials_ior``, ``_specular``,
``_iridescence``, ``_clearcoat`` and ``_sheen``): each read and checked against the range its specification allows, with an
:class:`~neuralbake.errors.InputError` naming the field otherwise. The textures of ``_specular``,
``_iridescence``, ``_clearcoat`` and ``_sheen`` are not sampled yet: a material that has them keeps the extension among its unshaded ones."""

from __future__ import annotations

import math

from neuralbake.errors import InputError

__all__ = [
    "CLEARCOAT_TEXTURES",
    "IRIDESCENCE_TEXTURES",
    "SHEEN_TEXTURES",
    "SPECULAR_TEXTURES",
    "SHADED_FACTORS",
    "SHADED_FACTOR_FIELDS",
    "read_clearcoat",
    "read_ior",
    "read_iridescence",
    "read_shaded_factors",
    "read_sheen",
    "read_specular",
]

SPECULAR_TEXTURES = ("specularTexture", "specularColorTexture")
"""``KHR_materials_specular``'s textures: not sampled yet, so a material with them keeps the extension among its
unshaded ones (refused by the bakes); its factors alone are shaded."""

IRIDESCENCE_TEXTURES = ("iridescenceTexture", "iridescenceThicknessTexture")
"""``KHR_materials_iridescence``'s textures: not sampled yet, so a material with them keeps the extension among its
unshaded ones (refused by the bakes); its factors alone are shaded (the film at its maximum thickness)."""


def read_ior(path: str, value: object, index: int) -> float:
    """A material's ``KHR_materials_ior.ior``: 0 (a mirror-like dielectric) or at least 1, as the extension requires."""
    ior = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    if not (ior == 0.0 or (ior >= 1.0 and math.isfinite(ior))):
        raise InputError(f"KHR_materials_ior.ior is {value!r}; the extension allows 0 or a finite number of at least 1.", path=path,
                         field=f"materials[{index}].extensions.KHR_materials_ior.ior", fix="set it to e.g. 1.5 (glass), 1.33 (water), or remove it.")
    return ior


def read_specular(path: str, ext: dict, index: int) -> tuple[float, tuple[float, float, float]]:
    """A material's ``KHR_materials_specular`` factors: ``specularFactor`` in [0, 1], ``specularColorFactor`` three
    finite values of at least 0."""
    where = f"materials[{index}].extensions.KHR_materials_specular"
    factor = ext.get("specularFactor", 1.0)
    colour = ext.get("specularColorFactor", [1.0, 1.0, 1.0])
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    if not (number(factor) and 0.0 <= factor <= 1.0):
        raise InputError(f"specularFactor is {factor!r}; it must be a number in [0, 1].", path=path, field=f"{where}.specularFactor",
                         fix="set it to e.g. 1.0, or remove it.")
    if not (isinstance(colour, list) and len(colour) == 3 and all(number(c) and c >= 0.0 for c in colour)):
        raise InputError(f"specularColorFactor is {colour!r}; it must be three numbers of at least 0.", path=path,
                         field=f"{where}.specularColorFactor", fix="set it to e.g. [1, 1, 1], or remove it.")
    return float(factor), (float(colour[0]), float(colour[1]), float(colour[2]))


def read_iridescence(path: str, ext: dict, index: int) -> tuple[float, float, tuple[float, float]]:
    """A material's ``KHR_materials_iridescence`` factors: the factor in [0, 1], the film's index at least 1, thickness
    bounds of at least 0 nm (the spec's defaults 0, 1.3, 100 and 400)."""
    where = f"materials[{index}].extensions.KHR_materials_iridescence"
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    factor, ior = ext.get("iridescenceFactor", 0.0), ext.get("iridescenceIor", 1.3)
    low, high = ext.get("iridescenceThicknessMinimum", 100.0), ext.get("iridescenceThicknessMaximum", 400.0)
    if not (number(factor) and 0.0 <= factor <= 1.0):
        raise InputError(f"iridescenceFactor is {factor!r}; it must be a number in [0, 1].", path=path, field=f"{where}.iridescenceFactor",
                         fix="set it to e.g. 1.0, or remove it.")
    if not (number(ior) and ior >= 1.0):
        raise InputError(f"iridescenceIor is {ior!r}; it must be a number of at least 1.", path=path, field=f"{where}.iridescenceIor",
                         fix="set it to e.g. 1.3, or remove it.")
    for key, value in (("iridescenceThicknessMinimum", low), ("iridescenceThicknessMaximum", high)):
        if not (number(value) and value >= 0.0):
            raise InputError(f"{key} is {value!r}; it must be a thickness of at least 0 nm.", path=path, field=f"{where}.{key}",
                             fix="set it to e.g. 400, or remove it.")
    return float(factor), float(ior), (float(low), float(high))


CLEARCOAT_TEXTURES = ("clearcoatTexture", "clearcoatRoughnessTexture", "clearcoatNormalTexture")
"""``KHR_materials_clearcoat``'s textures: not sampled yet (the extension stays unshaded, refused by the bakes)."""


def read_clearcoat(path: str, ext: dict, index: int) -> tuple[float, float]:
    """A material's ``KHR_materials_clearcoat`` factors: ``clearcoatFactor`` and ``clearcoatRoughnessFactor`` in [0, 1]."""
    where = f"materials[{index}].extensions.KHR_materials_clearcoat"
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    out = []
    for key in ("clearcoatFactor", "clearcoatRoughnessFactor"):
        value = ext.get(key, 0.0)
        if not (number(value) and 0.0 <= value <= 1.0):
            raise InputError(f"{key} is {value!r}; it must be a number in [0, 1].", path=path, field=f"{where}.{key}", fix="set it to e.g. 0.5, or remove it.")
        out.append(float(value))
    return out[0], out[1]


SHEEN_TEXTURES = ("sheenColorTexture", "sheenRoughnessTexture")
"""``KHR_materials_sheen``'s textures: not sampled yet (the extension stays unshaded, refused by the bakes)."""


def read_sheen(path: str, ext: dict, index: int) -> tuple[tuple[float, float, float], float]:
    """A material's ``KHR_materials_sheen`` factors: ``sheenColorFactor`` three numbers in [0, 1], ``sheenRoughnessFactor`` in [0, 1]."""
    where = f"materials[{index}].extensions.KHR_materials_sheen"
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0.0 <= v <= 1.0  # noqa: E731
    colour, roughness = ext.get("sheenColorFactor", [0.0, 0.0, 0.0]), ext.get("sheenRoughnessFactor", 0.0)
    if not (isinstance(colour, list) and len(colour) == 3 and all(number(c) for c in colour)):
        raise InputError(f"sheenColorFactor is {colour!r}; it must be three numbers in [0, 1].", path=path, field=f"{where}.sheenColorFactor",
                         fix="set it to e.g. [0.5, 0.5, 0.5], or remove it.")
    if not number(roughness):
        raise InputError(f"sheenRoughnessFactor is {roughness!r}; it must be a number in [0, 1].", path=path, field=f"{where}.sheenRoughnessFactor",
                         fix="set it to e.g. 0.5, or remove it.")
    return (float(colour[0]), float(colour[1]), float(colour[2])), float(roughness)


SHADED_FACTORS = {
    "KHR_materials_specular": (SPECULAR_TEXTURES, read_specular, ("specular", "specular_color")),
    "KHR_materials_iridescence": (IRIDESCENCE_TEXTURES, read_iridescence, ("iridescence", "iridescence_ior", "iridescence_thickness")),
    "KHR_materials_clearcoat": (CLEARCOAT_TEXTURES, read_clearcoat, ("clearcoat", "clearcoat_roughness")),
    "KHR_materials_sheen": (SHEEN_TEXTURES, read_sheen, ("sheen_color", "sheen_roughness")),
}
"""Extension -> (its textures, the reader of its factors, the :class:`~neuralbake.io.gltf.model.Material` fields they fill)."""


SHADED_FACTOR_FIELDS = ("ior", *(name for _, _, fields in SHADED_FACTORS.values() for name in fields))
"""Every :class:`~neuralbake.io.gltf.model.Material` field a shaded extension fills (``KHR_materials_ior``'s too): the
renderer's :class:`~neuralbake.render.scene.MaterialParameters` carries the same fields, copied by these names."""


def read_shaded_factors(path: str, material: object, extensions: dict, index: int) -> None:
    """Fill ``material``'s fields from the :data:`SHADED_FACTORS` extensions in ``extensions`` that have no textures, and
    drop those from its ``unshaded_extensions`` (the renderer shades them); one with textures stays unshaded."""
    for name, (textures, read, fields) in SHADED_FACTORS.items():
        ext = extensions.get(name)
        if isinstance(ext, dict) and not any(key in ext for key in textures):
            for field, value in zip(fields, read(path, ext, index), strict=True):
                setattr(material, field, value)
            material.unshaded_extensions = tuple(e for e in material.unshaded_extensions if e != name)
