"""Mixed-precision training pieces: compute dtypes and loss scaling.

The trainer keeps fp32 *master* weights and fp32 Adam moments, and each step runs forward and
backward on fp16 (or bf16) copies of the weights, as the RTX Neural Shaders training shaders do.
fp16 gradients of a mean loss over a thousand samples fall below fp16's smallest normal number
(6e-5), so the loss is multiplied by a *loss scale* before backward and the fp32 gradients are
divided by it again before the optimiser sees them. :class:`LossScaler` owns that scale:

* ``static``: a fixed scale; an overflowing step is skipped.
* ``dynamic``: an overflowing step (any inf/NaN gradient) is skipped and the scale is multiplied
  by ``backoff_factor``; after ``growth_interval`` clean steps in a row it is multiplied by
  ``growth_factor`` again, so it settles just under the overflow threshold.
* ``none``: scale 1; an overflowing step is still skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["LOSS_SCALE_MODES", "PRECISIONS", "LossScaler", "compute_dtype"]

PRECISIONS: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
LOSS_SCALE_MODES = ("dynamic", "static", "none")


def compute_dtype(precision: str) -> torch.dtype:
    """The torch dtype for ``fp32``, ``fp16`` or ``bf16``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


class LossScaler:
    """Loss scale bookkeeping (see the module docstring)."""

    def __init__(
        self,
        mode: str = "dynamic",
        init_scale: float = 4096.0,
        *,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 500,
        min_scale: float = 2.0**-14,
        max_scale: float = 2.0**24,
    ) -> None:
        if mode not in LOSS_SCALE_MODES:
            raise ValueError(f"loss scale mode must be one of {LOSS_SCALE_MODES}, got {mode!r}")
        if init_scale <= 0:
            raise ValueError(f"initial loss scale must be > 0, got {init_scale}")
        if not (0.0 < backoff_factor < 1.0 < growth_factor):
            raise ValueError("need 0 < backoff_factor < 1 < growth_factor")
        if growth_interval < 1:
            raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")
        self.mode = mode
        self.scale = 1.0 if mode == "none" else float(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.min_scale = min_scale
        self.max_scale = max_scale
        self.clean_steps = 0
        self.overflows = 0

    def unscale_(self, grads: Iterable[torch.Tensor]) -> bool:
        """Divide fp32 gradients by the scale in place; return True if any is inf or NaN."""
        grads = [g for g in grads if g is not None]
        if not grads:
            return False
        inverse = 1.0 / self.scale
        torch._foreach_mul_(grads, inverse)
        norms = torch._foreach_norm(grads, ord=float("inf"))
        return not bool(torch.isfinite(torch.stack(norms)).all())

    def update(self, overflow: bool) -> None:
        """Adjust the scale after a step: back off on overflow, grow after a clean run."""
        if overflow:
            self.overflows += 1
            self.clean_steps = 0
            if self.mode == "dynamic":
                self.scale = max(self.scale * self.backoff_factor, self.min_scale)
            return
        self.clean_steps += 1
        if self.mode == "dynamic" and self.clean_steps >= self.growth_interval:
            self.scale = min(self.scale * self.growth_factor, self.max_scale)
            self.clean_steps = 0

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "scale": self.scale, "clean_steps": self.clean_steps, "overflows": self.overflows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale = float(state["scale"])
        self.clean_steps = int(state["clean_steps"])
        self.overflows = int(state["overflows"])
