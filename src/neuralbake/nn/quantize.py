"""Quantisers for training through, and storing, low-bit values: uniform codes on [0, 1] (hard,
straight-through and soft/annealed), fake quantisation of latents on [-1, 1] (additive noise or
straight-through rounding, the NTC recipe) and of int8 weights, and the per-channel affine uint8
storage of latent textures. The training-time ("fake") quantisers keep dtype and device and give a
gradient (straight-through or smooth); the storage ones return integer codes plus what decodes
them. Every bake that quantises imports from here, so one rounding rule holds per format.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "FAKE_QUANTIZE_MODES",
    "codes_to_latents",
    "dequantize_latents_affine_u8",
    "fake_quantize_int8",
    "fake_quantize_latents",
    "int8_weight_scale",
    "latent_codes",
    "pack_codes",
    "quantize_hard",
    "quantize_int8",
    "quantize_latents_affine_u8",
    "quantize_soft",
    "quantize_ste",
    "unpack_codes",
]

FAKE_QUANTIZE_MODES = ("none", "noise", "round")
"""Modes of :func:`fake_quantize_latents`."""


# -- uniform codes on [0, 1] --------------------------------------------------------------------


def quantize_hard(x: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """Nearest ``bits``-bit code of ``x`` clamped to [0, 1], as a float ``k / (2^bits - 1)``.

    ``x``: float tensor of any shape; returns the same shape and dtype (zero gradient almost everywhere).
    """
    levels = float(2**bits - 1)
    return torch.round(torch.clamp(x, 0.0, 1.0) * levels) / levels


def quantize_ste(x: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """Straight-through estimator: the forward pass is :func:`quantize_hard`, the backward pass the
    identity (a biased gradient by design; it is the one the rounding would have without steps).

    ``x``: float tensor of any shape; returns the same shape and dtype.
    """
    return x + (quantize_hard(x, bits) - x).detach()


def quantize_soft(x: torch.Tensor, bits: int = 8, temperature: float = 20.0) -> torch.Tensor:
    """Soft quantiser: between codes ``n`` and ``n + 1`` (in units of one code) the value follows
    ``n + 1/2 + tanh(T (f - 1/2)) / (2 tanh(T / 2))`` with ``f`` the fraction past ``n``.

    Continuous, exact at the codes, differentiable everywhere (float64-gradcheckable); the identity
    as ``T -> 0`` and hard rounding as ``T -> inf``. ``x`` (float, any shape) is clamped to [0, 1]
    first; returns the same shape and dtype.
    """
    levels = float(2**bits - 1)
    y = torch.clamp(x, 0.0, 1.0) * levels
    n = torch.floor(y.detach())
    f = y - n
    t = float(temperature)
    step = 0.5 + torch.tanh(t * (f - 0.5)) / (2.0 * math.tanh(t / 2.0))
    return (n + step) / levels


# -- latents on [-1, 1] (neural texture compression) -------------------------------------------


def fake_quantize_latents(latents: torch.Tensor, bits: int, mode: str, *, noise: torch.Tensor | None = None) -> torch.Tensor:
    """Training-time quantisation of latents: clamped to [-1, 1], then ``2^bits`` uniform levels.

    ``mode``: ``none`` (clamp only), ``noise`` (add ``noise`` * step, with ``noise`` uniform in
    [-0.5, 0.5); drawn here when not given), ``round`` (hard rounding, straight-through gradient).
    ``latents``: float tensor of any shape; returns the same shape and dtype. The stored codes are
    :func:`latent_codes`.
    """
    clamped = latents.clamp(-1.0, 1.0)
    step = 2.0 / (2**bits - 1)
    if mode == "none":
        return clamped
    if mode == "noise":
        if noise is None:
            noise = torch.rand_like(clamped) - 0.5
        return clamped + noise * step
    if mode == "round":
        rounded = torch.round((clamped + 1.0) / step) * step - 1.0
        return clamped + (rounded - clamped).detach()
    raise ValueError(f"fake_quantize_latents: unknown mode {mode!r}; use one of {', '.join(FAKE_QUANTIZE_MODES)}")


def latent_codes(latents: torch.Tensor, bits: int) -> torch.Tensor:
    """Integer codes ``0 .. 2^bits - 1`` (int64, same shape) of float latents clamped to [-1, 1] (what is stored)."""
    step = 2.0 / (2**bits - 1)
    return torch.round((latents.detach().float().clamp(-1.0, 1.0) + 1.0) / step).to(torch.int64)


def codes_to_latents(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Float32 latents (same shape) of integer codes: the inverse of :func:`latent_codes` on the quantisation grid."""
    step = 2.0 / (2**bits - 1)
    return codes.to(torch.float32) * step - 1.0


def pack_codes(codes: np.ndarray, bits: int) -> bytes:
    """Integer codes (any shape, ``0 .. 2^bits - 1``) bit-packed in order: code ``i`` takes bits ``i * bits`` to
    ``(i + 1) * bits - 1`` of the stream, least significant first (bit ``b`` of the stream is bit ``b % 8`` of
    byte ``b // 8``); the last byte is zero-padded. How NTC containers (and their shader buffers) store latents."""
    flat = np.asarray(codes).reshape(-1).astype(np.uint16)
    planes = ((flat[:, None] >> np.arange(bits, dtype=np.uint16)) & 1).astype(np.uint8)
    return np.packbits(planes.reshape(-1), bitorder="little").tobytes()


def unpack_codes(data: bytes, count: int, bits: int) -> np.ndarray:
    """The first ``count`` codes of a :func:`pack_codes` stream: int64 ``[count]``."""
    planes = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")[: count * bits].reshape(count, bits)
    return (planes.astype(np.int64) << np.arange(bits, dtype=np.int64)).sum(axis=1)


# -- int8 weights -------------------------------------------------------------------------------


def int8_weight_scale(weight: torch.Tensor) -> torch.Tensor:
    """Per-tensor symmetric int8 scale ``max|w| / 127`` (1 for an all-zero tensor), a 0-d tensor of ``weight``'s dtype."""
    peak = weight.detach().abs().max()
    return torch.where(peak > 0, peak / 127.0, torch.ones_like(peak))


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stored int8 weights: ``(codes int8 [same shape], scale 0-d)`` with ``weight ~= codes * scale``."""
    scale = int8_weight_scale(weight)
    return torch.clamp(torch.round(weight / scale), -127, 127).to(torch.int8), scale


def fake_quantize_int8(weight: torch.Tensor) -> torch.Tensor:
    """Weights rounded to int8 with a per-tensor symmetric scale ``max|w| / 127``; straight-through gradient.

    ``weight``: float tensor of any shape; returns the same shape and dtype.
    """
    scale = int8_weight_scale(weight)
    quantized = torch.clamp(torch.round(weight / scale), -127, 127) * scale
    return weight + (quantized - weight).detach()


# -- latent textures, per-channel affine uint8 (neural materials) --------------------------------


def quantize_latents_affine_u8(latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """8-bit storage of a latent texture with a per-channel affine map.

    Parameters
    ----------
    latent : torch.Tensor
        Float ``[H, W, C]``.

    Returns
    -------
    tuple of torch.Tensor
        ``(codes uint8 [H, W, C], scale [C], offset [C])`` with ``latent ~= codes * scale + offset``;
        the error is at most ``scale / 2`` per channel.
    """
    low = latent.amin(dim=(0, 1))
    high = latent.amax(dim=(0, 1))
    scale = torch.clamp((high - low) / 255.0, min=1e-12)
    codes = torch.round((latent - low) / scale).clamp(0, 255).to(torch.uint8)
    return codes, scale, low


def dequantize_latents_affine_u8(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Float32 latents ``[H, W, C]`` of :func:`quantize_latents_affine_u8`'s ``codes`` (uint8 ``[H, W, C]``), ``scale`` and ``offset`` (``[C]``)."""
    return codes.float() * scale + offset
