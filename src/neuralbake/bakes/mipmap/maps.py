"""A texture set as tensors (:class:`MaterialMaps`), read from its images, and the classic mip
chains the learned one is compared with: box filtering and Toksvig's roughness widening."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.mipmap.config import MipmapConfig
from neuralbake.errors import InputError
from neuralbake.io.images import load_image, resize_image
from neuralbake.material.frame import normalize
from neuralbake.material.texture import srgb_to_linear
from neuralbake.render.mip import box_downsample, is_power_of_two

__all__ = ["MaterialMaps", "box_mip_chain", "load_material_maps", "renormalised", "toksvig_chain", "toksvig_roughness"]


@dataclass
class MaterialMaps:
    """One level of a texture set, as tensors ``[S, S, C]`` on one device."""

    base_color: torch.Tensor
    """Linear RGB base colour, ``[S, S, 3]``."""
    normal: torch.Tensor
    """Tangent-space normals, ``[S, S, 3]`` (unit for shading; box averages keep their shortened length)."""
    roughness: torch.Tensor
    """Perceptual roughness, ``[S, S, 1]``."""
    metallic: torch.Tensor
    """Metallic, ``[S, S, 1]``."""

    @property
    def side(self) -> int:
        """Texels per side."""
        return int(self.base_color.shape[0])

    def to(self, device: torch.device | str) -> MaterialMaps:
        """The same maps on ``device``."""
        return MaterialMaps(*(t.to(device) for t in (self.base_color, self.normal, self.roughness, self.metallic)))


def load_material_maps(config: MipmapConfig) -> tuple[MaterialMaps, dict[str, Any]]:
    """Read and check the maps of ``config`` (float32, CPU); returns the maps and facts for the report.

    Raises
    ------
    InputError
        A missing or unreadable file, a grey normal map, maps of different sizes, or a map that
        is not square with a power-of-two side; the message names the file and the fix.
    """
    paths = {"base_color": config.base_color, "normal": config.normal}
    if config.roughness_map:
        paths["roughness_map"] = config.roughness_map
    images = {name: load_image(path)[0] for name, path in paths.items()}
    normal = images["normal"]
    if normal.shape[2] < 3:
        raise InputError(
            f"the normal map has {normal.shape[2]} channel(s); a tangent-space normal map has 3 (RGB = XYZ).",
            path=config.normal,
            field="normal",
            fix="pass the RGB normal map (a grey image is a height or roughness map; convert heights to normals first).",
        )
    if images["base_color"].shape[2] < 3:
        # A grey base colour is a valid (colourless) albedo: use it for R, G and B.
        images["base_color"] = np.repeat(images["base_color"][..., :1], 3, axis=2)
    first = images["base_color"]
    for name, image in images.items():
        if image.shape[:2] != first.shape[:2]:
            raise InputError(
                f"the map is {image.shape[1]}x{image.shape[0]} but the base colour map "
                f"({paths['base_color']}) is {first.shape[1]}x{first.shape[0]}; every map of a texture set must have the same size.",
                path=paths[name],
                field=name,
                fix="resample the maps to one size (or pass --size to resample them all).",
            )
    height, width = first.shape[:2]
    if height != width or not is_power_of_two(width):
        raise InputError(
            f"the maps are {width}x{height}; mipmaps need a square map with a power-of-two side.",
            path=paths["base_color"],
            field="base_color",
            fix="resample the maps to e.g. 512x512 or 2048x2048 (or pass --size N).",
        )
    if config.texture_size is not None and config.texture_size != width:
        images = {name: resize_image(image, config.texture_size, config.texture_size) for name, image in images.items()}
    base = srgb_to_linear(torch.from_numpy(np.ascontiguousarray(images["base_color"][..., :3])))
    encoded = torch.from_numpy(np.ascontiguousarray(images["normal"][..., :3]))
    normal_t = normalize((2.0 * encoded - 1.0).reshape(-1, 3)).reshape(encoded.shape)
    side = base.shape[0]
    metallic_value = 0.0 if config.metallic is None else config.metallic
    roughness = torch.full((side, side, 1), config.roughness)
    metallic = torch.full((side, side, 1), metallic_value)
    metallic_from_map = False
    if config.roughness_map:
        rough_image = torch.from_numpy(np.ascontiguousarray(images["roughness_map"]))
        if rough_image.shape[2] >= 3:  # glTF metallicRoughness: G = roughness, B = metallic
            roughness = rough_image[..., 1:2]
            if config.metallic is None:
                metallic = rough_image[..., 2:3]
                metallic_from_map = True
        else:
            roughness = rough_image[..., :1]
    maps = MaterialMaps(base.float(), normal_t.float(), roughness.float().contiguous(), metallic.float().contiguous())
    digest = hashlib.sha256()
    for name in sorted(images):
        digest.update(np.ascontiguousarray(images[name]).tobytes())
    facts = {
        "paths": paths,
        "source_size": [width, height],
        "size": side,
        "metallic_from_map": metallic_from_map,
        "sha256": digest.hexdigest()[:16],
    }
    return maps, facts


def box_mip_chain(maps: MaterialMaps, levels: int) -> list[MaterialMaps]:
    """Box-filtered levels ``1..levels`` (normals: averaged unit normals, *not* renormalised)."""
    chain = []
    for k in range(1, levels + 1):
        f = 2**k
        chain.append(MaterialMaps(*(box_downsample(t, f) for t in (maps.base_color, maps.normal, maps.roughness, maps.metallic))))
    return chain


def toksvig_roughness(roughness: torch.Tensor, normal_length: torch.Tensor, *, variant: str = "variance") -> torch.Tensor:
    """Roughness widened by the normal variance of a shortened averaged normal (see the module docstring).

    ``variant="variance"``: ``alpha'^2 = alpha^2 + (1 - |n|) / |n|``; ``"phong"``: Toksvig's Phong
    exponent ``s' = s |n| / (|n| + s (1 - |n|))`` with ``s = 2 / alpha^2 - 2``. Returns perceptual
    roughness ``sqrt(alpha')`` clamped to ``[0, 1]``, shape of ``roughness``.
    """
    length = torch.clamp(normal_length, 1e-6, 1.0)
    alpha2 = torch.clamp(roughness, min=0.0) ** 4
    if variant == "variance":
        widened = alpha2 + (1.0 - length) / length
    elif variant == "phong":
        s = 2.0 / torch.clamp(alpha2, min=1e-8) - 2.0
        s_filtered = s * length / (length + s * (1.0 - length))
        widened = 2.0 / (torch.clamp(s_filtered, min=0.0) + 2.0)
    else:
        raise ValueError(f"unknown Toksvig variant {variant!r}")
    return torch.clamp(widened, 0.0, 1.0) ** 0.25


def toksvig_chain(box_chain: Sequence[MaterialMaps], *, variant: str = "variance") -> list[MaterialMaps]:
    """Box levels with Toksvig-widened roughness and renormalised normals."""
    chain = []
    for level in box_chain:
        length = torch.linalg.vector_norm(level.normal, dim=-1, keepdim=True)
        chain.append(
            MaterialMaps(
                level.base_color,
                normalize(level.normal.reshape(-1, 3)).reshape(level.normal.shape),
                toksvig_roughness(level.roughness, length, variant=variant),
                level.metallic,
            )
        )
    return chain


def renormalised(chain: Sequence[MaterialMaps]) -> list[MaterialMaps]:
    """The chain with unit normals (the box baseline as a renderer would sample it)."""
    return [
        MaterialMaps(lv.base_color, normalize(lv.normal.reshape(-1, 3)).reshape(lv.normal.shape), lv.roughness, lv.metallic) for lv in chain
    ]
