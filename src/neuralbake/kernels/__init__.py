"""Fused GPU kernels for the tiny networks, and the choice between them and the PyTorch path.

``--kernels auto|triton|torch`` on the bakes resolves here (:func:`resolve_kernels`): ``auto``
takes the Triton kernels on a CUDA device when Triton is installed and the network's shape is
supported (:func:`unsupported_reason`), and PyTorch otherwise; ``triton`` insists (an error says
why it cannot run); ``torch`` is the reference path. On a machine without a GPU the kernels run
only under Triton's interpreter (``TRITON_INTERPRET=1``, set before Python starts), which the tests
use: slow, but the same kernel code.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence

import torch

from neuralbake.errors import ConfigError
from neuralbake.nn.mlp import MLP, register_mlp_kernels

__all__ = [
    "ACTIVATION_CODES",
    "KERNEL_MODES",
    "MAX_LAYERS",
    "MAX_WIDTH",
    "interpreting",
    "kernel_choice",
    "resolve_kernels",
    "tried_kernels",
    "triton_installed",
    "try_kernels",
    "unsupported_reason",
]

KERNEL_MODES = ("auto", "triton", "torch")
ACTIVATION_CODES = {"none": 0, "relu": 1, "leaky_relu": 2, "tanh": 3, "exp": 4, "sigmoid": 5, "clamped_gelu": 6}
"""Activation codes (compile-time constants of the kernels), names as in :mod:`neuralbake.nn.activations`."""
TRAINABLE_ACTIVATIONS = ("none", "relu", "leaky_relu", "tanh", "exp", "sigmoid")
"""Activations whose derivative follows from their output (the training kernel keeps outputs only)."""
LOSS_CODES = {"mse": 0, "l1": 1, "relative_l1": 2, "upstream": 3}
DIRECTION_CODES = {"wi": 0, "wo": 1, "half": 2}
MAX_WIDTH = 128
"""Widest hidden layer (and input/output) the fused kernels keep on chip."""
MAX_LAYERS = 8
"""Most linear layers the fused kernels run."""


def triton_installed() -> bool:
    """Whether the ``triton`` package can be imported (CUDA builds of PyTorch bring it)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def unsupported_reason(widths: Sequence[int], activations: Sequence[str], *, training: bool = False) -> str | None:
    """Why the fused kernels cannot run a network of these layer ``widths`` (inputs, hidden..., outputs), or None."""
    linear = len(widths) - 1
    if linear < 2:
        return f"the network has {linear} linear layer(s); the kernels need an input and an output layer (2 to {MAX_LAYERS})"
    if linear > MAX_LAYERS:
        return f"the network has {linear} linear layers; the kernels run at most {MAX_LAYERS}"
    if max(widths) > MAX_WIDTH:
        return f"a layer is {max(widths)} wide; the kernels keep layers of at most {MAX_WIDTH} on chip"
    allowed = TRAINABLE_ACTIVATIONS if training else tuple(ACTIVATION_CODES)
    for name in activations:
        if name not in allowed:
            return f"activation {name!r} is not in the {'training ' if training else ''}kernels ({', '.join(allowed)})"
    return None


def kernel_choice(mode: str, device: torch.device, reason: str | None = None, *, field: str = "kernels", dtype: torch.dtype | None = None) -> tuple[str, str]:
    """``("triton" | "torch", why)`` for a ``kernels`` setting on ``device``.

    ``reason`` is :func:`unsupported_reason` for the bake's network (None: supported). ``auto``
    falls back to PyTorch quietly; ``triton`` raises :class:`ConfigError` saying why it cannot run.
    ``dtype``: the precision the kernels would compute in. ``auto`` takes the kernels for fp16 and
    bf16 only: with Triton 3.6 on an H100 an fp32 kernel (``tl.dot`` in IEEE fp32) took minutes to
    compile, longer than the PyTorch path of a whole bake; ``triton`` still runs them.
    """
    if mode not in KERNEL_MODES:
        raise ConfigError(f"unknown kernels {mode!r}.", field=field, fix="use auto, triton or torch.")
    if mode == "torch":
        return "torch", "--kernels torch"
    problem = reason
    if problem is None and not triton_installed():
        problem = "Triton is not installed (CUDA builds of PyTorch bring it; or pip install triton)"
    if problem is None and device.type != "cuda" and not interpreting():
        problem = f"the Triton kernels run on a CUDA GPU and this run is on {device.type} (TRITON_INTERPRET=1 runs them slowly on the CPU, for tests)"
    if problem is None and device.type == "cuda" and interpreting():
        problem = "TRITON_INTERPRET=1 is set, which runs kernels on the CPU; unset it for the GPU"
    if problem is None:
        if mode == "auto" and device.type != "cuda":
            return "torch", "auto: Triton's CPU interpreter is for tests"
        if mode == "auto" and dtype == torch.float32:
            return "torch", "auto: fp32 kernels compile for minutes, longer than PyTorch takes"
        return "triton", "--kernels triton" if mode == "triton" else "auto: the fused kernels run this network here"
    if mode == "triton":
        raise ConfigError(f"the fused kernels cannot run: {problem}.", field=field, fix="use --kernels auto or torch.")
    return "torch", f"auto: {problem}"


def resolve_kernels(mode: str, device: torch.device, reason: str | None = None, *, field: str = "kernels", dtype: torch.dtype | None = None) -> str:
    """``"triton"`` or ``"torch"`` for a ``kernels`` setting on ``device`` (:func:`kernel_choice` without the why)."""
    return kernel_choice(mode, device, reason, field=field, dtype=dtype)[0]


def try_kernels(mode: str, resolved: str, trial: Callable[[], object], note: Callable[[str], None]) -> str:
    """Run ``trial`` (one small call of the fused path) when ``resolved`` is ``triton``; return the path to use.

    Under ``auto`` a kernel that does not compile on this machine's Triton falls back to PyTorch
    with ``note`` saying why, so ``auto`` never fails a bake PyTorch could finish; under
    ``triton`` the error stands.
    """
    return tried_kernels(mode, resolved, trial, note)[0]


def tried_kernels(mode: str, resolved: str, trial: Callable[[], object], note: Callable[[str], None]) -> tuple[str, str | None]:
    """:func:`try_kernels`, with why it fell back to PyTorch (None when it did not)."""
    if resolved != "triton":
        return resolved, None
    try:
        trial()
    except Exception as exc:
        first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
        if mode != "auto":
            raise ConfigError(f"the fused Triton kernels failed here ({type(exc).__name__}: {first_line}).", field="kernels", fix="use --kernels auto or torch.") from exc
        why = f"the fused Triton kernels failed here ({type(exc).__name__}: {first_line})"
        note(f"{why}; using PyTorch")
        return "torch", f"auto: {why}"
    return "triton", None


def _fused_mlp(mlp: MLP) -> Callable[[torch.Tensor], torch.Tensor]:
    """``MLP.kernels = "triton"``: the MLP's forward and backward on the fused kernels."""
    from neuralbake.kernels.training import FusedMLP  # imports Triton, an optional dependency

    return FusedMLP(mlp)


register_mlp_kernels("triton", _fused_mlp)
