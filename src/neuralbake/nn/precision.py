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
    """Loss scale bookkeeping on the training device (see the module docstring).

    The scale, the count of clean steps and the overflow count are device tensors updated without
    host synchronisation, so a whole training step can be captured in a CUDA graph.
    """

    def __init__(
        self,
        mode: str = "dynamic",
        init_scale: float = 4096.0,
        *,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 500,
        device: torch.device | str = "cpu",
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
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.scale_tensor = torch.tensor(1.0 if mode == "none" else float(init_scale), device=device)
        self.clean_steps_tensor = torch.zeros((), dtype=torch.int32, device=device)
        self.overflows_tensor = torch.zeros((), device=device)

    @property
    def scale(self) -> float:
        """The current scale (reads the device: a synchronisation point)."""
        return float(self.scale_tensor)

    @property
    def overflows(self) -> int:
        """Steps that overflowed so far."""
        return int(self.overflows_tensor)

    def unscale_(self, grads: list[torch.Tensor], found_inf: torch.Tensor | None = None) -> torch.Tensor:
        """Divide fp32 gradients by the scale in place; return a 0-d tensor, 1.0 if any is inf/NaN."""
        if found_inf is None:
            found_inf = torch.zeros((), device=self.scale_tensor.device)
        else:
            found_inf.zero_()
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, self.scale_tensor.reciprocal())
        return found_inf

    def update(self, found_inf: torch.Tensor | bool) -> None:
        """After a step: back off on overflow (dynamic), grow after ``growth_interval`` clean steps."""
        if not isinstance(found_inf, torch.Tensor):
            found_inf = torch.tensor(float(found_inf), device=self.scale_tensor.device)
        self.overflows_tensor.add_(found_inf)
        if self.mode == "dynamic":
            torch._amp_update_scale_(
                self.scale_tensor, self.clean_steps_tensor, found_inf, self.growth_factor, self.backoff_factor, self.growth_interval
            )

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "scale": self.scale, "clean_steps": int(self.clean_steps_tensor), "overflows": self.overflows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale_tensor.fill_(float(state["scale"]))
        self.clean_steps_tensor.fill_(int(state["clean_steps"]))
        self.overflows_tensor.fill_(float(state["overflows"]))
