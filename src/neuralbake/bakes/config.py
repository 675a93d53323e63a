"""The settings every bake shares, declared once: a bake's config inherits them.

- :class:`BakeConfig`: ``device``.
- :class:`SeededConfig`: + ``seed``, for bakes without a trainer (their randomness is views and sampling).
- :class:`TrainedConfig`: + ``train`` (the trainer's settings; its seed is ``train.seed``). A bake
  with other training defaults re-declares the field with its own ``default_factory`` only; the
  docstring stays here.
- :class:`KernelsConfig`: + ``kernels``, for bakes with fused Triton kernels. What ``auto`` picks
  is each bake's own measurement, said in its command's help (the registry's ``notes``).

The shared fields are keyword-only, so a bake's own fields keep their order, and the command line
lists them after the bake's own (:func:`neuralbake.cli.common.config_flags`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from neuralbake.nn.trainer import TrainerConfig

__all__ = ["BakeConfig", "KernelsConfig", "SeededConfig", "TrainedConfig", "shared_fields"]


@dataclass(kw_only=True)
class BakeConfig:
    """Settings of every bake."""

    device: str = "auto"
    """auto (a CUDA GPU when there is one, else the CPU), cpu, cuda or cuda:N."""


@dataclass(kw_only=True)
class SeededConfig(BakeConfig):
    """Settings of a bake without a trainer."""

    seed: int = 0
    """Seeds everything random the bake does (views, their order, sampling): the same seed and settings give the same result."""


@dataclass(kw_only=True)
class TrainedConfig(BakeConfig):
    """Settings of a bake that trains with :class:`~neuralbake.nn.trainer.Trainer`."""

    train: TrainerConfig = field(default_factory=TrainerConfig)
    """Optimisation: steps, learning rate, precision, loss scaling, seed, cadence of logs, evaluations and checkpoints."""


@dataclass(kw_only=True)
class KernelsConfig(TrainedConfig):
    """Settings of a bake with fused Triton kernels."""

    kernels: Literal["auto", "triton", "torch"] = "auto"
    """triton: the fused Triton kernels (on a CUDA GPU); torch: PyTorch; auto: whichever this bake measured faster on the device."""


def shared_fields() -> frozenset[str]:
    """Names of the fields the bases above declare."""
    return frozenset(f.name for cls in (SeededConfig, KernelsConfig) for f in fields(cls))
