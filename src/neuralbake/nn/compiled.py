"""A :class:`~neuralbake.nn.trainer.ForwardBackward` whose forward and backward TorchInductor compiles.

Some steps are neither one big network nor bound by host launches: NTC's graphed step ran about
330 small kernels on the GPU (latent gathers, int8 and latent fake quantisation, cell maths, the
encoding, the MLP, their backward and the latents' scattered gradients), each a few microseconds,
so even replayed as a CUDA graph it was bound by the kernels' own start-up. Inductor fuses the
elementwise work, the gathers and the scatter-adds into a few generated Triton kernels; the
trainer then captures them in its CUDA graph like any other step. Writing that fusion by hand
(one NTC training kernel) would duplicate what the compiler derives from the model's own code, and
keep a second copy of the model to maintain.

Compiling costs tens of seconds once per model shape and quantisation mode; Inductor's FX-graph
and Triton caches (``TORCHINDUCTOR_CACHE_DIR``, by default under the system's temporary folder, and
``~/.triton/cache``) keep it for later runs on the same machine.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch
from torch import nn

from neuralbake.errors import TrainingError
from neuralbake.nn.trainer import AutogradForwardBackward, Batch

__all__ = ["CompiledForwardBackward"]


class CompiledForwardBackward:
    """Loss and gradients of ``loss_fn(model(inputs), targets)``, with the forward and backward compiled.

    The same contract as :class:`~neuralbake.nn.trainer.AutogradForwardBackward` (its reference);
    ``capturable``: the compiled code syncs nothing with the host, so the trainer graphs it. The
    model is compiled whole (``fullgraph``): a graph break would hide unfused eager work, so one
    fails at the first step instead. Attributes the forward reads (NTC's ``quant_mode``) are guarded:
    changing one compiles the other variant once.

    ``fall_back(why)``: where given, a step that fails to compile (no working compiler or Triton
    here; each variant compiles on its first call, which is a warm-up step outside the trainer's
    CUDA graph) is reported through it once, and this and every later step run the autograd
    reference; or it raises its own error, for a run that insisted on the compiled path. Without
    it the compiler's error stands.
    """

    capturable = True

    def __init__(self, model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                 fall_back: Callable[[str], None] | None = None) -> None:
        self.model = model
        self._own = dict(model.named_parameters())
        self._reference = AutogradForwardBackward(model, loss_fn)
        self._fall_back = fall_back
        self._state = "untried"  # then "compiled", or "eager" for good after a failed compile

        def loss_of(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return loss_fn(model(inputs).float(), targets)

        # Dynamo keeps compiled variants on the function's code object, at most 8 a process, and every instance's
        # loss_of shares one: a sweep of five rates (two variants each) would hit the limit. A code object of its own
        # per instance keeps each step's variants apart.
        own = types.FunctionType(loss_of.__code__.replace(), loss_of.__globals__, loss_of.__name__, loss_of.__defaults__, loss_of.__closure__)
        self._loss = torch.compile(own, fullgraph=True, dynamic=False)

    @property
    def fell_back(self) -> bool:
        """True once a failed compile handed the steps to the autograd reference."""
        return self._state == "eager"

    def __call__(self, params: dict[str, torch.Tensor], batch: Batch, loss_scale: float | torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if params.keys() != self._own.keys() or any(params[k] is not v for k, v in self._own.items()):
            raise TrainingError("the compiled step trains the model's own fp32 weights; this run computes in another precision.",
                                field="precision", fix="train in fp32, or use --kernels torch.")
        if self._state == "eager":
            return self._reference(params, batch, loss_scale)
        if self._fall_back is None:
            return self._compiled(params, batch, loss_scale)
        try:  # every call: a later phase's variant (another quant_mode) compiles on its own first call
            result = self._compiled(params, batch, loss_scale)
        except torch.cuda.OutOfMemoryError:
            raise  # not the compiler's failure: the reference would run out of memory too
        except Exception as exc:  # noqa: BLE001  (whatever stops the compiler here, the reference computes the same step)
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise  # compiles happen in the trainer's warm-up, outside capture: this is not one
            self._state = "eager"
            first_line = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            self._fall_back(f"{type(exc).__name__}: {first_line}")
            return self._reference(params, batch, loss_scale)
        self._state = "compiled"
        return result

    def _compiled(self, params: dict[str, torch.Tensor], batch: Batch, loss_scale: float | torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        loss = self._loss(batch.inputs, batch.targets)
        grads = torch.autograd.grad(loss * loss_scale, list(params.values()), allow_unused=True)
        return loss.detach(), [torch.zeros_like(p) if g is None else g for p, g in zip(params.values(), grads)]
