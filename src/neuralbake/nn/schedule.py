"""Learning-rate schedules, as pure functions of the step (so a resumed run needs no scheduler state),
and parameter groups with their own learning-rate scale."""

from __future__ import annotations

import math

import torch

from neuralbake.errors import TrainingError

__all__ = ["SCHEDULES", "decay_start", "learning_rate_at", "parameter_groups"]

SCHEDULES = ("constant", "cosine", "wsd")


def learning_rate_at(
    step: int,
    *,
    base: float,
    total_steps: int,
    schedule: str = "cosine",
    warmup_steps: int = 0,
    final_fraction: float = 0.05,
    decay_fraction: float = 0.2,
) -> float:
    """Learning rate for 0-based ``step``.

    Linear warm-up from ``base / warmup_steps`` to ``base`` over ``warmup_steps``, then either
    ``constant`` at ``base``, ``cosine`` decay from ``base`` to ``base * final_fraction`` at the
    last step, or ``wsd`` (warm-up, stable, decay): ``base`` until the last ``decay_fraction`` of
    the steps (from :func:`decay_start`), then the same cosine decay over those. Two ``wsd`` runs of
    different lengths take the same rate until the shorter one decays, which is what a run's
    half-length twin (:mod:`neuralbake.nn.half_run`) is trained from.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if step < warmup_steps:
        return base * (step + 1) / warmup_steps
    if schedule == "constant":
        return base
    start = warmup_steps if schedule == "cosine" else decay_start(total_steps, warmup_steps, decay_fraction)
    if step < start:
        return base
    span = max(total_steps - start - 1, 1)
    progress = min(max((step - start) / span, 0.0), 1.0)
    final = base * final_fraction
    return final + (base - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def decay_start(total_steps: int, warmup_steps: int, decay_fraction: float) -> int:
    """The step where a ``wsd`` run of ``total_steps`` leaves its peak rate: ``decay_fraction`` of the run before its end,
    not before the warm-up has ended."""
    return max(warmup_steps, round(total_steps * (1.0 - decay_fraction)))


def parameter_groups(master: dict[str, torch.Tensor], lr_scales: dict[str, float]) -> dict[float, list[torch.Tensor]]:
    """Group parameters by learning-rate scale (the longest matching name prefix wins; others 1)."""
    for prefix, scale in lr_scales.items():
        if not any(name.startswith(prefix) for name in master):
            raise TrainingError(f"no parameter name starts with {prefix!r}.", field="lr_scales", fix=f"use a prefix of one of: {', '.join(list(master)[:8])}.")
        if not (scale > 0 and math.isfinite(scale)):
            raise TrainingError(f"the scale for {prefix!r} must be a positive number, got {scale}.", field="lr_scales", fix="use a scale > 0.")
    groups: dict[float, list[torch.Tensor]] = {}
    for name, param in master.items():
        matches = [prefix for prefix in lr_scales if name.startswith(prefix)]
        scale = lr_scales[max(matches, key=len)] if matches else 1.0
        groups.setdefault(scale, []).append(param)
    return groups
