"""What the trainer trains on: a batch, the sampler that draws them, and what a sampler's batches are for a fused step
that draws them itself (:class:`TexelDraws`). The trainer's module re-exports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

__all__ = ["Batch", "Sampler", "TexelDraws"]


@dataclass
class Batch:
    """One training batch: network inputs and the reference values they should produce."""

    inputs: torch.Tensor
    """Network inputs, ``[samples, input_dim]``."""
    targets: torch.Tensor
    """Reference outputs, ``[samples, output_dim]`` (fp32)."""


class Sampler(Protocol):
    """Draws training batches from the reference.

    A sampler whose batches are uniform random uv and nearest texels of an image may also say so
    (``texel_draws() -> TexelDraws``): a fused training step that can draw such batches itself then
    does, and :meth:`sample` is not called (see :class:`TexelDraws`).
    """

    batch_size: int
    """Samples per batch (counted into ``samples_seen``)."""

    def sample(self, generator: torch.Generator) -> Batch: ...


@dataclass(frozen=True)
class TexelDraws:
    """What a sampler's batches are, for a fused step that draws them in its kernel: ``batch_size`` rows of uniform
    random ``(u, v)`` in [0, 1)^2 (the inputs) and the nearest texel of ``image`` (``[H, W, C]`` fp32, on the training
    device) at ``(u, v)`` mapped by ``transform`` (the targets): ``identity``, ``flip`` (u and v swapped) or ``zoom``
    (``uv * 0.5 + 0.25``), as :func:`neuralbake.bakes.neural_texture.transform_uv` and ``texel_lookup`` do.

    The kernel draws from its own counter-based generator (Philox keyed by the run's seed, one counter per step), so
    its batches follow the same distribution as the sampler's but are not the same numbers.
    """

    image: torch.Tensor
    transform: str
    batch_size: int

    TRANSFORMS = ("identity", "flip", "zoom")
