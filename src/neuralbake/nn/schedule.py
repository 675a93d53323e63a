"""Learning-rate schedules, as pure functions of the step (so a resumed run needs no scheduler state)."""

from __future__ import annotations

import math

__all__ = ["SCHEDULES", "learning_rate_at"]

SCHEDULES = ("constant", "cosine")


def learning_rate_at(
    step: int,
    *,
    base: float,
    total_steps: int,
    schedule: str = "cosine",
    warmup_steps: int = 0,
    final_fraction: float = 0.05,
) -> float:
    """Learning rate for 0-based ``step``.

    Linear warm-up from ``base / warmup_steps`` to ``base`` over ``warmup_steps``, then either
    ``constant`` at ``base`` or ``cosine`` decay from ``base`` to ``base * final_fraction`` at the
    last step.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if step < warmup_steps:
        return base * (step + 1) / warmup_steps
    if schedule == "constant":
        return base
    span = max(total_steps - warmup_steps - 1, 1)
    progress = min(max((step - warmup_steps) / span, 0.0), 1.0)
    final = base * final_fraction
    return final + (base - final) * 0.5 * (1.0 + math.cos(math.pi * progress))
