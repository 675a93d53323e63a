"""Neural texture compression (NTC): a whole material texture set as quantised latent grids + a tiny decoder.

Up to 16 channels (e.g. base colour RGB, normal XY, occlusion / roughness / metallic, emissive RGB)
are compressed together, in the spirit of RTX Neural Texture Compression (Vaidyanathan et al. 2023,
"Random-Access Neural Compression of Material Textures"). The code is our own:

- **mip groups**: mip levels go in pairs (0-1, 2-3, ...). Each pair has a *high-resolution* latent
  grid (one cell per ``high_div x high_div`` texels of the pair's finer level) and a
  *low-resolution* one (``2 * high_div``), both with ``features`` channels.
- **sampling** a texel (level, x, y): its UV ``((x + 0.5) / W_l, (y + 0.5) / H_l)`` is placed on the
  pair's grids; the four surrounding high-resolution cells are *concatenated* (the decoder learns
  its own interpolation), the low-resolution grid is sampled bilinearly, the position of the texel
  inside its high-resolution cell is frequency-encoded (``neuralbake.nn.encoding``), and the
  level within the pair (0 or 1) is appended.
- **decoder**: one MLP for every level (default ``inputs -> 64 -> 48 -> 32 -> channels``, the
  RTXNTC-sized network), leaky-ReLU hidden layers, linear output clamped to [0, 1] on decode.
- **quantisation-aware training**: latents live in [-1, 1] and are stored with ``bits`` bits
  (2-8) on a uniform grid of ``2^bits`` values. Training runs in two phases with the shared
  trainer: first with uniform noise of one quantisation step added to every fetched latent, then
  (``finetune_steps``) with hard rounding and a straight-through gradient. Weights are trained
  with int8 fake quantisation (per-layer symmetric scale ``max|w| / 127``, straight-through) from
  the first step, i.e. QAT, so the stored int8 weights are exactly the ones trained. Biases are
  stored as float32 (they are 1-2 % of the weights' bytes; int32 biases would need an activation
  scale we do not otherwise have).
- **rate control**: ``--bpp`` picks the richest entry of :data:`LATENT_SHAPES` whose *whole file*
  (header, packed latents of every mip group, int8 weights, scales and biases) fits the budget.
  The size is computed exactly before training from the same code that writes the file.
- **container** ``texture.ntc`` (little-endian): 8-byte magic, u16 version, u32 header length, a
  compact JSON header (sizes, groups, grid shapes, bits, decoder shape), the packed latent codes
  (each grid's codes bit-packed, padded to a byte), then per layer the int8 weights, one float32
  scale and float32 biases. ``manifest.json`` beside it holds its size and sha256.
- **bits per pixel** are ``8 * file bytes / (width * height of mip 0)``; the file holds the whole
  mip chain, and the BCn baselines are counted the same way (every mip level, 4x4-block padded
  tails included).

Decoding (:func:`decode_texels`, :func:`decode_texel`, :func:`decode_all_levels`) reads only the
container: no trainer, no model object. Block-compression baselines come from
:mod:`neuralbake.io.bcn` (etcpak + texture2ddecoder).

Hand-written parts and why: the grid sampling is a few gathers (``grid_sample`` cannot concatenate
the four corner cells, and one code path is shared by training and decoding so one-texel and
full decodes agree); the bit packing is NumPy's ``packbits``; the container is a small fixed
layout because no library stores "bit-packed latents + int8 MLP" and the byte count must be
exactly what is stored.
"""

from __future__ import annotations

import hashlib
import json
import math
import resource
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from torch import nn

from neuralbake.core.config import save_config
from neuralbake.core.device import resolve_device, seed_everything
from neuralbake.core.events import EventSink, EventWriter, JsonlSink, ProgressSink, progress_task
from neuralbake.core.metrics import mse
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import BundleError, ConfigError, InputError
from neuralbake.io.files import atomic_path, atomic_write_bytes, atomic_write_json, prepare_output_dir
from neuralbake.io.images import load_image, resize_image, save_exr, save_png
from neuralbake.io.limits import MAX_IMAGE_PIXELS, load_json_file, parse_json_text
from neuralbake.io.refs import resolve_reference
from neuralbake.nn.activations import ACTIVATIONS, DEFAULT_LEAK, activation_fn
from neuralbake.nn.encoding import frequency_encode
from neuralbake.nn.quantize import codes_to_latents, fake_quantize_int8, fake_quantize_latents, latent_codes, quantize_int8
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig, TrainResult
from neuralbake.render.mip import build_mip_pyramid, is_power_of_two
from neuralbake.render.pictures import comparison_row, display_rgb, panel_grid

__all__ = [
    "BPP_RANGE",
    "LATENT_SHAPES",
    "MAX_CHANNELS",
    "MAX_HIDDEN_LAYERS",
    "MAX_HIDDEN_WIDTH",
    "MAX_PE_FREQUENCIES",
    "ChannelGroup",
    "GridTables",
    "LatentShape",
    "NTCConfig",
    "NTCContainer",
    "NTCLayout",
    "NTCModel",
    "TexelSampler",
    "TextureSet",
    "bc_baselines",
    "check_bpp",
    "check_texture_set",
    "choose_layout",
    "compress_rate_distortion",
    "compress_texture_set",
    "decode_all_levels",
    "decode_texel",
    "decode_texels",
    "decoder_forward",
    "decompress",
    "load_config_texture_set",
    "load_gltf_material",
    "load_texture_set",
    "open_container",
    "pack_container",
    "plot_rate_distortion",
    "rate_distortion_summary",
    "read_container",
    "sample_features",
    "set_quality",
]

MAX_CHANNELS = 16
"""Most channels one texture set may hold (as in RTXNTC)."""
BPP_RANGE = (0.5, 48.0)
"""Accepted ``--bpp`` values for the whole set (inclusive)."""
MAGIC = b"NBNTC\r\n\x1a"
"""First 8 bytes of a ``texture.ntc`` file (a CR-LF and ^Z catch text-mode mangling, as in PNG)."""
CONTAINER_VERSION = 1
CONTAINER_NAME = "texture.ntc"
MANIFEST_NAME = "manifest.json"
_PREFIX = struct.Struct("<8sHI")


# -- texture sets -------------------------------------------------------------------------------


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
        width, height = max(1, int(round(self.width * scale))), max(1, int(round(self.height * scale)))
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


def load_texture_set(sources: Sequence[str | Path], *, material: str = "0") -> TextureSet:
    """Load a texture set from images (``PATH`` or ``NAME=PATH``) or from one glTF material.

    Each image becomes one channel group named after its file stem (or ``NAME``); a group named
    ``normal`` keeps only X and Y. A single ``.gltf`` source is read with :func:`load_gltf_material`.
    """
    if not sources:
        raise InputError("no textures given.", field="sources", fix="pass image files or a .gltf file.")
    if len(sources) == 1 and str(sources[0]).lower().endswith((".gltf", ".glb")):
        return load_gltf_material(sources[0], material=material)
    groups, images, paths = [], [], []
    for source in sources:
        text = str(source)
        name, _, path_text = text.rpartition("=") if "=" in text else ("", "", text)
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
    """Read a glTF 2.0 material's textures: base colour RGB, normal XY, occlusion R / roughness G / metallic B, emissive RGB.

    Occlusion comes from the occlusion texture's R channel, roughness and metallic from the
    metallic-roughness texture's G and B (glTF 2.0 section 3.9); they form the ``orm`` group. A
    missing texture leaves its channels out (a missing occlusion or metal-rough texture drops the
    whole ``orm`` group). Factors (``baseColorFactor`` ...) are not applied: the textures are
    compressed as stored. The file is read by :func:`neuralbake.io.gltf.load_gltf_materials`
    (validation, confinement of image URIs, embedded images too).
    """
    from neuralbake.io.gltf import load_gltf_materials

    path = Path(path)
    materials = load_gltf_materials(path)
    if not materials:
        raise InputError("the glTF file has no materials.", path=path, field="materials", fix="pass a glTF file with a material.")
    index = _material_index(materials, material, path)
    mat = materials[index]

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
    if base is not None:
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


# -- rate control -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatentShape:
    """Grid resolution, feature count and bit depth of the latents (one entry of the rate table)."""

    high_div: int
    """Texels per high-resolution cell side (at the finer level of each mip pair)."""
    features: int
    """Features per cell, in both grids."""
    bits: int
    """Bits per stored latent feature (2-8)."""

    @property
    def low_div(self) -> int:
        """Texels per low-resolution cell side: twice ``high_div``."""
        return 2 * self.high_div

    @property
    def nominal_bpp(self) -> float:
        """Latent bits per texel of a large texture, mip pairs included (``x 16/15``); no decoder."""
        per_texel = self.features * self.bits * (1.0 / self.high_div**2 + 1.0 / self.low_div**2)
        return per_texel * 16.0 / 15.0

    @property
    def name(self) -> str:
        return f"h{self.high_div}f{self.features}b{self.bits}"


LATENT_SHAPES: tuple[LatentShape, ...] = (
    LatentShape(8, 8, 2),  # 0.33 bpp of latents on a large texture
    LatentShape(8, 8, 4),  # 0.67
    LatentShape(4, 8, 2),  # 1.33
    LatentShape(4, 12, 2),  # 2.0
    LatentShape(4, 8, 4),  # 2.67
    LatentShape(4, 12, 4),  # 4.0
    LatentShape(4, 16, 4),  # 5.33
    LatentShape(2, 6, 4),  # 8.0
    LatentShape(2, 8, 4),  # 10.67
    LatentShape(2, 12, 4),  # 16.0
    LatentShape(2, 12, 5),  # 20.0
    LatentShape(2, 16, 5),  # 26.67, about the BC1 set's rate (BC1 + BC5 normals, full mip chains)
    LatentShape(2, 16, 6),  # 32.0
    LatentShape(1, 6, 5),  # 40.0: one high-resolution cell per texel
    LatentShape(1, 8, 4),  # 42.67, about the BC7 set's rate
)
"""The rate table, in increasing size. ``--bpp`` takes the last entry whose whole file fits; on
small textures the decoder's weights take a large share, so the entry chosen is lower than the
nominal latent rate suggests (the report gives both)."""


@dataclass(frozen=True)
class NTCLayout:
    """Everything about a compressed set except the trained numbers: sizes, groups, grids, decoder shape."""

    width: int
    height: int
    groups: tuple[ChannelGroup, ...]
    shape: LatentShape
    hidden: tuple[int, ...] = (64, 48, 32)
    pe_frequencies: int = 3
    activation: str = "leaky_relu"
    leak: float = DEFAULT_LEAK

    @property
    def channels(self) -> int:
        return sum(len(g.channels) for g in self.groups)

    @property
    def level_sizes(self) -> list[tuple[int, int]]:
        """``(width, height)`` of every mip level, 0 to 1x1."""
        sizes = [(self.width, self.height)]
        while max(sizes[-1]) > 1:
            w, h = sizes[-1]
            sizes.append((max(1, w // 2), max(1, h // 2)))
        return sizes

    @property
    def levels(self) -> int:
        return len(self.level_sizes)

    def _grid_dims(self, div: int) -> list[tuple[int, int]]:
        sizes = self.level_sizes
        return [(max(1, sizes[g][0] // div), max(1, sizes[g][1] // div)) for g in range(0, self.levels, 2)]

    @property
    def high_dims(self) -> list[tuple[int, int]]:
        """``(width, height)`` in cells of each mip pair's high-resolution grid."""
        return self._grid_dims(self.shape.high_div)

    @property
    def low_dims(self) -> list[tuple[int, int]]:
        """``(width, height)`` in cells of each mip pair's low-resolution grid."""
        return self._grid_dims(self.shape.low_div)

    @property
    def mlp_inputs(self) -> int:
        return 5 * self.shape.features + 4 * self.pe_frequencies + 1

    @property
    def layer_widths(self) -> list[int]:
        return [self.mlp_inputs, *self.hidden, self.channels]

    def header(self) -> dict[str, Any]:
        return {
            "format": "neuralbake.ntc",
            "version": CONTAINER_VERSION,
            "width": self.width,
            "height": self.height,
            "groups": [{"name": g.name, "channels": list(g.channels), "kind": g.kind} for g in self.groups],
            "latents": {"high_div": self.shape.high_div, "features": self.shape.features, "bits": self.shape.bits, "range": [-1, 1]},
            "decoder": {"hidden": list(self.hidden), "pe_frequencies": self.pe_frequencies, "activation": self.activation, "leak": self.leak},
            "weights": "int8, per-layer float32 scale; float32 biases",
        }

    def header_bytes(self) -> bytes:
        return json.dumps(self.header(), separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> NTCLayout:
        latents, decoder = header["latents"], header["decoder"]
        return cls(
            width=int(header["width"]),
            height=int(header["height"]),
            groups=tuple(ChannelGroup(g["name"], tuple(g["channels"]), g["kind"]) for g in header["groups"]),
            shape=LatentShape(int(latents["high_div"]), int(latents["features"]), int(latents["bits"])),
            hidden=tuple(int(h) for h in decoder["hidden"]),
            pe_frequencies=int(decoder["pe_frequencies"]),
            activation=str(decoder["activation"]),
            leak=float(decoder["leak"]),
        )

    def latent_cells(self) -> tuple[int, int]:
        """Cells in all high-resolution grids, and in all low-resolution grids."""
        return sum(w * h for w, h in self.high_dims), sum(w * h for w, h in self.low_dims)

    def section_bytes(self) -> dict[str, int]:
        """Bytes of each part of the container file."""
        high, low = self.latent_cells()
        features, bits = self.shape.features, self.shape.bits
        widths = self.layer_widths
        weights = sum(a * b for a, b in zip(widths[:-1], widths[1:]))
        layers = len(widths) - 1
        return {
            "prefix": _PREFIX.size,
            "header": len(self.header_bytes()),
            "latents_high": math.ceil(high * features * bits / 8),
            "latents_low": math.ceil(low * features * bits / 8),
            "weights_int8": weights,
            "weight_scales": 4 * layers,
            "biases_fp32": 4 * sum(widths[1:]),
        }

    def file_bytes(self) -> int:
        return sum(self.section_bytes().values())

    def bpp(self) -> float:
        """Bits per texel of mip 0 for the whole file (every mip level is inside it)."""
        return 8.0 * self.file_bytes() / (self.width * self.height)


def choose_layout(
    width: int,
    height: int,
    groups: Sequence[ChannelGroup],
    bpp: float,
    *,
    hidden: Sequence[int] = (64, 48, 32),
    pe_frequencies: int = 3,
) -> NTCLayout:
    """The richest rate-table entry whose whole container fits ``bpp`` bits per texel of mip 0."""
    check_bpp(bpp)
    layouts = [NTCLayout(width, height, tuple(groups), shape, tuple(hidden), pe_frequencies) for shape in LATENT_SHAPES]
    fitting = [layout for layout in layouts if layout.bpp() <= bpp + 1e-9]
    if not fitting:
        smallest = min(layouts, key=NTCLayout.bpp)
        section = smallest.section_bytes()
        decoder_bpp = 8.0 * (section["weights_int8"] + section["weight_scales"] + section["biases_fp32"]) / (width * height)
        raise ConfigError(
            f"{bpp:g} bpp is below the smallest file for this {width}x{height} set ({smallest.bpp():.2f} bpp; "
            f"the decoder's weights alone take {decoder_bpp:.2f} bpp at this size).",
            field="bpp",
            fix="raise --bpp, compress larger textures, or use a smaller decoder (--hidden).",
        )
    return max(fitting, key=NTCLayout.bpp)


def check_bpp(bpp: float) -> None:
    if not (isinstance(bpp, (int, float)) and math.isfinite(bpp) and BPP_RANGE[0] <= bpp <= BPP_RANGE[1]):
        raise ConfigError(
            f"{bpp!r} bits per pixel is out of range.", field="bpp", fix=f"use {BPP_RANGE[0]:g} to {BPP_RANGE[1]:g} bpp for the whole set."
        )


# -- the differentiable parts -------------------------------------------------------------------


@dataclass
class GridTables:
    """Per-level and per-grid lookup tables for :func:`sample_features` (small integer tensors)."""

    level_w: torch.Tensor
    level_h: torch.Tensor
    high_w: torch.Tensor
    high_h: torch.Tensor
    high_offset: torch.Tensor
    low_w: torch.Tensor
    low_h: torch.Tensor
    low_offset: torch.Tensor

    @classmethod
    def from_layout(cls, layout: NTCLayout, device: torch.device | str = "cpu") -> GridTables:
        def offsets(dims: list[tuple[int, int]]) -> list[int]:
            return [0, *np.cumsum([w * h for w, h in dims])[:-1].tolist()]

        long = lambda values: torch.tensor(values, dtype=torch.int64, device=device)  # noqa: E731
        sizes, high, low = layout.level_sizes, layout.high_dims, layout.low_dims
        return cls(
            level_w=long([w for w, _ in sizes]),
            level_h=long([h for _, h in sizes]),
            high_w=long([w for w, _ in high]),
            high_h=long([h for _, h in high]),
            high_offset=long(offsets(high)),
            low_w=long([w for w, _ in low]),
            low_h=long([h for _, h in low]),
            low_offset=long(offsets(low)),
        )


def _cell_coords(u: torch.Tensor, v: torch.Tensor, width: torch.Tensor, height: torch.Tensor):
    """Lower-left cell, clamped neighbours and fractions for bilinear-style lookups on a cell-centred grid."""
    px = u * width.to(u.dtype) - 0.5
    py = v * height.to(v.dtype) - 0.5
    x0, y0 = torch.floor(px), torch.floor(py)
    fx, fy = px - x0, py - y0
    x0, y0 = x0.to(torch.int64), y0.to(torch.int64)
    zero = torch.zeros_like(x0)
    xa, xb = torch.clamp(x0, zero, width - 1), torch.clamp(x0 + 1, zero, width - 1)
    ya, yb = torch.clamp(y0, zero, height - 1), torch.clamp(y0 + 1, zero, height - 1)
    return xa, xb, ya, yb, fx, fy


def _gather_corners(
    grid: torch.Tensor, offset: torch.Tensor, width: torch.Tensor, xa: torch.Tensor, xb: torch.Tensor, ya: torch.Tensor, yb: torch.Tensor
) -> torch.Tensor:
    """Rows of ``grid`` at the four cells (ya, xa), (ya, xb), (yb, xa), (yb, xb): ``[4, N, F]``.

    One ``index_select`` for all four: its backward is an ``index_add`` (atomic adds on a GPU),
    several times faster than the sort-based backward of advanced indexing, which took most of a
    training step on the H100.
    """
    rows = torch.stack((ya, ya, yb, yb)) * width + torch.stack((xa, xb, xa, xb)) + offset
    return torch.index_select(grid, 0, rows.reshape(-1)).reshape(4, xa.shape[0], grid.shape[1])


def sample_features(
    high: torch.Tensor,
    low: torch.Tensor,
    tables: GridTables,
    level: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    pe_frequencies: int,
    quantize: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Decoder inputs for texels ``(level, x, y)`` (int64 ``[N]`` each).

    ``high`` ``[high cells, F]`` and ``low`` ``[low cells, F]`` hold every mip pair's grids, row-major,
    one after another. Returns ``[N, 5F + 4 * pe_frequencies + 1]``: the four high-resolution cells
    around the texel (concatenated), the low-resolution grid sampled bilinearly, the encoded
    position inside the high-resolution cell and the level within the pair. ``quantize`` is applied
    to fetched latents (training); decoding passes already-dequantised latents.
    """
    dtype = high.dtype
    u = (x.to(dtype) + 0.5) / tables.level_w[level].to(dtype)
    v = (y.to(dtype) + 0.5) / tables.level_h[level].to(dtype)
    pair = torch.div(level, 2, rounding_mode="floor")
    in_pair = (level - 2 * pair).to(dtype)[:, None]
    q = quantize if quantize is not None else (lambda t: t)

    count, features = x.shape[0], high.shape[1]
    hw, hh, ho = tables.high_w[pair], tables.high_h[pair], tables.high_offset[pair]
    xa, xb, ya, yb, fx, fy = _cell_coords(u, v, hw, hh)
    corners = _gather_corners(high, ho, hw, xa, xb, ya, yb)  # [4, N, F]
    high_features = q(corners.permute(1, 0, 2).reshape(count, 4 * features))

    lw, lh, lo_off = tables.low_w[pair], tables.low_h[pair], tables.low_offset[pair]
    lxa, lxb, lya, lyb, lfx, lfy = _cell_coords(u, v, lw, lh)
    lfx, lfy = lfx[:, None], lfy[:, None]
    l00, l10, l01, l11 = q(_gather_corners(low, lo_off, lw, lxa, lxb, lya, lyb)).unbind(0)
    low_features = (l00 * (1 - lfx) + l10 * lfx) * (1 - lfy) + (l01 * (1 - lfx) + l11 * lfx) * lfy

    position = frequency_encode(torch.stack((fx, fy), dim=-1), pe_frequencies)
    return torch.cat((high_features, low_features, position, in_pair), dim=1)


def decoder_forward(features: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor], act: Callable) -> torch.Tensor:
    """The decoder MLP: ``act`` after every hidden layer, linear output."""
    out = features
    for index, (weight, bias) in enumerate(zip(weights, biases)):
        out = F.linear(out, weight, bias)
        if index < len(weights) - 1:
            out = act(out)
    return out


# -- the trainable model ------------------------------------------------------------------------


class NTCModel(nn.Module):
    """Latent grids of every mip pair + the decoder, for training.

    ``forward(inputs)``: ``inputs`` ``[N, 3]`` float (level, x, y as whole numbers) -> ``[N, channels]``.
    ``quant_mode`` (``noise``, ``round`` or ``none``) selects how latents are quantised in the
    forward pass; weights are always int8 fake-quantised unless ``quantize_weights`` is False.
    """

    def __init__(self, layout: NTCLayout, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.layout = layout
        high_cells, low_cells = layout.latent_cells()
        features = layout.shape.features
        init = lambda n: (torch.rand(n, features, generator=generator) - 0.5) * 0.5  # noqa: E731
        self.latents_high = nn.Parameter(init(high_cells))
        self.latents_low = nn.Parameter(init(low_cells))
        widths = layout.layer_widths
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.quant_mode = "noise"
        self.quantize_weights = True
        self._act = activation_fn(layout.activation, layout.leak)
        for name, value in asdict(GridTables.from_layout(layout)).items():
            self.register_buffer(f"table_{name}", value, persistent=False)

    @property
    def tables(self) -> GridTables:
        return GridTables(**{name: getattr(self, f"table_{name}") for name in GridTables.__dataclass_fields__})

    def weights(self) -> list[torch.Tensor]:
        return [fake_quantize_int8(layer.weight) if self.quantize_weights else layer.weight for layer in self.layers]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        coords = inputs.to(torch.int64)
        bits = self.layout.shape.bits
        features = sample_features(
            self.latents_high,
            self.latents_low,
            self.tables,
            coords[:, 0],
            coords[:, 1],
            coords[:, 2],
            self.layout.pe_frequencies,
            quantize=lambda t: fake_quantize_latents(t, bits, self.quant_mode),
        )
        return decoder_forward(features, self.weights(), [layer.bias for layer in self.layers], self._act)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


class TexelSampler:
    """Random texels over every mip level: half drawn by area, half level-uniform, so small mips are learned too."""

    capturable = True
    """Pure device work (searchsorted, rand, gathers): the trainer may capture it in a CUDA graph."""

    def __init__(self, layout: NTCLayout, reference_levels: Sequence[np.ndarray], batch_size: int, device: torch.device) -> None:
        self.batch_size = batch_size
        sizes = layout.level_sizes
        areas = np.array([w * h for w, h in sizes], dtype=np.float64)
        probability = 0.5 * areas / areas.sum() + 0.5 / len(sizes)
        self.cdf = torch.tensor(np.cumsum(probability)[:-1], dtype=torch.float32, device=device)
        self.level_w = torch.tensor([w for w, _ in sizes], dtype=torch.int64, device=device)
        self.level_h = torch.tensor([h for _, h in sizes], dtype=torch.int64, device=device)
        self.offset = torch.tensor([0, *np.cumsum(areas)[:-1].astype(np.int64).tolist()], dtype=torch.int64, device=device)
        self.texels = torch.cat([torch.from_numpy(level.reshape(-1, level.shape[2])) for level in reference_levels]).to(device)

    def sample(self, generator: torch.Generator) -> Batch:
        device = self.texels.device
        draws = torch.rand(self.batch_size, 3, generator=generator, device=device)
        level = torch.searchsorted(self.cdf, draws[:, 0].contiguous())
        width, height = self.level_w[level], self.level_h[level]
        x = torch.minimum((draws[:, 1] * width).to(torch.int64), width - 1)
        y = torch.minimum((draws[:, 2] * height).to(torch.int64), height - 1)
        targets = self.texels[self.offset[level] + y * width + x]
        return Batch(inputs=torch.stack((level, x, y), dim=1).to(torch.float32), targets=targets)


# -- the container ------------------------------------------------------------------------------


def _pack_bits(codes: np.ndarray, bits: int) -> bytes:
    flat = codes.reshape(-1).astype(np.uint16)
    planes = ((flat[:, None] >> np.arange(bits, dtype=np.uint16)) & 1).astype(np.uint8)
    return np.packbits(planes.reshape(-1), bitorder="little").tobytes()


def _unpack_bits(data: bytes, count: int, bits: int) -> np.ndarray:
    planes = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")[: count * bits].reshape(count, bits)
    return (planes.astype(np.int64) << np.arange(bits, dtype=np.int64)).sum(axis=1)


@dataclass
class NTCContainer:
    """A decoded ``texture.ntc``: the layout plus dequantised latents and int8-derived weights (float32, CPU)."""

    layout: NTCLayout
    latents_high: torch.Tensor
    latents_low: torch.Tensor
    weights_int8: list[torch.Tensor]
    scales: list[torch.Tensor]
    biases: list[torch.Tensor]

    def weights(self) -> list[torch.Tensor]:
        return [q.to(torch.float32) * s for q, s in zip(self.weights_int8, self.scales)]

    def to(self, device: torch.device | str) -> NTCContainer:
        move = lambda ts: [t.to(device) for t in ts]  # noqa: E731
        return NTCContainer(
            self.layout, self.latents_high.to(device), self.latents_low.to(device), move(self.weights_int8), move(self.scales), move(self.biases)
        )


def pack_container(model: NTCModel) -> bytes:
    """The ``texture.ntc`` bytes of a trained model: latents hard-quantised, weights int8."""
    layout = model.layout
    bits = layout.shape.bits
    parts = [_PREFIX.pack(MAGIC, CONTAINER_VERSION, len(layout.header_bytes())), layout.header_bytes()]
    for latents in (model.latents_high, model.latents_low):
        parts.append(_pack_bits(latent_codes(latents, bits).cpu().numpy(), bits))
    for layer in model.layers:
        weight = layer.weight.detach().float()
        codes, scale = quantize_int8(weight)
        parts += [codes.cpu().numpy().tobytes(), np.float32(scale.item()).tobytes(), layer.bias.detach().float().cpu().numpy().astype("<f4").tobytes()]
    data = b"".join(parts)
    if len(data) != layout.file_bytes():  # the rate controller's count must be the file's
        raise RuntimeError(f"container is {len(data)} bytes, layout predicted {layout.file_bytes()}")
    return data


MAX_HIDDEN_LAYERS = 16
"""Most hidden layers in the decoder MLP (compress refuses more; decompress refuses a header with more)."""
MAX_HIDDEN_WIDTH = 1024
"""Widest hidden layer of the decoder MLP (same bound on compress and decompress)."""
MAX_PE_FREQUENCIES = 16
"""Most positional-encoding octaves (same bound on compress and decompress)."""

_MAX_HEADER_BYTES = 1 << 20
"""Largest container header read (a real one is well under 1 KiB)."""
_GROUP_KINDS = ("color", "normal_xy", "data")


def _check_header(header: Any, path: Path | None) -> None:
    """Check the container header's structure, types and ranges before :meth:`NTCLayout.from_header` uses it.

    Sizes within the decode limit, group names usable as file names (decompress writes
    ``<group>_mip<k>.png``), channel counts, latent shape and decoder widths in range.
    """

    def fail(problem: str, field: str) -> BundleError:
        return BundleError(problem, path=path, field=f"header.{field}", fix="compress the textures again.")

    def obj(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(f"must be an object, not {type(value).__name__}.", field)
        return value

    def get(mapping: dict[str, Any], key: str, field: str) -> Any:
        if key not in mapping:
            raise fail(f"the header has no {key!r}.", f"{field}.{key}" if field else key)
        return mapping[key]

    def integer(value: Any, field: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(f"must be an integer from {low} to {high}, not {str(value)[:40]!r}.", field)
        return value

    def text(value: Any, field: str) -> str:
        if not isinstance(value, str) or not value or len(value) > 64 or any(char in value for char in '/\\:\x00') or value in (".", ".."):
            raise fail(f"must be a short name without path separators, not {str(value)[:40]!r}.", field)
        return value

    header = obj(header, "")
    side = 1 << 16
    width, height = integer(get(header, "width", ""), "width", 1, side), integer(get(header, "height", ""), "height", 1, side)
    if width * height > MAX_IMAGE_PIXELS:
        raise fail(f"{width}x{height} is more than the {MAX_IMAGE_PIXELS:,} texels decoded.", "width")
    groups = get(header, "groups", "")
    if not isinstance(groups, list) or not groups:
        raise fail("must be a non-empty list.", "groups")
    channels, names = 0, set()
    for index, group in enumerate(groups):
        where = f"groups[{index}]"
        group = obj(group, where)
        name = text(get(group, "name", where), f"{where}.name")
        if name in names:
            raise fail(f"group name {name!r} appears twice.", f"{where}.name")
        names.add(name)
        kind = get(group, "kind", where)
        if not isinstance(kind, str) or kind not in _GROUP_KINDS:
            raise fail(f"kind must be one of {list(_GROUP_KINDS)}, not {str(kind)[:40]!r}.", f"{where}.kind")
        group_channels = get(group, "channels", where)
        if not isinstance(group_channels, list) or not 1 <= len(group_channels) <= (2 if kind == "normal_xy" else 4):
            raise fail("must list 1 to 4 channel names (normal_xy: 2).", f"{where}.channels")
        if kind == "normal_xy" and len(group_channels) != 2:
            raise fail("a normal_xy group has exactly 2 channels (X, Y).", f"{where}.channels")
        for k, channel in enumerate(group_channels):
            text(channel, f"{where}.channels[{k}]")
        channels += len(group_channels)
    if channels > MAX_CHANNELS:
        raise fail(f"{channels} channels; at most {MAX_CHANNELS} fit one set.", "groups")
    latents = obj(get(header, "latents", ""), "latents")
    integer(get(latents, "high_div", "latents"), "latents.high_div", 1, 64)
    integer(get(latents, "features", "latents"), "latents.features", 1, 64)
    integer(get(latents, "bits", "latents"), "latents.bits", 1, 8)
    decoder = obj(get(header, "decoder", ""), "decoder")
    hidden = get(decoder, "hidden", "decoder")
    if not isinstance(hidden, list) or len(hidden) > MAX_HIDDEN_LAYERS:
        raise fail(f"must be a list of at most {MAX_HIDDEN_LAYERS} layer widths.", "decoder.hidden")
    for k, value in enumerate(hidden):
        integer(value, f"decoder.hidden[{k}]", 1, MAX_HIDDEN_WIDTH)
    integer(get(decoder, "pe_frequencies", "decoder"), "decoder.pe_frequencies", 0, MAX_PE_FREQUENCIES)
    activation = get(decoder, "activation", "decoder")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise fail(f"unknown activation {str(activation)[:40]!r}.", "decoder.activation")
    leak = get(decoder, "leak", "decoder")
    if isinstance(leak, bool) or not isinstance(leak, (int, float)) or not math.isfinite(leak):
        raise fail("must be a finite number.", "decoder.leak")


def read_container(source: str | Path | bytes) -> NTCContainer:
    """Parse a ``texture.ntc`` file (or its bytes); raises BundleError on anything malformed."""
    path = None if isinstance(source, bytes) else Path(source)
    if path is not None:
        if not path.is_file():
            raise BundleError("the NTC file does not exist.", path=path, fix="pass a folder written by `neuralbake ntc compress`.")
        data = path.read_bytes()
    else:
        data = source  # type: ignore[assignment]
    return _parse_container(data, path)


def _parse_container(data: bytes, path: Path | None) -> NTCContainer:
    """The container in ``data``; ``path`` (the file it came from, if any) is what errors name."""
    if len(data) < _PREFIX.size:
        raise BundleError("the file is too short to be an NTC container.", path=path, fix="compress the textures again.")
    magic, version, header_len = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise BundleError("this is not a neuralbake NTC container (wrong magic bytes).", path=path, fix="pass a texture.ntc file.")
    if version != CONTAINER_VERSION:
        raise BundleError(f"container version {version} is not supported (this neuralbake reads {CONTAINER_VERSION}).", path=path, fix="compress again with this version.")
    if header_len > len(data) - _PREFIX.size or header_len > _MAX_HEADER_BYTES:
        raise BundleError(
            f"the header claims {header_len} bytes but the file has {len(data) - _PREFIX.size} after the prefix (truncated or damaged).",
            path=path,
            field="header",
            fix="copy the file again or compress the textures again.",
        )
    try:
        text = data[_PREFIX.size : _PREFIX.size + header_len].decode("utf-8")
        header = parse_json_text(text, source=path or CONTAINER_NAME, what="container header", fix="compress the textures again.")
    except UnicodeDecodeError as exc:
        raise BundleError(f"the container header is not UTF-8 ({exc.reason}).", path=path, field="header", fix="compress the textures again.") from exc
    except InputError as exc:
        raise BundleError(exc.problem, path=path, field="header", fix=exc.fix) from exc
    _check_header(header, path)
    try:
        layout = NTCLayout.from_header(header)
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"the container header is damaged ({exc}).", path=path, field="header", fix="compress the textures again.") from exc
    if len(layout.header_bytes()) != header_len:
        raise BundleError(
            f"the header is {header_len} bytes, but the layout it describes writes {len(layout.header_bytes())} (edited or damaged).",
            path=path,
            field="header",
            fix="compress the textures again.",
        )
    sections = layout.section_bytes()
    if len(data) != layout.file_bytes():
        raise BundleError(
            f"the file has {len(data)} bytes but its header describes {layout.file_bytes()} (truncated or padded).",
            path=path,
            fix="copy the file again or compress the textures again.",
        )
    cursor = _PREFIX.size + header_len
    high_cells, low_cells = layout.latent_cells()
    features, bits = layout.shape.features, layout.shape.bits
    latents = []
    for cells, key in ((high_cells, "latents_high"), (low_cells, "latents_low")):
        codes = _unpack_bits(data[cursor : cursor + sections[key]], cells * features, bits)
        latents.append(codes_to_latents(torch.from_numpy(codes).reshape(cells, features), bits))
        cursor += sections[key]
    widths = layout.layer_widths
    weights, scales, biases = [], [], []
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        weights.append(torch.from_numpy(np.frombuffer(data, np.int8, fan_in * fan_out, cursor).copy().reshape(fan_out, fan_in)))
        cursor += fan_in * fan_out
        scales.append(torch.tensor(np.frombuffer(data, "<f4", 1, cursor)[0], dtype=torch.float32))
        cursor += 4
        biases.append(torch.from_numpy(np.frombuffer(data, "<f4", fan_out, cursor).astype(np.float32)))
        cursor += 4 * fan_out
    return NTCContainer(layout, latents[0], latents[1], weights, scales, biases)


def decode_texels(container: NTCContainer, level: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, chunk: int = 1 << 18) -> torch.Tensor:
    """Decode texels ``(level, x, y)`` (int64 ``[N]``, on the container's device) -> float32 ``[N, channels]`` in [0, 1]."""
    layout = container.layout
    tables = GridTables.from_layout(layout, container.latents_high.device)
    weights, act = container.weights(), activation_fn(layout.activation, layout.leak)
    outputs = []
    with torch.no_grad():
        for start in range(0, level.numel(), chunk):
            part = slice(start, start + chunk)
            features = sample_features(container.latents_high, container.latents_low, tables, level[part], x[part], y[part], layout.pe_frequencies)
            outputs.append(decoder_forward(features, weights, container.biases, act).clamp_(0.0, 1.0))
    return torch.cat(outputs) if outputs else torch.zeros(0, layout.channels)


def decode_texel(container: NTCContainer, mip: int, x: int, y: int) -> np.ndarray:
    """Decode one texel of one mip level (random access) -> float32 ``[channels]``."""
    sizes = container.layout.level_sizes
    if not 0 <= mip < len(sizes):
        raise InputError(f"mip {mip} does not exist (the set has {len(sizes)} levels).", field="mip", fix=f"use 0 to {len(sizes) - 1}.")
    width, height = sizes[mip]
    if not (0 <= x < width and 0 <= y < height):
        raise InputError(f"texel ({x}, {y}) is outside mip {mip} ({width}x{height}).", field="x, y", fix="use coordinates inside the level.")
    device = container.latents_high.device
    one = lambda v: torch.tensor([v], dtype=torch.int64, device=device)  # noqa: E731
    return decode_texels(container, one(mip), one(x), one(y))[0].cpu().numpy()


def decode_all_levels(
    container: NTCContainer, *, chunk: int = 1 << 18, progress: Callable[[int], None] | None = None
) -> list[np.ndarray]:
    """Decode every texel of every mip level -> a list of float32 ``[H_l, W_l, channels]``.

    ``progress`` (if given) is called with the texels decoded after each level.
    """
    device = container.latents_high.device
    levels = []
    for index, (width, height) in enumerate(container.layout.level_sizes):
        yy, xx = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij")
        level = torch.full((width * height,), index, dtype=torch.int64, device=device)
        levels.append(decode_texels(container, level, xx.reshape(-1), yy.reshape(-1), chunk=chunk).reshape(height, width, -1).cpu().numpy())
        if progress is not None:
            progress(width * height)
    return levels


def set_quality(levels: Sequence[np.ndarray], reference: Sequence[np.ndarray], groups: Sequence[ChannelGroup]) -> dict[str, Any]:
    """PSNR (dB) of a decoded mip chain against the reference chain.

    ``overall_db``: all channels of mip 0; ``overall_all_mips_db``: all channels and texels of every
    level; ``per_mip_db``: all channels, per level; ``groups[name]``: the same per channel group.
    """

    def db(error: float) -> float:
        return math.inf if error == 0 else round(10.0 * math.log10(1.0 / error), 3)

    def errors(channel_slice: slice) -> tuple[list[float], float]:
        per_level = [mse(torch.from_numpy(out[..., channel_slice]), torch.from_numpy(ref[..., channel_slice])) for out, ref in zip(levels, reference)]
        counts = [ref[..., channel_slice].size for ref in reference]
        return per_level, float(np.dot(per_level, counts) / sum(counts))

    per_level, all_levels = errors(slice(None))
    result: dict[str, Any] = {
        "overall_db": db(per_level[0]),
        "overall_all_mips_db": db(all_levels),
        "per_mip_db": [db(e) for e in per_level],
        "groups": {},
    }
    start = 0
    for group in groups:
        stop = start + len(group.channels)
        group_levels, group_all = errors(slice(start, stop))
        result["groups"][group.name] = {"mip0_db": db(group_levels[0]), "all_mips_db": db(group_all), "per_mip_db": [db(e) for e in group_levels]}
        start = stop
    return result


# -- BCn baselines ------------------------------------------------------------------------------


def _bc_format(group: ChannelGroup, family: str) -> str:
    channels = len(group.channels)
    if channels == 2:
        return "bc5"
    if family == "bc1" and channels == 4:
        return "bc7"  # etcpak's BC1 stores no alpha; an RGBA texture would ship as BC7 (or BC3)
    return family


def bc_baselines(reference_levels: Sequence[np.ndarray], groups: Sequence[ChannelGroup], width: int, height: int, *, bc7_uber_level: int = 1) -> dict[str, Any]:
    """Round-trip every group's mip chain through BC1 and BC7 (BC5 for two-channel groups, e.g. normal XY).

    One-channel groups are replicated to RGB. Returns per family the measured bpp (all mip levels'
    compressed bytes, 4x4-padded tails included, per texel of mip 0), the format of each group,
    the decoded chain and its quality (:func:`set_quality`).
    """
    from neuralbake.io.bcn import bc_mip_chain_roundtrip

    results: dict[str, Any] = {}
    for family in ("bc1", "bc7"):
        decoded_groups, total_bytes, formats = [], 0, {}
        start = 0
        for group in groups:
            stop = start + len(group.channels)
            chain = [level[..., start:stop] for level in reference_levels]
            if len(group.channels) == 1:
                chain = [np.repeat(level, 3, axis=2) for level in chain]
            fmt = _bc_format(group, family)
            decoded, sizes = bc_mip_chain_roundtrip(chain, fmt, bc7_uber_level=bc7_uber_level)
            decoded_groups.append([level[..., : stop - start] for level in decoded])
            total_bytes += sum(sizes)
            formats[group.name] = fmt
            start = stop
        levels = [np.concatenate([g[i] for g in decoded_groups], axis=2) for i in range(len(reference_levels))]
        results[family] = {
            "bytes": total_bytes,
            "bpp": round(8.0 * total_bytes / (width * height), 4),
            "formats": formats,
            "quality": set_quality(levels, reference_levels, groups),
            "levels": levels,
        }
    return results


# -- the bake -----------------------------------------------------------------------------------


def _default_train() -> TrainerConfig:
    return TrainerConfig(steps=3000, learning_rate=0.01, precision="fp32", eval_every=500, checkpoint_every=1000, log_every=50)


@dataclass
class NTCConfig:
    """Everything that determines an NTC compression."""

    sources: list[str] = field(default_factory=list)
    """Texture images (PATH or NAME=PATH; a group named normal keeps X and Y) or one .gltf file."""
    material: str = "0"
    """glTF material to read (index or name)."""
    size: int | None = None
    """Resample the set so its larger side is this power of two before compressing (None: as loaded)."""
    bpp: float = 4.0
    """Target bits per texel of mip 0 for the whole file (every mip level included); 0.5 to 48 (26.7 and 42.7 are about the BC1 and BC7 sets' rates)."""
    hidden: tuple[int, ...] = (64, 48, 32)
    """Hidden layer widths of the decoder MLP (RTXNTC's is about 64-48-32). On DamagedHelmet at 2048²,
    256-256-128 gains 2.7 dB at ~3 bpp and 6.5 dB at 43 bpp for 13.6x the decode work (docs/benchmarks.md)."""
    pe_frequencies: int = 3
    """Frequency octaves of the positional encoding of the texel inside its latent cell."""
    batch_size: int = 8192
    """Random texels per training step (over all mip levels)."""
    finetune_steps: int = 500
    """Steps after the main run with hard-rounded latents (straight-through), at finetune_lr_fraction of the learning rate."""
    finetune_lr_fraction: float = 0.2
    """Learning rate of the hard-quantisation phase as a fraction of train.learning_rate."""
    baselines: bool = True
    """Also round-trip the set through BC1 / BC7 (+ BC5 for normals) and report their PSNR."""
    bc7_uber_level: int = 1
    """bc7enc effort for the BC7 baseline, 0 (fastest) to 4 (best)."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N."""
    train: TrainerConfig = field(default_factory=_default_train)
    """Main (noise-quantised) phase: steps, learning rate, precision, seed, cadence of logs and checkpoints."""

    def validate(self) -> None:
        """Raise ConfigError on settings no compression can use."""
        if not self.sources:
            raise ConfigError("no textures given.", field="sources", fix="pass image files or a .gltf file.")
        check_bpp(self.bpp)
        if self.size is not None and not (is_power_of_two(self.size) and 4 <= self.size <= 16384):
            raise ConfigError(f"{self.size} is not a power of two from 4 to 16384.", field="size", fix="use e.g. 256, 1024 or 2048.")
        hidden = tuple(self.hidden) if isinstance(self.hidden, (list, tuple)) else ()
        if not hidden or len(hidden) > MAX_HIDDEN_LAYERS or any(isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= MAX_HIDDEN_WIDTH for h in hidden):
            raise ConfigError(
                f"hidden must list 1 to {MAX_HIDDEN_LAYERS} layer widths, each an integer from 1 to {MAX_HIDDEN_WIDTH}, not {str(self.hidden)[:80]}.",
                field="hidden",
                fix="use e.g. 64,48,32 (decompress refuses a container with wider or more layers).",
            )
        if isinstance(self.pe_frequencies, bool) or not isinstance(self.pe_frequencies, int) or not 1 <= self.pe_frequencies <= MAX_PE_FREQUENCIES:
            raise ConfigError(
                f"must be an integer from 1 to {MAX_PE_FREQUENCIES}, not {str(self.pe_frequencies)[:40]}.",
                field="pe_frequencies",
                fix="use e.g. 3 (decompress refuses a container with more).",
            )
        if self.batch_size < 1:
            raise ConfigError("must be >= 1.", field="batch_size", fix="use e.g. 8192.")
        if self.finetune_steps < 0:
            raise ConfigError("must be >= 0.", field="finetune_steps", fix="use e.g. 500.")
        if not 0 < self.finetune_lr_fraction <= 1:
            raise ConfigError("must be in (0, 1].", field="finetune_lr_fraction", fix="use e.g. 0.2.")
        if not 0 <= self.bc7_uber_level <= 4:
            raise ConfigError("must be 0 to 4.", field="bc7_uber_level", fix="use 1.")
        self.train.validate()


def load_config_texture_set(config: NTCConfig) -> TextureSet:
    """Load, validate and (with ``size``) resample the configured texture set."""
    texture_set = load_texture_set(config.sources, material=config.material)
    if config.size is not None and max(texture_set.width, texture_set.height) != config.size:
        texture_set = texture_set.resized(config.size)
        check_texture_set(texture_set)
    return texture_set


def _peak_memory(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        return {"peak_gpu_memory_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}
    # Linux reports ru_maxrss in KiB: the peak resident memory of the whole process so far.
    return {"peak_process_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _train_phase(
    model: NTCModel,
    sampler: TexelSampler,
    train: TrainerConfig,
    device: torch.device,
    out: Path,
    name: str,
    sinks: list[EventSink],
    progress: bool,
    evaluate: Callable[[nn.Module], dict[str, float]],
    resume: bool,
    compatibility: dict[str, Any],
) -> TrainResult:
    all_sinks: list[EventSink] = [JsonlSink(out / "events.jsonl"), *sinks]
    if progress:
        all_sinks.append(ProgressSink(f"ntc {name}", console=Console(stderr=True)))
    with EventWriter(all_sinks) as events:
        trainer = Trainer(
            model,
            sampler,
            F.mse_loss,
            train,
            device=device,
            checkpoint_path=out / f"checkpoint_{name}.pt",
            events=events,
            evaluate=evaluate,
            compatibility={**compatibility, "phase": name},
        )
        return trainer.fit(resume=resume)


def compress_texture_set(
    config: NTCConfig,
    out_dir: str | Path,
    *,
    texture_set: TextureSet | None = None,
    baselines: dict[str, Any] | None = None,
    resume: bool = False,
    progress: bool = True,
    sinks: list[EventSink] | None = None,
) -> dict[str, Any]:
    """Compress a texture set to ``out_dir/texture.ntc`` (+ manifest, decoded mip-0 preview, report).

    ``texture_set`` and ``baselines`` let a rate-distortion run load the set and the BCn round
    trips once. Returns the report dict (also written to ``report.json``).
    """
    wall_start = time.perf_counter()
    config.validate()
    device = resolve_device(config.device)
    if texture_set is None:
        texture_set = load_config_texture_set(config)
    layout = choose_layout(texture_set.width, texture_set.height, texture_set.groups, config.bpp, hidden=config.hidden, pe_frequencies=config.pe_frequencies)
    out = prepare_output_dir(out_dir)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    reference = texture_set.mip_chain()
    save_config(out / "config.json", config)

    seed_everything(config.train.seed)
    generator = torch.Generator().manual_seed(config.train.seed)
    model = NTCModel(layout, generator=generator).to(device)
    sampler = TexelSampler(layout, reference, config.batch_size, device)
    eval_targets = sampler.texels

    def evaluate(net: nn.Module) -> dict[str, float]:
        mode = net.quant_mode
        net.quant_mode = "round"
        coords = _all_texel_coords(layout, device)
        with torch.no_grad():
            prediction = torch.cat([net(part).clamp(0, 1) for part in coords.split(1 << 16)])
        net.quant_mode = mode
        error = mse(prediction, eval_targets)
        return {"psnr_db": 10 * math.log10(1 / error) if error > 0 else math.inf}

    if (out / "events.jsonl").exists() and not resume:
        (out / "events.jsonl").unlink()
    compatibility = {"layout": layout.header(), "size": [texture_set.width, texture_set.height], "batch_size": config.batch_size}
    finetune = replace(
        config.train,
        steps=max(config.finetune_steps, 1),
        learning_rate=config.train.learning_rate * config.finetune_lr_fraction,
        warmup_steps=0,
    )
    # A run is resumed in the phase it stopped in: the hard-quantisation phase when its checkpoint
    # exists, else the main phase (whose trainer reports a missing checkpoint as an error).
    resume_finetune = resume and config.finetune_steps > 0 and (out / "checkpoint_round.pt").exists()
    resume_main = resume and not resume_finetune
    history: list[dict[str, Any]] = []
    main_result = None
    if not resume_finetune:
        model.quant_mode = "noise"
        main_result = _train_phase(model, sampler, config.train, device, out, "noise", sinks or [], progress, evaluate, resume_main, compatibility)
        history += main_result.history
    fine_result = None
    if config.finetune_steps > 0:
        model.quant_mode = "round"
        fine_result = _train_phase(model, sampler, finetune, device, out, "round", sinks or [], progress, evaluate, resume_finetune, compatibility)
        history += [{**e, "step": e["step"] + config.train.steps} for e in fine_result.history]
    train_seconds = sum(r.train_seconds for r in (main_result, fine_result) if r is not None)

    data = pack_container(model)
    atomic_write_bytes(out / CONTAINER_NAME, data)
    digest = hashlib.sha256(data).hexdigest()
    atomic_write_json(out / MANIFEST_NAME, {"file": CONTAINER_NAME, "bytes": len(data), "sha256": digest, "format": "neuralbake.ntc", "version": CONTAINER_VERSION})
    memory = _peak_memory(device)

    decode_start = time.perf_counter()
    container = read_container(out / CONTAINER_NAME).to(device)
    decoded = decode_all_levels(container)
    _sync(device)
    decode_seconds = time.perf_counter() - decode_start
    quality = set_quality(decoded, reference, layout.groups)
    _save_preview(out / "preview.png", reference[0], decoded[0], layout.groups)
    plot_loss_curve(out / "loss.png", history, title=f"NTC {layout.shape.name} at {layout.bpp():.2f} bpp", quality_key="psnr_db")

    measured_bytes = (out / CONTAINER_NAME).stat().st_size
    report_fields: dict[str, Any] = {
        "bpp_target": config.bpp,
        "bpp_measured": 8.0 * measured_bytes / (texture_set.width * texture_set.height),
        "bpp_counts": "bytes of texture.ntc (every mip level inside) * 8 / texels of mip 0; BCn likewise over the full mip chain",
        "bytes": measured_bytes,
        "sections": layout.section_bytes(),
        "latent_shape": {**asdict(layout.shape), "low_div": layout.shape.low_div, "name": layout.shape.name, "nominal_latent_bpp": round(layout.shape.nominal_bpp, 3)},
        "decoder": {"widths": layout.layer_widths, "activation": layout.activation, "weights": "int8 QAT", "biases": "fp32"},
        "size": [texture_set.width, texture_set.height],
        "levels": layout.levels,
        "groups": [asdict(g) for g in layout.groups],
        "sources": texture_set.sources,
        "ntc": quality,
        "train_seconds": round(train_seconds, 3),
        "decode_seconds_all_levels": round(decode_seconds, 4),
        "steps": {"noise": config.train.steps, "round": config.finetune_steps},
        **memory,
    }
    if config.baselines or baselines is not None:
        if baselines is None:
            baselines = bc_baselines(reference, layout.groups, texture_set.width, texture_set.height, bc7_uber_level=config.bc7_uber_level)
        report_fields["bcn"] = {family: {k: v for k, v in result.items() if k != "levels"} for family, result in baselines.items()}
    report_fields["wall_seconds"] = round(time.perf_counter() - wall_start, 3)
    return write_report(out / "report.json", bake="ntc", device=device, metrics={"psnr_db": quality["overall_db"], "bpp": report_fields["bpp_measured"]}, **report_fields)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _all_texel_coords(layout: NTCLayout, device: torch.device) -> torch.Tensor:
    parts = []
    for index, (width, height) in enumerate(layout.level_sizes):
        yy, xx = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij")
        parts.append(torch.stack((torch.full((width * height,), index, device=device), xx.reshape(-1), yy.reshape(-1)), dim=1))
    return torch.cat(parts).to(torch.float32)


def _save_preview(path: Path, reference: np.ndarray, decoded: np.ndarray, groups: Sequence[ChannelGroup]) -> None:
    """Rows per group: reference | NTC | error x10 around mid-grey."""
    rows, start = [], 0
    for group in groups:
        stop = start + len(group.channels)
        rows += comparison_row(reference[..., start:stop], decoded[..., start:stop], error="signed", error_gain=10.0, kind=group.kind)
        start = stop
    save_png(path, panel_grid(rows, gap=4))


def compress_rate_distortion(
    config: NTCConfig,
    bpps: Sequence[float],
    out_dir: str | Path,
    *,
    progress: bool = True,
    sinks: list[EventSink] | None = None,
) -> dict[str, Any]:
    """Compress the set at several rates (``out_dir/bpp_<X>/``), write ``rd.json`` and ``rd.png`` (PSNR vs bpp, BCn as points)."""
    if not bpps:
        raise ConfigError("no rates given.", field="bpp", fix="pass --bpp one or more times.")
    for bpp in bpps:
        check_bpp(bpp)
    config.validate()
    texture_set = load_config_texture_set(config)
    for bpp in bpps:  # every rate must fit before hours of training start
        choose_layout(texture_set.width, texture_set.height, texture_set.groups, bpp, hidden=config.hidden, pe_frequencies=config.pe_frequencies)
    out = prepare_output_dir(out_dir)
    reference = texture_set.mip_chain()
    baselines = None
    if config.baselines:
        baselines = bc_baselines(reference, texture_set.groups, texture_set.width, texture_set.height, bc7_uber_level=config.bc7_uber_level)
    runs = []
    for bpp in sorted(bpps):
        run_config = replace(config, bpp=float(bpp))
        report = compress_texture_set(run_config, out / f"bpp_{bpp:g}", texture_set=texture_set, baselines=baselines, progress=progress, sinks=sinks)
        runs.append(report)
    summary = rate_distortion_summary(runs, baselines)
    atomic_write_json(out / "rd.json", summary)
    plot_rate_distortion(out / "rd.png", summary)
    return summary


def _interpolate_psnr(points: Sequence[tuple[float, float]], bpp: float) -> float | None:
    """PSNR at ``bpp`` by linear interpolation of the NTC curve (None outside its range)."""
    points = sorted(points)
    for (b0, p0), (b1, p1) in zip(points, points[1:]):
        if b0 <= bpp <= b1:
            return p0 if b1 == b0 else p0 + (p1 - p0) * (bpp - b0) / (b1 - b0)
    return None


def _bpp_for_psnr(points: Sequence[tuple[float, float]], target: float) -> float | None:
    """Lowest bpp at which the (interpolated) NTC curve reaches ``target`` dB (None if it never does)."""
    points = sorted(points)
    if points and points[0][1] >= target:
        return points[0][0]
    for (b0, p0), (b1, p1) in zip(points, points[1:]):
        if p0 < target <= p1:
            return b0 + (b1 - b0) * (target - p0) / (p1 - p0)
    return None


def rate_distortion_summary(runs: Sequence[dict[str, Any]], baselines: dict[str, Any] | None) -> dict[str, Any]:
    """The RD record: NTC points, BCn points, NTC's PSNR at BC1's and BC7's rates, and the rate that matches BC7's PSNR."""
    ntc = [
        {
            "bpp_target": r["bpp_target"],
            "bpp": r["bpp_measured"],
            "psnr_db": r["ntc"]["overall_db"],
            "psnr_all_mips_db": r["ntc"]["overall_all_mips_db"],
            "groups_db": {k: v["mip0_db"] for k, v in r["ntc"]["groups"].items()},
            "latent_shape": r["latent_shape"]["name"],
            "train_seconds": r["train_seconds"],
        }
        for r in runs
    ]
    points = [(p["bpp"], p["psnr_db"]) for p in ntc]
    best = max(ntc, key=lambda p: p["bpp"])
    # The interpolated comparisons are None when the curve does not reach a BCn rate (or PSNR);
    # the highest NTC rate is always stated beside them.
    summary: dict[str, Any] = {"ntc": ntc, "bcn": {}, "comparison": {"ntc_highest_rate": {"bpp": best["bpp"], "psnr_db": best["psnr_db"]}}}
    for family, result in (baselines or {}).items():
        quality = result["quality"]
        summary["bcn"][family] = {"bpp": result["bpp"], "psnr_db": quality["overall_db"], "psnr_all_mips_db": quality["overall_all_mips_db"], "formats": result["formats"]}
        summary["comparison"][f"ntc_psnr_at_{family}_bpp_db"] = _interpolate_psnr(points, result["bpp"])
        summary["comparison"][f"ntc_bpp_matching_{family}_psnr"] = _bpp_for_psnr(points, quality["overall_db"])
    return summary


def plot_rate_distortion(path: str | Path, summary: dict[str, Any]) -> None:
    """PSNR (mip 0, all channels) against bpp: the NTC curve and the BCn sets as points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4.2), dpi=110)
    ntc = sorted(summary["ntc"], key=lambda p: p["bpp"])
    axis.plot([p["bpp"] for p in ntc], [p["psnr_db"] for p in ntc], "o-", color="tab:blue", label="NTC")
    markers = {"bc1": ("s", "tab:orange"), "bc7": ("D", "tab:green")}
    for family, point in summary["bcn"].items():
        marker, colour = markers.get(family, ("^", "tab:red"))
        formats = "+".join(sorted(set(point["formats"].values())))
        axis.plot([point["bpp"]], [point["psnr_db"]], marker, color=colour, ms=8, label=f"{family.upper()} set ({formats})")
    axis.set_xlabel("bits per texel of mip 0 (full mip chain stored)")
    axis.set_ylabel("PSNR, mip 0, all channels (dB)")
    axis.grid(alpha=0.3)
    axis.legend()
    axis.set_title("NTC rate-distortion")
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
    plt.close(figure)


# -- decompression ------------------------------------------------------------------------------


def open_container(folder: str | Path) -> NTCContainer:
    """Read ``folder/texture.ntc`` after checking it against ``folder/manifest.json`` (size and sha256)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BundleError("the folder does not exist.", path=folder, fix="pass a folder written by `neuralbake ntc compress`.")
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        raise BundleError(f"{MANIFEST_NAME} or {CONTAINER_NAME} is missing.", path=folder, fix="pass a folder written by `neuralbake ntc compress`.")
    fix = "compress the textures again."
    try:
        manifest = load_json_file(manifest_path, what="NTC manifest", fix=fix)
    except InputError as exc:
        raise BundleError(exc.problem, path=manifest_path, fix=exc.fix) from exc
    if not isinstance(manifest, dict):
        raise BundleError("the manifest is not a JSON object.", path=manifest_path, fix=fix)
    name = manifest.get("file", CONTAINER_NAME)
    if name != CONTAINER_NAME:  # neuralbake always writes texture.ntc beside the manifest
        raise BundleError(f"names the file {str(name)[:60]!r}; an NTC folder holds {CONTAINER_NAME!r}.", path=manifest_path, field="file", fix=fix)
    try:
        file_path = resolve_reference(manifest_path, CONTAINER_NAME, field="file", what="NTC container")
    except InputError as exc:  # texture.ntc is a symlink out of the folder
        raise BundleError(exc.problem, path=manifest_path, field="file", fix=exc.fix) from exc
    if not file_path.is_file():
        raise BundleError(f"{MANIFEST_NAME} or {CONTAINER_NAME} is missing.", path=folder, fix="pass a folder written by `neuralbake ntc compress`.")
    expected = manifest.get("sha256")
    if not isinstance(expected, str) or len(expected) != 64:
        raise BundleError("the manifest has no sha256 (64 hex digits) of the container.", path=manifest_path, field="sha256", fix=fix)
    size = manifest.get("bytes")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size != file_path.stat().st_size):
        raise BundleError(
            f"the file has {file_path.stat().st_size} bytes but the manifest records {str(size)[:40]} (truncated or replaced).",
            path=file_path,
            field="bytes",
            fix="copy it again or compress again.",
        )
    data = file_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != expected:
        raise BundleError("the file's sha256 does not match the manifest (damaged or replaced).", path=file_path, field="sha256", fix="copy it again or compress again.")
    return _parse_container(data, file_path)


def decompress(
    folder: str | Path, out_dir: str | Path, *, image_format: str = "png", device: str = "auto", progress: bool = False
) -> list[Path]:
    """Decode every group at every mip level to ``out_dir/<group>_mip<k>.png`` (8-bit RGB) or ``.exr`` (float32, one channel per stored channel)."""
    if image_format not in ("png", "exr"):
        raise ConfigError(f"unknown image format {image_format!r}.", field="format", fix="use png or exr.")
    container = open_container(folder).to(resolve_device(device))
    out = prepare_output_dir(out_dir)
    total = sum(width * height for width, height in container.layout.level_sizes)
    with progress_task("decoding", total, enabled=progress, unit="texels") as advance:
        levels = decode_all_levels(container, progress=advance)
    written = []
    for index, level in enumerate(levels):
        start = 0
        for group in container.layout.groups:
            stop = start + len(group.channels)
            part = level[..., start:stop]
            path = out / f"{group.name}_mip{index}.{image_format}"
            if image_format == "png":
                save_png(path, display_rgb(part, kind=group.kind))
            else:
                save_exr(path, part, channels=group.channels)
            written.append(path)
            start = stop
    return written
