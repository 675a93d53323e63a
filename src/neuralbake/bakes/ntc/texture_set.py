"""NTC texture sets: the channel groups of one material (images or a glTF material), checked and mip-mapped.

A set holds up to 16 channels of one power-of-two size; a group named ``normal`` keeps X and Y
(Z is rebuilt on decode). glTF materials are read through :mod:`neuralbake.io.gltf`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.errors import InputError
from neuralbake.io.gltf import load_gltf_materials
from neuralbake.io.images import load_image, resize_image
from neuralbake.render.mip import build_mip_pyramid, is_power_of_two

__all__ = ["MAX_CHANNELS", "ChannelGroup", "TextureSet", "check_texture_set", "load_gltf_material", "load_texture_set"]

MAX_CHANNELS = 16
"""Most channels one texture set may hold (as in RTXNTC)."""

@dataclass(frozen=True)
class ChannelGroup:
    """One texture of the set: its name, channel names and kind."""

    name: str
    """Group name, used in file names and reports (e.g. ``base_color``)."""
    channels: tuple[str, ...]
    """Channel names in storage order (e.g. ``("R", "G", "B")``)."""
    kind: str = "color"
    """``color`` (RGB-like), ``normal_xy`` (tangent-space X and Y in ``0.5 n + 0.5``; Z is rebuilt on
    decode) or ``data`` (anything else, e.g. occlusion / roughness / metallic)."""


@dataclass
class TextureSet:
    """Channel groups of one material, all the same power-of-two size, as float32 ``[H, W, c]`` in [0, 1]."""

    groups: list[ChannelGroup]
    images: list[np.ndarray]
    sources: list[str]

    @property
    def width(self) -> int:
        return int(self.images[0].shape[1])

    @property
    def height(self) -> int:
        return int(self.images[0].shape[0])

    @property
    def channels(self) -> int:
        return sum(len(g.channels) for g in self.groups)

    def stacked(self) -> np.ndarray:
        """All groups side by side, ``[H, W, channels]``."""
        return np.concatenate(self.images, axis=2).astype(np.float32)

    def mip_chain(self) -> list[np.ndarray]:
        """The box-filtered mip chain of :meth:`stacked`, float32 ``[H_k, W_k, channels]`` down to 1x1
        (:func:`~neuralbake.render.mip.build_mip_pyramid`, averaged in float64 per level)."""
        chain = build_mip_pyramid(torch.from_numpy(self.stacked()), compute_dtype=torch.float64)
        return [np.ascontiguousarray(level.numpy()) for level in chain]

    def resized(self, side: int) -> TextureSet:
        """The set resampled so that its larger side is ``side`` (a power of two), keeping the aspect."""
        scale = side / max(self.width, self.height)
        width, height = max(1, round(self.width * scale)), max(1, round(self.height * scale))
        return TextureSet(self.groups, [resize_image(image, width, height) for image in self.images], self.sources)


def check_texture_set(texture_set: TextureSet) -> None:
    """Raise InputError unless every texture has the same power-of-two size and there are at most 16 channels."""
    first = texture_set.images[0].shape[:2]
    for image, source in zip(texture_set.images, texture_set.sources):
        if image.shape[:2] != first:
            raise InputError(
                f"this texture is {image.shape[1]}x{image.shape[0]} but {texture_set.sources[0]} is {first[1]}x{first[0]}; "
                "all textures of a set must have the same size.",
                path=source,
                fix="resize the textures to one size (e.g. all 2048x2048) before compressing.",
            )
    height, width = first
    if not (is_power_of_two(width) and is_power_of_two(height)):
        raise InputError(
            f"{width}x{height} is not a power-of-two size; mip chains and latent grids need 2^n sides.",
            path=texture_set.sources[0],
            fix="resize the textures to powers of two (e.g. 1024x1024), or pass --size.",
        )
    if min(width, height) < 4:
        raise InputError(f"{width}x{height} is too small.", path=texture_set.sources[0], fix="use textures of at least 4x4 texels.")
    if texture_set.channels > MAX_CHANNELS:
        listing = ", ".join(f"{g.name} ({len(g.channels)})" for g in texture_set.groups)
        raise InputError(
            f"the set has {texture_set.channels} channels ({listing}); at most {MAX_CHANNELS} fit one texture set.",
            path=texture_set.sources[0],
            field="channels",
            fix="drop textures or split the material into two sets.",
        )
    names = [g.name for g in texture_set.groups]
    if len(set(names)) != len(names):
        raise InputError(f"group names repeat: {names}.", field="groups", fix="name each texture once (NAME=PATH).")


_RGBA = ("R", "G", "B", "A")


def _group_for_image(name: str, image: np.ndarray) -> tuple[ChannelGroup, np.ndarray]:
    if name in ("normal", "normals", "normal_map"):
        if image.shape[2] < 2:
            raise InputError("a normal map needs at least X and Y channels.", field=name, fix="pass an RGB normal map.")
        return ChannelGroup(name, ("X", "Y"), "normal_xy"), image[..., :2]
    kind = "color" if image.shape[2] >= 3 else "data"
    return ChannelGroup(name, _RGBA[: image.shape[2]], kind), image


def split_source(text: str) -> tuple[str, str, str]:
    """A source ``NAME=PATH`` or ``PATH`` -> (``"NAME="`` or ``""``, the path, ``""``)."""
    name, sep, path = text.rpartition("=")
    return (name + sep, path, "") if sep else ("", text, "")


def load_texture_set(sources: Sequence[str | Path], *, material: str = "0") -> TextureSet:
    """Load a texture set from images (``PATH`` or ``NAME=PATH``) or from one glTF material.

    Each image becomes one channel group named after its file stem (or ``NAME``); a group named
    ``normal`` keeps only X and Y. A single ``.gltf`` source is read with :func:`load_gltf_material`.
    """
    if not sources:
        raise InputError("no textures given.", field="sources", fix="pass image files or a .gltf file.")
    if len(sources) == 1 and str(sources[0]).lower().endswith((".gltf", ".glb")):
        head, path, _ = split_source(str(sources[0]))
        if head:  # the path that is checked (by the service too) is the one that is opened
            raise InputError("a glTF source takes no NAME=.", path=path, field="sources", fix="pass the .gltf file alone; its maps are named by the material.")
        return load_gltf_material(path, material=material)
    groups, images, paths = [], [], []
    for source in sources:
        text = str(source)
        head, path_text, _ = split_source(text)
        name = head[:-1]
        path = Path(path_text)
        if path.suffix.lower() in (".gltf", ".glb"):
            raise InputError("a glTF file must be the only source.", path=path, fix="pass either one .gltf file or image files.")
        image, _ = load_image(path)
        group, image = _group_for_image(name or path.stem, image)
        groups.append(group)
        images.append(image.astype(np.float32))
        paths.append(str(path))
    texture_set = TextureSet(groups, images, paths)
    check_texture_set(texture_set)
    return texture_set


def load_gltf_material(path: str | Path, *, material: str = "0") -> TextureSet:
    """Read a glTF 2.0 material's textures: base colour RGB (RGBA for a MASK or BLEND material whose texture has alpha),
    normal XY, occlusion R / roughness G / metallic B, emissive RGB.

    Occlusion comes from the occlusion texture's R channel, roughness and metallic from the
    metallic-roughness texture's G and B (glTF 2.0 section 3.9); they form the ``orm`` group. A
    missing texture leaves its channels out (a missing occlusion or metal-rough texture drops the
    whole ``orm`` group). Factors (``baseColorFactor`` ...) are not applied: the textures are
    compressed as stored. The file is read by :func:`neuralbake.io.gltf.load_gltf_materials`
    (validation, confinement of image URIs, embedded images too).
    """
    path = Path(path)
    materials = load_gltf_materials(path)
    if not materials:
        raise InputError("the glTF file has no materials.", path=path, field="materials", fix="pass a glTF file with a material.")
    index = _material_index(materials, material, path)
    mat = materials[index]
    # a see-through material's alpha lives in its base colour texture's fourth channel: it is compressed with the colour
    # (an alpha from the factor or the vertex colours alone stays in the material, as every factor does)
    carries_alpha = mat.alpha_mode != "OPAQUE"

    def image_of(ref: Any, role: str) -> np.ndarray | None:
        if ref is None:
            return None
        image = ref.image
        if image.shape[2] < 3 and role != "occlusionTexture":
            image = np.repeat(image[..., :1], 3, axis=2)
        return image

    groups: list[ChannelGroup] = []
    images: list[np.ndarray] = []
    sources: list[str] = []

    def add(group: ChannelGroup, image: np.ndarray, role: str) -> None:
        groups.append(group)
        images.append(np.ascontiguousarray(image, dtype=np.float32))
        sources.append(f"{path}#{role}")

    base = image_of(mat.base_color_texture, "baseColorTexture")
    if base is not None and carries_alpha and base.shape[2] == 4:
        add(ChannelGroup("base_color", ("R", "G", "B", "A"), "color"), base, "baseColorTexture")
    elif base is not None:
        add(ChannelGroup("base_color", ("R", "G", "B"), "color"), base[..., :3], "baseColorTexture")
    normal = image_of(mat.normal_texture, "normalTexture")
    if normal is not None:
        add(ChannelGroup("normal", ("X", "Y"), "normal_xy"), normal[..., :2], "normalTexture")
    occlusion = image_of(mat.occlusion_texture, "occlusionTexture")
    metal_rough = image_of(mat.metallic_roughness_texture, "metallicRoughnessTexture")
    if occlusion is not None and metal_rough is not None:
        if occlusion.shape[:2] != metal_rough.shape[:2]:
            raise InputError(
                f"the occlusion texture is {occlusion.shape[1]}x{occlusion.shape[0]} but the metallic-roughness one is "
                f"{metal_rough.shape[1]}x{metal_rough.shape[0]}.",
                path=path,
                field=f"materials[{index}].occlusionTexture",
                fix="resize the textures to one size.",
            )
        orm = np.stack([occlusion[..., 0], metal_rough[..., 1], metal_rough[..., 2]], axis=-1)
        add(ChannelGroup("orm", ("occlusion", "roughness", "metallic"), "data"), orm, "occlusion+metallicRoughness")
    emissive = image_of(mat.emissive_texture, "emissiveTexture")
    if emissive is not None:
        add(ChannelGroup("emissive", ("R", "G", "B"), "color"), emissive[..., :3], "emissiveTexture")
    if not groups:
        raise InputError(f"material {index} has no textures.", path=path, field=f"materials[{index}]", fix="pick a textured material.")
    texture_set = TextureSet(groups, images, sources)
    check_texture_set(texture_set)
    return texture_set


def _material_index(materials: Sequence[Any], material: str, path: Path) -> int:
    names = [m.name for m in materials]
    if str(material).isdigit():
        index = int(material)
        if index < len(names):
            return index
    elif material in names:
        return names.index(material)
    raise InputError(
        f"material {material!r} is not in this file.",
        path=path,
        field="material",
        fix=f"use an index 0-{len(names) - 1} or one of the names {names}.",
    )

