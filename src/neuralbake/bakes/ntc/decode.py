"""Decoding ``texture.ntc``: any texel of any mip level from the container alone (no trainer, no model object),
filtered samples at any uv and level of detail, its quality against a reference chain, and ``ntc decompress``
(every group and level to PNG or EXR).

Filtered sampling (:func:`sample_filtered`, the reference of the exported shader's ``ntc_<set>_sample``)
decodes texels and blends the decoded values, as RTXNTC does: *bilinear* blends the four texels around
``uv`` in one level, *trilinear* (the default) the bilinear samples of the two levels around ``lod``
(clamped to the chain), and :func:`sample_stochastic` decodes one of those texels instead, chosen
with probability equal to its filter weight by a caller's uniform random number, so that its mean
over random numbers is the filtered value. Texel centres are at ``(i + 0.5) / size``; the wrap mode
is **repeat** (glTF's default sampler; the example crate's), for every level: the texels left of
column 0 are those of column ``width - 1``. :func:`sample_levels` filters plain texel arrays (the
source textures) the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.ntc.container import NTCContainer, open_container
from neuralbake.bakes.ntc.model import GridTables, decoder_forward, sample_features
from neuralbake.bakes.ntc.texture_set import ChannelGroup
from neuralbake.core.device import resolve_device
from neuralbake.core.events import progress_task
from neuralbake.core.metrics import mse, psnr_from_mse
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.files import prepare_output_dir
from neuralbake.io.images import save_exr, save_png
from neuralbake.kernels import resolve_kernels, unsupported_reason
from neuralbake.nn.activations import activation_fn
from neuralbake.render.pictures import display_rgb

__all__ = [
    "FILTERS",
    "TAPS",
    "decode_all_levels",
    "decode_texel",
    "decode_texels",
    "decompress",
    "filter_taps",
    "decode_reason",
    "resolve_decode_kernels",
    "sample_filtered",
    "sample_levels",
    "sample_stochastic",
    "set_quality",
    "stochastic_tap",
]

FILTERS = ("trilinear", "bilinear")
"""Filters of :func:`sample_filtered`: ``trilinear`` (two levels around ``lod``) or ``bilinear`` (the level nearest ``lod``)."""
TAPS = 8
"""Texels :func:`filter_taps` gives per sample: four in the level below ``lod``, four in the level above."""


def decode_texels(
    container: NTCContainer,
    level: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    chunk: int = 1 << 18,
    decoder: Callable[[torch.Tensor], torch.Tensor] | None = None,
    latents: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Decode texels ``(level, x, y)`` (int64 ``[N]``, on the container's device) -> float32 ``[N, channels]`` in [0, 1].

    ``decoder`` (features -> outputs) replaces the fp32 decoder and ``latents`` (high, low) the container's
    grids: another arithmetic on the same features (:func:`neuralbake.bakes.ntc.int8.decode_texels_int8`).
    """
    layout = container.layout
    tables = GridTables.from_layout(layout, container.latents_high.device)
    if decoder is None:
        weights, act = container.weights(), activation_fn(layout.activation, layout.leak)
        decoder = lambda features: decoder_forward(features, weights, container.biases, act)
    high, low = latents if latents is not None else (container.latents_high, container.latents_low)
    outputs = []
    with torch.no_grad():
        for start in range(0, level.numel(), chunk):
            part = slice(start, start + chunk)
            features = sample_features(high, low, tables, level[part], x[part], y[part], layout.pe_frequencies)
            outputs.append(decoder(features).clamp_(0.0, 1.0))
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
    one = lambda v: torch.tensor([v], dtype=torch.int64, device=device)
    return decode_texels(container, one(mip), one(x), one(y))[0].cpu().numpy()


def filter_taps(
    level_sizes: Sequence[tuple[int, int]], uv: torch.Tensor, lod: torch.Tensor, *, filter: str = "trilinear"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The texels a filtered sample blends, and their weights: ``(level, x, y, weight)``, each ``[N, 8]`` (int64, weights float32).

    ``uv`` float ``[N, 2]`` (any values: repeat wrap), ``lod`` float ``[N]`` (clamped to ``[0, levels - 1]``;
    ``bilinear`` rounds it to the nearest level). Taps 0-3 are in the level below ``lod``, 4-7 in the one
    above, each four in the order (x0, y0), (x1, y0), (x0, y1), (x1, y1) with weights
    ``(1 - fx)(1 - fy)``, ``fx (1 - fy)``, ``(1 - fx) fy``, ``fx fy`` times ``1 - t`` (below) or ``t``
    (above). The weights sum to 1; at a whole ``lod`` the four above have weight 0. The exported shader
    computes the same taps in the same order and float32 operations.
    """
    if filter not in FILTERS:
        raise ConfigError(f"unknown filter {filter!r}.", field="filter", fix=f"use one of {', '.join(FILTERS)}.")
    device = uv.device
    uv, lod = uv.to(torch.float32), lod.to(torch.float32)
    sizes = torch.tensor(level_sizes, dtype=torch.int64, device=device)
    last = len(level_sizes) - 1
    level = torch.clamp(lod, 0.0, float(last))
    if filter == "bilinear":
        level = torch.floor(level + 0.5)
    below = torch.floor(level)
    t = level - below
    below = below.to(torch.int64)
    above = torch.clamp(below + 1, max=last)
    levels, xs, ys, weights = [], [], [], []
    for index, blend in ((below, 1.0 - t), (above, t)):
        width, height = sizes[index, 0], sizes[index, 1]
        px = uv[:, 0] * width.to(torch.float32) - 0.5
        py = uv[:, 1] * height.to(torch.float32) - 0.5
        x0, y0 = torch.floor(px), torch.floor(py)
        fx, fy = px - x0, py - y0
        x0, y0 = x0.to(torch.int64), y0.to(torch.int64)
        column = (torch.remainder(x0, width), torch.remainder(x0 + 1, width))
        row = (torch.remainder(y0, height), torch.remainder(y0 + 1, height))
        for (cx, cy), w in zip(((0, 0), (1, 0), (0, 1), (1, 1)), ((1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy)):
            levels.append(index)
            xs.append(column[cx])
            ys.append(row[cy])
            weights.append(w * blend)
    return torch.stack(levels, 1), torch.stack(xs, 1), torch.stack(ys, 1), torch.stack(weights, 1)


def stochastic_tap(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The tap a stochastic sample decodes: int64 ``[N]``, the first ``i`` with ``u < weights[0] + ... + weights[i]``.

    ``weights`` float32 ``[N, 8]`` (:func:`filter_taps`), ``u`` float ``[N]`` uniform in [0, 1): tap ``i`` is
    chosen with probability ``weights[i]``. The running sum is float32, added in tap order as the shader
    adds it; where rounding leaves ``u`` at or above the total, the last tap of positive weight is taken.
    """
    u = u.to(torch.float32)
    chosen = torch.full(u.shape, -1, dtype=torch.int64, device=u.device)
    total = torch.zeros_like(u)
    for i in range(weights.shape[1]):
        total = total + weights[:, i]
        chosen = torch.where((chosen < 0) & (u < total), i, chosen)
    positive = torch.arange(weights.shape[1], device=u.device).expand_as(weights).masked_fill(weights <= 0, -1)
    return torch.where(chosen < 0, positive.amax(dim=1), chosen)


def sample_filtered(container: NTCContainer, uv: torch.Tensor, lod: torch.Tensor, *, filter: str = "trilinear") -> torch.Tensor:
    """Filtered samples of the decoded set: float32 ``[N, channels]``, each the weighted sum of the decoded (clamped) texels of
    :func:`filter_taps` at ``uv`` ``[N, 2]`` and ``lod`` ``[N]`` (on the container's device)."""
    level, x, y, weight = filter_taps(container.layout.level_sizes, uv, lod, filter=filter)
    used = weight.reshape(-1) > 0  # only the taps that count are decoded
    values = torch.zeros(used.numel(), container.layout.channels, device=uv.device)
    values[used] = decode_texels(container, level.reshape(-1)[used], x.reshape(-1)[used], y.reshape(-1)[used])
    return (values.reshape(*weight.shape, -1) * weight[..., None]).sum(dim=1)


def sample_stochastic(container: NTCContainer, uv: torch.Tensor, lod: torch.Tensor, u: torch.Tensor, *, filter: str = "trilinear") -> torch.Tensor:
    """Stochastically filtered samples: float32 ``[N, channels]``, the one decoded texel of :func:`stochastic_tap` per sample
    (``u`` ``[N]`` uniform in [0, 1)); its mean over ``u`` is :func:`sample_filtered`."""
    level, x, y, weight = filter_taps(container.layout.level_sizes, uv, lod, filter=filter)
    pick = stochastic_tap(weight, u)[:, None]
    return decode_texels(container, level.gather(1, pick)[:, 0], x.gather(1, pick)[:, 0], y.gather(1, pick)[:, 0])


def sample_levels(levels: Sequence[np.ndarray | torch.Tensor], uv: torch.Tensor, lod: torch.Tensor, *, filter: str = "trilinear") -> torch.Tensor:
    """:func:`sample_filtered` over plain texel arrays: ``levels`` ``[H_l, W_l, C]`` (a mip chain, e.g. the source textures'),
    ``uv`` ``[N, 2]``, ``lod`` ``[N]`` -> float32 ``[N, C]``, the same taps and weights."""
    tensors = [torch.as_tensor(level, dtype=torch.float32, device=uv.device) for level in levels]
    level, x, y, weight = filter_taps([(int(t.shape[1]), int(t.shape[0])) for t in tensors], uv, lod, filter=filter)
    flat = torch.cat([t.reshape(-1, t.shape[2]) for t in tensors])
    starts = torch.tensor([0, *np.cumsum([t.shape[0] * t.shape[1] for t in tensors])[:-1].tolist()], dtype=torch.int64, device=uv.device)
    widths = torch.tensor([t.shape[1] for t in tensors], dtype=torch.int64, device=uv.device)
    texels = flat[starts[level] + y * widths[level] + x]  # [N, 8, C]
    return (texels * weight[..., None]).sum(dim=1)


def decode_reason(container: NTCContainer) -> str | None:
    """Why the fused kernels cannot decode ``container`` (:func:`~neuralbake.kernels.unsupported_reason`), or None."""
    layout = container.layout
    return unsupported_reason(layout.layer_widths, [layout.activation, "none"])


def resolve_decode_kernels(container: NTCContainer, kernels: str) -> str:
    """``triton`` or ``torch`` for decoding ``container`` with the ``--kernels`` setting (see :mod:`neuralbake.kernels`)."""
    return resolve_kernels(kernels, container.latents_high.device, decode_reason(container), dtype=torch.float32)  # the decode runs in fp32


def decode_all_levels(
    container: NTCContainer, *, chunk: int = 1 << 18, progress: Callable[[int], None] | None = None, kernels: str = "torch"
) -> list[np.ndarray]:
    """Decode every texel of every mip level -> a list of float32 ``[H_l, W_l, channels]``.

    ``progress`` (if given) is called with the texels decoded after each level. ``kernels``
    (auto, triton or torch) picks the fused Triton decode (fp32, the reference's precision) or
    PyTorch.
    """
    device = container.latents_high.device
    fused = None
    if resolve_decode_kernels(container, kernels) == "triton":
        from neuralbake.kernels.decoders import FusedNTC  # imports Triton

        fused = FusedNTC(container, torch.float32)
    levels = []
    for index, (width, height) in enumerate(container.layout.level_sizes):
        if fused is not None:
            levels.append(fused.level(index).cpu().numpy())
        else:
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

    def db(error: float, count: int) -> float:
        value = psnr_from_mse(error, count)  # a lossless round trip's float rounding is inf (exact), not 170 dB
        return value if math.isinf(value) else round(value, 3)

    def errors(channel_slice: slice) -> tuple[list[tuple[float, int]], tuple[float, int]]:
        per_level = [mse(torch.from_numpy(out[..., channel_slice]), torch.from_numpy(ref[..., channel_slice])) for out, ref in zip(levels, reference)]
        counts = [ref[..., channel_slice].size for ref in reference]
        return list(zip(per_level, counts)), (float(np.dot(per_level, counts) / sum(counts)), sum(counts))

    per_level, all_levels = errors(slice(None))
    result: dict[str, Any] = {
        "overall_db": db(*per_level[0]),
        "overall_all_mips_db": db(*all_levels),
        "per_mip_db": [db(*e) for e in per_level],
        "groups": {},
    }
    start = 0
    for group in groups:
        stop = start + len(group.channels)
        group_levels, group_all = errors(slice(start, stop))
        result["groups"][group.name] = {"mip0_db": db(*group_levels[0]), "all_mips_db": db(*group_all), "per_mip_db": [db(*e) for e in group_levels]}
        start = stop
    return result



def decompress(
    folder: str | Path, out_dir: str | Path, *, image_format: str = "png", device: str = "auto", progress: bool = False, kernels: str = "auto"
) -> list[Path]:
    """Decode every group at every mip level to ``out_dir/<group>_mip<k>.png`` (8-bit RGB; RGBA for a four-channel colour
    group) or ``.exr`` (float32, one channel per stored channel)."""
    if image_format not in ("png", "exr"):
        raise ConfigError(f"unknown image format {image_format!r}.", field="format", fix="use png or exr.")
    container = open_container(folder).to(resolve_device(device))
    resolve_decode_kernels(container, kernels)  # a --kernels triton that cannot run fails before any file is written
    out = prepare_output_dir(out_dir)
    total = sum(width * height for width, height in container.layout.level_sizes)
    with progress_task("decoding", total, enabled=progress, unit="texels") as advance:
        levels = decode_all_levels(container, progress=advance, kernels=kernels)
    written = []
    for index, level in enumerate(levels):
        start = 0
        for group in container.layout.groups:
            stop = start + len(group.channels)
            part = level[..., start:stop]
            path = out / f"{group.name}_mip{index}.{image_format}"
            if image_format == "png":  # an RGBA colour group (a see-through base colour) keeps its alpha
                save_png(path, part if group.kind == "color" and len(group.channels) == 4 else display_rgb(part, kind=group.kind))
            else:
                save_exr(path, part, channels=group.channels)
            written.append(path)
            start = stop
    return written
