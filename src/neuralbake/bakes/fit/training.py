"""How the fit trains on the shared :class:`~neuralbake.nn.trainer.Trainer`: a "batch" is a set of
training views (their indices), drawn one epoch at a time -- every epoch one pass over the view
pool in a fresh seeded random order -- and the loss of a view is computed over its hit pixels,
whose count varies from view to view; so the fit brings its own forward/backward.

The view order and the soft quantiser's temperature follow the step. The step is the sampler's
own count, set from the Trainer's ``start`` event (the step it starts or resumes at), so a
resumed fit draws the same views at the same temperature as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from neuralbake.bakes.fit.model import LodAppearance, view_loss
from neuralbake.bakes.fit.views import View
from neuralbake.nn.trainer import Batch

__all__ = ["ViewBatch", "ViewForwardBackward", "ViewOrderSampler", "soft_temperature_at"]


@dataclass
class ViewBatch(Batch):
    """``inputs``: the training views' indices (int64, ``[views_per_step]``); ``targets`` unused
    (each view holds its reference)."""

    step: int = 0
    """The 0-based step this batch is for."""


class ViewOrderSampler:
    """The training views of each step: epochs of one pass over ``views`` in a seeded random order.

    Also an event sink: the Trainer's ``start`` event sets the step (0, or the step a resumed run
    continues from); each :meth:`sample` advances it by one.
    """

    def __init__(self, views: int, views_per_step: int, seed: int) -> None:
        self.views = views
        self.batch_size = views_per_step
        self.steps_per_epoch = math.ceil(views / views_per_step)
        self.seed = seed
        self.step = 0
        self._generator = torch.Generator()
        self._epoch = -1
        self._order: list[int] = []

    def order(self, epoch: int) -> list[int]:
        """The view order of 0-based ``epoch`` (the epoch-th permutation of one generator seeded with ``seed``)."""
        if epoch < self._epoch:
            self._epoch = -1
        if self._epoch < 0:
            self._generator.manual_seed(self.seed)
        while self._epoch < epoch:
            self._order = torch.randperm(self.views, generator=self._generator).tolist()
            self._epoch += 1
        return self._order

    def sample(self, generator: torch.Generator) -> ViewBatch:
        epoch, k = divmod(self.step, self.steps_per_epoch)
        chunk = self.order(epoch)[k * self.batch_size : (k + 1) * self.batch_size]
        batch = ViewBatch(inputs=torch.tensor(chunk, dtype=torch.int64), targets=torch.empty(0), step=self.step)
        self.step += 1
        return batch

    def write(self, event: dict[str, Any]) -> None:
        if event.get("event") == "start":
            self.step = int(event["step"])

    def close(self) -> None:
        pass


def soft_temperature_at(step: int, total_steps: int, temperature: tuple[float, float]) -> float:
    """The soft quantiser's sharpness at ``step``: geometric from ``temperature[0]`` to ``temperature[1]``."""
    start, end = temperature
    return start * (end / start) ** (step / max(total_steps - 1, 1))


class ViewForwardBackward:
    """The fit's :class:`~neuralbake.nn.trainer.ForwardBackward`: the mean of the batch's view
    losses (fp32, the model's own parameters) and its gradients by autograd."""

    def __init__(self, model: LodAppearance, views: list[View], temperature: Callable[[int], float]) -> None:
        self.model = model
        self.views = views
        self.temperature = temperature

    def __call__(self, params: dict[str, torch.Tensor], batch: Batch, loss_scale: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        assert isinstance(batch, ViewBatch)
        self.model.temperature = self.temperature(batch.step)
        chunk = batch.inputs.tolist()
        loss = sum(view_loss(self.model, self.views[i]) for i in chunk) / len(chunk)
        grads = torch.autograd.grad(loss * loss_scale, list(params.values()), allow_unused=True)
        return loss.detach(), [torch.zeros_like(p) if g is None else g for p, g in zip(params.values(), grads)]
