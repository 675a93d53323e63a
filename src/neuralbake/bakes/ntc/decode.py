"""Decoding ``texture.ntc``: any texel of any mip level from the container alone (no trainer, no model object),
its quality against a reference chain, and ``ntc decompress`` (every group and level to PNG or EXR).
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

__all__ = ["decode_all_levels", "decode_texel", "decode_texels", "decompress", "resolve_decode_kernels", "set_quality"]


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


def resolve_decode_kernels(container: NTCContainer, kernels: str) -> str:
    """``triton`` or ``torch`` for decoding ``container`` with the ``--kernels`` setting (see :mod:`neuralbake.kernels`)."""
    layout = container.layout
    reason = unsupported_reason(layout.layer_widths, [layout.activation, "none"])
    return resolve_kernels(kernels, container.latents_high.device, reason, dtype=torch.float32)  # the decode runs in fp32


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
    """Decode every group at every mip level to ``out_dir/<group>_mip<k>.png`` (8-bit RGB) or ``.exr`` (float32, one channel per stored channel)."""
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
            if image_format == "png":
                save_png(path, display_rgb(part, kind=group.kind))
            else:
                save_exr(path, part, channels=group.channels)
            written.append(path)
            start = stop
    return written
