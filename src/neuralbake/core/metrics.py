"""Image-quality metrics shared by every bake's report."""

from __future__ import annotations

import math

import torch

__all__ = ["mse", "psnr"]


def mse(prediction: torch.Tensor, reference: torch.Tensor) -> float:
    """Mean squared error over all elements, computed in float64."""
    if prediction.shape != reference.shape:
        raise ValueError(f"mse: shapes differ, {tuple(prediction.shape)} vs {tuple(reference.shape)}")
    diff = prediction.detach().double() - reference.detach().double()
    return float(torch.mean(diff * diff))


def psnr(prediction: torch.Tensor, reference: torch.Tensor, *, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB, ``10 log10(peak^2 / MSE)``; ``inf`` for identical inputs."""
    error = mse(prediction, reference)
    if error == 0.0:
        return math.inf
    return 10.0 * math.log10(peak * peak / error)
