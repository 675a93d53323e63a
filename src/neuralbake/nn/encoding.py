"""Frequency (positional) encoding of low-dimensional coordinates.

Each input coordinate ``x`` becomes ``2 * frequencies`` values,
``sin(2^k * pi * x), cos(2^k * pi * x)`` for ``k = 0 .. frequencies - 1``, grouped per input in
that order: ``[sin(pi u), cos(pi u), sin(2 pi u), cos(2 pi u), ..., sin(pi v), cos(pi v), ...]``.
So ``inputs`` coordinates encode to ``inputs * 2 * frequencies`` network inputs. The default of
3 frequencies turns a UV pair into 2 x 6 = 12 inputs, the "Input Neurons 2 * 6" of the RTX Neural
Shaders simple-training sample. ``k = 0`` has a half period over ``[0, 1]``, so opposite texture
edges are not forced to match.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["FrequencyEncoding", "frequency_encode"]


def frequency_encode(x: torch.Tensor, frequencies: int) -> torch.Tensor:
    """Encode ``x`` of shape ``[..., inputs]`` to ``[..., inputs * 2 * frequencies]``.

    Computed in ``x``'s dtype (callers pass float32 or float64 coordinates; casting to a
    training precision happens after encoding, so the phases stay accurate). The phase is taken in
    half-turns, ``2^k x`` (exact: a power of two), and reduced exactly to [0, 2) before it is multiplied
    by pi, so a high octave is as accurate as a low one (``sin(2^k pi x)`` in float32 loses the
    phase's low bits: 8e-4 off at ``k = 11``), as the fused kernels compute it. The reduction's floor
    has no gradient, so the gradient is ``2^k pi`` times the cosine, as before.
    """
    if frequencies < 1:
        raise ValueError(f"frequencies must be >= 1, got {frequencies}")
    turns = x[..., :, None] * torch.exp2(torch.arange(frequencies, dtype=x.dtype, device=x.device))  # [..., inputs, frequencies]
    phases = math.pi * (turns - 2.0 * torch.floor(0.5 * turns))
    encoded = torch.stack((torch.sin(phases), torch.cos(phases)), dim=-1)  # [..., inputs, frequencies, 2]
    return encoded.flatten(start_dim=-3)


class FrequencyEncoding(nn.Module):
    """Module form of :func:`frequency_encode` (no parameters)."""

    def __init__(self, inputs: int, frequencies: int = 3) -> None:
        super().__init__()
        if inputs < 1:
            raise ValueError(f"inputs must be >= 1, got {inputs}")
        if frequencies < 1:
            raise ValueError(f"frequencies must be >= 1, got {frequencies}")
        self.inputs = inputs
        self.frequencies = frequencies

    @property
    def output_dim(self) -> int:
        """Number of encoded values: ``inputs * 2 * frequencies``."""
        return self.inputs * 2 * self.frequencies

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.inputs:
            raise ValueError(f"FrequencyEncoding expects {self.inputs} coordinates in the last dimension, got shape {tuple(x.shape)}")
        return frequency_encode(x, self.frequencies)

    def extra_repr(self) -> str:
        return f"inputs={self.inputs}, frequencies={self.frequencies}, output_dim={self.output_dim}"
