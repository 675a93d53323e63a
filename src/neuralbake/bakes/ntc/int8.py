"""Integer arithmetic for the NTC decoder: int8 activations times the container's int8 weights, int32 sums.

The container stores every decoder layer as int8 codes and one scale (quantisation-aware trained,
:mod:`neuralbake.bakes.ntc.container`); the fp32 decode multiplies the dequantised weights. This
module is the other arithmetic, the one inference hardware runs fastest (RTXNTC's int8 path; the
tensor cores' int8 rate is twice their fp16 rate): each layer's input is quantised to int8 with one
static step per layer, multiplied by the int8 codes with exact integer sums, and rescaled once::

    q   = clamp(floor(x / step_l + 1/2), -127, 127)        (int8; x the layer's input)
    acc = q W_l^T                                          (int32, exact)
    z   = acc (step_l scale_l) + b_l                       (fp32; then the activation, except last)

The steps come from a calibration decode (:func:`calibrate_int8`): fp32 decodes of random texels
of every level, each layer's input step the 99.99th percentile of ``|x|`` over 127 (a step sized for
the few largest inputs wastes the 8 bits on the rest; those few clip). :func:`decode_texels_int8` is the reference the fused kernel
(:class:`neuralbake.kernels.decoders.FusedNTC` with a calibration) is checked against; the bench
``bench/ntc_int8.py`` reports what the arithmetic costs in quality on a real container.

Written here: the int8 scheme is the container's own (its codes and scales), and PyTorch's
quantised operators do not run on every device this project targets (CPU tests, Triton's CUDA).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from neuralbake.bakes.ntc.container import NTCContainer
from neuralbake.bakes.ntc.decode import decode_texels
from neuralbake.bakes.ntc.model import GridTables, sample_features
from neuralbake.nn.activations import activation_fn

__all__ = ["Int8Calibration", "calibrate_int8", "decode_texels_int8", "decoder_forward_int8", "fp16_latents", "int8_factors", "quantize_activations"]

CALIBRATION_TEXELS = 1 << 16
"""Texels decoded (fp32) to set the activation steps."""
CALIBRATION_QUANTILE = 0.9999
"""Each layer's step covers this fraction of its calibration inputs; the rarest, largest ones clip. On the
example crate at 4 bpp (``bench/ntc_int8.py --quantile Q``): the maximum (1.0) gave 33.57 dB, 0.9999 34.44, 0.999 32.45,
against 34.99 dB in fp32."""


@dataclass(frozen=True)
class Int8Calibration:
    """Per decoder layer, the quantisation step of its input (a quantile of ``|input|`` over the calibration texels, / 127)."""

    steps: tuple[float, ...]
    texels: int


def _layer_inputs(container: NTCContainer, features: torch.Tensor) -> list[torch.Tensor]:
    """The input of every decoder layer (fp32 decode): the features, then each hidden layer's activation."""
    act = activation_fn(container.layout.activation, container.layout.leak)
    inputs, out = [], features
    weights = container.weights()
    for index, (weight, bias) in enumerate(zip(weights, container.biases, strict=True)):
        inputs.append(out)
        out = torch.nn.functional.linear(out, weight, bias)
        if index < len(weights) - 1:
            out = act(out)
    return inputs


def _texels(container: NTCContainer, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``count`` random texels, the levels drawn uniformly (small levels count as much as large ones)."""
    sizes = torch.tensor(container.layout.level_sizes, dtype=torch.float64)
    level = torch.randint(0, len(sizes), (count,), generator=generator)
    x = (torch.rand(count, generator=generator, dtype=torch.float64) * sizes[level, 0]).long()
    y = (torch.rand(count, generator=generator, dtype=torch.float64) * sizes[level, 1]).long()
    return level, x, y


def calibrate_int8(container: NTCContainer, *, texels: int = CALIBRATION_TEXELS, seed: int = 0, quantile: float = CALIBRATION_QUANTILE) -> Int8Calibration:
    """Activation steps for :func:`decoder_forward_int8` from fp32 decodes of ``texels`` random texels of every level:
    per layer, the ``quantile`` of its inputs' magnitudes over 127 (larger inputs clip to +-127 steps)."""
    device = container.latents_high.device
    level, x, y = (t.to(device) for t in _texels(container, texels, torch.Generator().manual_seed(seed)))
    tables = GridTables.from_layout(container.layout, device)
    with torch.no_grad():
        features = sample_features(*fp16_latents(container), tables, level, x, y, container.layout.pe_frequencies)
        peaks = []
        for values in _layer_inputs(container, features):
            flat = values.abs().flatten().cpu()
            peak = float(torch.kthvalue(flat, max(1, math.ceil(quantile * flat.numel()))).values)
            peaks.append(peak if peak > 0 else float(flat.max()))  # a mostly-zero input (sparse ReLU): size the step on its largest
    return Int8Calibration(tuple(max(peak, 1e-8) / 127.0 for peak in peaks), texels)


def int8_factors(container: NTCContainer, calibration: Int8Calibration) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 ``[layers]`` each: ``1 / step`` (to quantise the input) and ``step * weight scale`` (to rescale the sums)."""
    device = container.latents_high.device
    steps = torch.tensor(calibration.steps, dtype=torch.float64)
    scales = torch.tensor([float(s) for s in container.scales], dtype=torch.float64)
    if steps.numel() != scales.numel():
        raise ValueError(f"the calibration has {steps.numel()} layers, the decoder {scales.numel()}")
    return (1.0 / steps).to(torch.float32).to(device), (steps * scales).to(torch.float32).to(device)


def quantize_activations(x: torch.Tensor, inverse_step: torch.Tensor) -> torch.Tensor:
    """``clamp(floor(x / step + 1/2), -127, 127)`` (fp32 holding whole numbers), as the kernel rounds."""
    return torch.clamp(torch.floor(x * inverse_step + 0.5), -127.0, 127.0)


def decoder_forward_int8(features: torch.Tensor, container: NTCContainer, calibration: Int8Calibration) -> torch.Tensor:
    """The decoder in int8 arithmetic (module docstring); fp32 ``features`` ``[N, inputs]`` -> ``[N, channels]`` (not clamped).

    The integer sums are exact in fp32 (at most 127 x 127 x 256 < 2^24), so this is the kernel's
    arithmetic up to the order of its fp32 rescale and bias add.
    """
    act = activation_fn(container.layout.activation, container.layout.leak)
    inverse, factor = int8_factors(container, calibration)
    out = features.float()
    count = len(container.weights_int8)
    for index, (codes, bias) in enumerate(zip(container.weights_int8, container.biases, strict=True)):
        q = quantize_activations(out, inverse[index])
        acc = q @ codes.to(torch.float32).t()
        out = acc * factor[index] + bias.float()
        if index < count - 1:
            out = act(out)
    return out


def fp16_latents(container: NTCContainer) -> tuple[torch.Tensor, torch.Tensor]:
    """The latent grids as the int8 kernel fetches them: rounded to fp16 (their codes have at most 8 bits; fp16 keeps them to 2^-11)."""
    return container.latents_high.half().float(), container.latents_low.half().float()


def decode_texels_int8(
    container: NTCContainer, calibration: Int8Calibration, level: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, chunk: int = 1 << 18
) -> torch.Tensor:
    """:func:`~neuralbake.bakes.ntc.decode.decode_texels` in int8 arithmetic (latents as :func:`fp16_latents`) -> float32
    ``[N, channels]`` in [0, 1]."""
    return decode_texels(
        container, level, x, y, chunk=chunk, decoder=lambda features: decoder_forward_int8(features, container, calibration), latents=fp16_latents(container)
    )
