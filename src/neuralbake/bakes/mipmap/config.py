"""The learned-mipmap bake's settings: :class:`MipmapConfig`, its limits, the memory a bake needs,
and the sizes it picks by device."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Literal

import torch

from neuralbake.bakes.config import TrainedConfig
from neuralbake.bakes.footprint import PROCESS_BYTES, dominant_field, footprint
from neuralbake.bakes.run import Footprint
from neuralbake.core.paths import InputPath
from neuralbake.errors import ConfigError, short_repr
from neuralbake.io.limits import check_memory
from neuralbake.nn.trainer import TrainerConfig
from neuralbake.render.mip import is_power_of_two

__all__ = [
    "CPU_TEXTURE_SIZE",
    "MAX_SIZE",
    "SLOPE_PARAMETERISATION",
    "MipmapConfig",
    "check_bake_memory",
    "check_map_paths",
    "device_defaults",
    "estimated_bake_bytes",
    "mipmap_footprint",
]


def _default_train() -> TrainerConfig:
    return TrainerConfig(
        steps=300,
        learning_rate=0.02,
        precision="fp32",
        loss_scale="none",
        log_every=10,
        eval_every=100,
        checkpoint_every=0,
        final_lr_fraction=0.1,
    )


MAP_FIELDS = ("base_color", "normal", "roughness_map")
"""The config fields that name the maps, in the command line's order."""


def check_map_paths(paths: Mapping[str, Any]) -> None:
    """Refuse a glTF asset given where a map goes (``{field: path}``, fields of :data:`MAP_FIELDS`): the bake
    takes the material's images, and the command line would otherwise only say that NORMAL is missing.
    Raises a :class:`~neuralbake.errors.ConfigError` naming the field and how to get the images."""
    for name in MAP_FIELDS:
        value = paths.get(name)
        if isinstance(value, str) and PurePath(value).suffix.lower() in (".gltf", ".glb"):
            raise ConfigError(
                f"mipmap takes images (the base colour, the normal map and optionally a roughness map), not a glTF asset: {short_repr(value)}.",
                field=name,
                fix="pass the material's texture files, e.g. `neuralbake mipmap base_color.png normal.png metallic_roughness.png --out DIR`. "
                "A .gltf names them (its images' uri, usually files beside it); a .glb holds them inside: save it as .gltf with separate "
                "textures (a glTF tool such as gltf-transform does) or export the maps from the tool that made it.",
            )


@dataclass
class MipmapConfig(TrainedConfig):
    """Everything that determines a learned-mipmap bake."""

    base_color: InputPath = ""
    """Base colour map (sRGB), square, power-of-two side."""
    normal: InputPath = ""
    """Tangent-space normal map (OpenGL +y, as glTF), RGB, same size as the base colour."""
    roughness_map: InputPath | None = None
    """Roughness map: a grey image, or a glTF metallicRoughness map (G = roughness, B = metallic); None: the constant `roughness`."""
    roughness: float = 0.2
    """Perceptual roughness (GGX alpha = roughness^2) when no roughness map is given."""
    metallic: float | None = None
    """Constant metallic; None: the B channel of a glTF metallicRoughness map when one is given, else 0 (dielectric)."""
    texture_size: int | None = None
    """Resample every map to N x N (a power of two) before baking; None: the maps' own size on a GPU, at most 256 on a CPU."""
    levels: int | None = None
    """Mip levels to make below the base (1: half size only); None: every level down to 1x1."""
    light_intensity: float = 5.0
    """Radiance scale of the light (the seed's 'bright white light' uses 5)."""
    directions_per_step: int = 16
    """Random (light, view) pairs per training step, each shared by every texel of every level."""
    held_out_directions: int = 32
    """Fixed (light, view) pairs, drawn with another seed, on which the report measures every method."""
    specular_fraction: float = 0.5
    """Fraction of light directions drawn around the view's mirror direction (where highlights are)."""
    init: Literal["box", "toksvig"] = "toksvig"
    """Starting point of the learned texels: Toksvig's maps (converges faster) or the box-filtered ones."""
    train: TrainerConfig = field(default_factory=_default_train)  # this bake's training defaults

    def validate(self) -> None:
        """Raise ConfigError on settings no bake can use (before any file is read)."""
        check_map_paths({name: getattr(self, name) for name in MAP_FIELDS})
        for name in ("base_color", "normal"):
            if not getattr(self, name):
                raise ConfigError("no map given.", field=name, fix=f"pass the path of the {name.replace('_', ' ')} map.")
        if not (0.0 <= self.roughness <= 1.0):
            raise ConfigError(f"must be in [0, 1], got {self.roughness}.", field="roughness", fix="use e.g. 0.2 for a shiny surface.")
        if self.metallic is not None and not (0.0 <= self.metallic <= 1.0):
            raise ConfigError(f"must be in [0, 1], got {self.metallic}.", field="metallic", fix="use 0 (dielectric) to 1 (metal).")
        if self.texture_size is not None and (not is_power_of_two(self.texture_size) or not 2 <= self.texture_size <= MAX_SIZE):
            raise ConfigError(
                f"must be a power of two from 2 to {MAX_SIZE}, got {self.texture_size}.",
                field="texture_size",
                fix="use e.g. 128, 512 or 2048.",
            )
        if self.levels is not None and self.levels < 1:
            raise ConfigError(
                f"must be >= 1, got {self.levels}.", field="levels", fix="ask for at least one level, or leave it unset for all."
            )
        if not (self.light_intensity > 0.0 and math.isfinite(self.light_intensity)):
            raise ConfigError(f"must be a positive number, got {self.light_intensity}.", field="light_intensity", fix="use e.g. 5.")
        for name in ("directions_per_step", "held_out_directions"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}.", field=name, fix=f"set {name} to 1 or more.")
        if not (0.0 <= self.specular_fraction <= 1.0):
            raise ConfigError(f"must be in [0, 1], got {self.specular_fraction}.", field="specular_fraction", fix="use e.g. 0.5.")
        if self.init not in ("box", "toksvig"):
            raise ConfigError(f"unknown initialisation {self.init!r}.", field="init", fix="use box or toksvig.")
        self.train.validate()
        if self.train.precision != "fp32":
            raise ConfigError(
                f"texel optimisation runs in fp32, got {self.train.precision}.",
                field="train.precision",
                fix="use fp32 (GGX peaks of a shiny surface overflow fp16).",
            )


MAX_SIZE = 16384
"""Largest ``texture_size`` a bake resamples to (the 16K texture that image loading also caps)."""

SLOPE_PARAMETERISATION = "offset_in_alpha_units"
"""What ``LearnedMipLevel.slope`` holds, recorded in checkpoints: an offset from ``slope_origin`` in
units of the initial GGX alpha. Checkpoints from before this (absolute slopes) carry no such key and
are refused on ``--resume`` rather than loaded as offsets."""


def estimated_bake_bytes(side: int, config: MipmapConfig, device: torch.device | str = "cpu") -> int:
    """A rough upper estimate of a bake's peak host memory for a ``side`` x ``side`` base.

    Measured on CPU at 256-1024 texels (16 training and 32 held-out directions): about 3.2 KB per
    base texel plus a fixed ~0.3 GB. Per base texel: the loaded images and full-size maps (~64 B);
    the mip chains (box, Toksvig x2, learned, 8-bit) and the learned texels' Adam state (~1/3 of a
    texel each, ~8 floats: ~256 B); the reference shading of every level for the step's, the
    held-out and the 12 mirror directions (4 B x 3 channels / 3 per direction and texel, kept
    twice: ~8 B x directions); and the autograd graph of the learned chain's shading, which keeps
    ~40 floats per (direction, level texel): ~160 B x directions_per_step. On a GPU only the loaded
    images and the host copies of the outputs stay in host memory.
    """
    texels = side * side
    host = texels * (64 + 128)
    if torch.device(device).type != "cpu":
        return host
    directions = config.directions_per_step + config.held_out_directions + 12
    return host + texels * (256 + 8 * directions + 160 * config.directions_per_step) + (1 << 29)


def check_bake_memory(side: int, config: MipmapConfig, device: torch.device | str) -> None:
    check_memory(
        estimated_bake_bytes(side, config, device),
        what=f"a learned-mipmap bake of a {side}x{side} texture set",
        field="texture_size",
        fix="bake at a smaller --size (e.g. 1024 or 2048), lower --directions, or bake on a GPU.",
    )


CPU_TEXTURE_SIZE = 256
"""Largest side a CPU bake resamples the maps to when ``texture_size`` is left unset: 300 steps of
a 256^2 set take about 2 minutes on 2 cores (see ``README.md``); a GPU bakes the maps' own size."""


def _source_side(path: str) -> int | None:
    """The larger side of the image at ``path`` from its header, or ``None`` if it cannot be read
    (the loader then reports the problem with its own message)."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return max(image.size)
    except Exception:  # noqa: BLE001  (any unreadable file is reported later by the loader)
        return None


def device_defaults(config: MipmapConfig, device: torch.device) -> dict[str, Any]:
    """``texture_size`` when left unset: the maps' own size on a GPU; on a CPU at most
    :data:`CPU_TEXTURE_SIZE` (maps already that small keep their size)."""
    if device.type != "cpu" or not config.base_color:
        return {}
    side = _source_side(config.base_color)
    if side is None or side <= CPU_TEXTURE_SIZE:
        return {}
    return {"texture_size": CPU_TEXTURE_SIZE}


# -- footprint --------------------------------------------------------------------------------

ASSUMED_GPU_SIDE = 1024
"""The maps' side assumed when ``texture_size`` is unset on a GPU (the maps' own size, read only when
the bake runs): a 1K set, 3.5 GiB by these terms (a 2K set needs about 14 GiB, a 4K set 56). The bake
checks the side it reads with :func:`check_bake_memory` (host memory) before resampling, and the
image loader checks each map's decoded size; a service that bakes large sets should pass
``texture_size`` so that this estimate sees it."""


def _side(config: MipmapConfig, device: torch.device) -> int:
    # unset on a CPU: the device default left the maps' own size, which is at most CPU_TEXTURE_SIZE
    return config.texture_size or (ASSUMED_GPU_SIDE if device.type == "cuda" else CPU_TEXTURE_SIZE)


def estimated_memory(config: MipmapConfig, device: torch.device) -> dict[str, float]:
    """:func:`estimated_bake_bytes`' per-texel terms by the setting that drives them: the maps and their
    mip chains (``texture_size``), the reference shading per direction (``held_out_directions``) and the
    autograd graph of a step's shading (``directions_per_step``). On a GPU the work (and the maps) sit
    in GPU memory."""
    texels = _side(config, device) ** 2
    directions = config.directions_per_step + config.held_out_directions + 12
    return {
        "texture_size": texels * (64 + 128 + 256),
        "held_out_directions": texels * 8 * directions,
        "directions_per_step": texels * 160 * config.directions_per_step,
    }


def mipmap_footprint(config: MipmapConfig, device: torch.device) -> Footprint:
    """Peak memory of a learned-mipmap bake (:func:`estimated_memory` on top of the process's base) and its steps."""
    terms = estimated_memory(config, device)
    total = lambda c, d: sum(estimated_memory(c, d).values())  # noqa: E731
    knobs = {"texture_size": CPU_TEXTURE_SIZE, "directions_per_step": 16, "held_out_directions": 32}
    field = dominant_field(total, config, device, knobs, fallback="texture_size")
    return footprint(terms, steps=config.train.steps or 0, steps_field="train.steps", base=PROCESS_BYTES, field=field)
