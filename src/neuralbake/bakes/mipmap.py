"""Learned mipmaps: mip levels of a PBR texture set optimised so that *shading the mip* matches
*the mip of the shading*.

Box-filtered mips work for base colour but not for normals: averaging a bump's slopes makes the
surface flat and shiny, so a highlight that the full-resolution bumps break up into a wide, dim
glint becomes a small, bright one far away (the specular aliasing the NVIDIA neural-shading
primer's mipmap example, seed 001, opens with). This bake optimises each level's texels so that
shading them with the glTF metal/rough BRDF (:func:`neuralbake.material.gltf.gltf_eval`) under a
light ``wi`` and a view ``wo`` gives the box average, over the level's ``2^k x 2^k`` footprint, of
the full-resolution shading under the same ``wi`` and ``wo``; averaged over random directions.

Shading. Maps are tangent-space (OpenGL ``+y``, as glTF). A texel with normal ``n`` is shaded in
an orthonormal frame around ``n`` (Duff et al., "Building an Orthonormal Basis, Revisited",
JCGT 6(1), 2017; the BRDF is isotropic, so any frame around ``n`` gives the same value): the
radiance is ``light_intensity * f(wi, wo) (n . wi)`` with both directions above the geometric
surface. Errors are measured on Reinhard-tone-mapped radiance ``x / (1 + x)`` (per channel), so
that the rare, very bright GGX peaks of a shiny surface do not drown every other texel; the
reports also give the RMSE of linear radiance.

Directions. ``wo`` is cosine-distributed over the hemisphere; ``wi`` is, with probability
``specular_fraction``, the mirror of ``wo`` about a visible GGX normal of alpha 0.2 (so the
highlights, where box filtering fails, are sampled often), else cosine-distributed. Training draws
fresh pairs each step, shared by every texel of every level (the texels are independent
parameters, so sharing costs no variance and lets one full-resolution shading serve all levels).
The report uses a fixed held-out set drawn with a different seed.

Learned texels, per level: base colour ``sigmoid(a)`` (linear RGB), normal
``normalize(s_x, s_y, 1)`` from two slopes (always above the surface), perceptual roughness
``sigmoid(r)``, and metallic ``sigmoid(m)`` when a metallic map was given (else the constant).
The slopes are learned as offsets from the initial ones in units of the initial GGX alpha,
``s = s_0 + alpha_0 * d``: shading depends on a tilt through ``tilt / alpha``, and Adam steps every
parameter by about ``lr`` whatever its gradient's size, so raw slopes let one rare gradient spike of
a mirror-like texel (alpha ~ 1e-3, whose sharp highlight 16 random directions a step seldom hit)
tilt it by ~10 lr = 0.2, far past its lobe: its highlight left the mirror direction for good (the
narrow lobe has no tail to pull it back) and the texel shaded black where the reference is bright.
They start from Toksvig's maps (``init = "toksvig"``, the default) or the box-filtered ones
(``init = "box"``) and are optimised with Adam by the shared :class:`~neuralbake.nn.trainer.Trainer`.
Toksvig is the default start because it converges faster: on a 32^2 synthetic bump map, 300
steps from Toksvig reach a mean 27.2 dB over the levels, from box 24.5 dB (600 steps: 25.0 dB).

Baselines. ``box``: box-filtered maps (base colour averaged in linear light, normals averaged and
renormalised, perceptual roughness and metallic averaged). ``toksvig``: as box, with the roughness
widened by the normal variance Toksvig estimates from the averaged normal's length
(M. Toksvig, "Mipmapping Normal Maps", NVIDIA technical brief 2004 / JGT 10(3), 2005):
``sigma^2 = (1 - |n|) / |n|``, added to the GGX ``alpha^2``: ``alpha'^2 = alpha^2 + sigma^2``.
``toksvig_phong``: Toksvig's own formula on a Phong exponent, ``s' = s |n| / (|n| + s (1 - |n|))``,
with the Beckmann/Phong mapping ``s = 2 / alpha^2 - 2`` (Walter et al., EGSR 2007) there and back;
for large ``s`` it is ``alpha'^2 ~ alpha^2 + 2 sigma^2``.

Outputs in ``--out``: ``mips/{base_color,normal,roughness[,metallic]}_L{k}.png`` (the learned
chain, level 0 = the input; base colour sRGB-encoded, normals as ``0.5 n + 0.5``),
``comparison.png`` (one row per level; two blocks, an exact mirror pair and an off-mirror pair, each
reference = box-averaged full-resolution shading | box | Toksvig | learned, panels enlarged with
nearest sampling), ``report.json`` (per-level PSNR/RMSE of every method on the held-out
directions, including the learned chain re-read from its 8-bit PNGs, and separately on exact
mirror pairs, see :func:`mirror_directions`), ``config.json``, ``loss.png``,
``events.jsonl`` and ``checkpoint.pt`` (for ``resume``).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from rich.console import Console

from neuralbake.core.config import save_config
from neuralbake.core.device import resolve_device, seed_everything
from neuralbake.core.events import EventSink, EventWriter, JsonlSink, ProgressSink
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import ConfigError, InputError, TrainingError
from neuralbake.io.files import prepare_output_dir
from neuralbake.io.images import load_image, resize_image, save_png
from neuralbake.io.limits import check_memory
from neuralbake.material.frame import normalize, square_to_cosine_hemisphere
from neuralbake.material.gltf import gltf_eval
from neuralbake.material.microfacet import ggx_reflection_sample
from neuralbake.material.texture import linear_to_srgb, srgb_to_linear
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig
from neuralbake.render.mip import box_downsample, build_mip_pyramid, is_power_of_two
from neuralbake.render.pictures import panel_grid
from neuralbake.render.tonemap import tone_map, tone_map_reinhard

__all__ = [
    "METHODS",
    "LearnedMipChain",
    "LearnedMipLevel",
    "MaterialMaps",
    "MipmapConfig",
    "MipReferenceSampler",
    "bake_mipmap",
    "box_mip_chain",
    "level_errors",
    "load_material_maps",
    "mirror_directions",
    "orthonormal_basis",
    "sample_directions",
    "shade_chain",
    "shade_maps",
    "shade_texels",
    "toksvig_chain",
]

METHODS = ("box", "toksvig", "toksvig_phong", "learned", "learned_8bit")
"""Mip chains compared in the report (``learned_8bit``: the learned chain re-read from its PNGs)."""

_SAMPLING_ALPHA = 0.2
"""GGX alpha of the lobe that draws light directions around the mirror direction (0.2 fits exact
mirror pairs better than 0.5 on the helmet at 128^2: level-1 PSNR 16.2 vs 14.8 dB)."""

_MIN_SLOPE_SCALE = 1e-4
"""Smallest unit of a learned slope offset (GGX's smallest alpha, ``MIN_ALPHA``)."""

_LOGIT_EPS = 1e-4
"""Values are clamped to [eps, 1 - eps] before the logit, so a 0 or 1 texel starts finite."""


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


@dataclass
class MipmapConfig:
    """Everything that determines a learned-mipmap bake."""

    base_color: str = ""
    """Base colour map (sRGB), square, power-of-two side."""
    normal: str = ""
    """Tangent-space normal map (OpenGL +y, as glTF), RGB, same size as the base colour."""
    roughness_map: str | None = None
    """Roughness map: a grey image, or a glTF metallicRoughness map (G = roughness, B = metallic); None: the constant `roughness`."""
    roughness: float = 0.2
    """Perceptual roughness (GGX alpha = roughness^2) when no roughness map is given."""
    metallic: float | None = None
    """Constant metallic; None: the B channel of a glTF metallicRoughness map when one is given, else 0 (dielectric)."""
    size: int | None = None
    """Resample every map to size x size (a power of two) before baking; None keeps their own size."""
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
    device: str = "auto"
    """auto, cpu, cuda or cuda:N (auto picks the GPU when there is one)."""
    train: TrainerConfig = field(default_factory=_default_train)
    """Optimisation: steps, learning rate, seed, cadence of logs and evaluations (precision must be fp32)."""

    def validate(self) -> None:
        """Raise ConfigError on settings no bake can use (before any file is read)."""
        for name in ("base_color", "normal"):
            if not getattr(self, name):
                raise ConfigError("no map given.", field=name, fix=f"pass the path of the {name.replace('_', ' ')} map.")
        if not (0.0 <= self.roughness <= 1.0):
            raise ConfigError(f"must be in [0, 1], got {self.roughness}.", field="roughness", fix="use e.g. 0.2 for a shiny surface.")
        if self.metallic is not None and not (0.0 <= self.metallic <= 1.0):
            raise ConfigError(f"must be in [0, 1], got {self.metallic}.", field="metallic", fix="use 0 (dielectric) to 1 (metal).")
        if self.size is not None and (not is_power_of_two(self.size) or not 2 <= self.size <= MAX_SIZE):
            raise ConfigError(
                f"must be a power of two from 2 to {MAX_SIZE}, got {self.size}.", field="size", fix="use e.g. 128, 512 or 2048."
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
"""Largest ``size`` a bake resamples to (the 16K texture that image loading also caps)."""

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


def _check_bake_memory(side: int, config: MipmapConfig, device: torch.device | str) -> None:
    check_memory(
        estimated_bake_bytes(side, config, device),
        what=f"a learned-mipmap bake of a {side}x{side} texture set",
        field="size",
        fix="bake at a smaller --size (e.g. 1024 or 2048), lower --directions-per-step, or bake on a GPU.",
    )


# -- maps -----------------------------------------------------------------------------------------


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
    if config.size is not None and config.size != width:
        images = {name: resize_image(image, config.size, config.size) for name, image in images.items()}
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


# -- shading --------------------------------------------------------------------------------------


def orthonormal_basis(n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two unit tangents ``(t, b)`` completing unit normals ``n`` ``[M, 3]`` to a right-handed frame.

    Duff et al. (JCGT 6(1), 2017): branch-free, continuous except across ``n.z = 0``'s sign flip,
    differentiable in ``n``.
    """
    x, y, z = n.unbind(-1)
    sign = torch.copysign(torch.ones_like(z), z)
    a = -1.0 / (sign + z)
    b = x * y * a
    t = torch.stack((1.0 + sign * x * x * a, sign * b, -sign * x), dim=-1)
    bt = torch.stack((b, sign + y * y * a, -y), dim=-1)
    return t, bt


def shade_texels(
    base_color: torch.Tensor,
    normal: torch.Tensor,
    roughness: torch.Tensor,
    metallic: torch.Tensor,
    wi: torch.Tensor,
    wo: torch.Tensor,
    *,
    light_intensity: float,
) -> torch.Tensor:
    """Radiance ``[D, M, 3]`` of ``M`` texels under ``D`` (light, view) pairs.

    ``base_color`` ``[M, 3]`` linear; ``normal`` ``[M, 3]`` unit, tangent space; ``roughness`` and
    ``metallic`` ``[M]``; ``wi``, ``wo`` ``[D, 3]`` unit, tangent space (geometric normal ``+z``).
    Zero where either direction is below the geometric surface or the normal-mapped one.
    Differentiable in the texel parameters.
    """
    count, texels = wi.shape[0], normal.shape[0]
    t, b = orthonormal_basis(normal)
    frame = torch.stack((t, b, normal), dim=1)  # [M, 3 (axis), 3 (xyz)]

    def local(w: torch.Tensor) -> torch.Tensor:  # [D, 3] -> [D * M, 3]
        return torch.einsum("max,dx->dma", frame, w).reshape(count * texels, 3)

    f_cos = gltf_eval(
        local(wi),
        local(wo),
        base_color=base_color.repeat(count, 1),
        metallic=metallic.repeat(count),
        roughness=roughness.repeat(count),
    ).reshape(count, texels, 3)
    above = ((wi[:, 2] > 0.0) & (wo[:, 2] > 0.0)).to(f_cos.dtype)  # a tensor mask: no host sync on a GPU
    return f_cos * (light_intensity * above)[:, None, None]


SHADING_CHUNK = 1 << 21
"""Most (direction, texel) pairs shaded at once; bounds the memory of large maps."""


def shade_maps(maps: MaterialMaps, wi: torch.Tensor, wo: torch.Tensor, *, light_intensity: float) -> torch.Tensor:
    """:func:`shade_texels` of every texel of ``maps`` (normals normalised first): ``[D, S, S, 3]``.

    ``wi``, ``wo``: ``[D, 3]``. Directions are shaded in groups of at most ``SHADING_CHUNK``
    (direction, texel) pairs, and the texels of one direction in slices of that size.
    """
    side = maps.side
    texels = side * side
    params = (
        maps.base_color.reshape(-1, 3),
        normalize(maps.normal.reshape(-1, 3)),
        maps.roughness.reshape(-1),
        maps.metallic.reshape(-1),
    )
    per_group = max(1, SHADING_CHUNK // texels)
    outputs = []
    for start in range(0, wi.shape[0], per_group):
        wi_g, wo_g = wi[start : start + per_group], wo[start : start + per_group]
        if texels <= SHADING_CHUNK:
            outputs.append(shade_texels(*params, wi_g, wo_g, light_intensity=light_intensity))
        else:
            pieces = [
                shade_texels(*(p[i : i + SHADING_CHUNK] for p in params), wi_g, wo_g, light_intensity=light_intensity)
                for i in range(0, texels, SHADING_CHUNK)
            ]
            outputs.append(torch.cat(pieces, dim=1))
    return torch.cat(outputs).reshape(-1, side, side, 3)


def shade_chain(chain: Sequence[MaterialMaps], wi: torch.Tensor, wo: torch.Tensor, *, light_intensity: float) -> torch.Tensor:
    """Shading of every level of ``chain`` under ``D`` pairs, flattened and concatenated: ``[D, sum S_k^2 * 3]``."""
    count = wi.shape[0]
    return torch.cat([shade_maps(level, wi, wo, light_intensity=light_intensity).reshape(count, -1) for level in chain], dim=1)


def reference_chain(full: torch.Tensor, levels: int) -> torch.Tensor:
    """Box averages of full-resolution shading ``[D, S, S, 3]`` for levels ``1..levels``: ``[D, sum S_k^2 * 3]``."""
    chain = build_mip_pyramid(full, levels=levels + 1)[1:]
    return torch.cat([level.reshape(full.shape[0], -1) for level in chain], dim=1)


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


# -- directions -----------------------------------------------------------------------------------


def sample_directions(count: int, generator: torch.Generator, device: torch.device, *, specular_fraction: float) -> torch.Tensor:
    """``count`` (light, view) pairs as ``[count, 6]`` (``wi`` then ``wo``, tangent space).

    ``wo`` cosine-distributed; ``wi`` around the mirror direction (GGX, alpha 0.2) with probability
    ``specular_fraction``, else cosine-distributed. ``wi`` may fall below the surface (shading 0).
    """
    u = torch.rand(count, 5, generator=generator, device=device)
    wo = square_to_cosine_hemisphere(u[:, 0:2])
    alpha = torch.full((count,), _SAMPLING_ALPHA, device=device)
    wi_specular, _ = ggx_reflection_sample(wo, u[:, 2:4], alpha, alpha)
    wi_diffuse = square_to_cosine_hemisphere(u[:, 2:4])
    wi = torch.where((u[:, 4] < specular_fraction)[:, None], wi_specular, wi_diffuse)
    return torch.cat((normalize(wi), wo), dim=-1)


def mirror_directions(device: torch.device) -> torch.Tensor:
    """12 exact mirror pairs ``[12, 6]``: ``wo`` at 10, 35 and 60 degrees from the normal, four azimuths, ``wi`` its mirror.

    With flat normals every texel sits on its highlight peak: the hardest case for any filtered
    normal map. The report measures it apart from the held-out set.
    """
    rows = []
    for theta in (10.0, 35.0, 60.0):
        for phi in (0.0, 90.0, 180.0, 270.0):
            t, p = math.radians(theta), math.radians(phi)
            wo = [math.sin(t) * math.cos(p), math.sin(t) * math.sin(p), math.cos(t)]
            rows.append([-wo[0], -wo[1], wo[2], *wo])
    return torch.tensor(rows, device=device)


# -- the learned chain ----------------------------------------------------------------------------


def _logit(x: torch.Tensor) -> torch.Tensor:
    return torch.logit(torch.clamp(x, _LOGIT_EPS, 1.0 - _LOGIT_EPS))


class LearnedMipLevel(torch.nn.Module):
    """The trainable texels of one mip level (see the module docstring for the parameterisation).

    ``base_logit`` ``[S, S, 3]``, ``slope`` ``[2, S, S]`` (the offset from the initial slopes
    ``slope_origin`` in units of ``slope_scale``, the initial GGX alpha; channel first, so that its
    gradient, a slice of the normal's, is contiguous: the trainer's fused Adam silently mis-steps
    parameters whose gradient has other strides), ``roughness_logit`` ``[S, S, 1]`` and, when
    learned, ``metallic_logit`` ``[S, S, 1]``.
    """

    def __init__(self, init: MaterialMaps, *, learn_metallic: bool) -> None:
        super().__init__()
        n = init.normal
        slope = n[..., :2] / torch.clamp(n[..., 2:3], min=1e-3)
        # The learned slope is an offset from the initial one in units of the initial GGX alpha
        # (the lobe's width in slope units), so that one Adam step, about lr in size whatever the
        # gradient's magnitude, tilts a mirror-like texel by a fraction of its lobe, not past it.
        self.register_buffer("slope_origin", slope.permute(2, 0, 1).contiguous())
        alpha = torch.clamp(init.roughness, min=0.0) ** 2
        self.register_buffer("slope_scale", torch.clamp(alpha, min=_MIN_SLOPE_SCALE).permute(2, 0, 1).contiguous())
        self.base_logit = torch.nn.Parameter(_logit(init.base_color).contiguous())
        self.slope = torch.nn.Parameter(torch.zeros_like(self.slope_origin))
        self.roughness_logit = torch.nn.Parameter(_logit(init.roughness).contiguous())
        if learn_metallic:
            self.metallic_logit = torch.nn.Parameter(_logit(init.metallic).contiguous())
        else:
            self.register_buffer("metallic_value", init.metallic.clone())

    def maps(self) -> MaterialMaps:
        """The level's maps (unit normals), differentiable in the parameters."""
        slope = self.slope_origin + self.slope_scale * self.slope
        normal = torch.cat((slope, torch.ones_like(slope[:1])), dim=0).permute(1, 2, 0)
        normal = normalize(normal.reshape(-1, 3)).reshape(normal.shape)
        metallic = torch.sigmoid(self.metallic_logit) if hasattr(self, "metallic_logit") else self.metallic_value
        return MaterialMaps(torch.sigmoid(self.base_logit), normal, torch.sigmoid(self.roughness_logit), metallic)


class LearnedMipChain(torch.nn.Module):
    """Levels ``1..L`` of learned texels; ``forward(directions [D, 6]) -> shading [D, sum S_k^2 * 3]``."""

    def __init__(self, init_chain: Sequence[MaterialMaps], *, light_intensity: float, learn_metallic: bool) -> None:
        super().__init__()
        self.levels = torch.nn.ModuleList([LearnedMipLevel(level, learn_metallic=learn_metallic) for level in init_chain])
        self.light_intensity = light_intensity

    def chain(self) -> list[MaterialMaps]:
        """Every level's maps."""
        return [level.maps() for level in self.levels]

    def forward(self, directions: torch.Tensor) -> torch.Tensor:
        return shade_chain(self.chain(), directions[:, :3], directions[:, 3:], light_intensity=self.light_intensity)


class MipReferenceSampler:
    """Batches for the trainer: random direction pairs and the box-averaged full-resolution shading."""

    capturable = False
    """Kept out of CUDA-graph capture: the reference shading of a large map is chunked and allocates per step."""

    def __init__(self, maps: MaterialMaps, levels: int, config: MipmapConfig) -> None:
        self.maps = maps
        self.levels = levels
        self.batch_size = config.directions_per_step
        self.light_intensity = config.light_intensity
        self.specular_fraction = config.specular_fraction

    def targets(self, directions: torch.Tensor) -> torch.Tensor:
        """Reference shading ``[D, sum S_k^2 * 3]`` for the pairs ``directions`` ``[D, 6]``."""
        parts = []
        with torch.no_grad():
            # One direction group at a time, so the full-resolution shading never holds all of them.
            per_group = max(1, SHADING_CHUNK // (self.maps.side**2))
            for group in directions.split(per_group):
                full = shade_maps(self.maps, group[:, :3], group[:, 3:], light_intensity=self.light_intensity)
                parts.append(reference_chain(full, self.levels))
        return torch.cat(parts)

    def sample(self, generator: torch.Generator) -> Batch:
        directions = sample_directions(self.batch_size, generator, self.maps.base_color.device, specular_fraction=self.specular_fraction)
        return Batch(inputs=directions, targets=self.targets(directions))


def level_slices(side: int, levels: int) -> list[slice]:
    """Where each level ``1..levels`` of a base of ``side`` texels sits in a flattened chain."""
    slices, start = [], 0
    for k in range(1, levels + 1):
        size = (side >> k) ** 2 * 3
        slices.append(slice(start, start + size))
        start += size
    return slices


def tone_mapped_loss(slices: Sequence[slice]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Sum over levels of the mean squared error of Reinhard-tone-mapped shading."""

    def loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        diff = tone_map_reinhard(prediction) - tone_map_reinhard(target)
        return sum(torch.mean(diff[:, s] ** 2) for s in slices)

    return loss


def level_errors(prediction: torch.Tensor, target: torch.Tensor, slices: Sequence[slice]) -> list[dict[str, float]]:
    """Per-level errors of shading ``[D, T]`` against the reference ``[D, T]``.

    ``psnr_db`` and ``rmse`` on Reinhard-tone-mapped values (peak 1), ``rmse_linear`` on radiance.
    """
    rows = []
    for s in slices:
        p, t = prediction[:, s].double(), target[:, s].double()
        mse = float(torch.mean((tone_map_reinhard(p) - tone_map_reinhard(t)) ** 2))
        rows.append(
            {
                "psnr_db": round(10.0 * math.log10(1.0 / mse), 4) if mse > 0 else math.inf,
                "rmse": round(math.sqrt(mse), 6),
                "rmse_linear": round(math.sqrt(float(torch.mean((p - t) ** 2))), 6),
            }
        )
    return rows


def _shade_directions(chain: Sequence[MaterialMaps], directions: torch.Tensor, light_intensity: float) -> torch.Tensor:
    with torch.no_grad():
        return shade_chain(chain, directions[:, :3], directions[:, 3:], light_intensity=light_intensity)


# -- outputs --------------------------------------------------------------------------------------


def _encode_chain_8bit(chain: Sequence[MaterialMaps]) -> list[dict[str, np.ndarray]]:
    """The chain as the 8-bit images written to disk (base colour sRGB, normals 0.5 n + 0.5)."""
    images = []
    for level in chain:
        images.append(
            {
                "base_color": linear_to_srgb(level.base_color).clamp(0, 1).cpu().numpy(),
                "normal": (0.5 * normalize(level.normal.reshape(-1, 3)).reshape(level.normal.shape) + 0.5).cpu().numpy(),
                "roughness": level.roughness.clamp(0, 1).cpu().numpy(),
                "metallic": level.metallic.clamp(0, 1).cpu().numpy(),
            }
        )
    return images


def _decode_8bit(images: dict[str, np.ndarray], device: torch.device) -> MaterialMaps:
    q = {name: torch.from_numpy(np.round(np.clip(a, 0, 1) * 255.0) / 255.0).float().to(device) for name, a in images.items()}
    normal = normalize((2.0 * q["normal"] - 1.0).reshape(-1, 3)).reshape(q["normal"].shape)
    return MaterialMaps(srgb_to_linear(q["base_color"]), normal, q["roughness"], q["metallic"])


COMPARISON_PAIRS = {"mirror_35deg": (35.0, 0.0, 35.0, 180.0), "light_50deg_view_20deg": (50.0, 0.0, 20.0, 120.0)}
"""(light theta, light phi, view theta, view phi) in degrees of the comparison image's two blocks."""


def _direction(theta: float, phi: float, device: torch.device) -> torch.Tensor:
    t, p = math.radians(theta), math.radians(phi)
    return torch.tensor([[math.sin(t) * math.cos(p), math.sin(t) * math.sin(p), math.cos(t)]], device=device)


def _fit_panel(image: torch.Tensor, panel: int) -> torch.Tensor:
    """``[H, W, 3]`` shown at ``panel`` x ``panel``: enlarged by pixel repetition, or area-averaged when larger."""
    if image.shape[0] == panel:
        return image
    mode = "nearest" if image.shape[0] < panel else "area"
    return torch.nn.functional.interpolate(image.permute(2, 0, 1)[None], size=(panel, panel), mode=mode)[0].permute(1, 2, 0)


def _comparison_image(maps: MaterialMaps, chains: dict[str, list[MaterialMaps]], light_intensity: float, panel: int) -> np.ndarray:
    """Rows per level; per light/view pair of ``COMPARISON_PAIRS``: reference | box | toksvig | learned."""
    device = maps.base_color.device
    blocks = []
    with torch.no_grad():
        for light_theta, light_phi, view_theta, view_phi in COMPARISON_PAIRS.values():
            wi, wo = _direction(light_theta, light_phi, device), _direction(view_theta, view_phi, device)
            full = shade_maps(maps, wi, wo, light_intensity=light_intensity)[0]
            rows = []
            for k in range(len(chains["box"])):
                reference = box_downsample(full, 2 ** (k + 1))
                panels = [reference] + [
                    shade_maps(chains[name][k], wi, wo, light_intensity=light_intensity)[0] for name in ("box", "toksvig", "learned")
                ]
                rows.append([_fit_panel(tone_map(p, operator="reinhard"), panel) for p in panels])
            blocks.append(panel_grid(rows, gap=4))
    return panel_grid([blocks], gap=16)


def _write_chain(folder: Path, base: MaterialMaps, chain_images: list[dict[str, np.ndarray]], write_metallic: bool) -> list[str]:
    folder.mkdir(exist_ok=True)
    names = ["base_color", "normal", "roughness"] + (["metallic"] if write_metallic else [])
    written = []
    for k, images in enumerate(_encode_chain_8bit([base]) + chain_images):
        for name in names:
            path = folder / f"{name}_L{k}.png"
            save_png(path, images[name])
            written.append(f"{folder.name}/{path.name}")
    return written


# -- the bake -------------------------------------------------------------------------------------


def bake_mipmap(
    config: MipmapConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    sinks: list[EventSink] | None = None,
) -> dict[str, Any]:
    """Learn a mip chain for a texture set and write it with a comparison image and a report.

    Everything (config, device, maps, output folder) is checked before any optimisation. Returns
    the report as a dict.
    """
    wall_start = time.perf_counter()
    config.validate()
    device = resolve_device(config.device)
    if config.size is not None:  # before the maps are resampled to it
        _check_bake_memory(config.size, config, device)
    maps_cpu, facts = load_material_maps(config)
    side = maps_cpu.side
    _check_bake_memory(side, config, device)
    max_levels = int(math.log2(side))
    if config.levels is not None and config.levels > max_levels:
        raise ConfigError(
            f"a {side}x{side} map has {max_levels} levels below it, {config.levels} were asked for.",
            field="levels",
            fix=f"use --levels {max_levels} or fewer.",
        )
    levels = config.levels or max_levels
    out = prepare_output_dir(out_dir)
    save_config(out / "config.json", config)
    seed_everything(config.train.seed)

    maps = maps_cpu.to(device)
    box = box_mip_chain(maps, levels)
    chains = {"box": renormalised(box), "toksvig": toksvig_chain(box), "toksvig_phong": toksvig_chain(box, variant="phong")}
    learn_metallic = bool(facts["metallic_from_map"])
    model = LearnedMipChain(
        chains["toksvig"] if config.init == "toksvig" else box, light_intensity=config.light_intensity, learn_metallic=learn_metallic
    )
    model = model.to(device)
    sampler = MipReferenceSampler(maps, levels, config)
    slices = level_slices(side, levels)

    held_generator = torch.Generator(device="cpu").manual_seed(config.train.seed + 7919)
    held_out = sample_directions(
        config.held_out_directions, held_generator, torch.device("cpu"), specular_fraction=config.specular_fraction
    ).to(device)
    held_targets = sampler.targets(held_out)

    def evaluate(module: torch.nn.Module) -> dict[str, float]:
        with torch.no_grad():
            rows = level_errors(_shade_directions(module.chain(), held_out, config.light_intensity), held_targets, slices)
        return {"psnr_db": float(np.mean([r["psnr_db"] for r in rows]))}

    log_path = out / "events.jsonl"
    if not resume:
        log_path.unlink(missing_ok=True)
    all_sinks: list[EventSink] = [JsonlSink(log_path), *(sinks or [])]
    if progress:
        all_sinks.append(ProgressSink("learned mipmaps", console=Console(stderr=True)))
    with EventWriter(all_sinks) as events:
        trainer = Trainer(
            model,
            sampler,
            tone_mapped_loss(slices),
            config.train,
            device=device,
            checkpoint_path=out / "checkpoint.pt",
            events=events,
            evaluate=evaluate,
            compatibility={
                "maps_sha256": facts["sha256"],
                "size": side,
                "levels": levels,
                "init": config.init,
                "slope_parameterisation": SLOPE_PARAMETERISATION,
            },
        )
        try:
            result = trainer.fit(resume=resume)
        except TrainingError as exc:
            if exc.field != "slope_parameterisation":
                raise
            raise TrainingError(
                "the checkpoint was made by an older neuralbake that stored absolute normal slopes; this version learns "
                f"offsets from the initial slopes ({SLOPE_PARAMETERISATION}), so its texels cannot be resumed.",
                path=exc.path,
                field="slope_parameterisation",
                fix="run without --resume to start the bake over.",
            ) from exc

    with torch.no_grad():
        chains["learned"] = model.chain()
        chain_images = _encode_chain_8bit(chains["learned"])
        chains["learned_8bit"] = [_decode_8bit(images, device) for images in chain_images]
        per_method = {
            name: level_errors(_shade_directions(chains[name], held_out, config.light_intensity), held_targets, slices) for name in METHODS
        }
        mirror = mirror_directions(device)
        mirror_targets = sampler.targets(mirror)
        per_method_mirror = {
            name: level_errors(_shade_directions(chains[name], mirror, config.light_intensity), mirror_targets, slices) for name in METHODS
        }
    files = _write_chain(out / "mips", maps, chain_images, learn_metallic)
    panel = int(min(256, max(128, side)))
    save_png(out / "comparison.png", _comparison_image(maps, chains, config.light_intensity, panel))
    plot_loss_curve(out / "loss.png", result.history, title="learned mipmaps", quality_key="psnr_db")

    per_level, per_level_mirror = [], []
    for k in range(levels):
        per_level.append({"level": k + 1, "side": side >> (k + 1), **{name: per_method[name][k] for name in METHODS}})
        per_level_mirror.append({"level": k + 1, "side": side >> (k + 1), **{name: per_method_mirror[name][k] for name in METHODS}})
    mean_mirror = {
        f"mean_mirror_psnr_{name}_db": round(float(np.mean([row[name]["psnr_db"] for row in per_level_mirror])), 4) for name in METHODS
    }
    mean_psnr = {name: round(float(np.mean([row[name]["psnr_db"] for row in per_level])), 4) for name in METHODS}
    beats = {
        f"learned_beats_{name}_every_level": all(row["learned"]["psnr_db"] > row[name]["psnr_db"] for row in per_level)
        for name in ("box", "toksvig", "toksvig_phong")
    }
    return write_report(
        out / "report.json",
        bake="mipmap",
        device=device,
        metrics={f"mean_psnr_{name}_db": value for name, value in mean_psnr.items()},
        **beats,
        **mean_mirror,
        per_level=per_level,
        per_level_mirror=per_level_mirror,
        mirror_directions="12 exact mirror pairs (view at 10/35/60 degrees, 4 azimuths): every flat texel on its highlight peak",
        error_space="PSNR and RMSE of Reinhard-tone-mapped radiance x/(1+x) (peak 1); rmse_linear on radiance",
        held_out_directions=config.held_out_directions,
        steps=result.steps,
        final_loss=result.final_loss,
        seconds=round(result.train_seconds, 3),
        wall_seconds=round(time.perf_counter() - wall_start, 3),
        maps=facts,
        levels=levels,
        learned_parameters=sum(p.numel() for p in model.parameters()),
        comparison={
            "file": "comparison.png",
            "rows": "levels 1..L",
            "blocks": {
                name: {"light_theta_phi_deg": list(v[:2]), "view_theta_phi_deg": list(v[2:])} for name, v in COMPARISON_PAIRS.items()
            },
            "columns_per_block": ["reference (box of full-res shading)", "box", "toksvig", "learned"],
        },
        files=files,
    )
