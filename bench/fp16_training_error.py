"""How far the fused fp16 training step's gradients are from the exact gradient, per layer, on the CPU.

The network is the one docs/dev/benchmarks-diary.md ("The Gluon kernels on the CPU interpreter") discusses: a coordinate network
64 wide, 4 hidden layers, ReLU, sigmoid output, 700 rows, MSE, loss scale 64 (``tests/kernels/test_gluon_train.py``'s
``half-activations`` shape with MSE). For each linear layer's weight gradient it prints the largest error against the
exact gradient (the same fp16 weights in float64, nothing rounded), relative to that gradient's largest value, for:

- the Triton training kernel and the Gluon one at both tiles (Triton's interpreter; the Gluon kernel through
  ``neuralbake.kernels.gluon_interpret``), and their largest difference from each other;
- PyTorch's fp16 autograd (``AutogradForwardBackward``);
- a float64 emulation of the kernels' roundings (inputs, activations, the output's ``dz`` and each hidden ``dz`` rounded
  to fp16, sums exact), with all of them, and with one at a time.

    python bench/fp16_training_error.py     # about 10 s on 2 cores
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import mock

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: the kernels run on the CPU

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch

from neuralbake.kernels import gluon_train, tuning
from neuralbake.kernels.training import FusedForwardBackward
from neuralbake.nn.mlp import CoordinateNetwork, CoordinateNetworkConfig
from neuralbake.nn.trainer import AutogradForwardBackward, Batch, cast_model

ROWS, SCALE = 700, 64.0


def _network() -> tuple[CoordinateNetwork, Batch]:
    torch.manual_seed(5)
    config = CoordinateNetworkConfig(hidden=64, layers=4, outputs=3, hidden_activation="relu", output_activation="sigmoid")
    model = CoordinateNetwork(config).half()
    g = torch.Generator().manual_seed(8)
    return model, Batch(inputs=torch.rand(ROWS, 2, generator=g).half(), targets=torch.rand(ROWS, 3, generator=g) + 0.05)


def _emulated(model: CoordinateNetwork, batch: Batch, *, inputs: bool, activations: bool, output_dz: bool, hidden_dz: bool) -> list[torch.Tensor]:
    """The weight gradients (scaled by SCALE) in float64, with the chosen values rounded to fp16 where the kernels round them."""
    rounded = lambda t, on: t.half().double() if on else t
    layers = model.mlp.layers
    weights = [layer.weight.detach().double() for layer in layers]
    biases = [layer.bias.detach().double() for layer in layers]
    acts = [rounded(model.encoding(batch.inputs.float()).double(), inputs)]
    for w, b in zip(weights[:-1], biases[:-1], strict=True):
        acts.append(rounded(torch.relu(acts[-1] @ w.T + b), activations))
    y = torch.sigmoid(acts[-1] @ weights[-1].T + biases[-1])
    dz = rounded(2 * (y - batch.targets.double()) * SCALE / y.numel() * y * (1 - y), output_dz)
    grads: list[torch.Tensor] = [torch.empty(0)] * len(layers)
    for i in range(len(layers) - 1, -1, -1):
        grads[i] = dz.T @ acts[i]
        if i:
            dz = rounded((dz @ weights[i]) * (acts[i] > 0), hidden_dz)
    return grads


def _fused(model: CoordinateNetwork, batch: Batch, tile: tuple[int, int] | None) -> list[torch.Tensor]:
    """The fused step's weight gradients: the Triton kernel (``tile`` None) or the Gluon kernel at ``tile``."""
    step = FusedForwardBackward(model, "mse", dtype=torch.float16, programs=4)
    if tile is None:
        _, grads = step(dict(model.named_parameters()), batch, torch.tensor(SCALE))
        assert step.buffers.kernel == "triton"
    else:
        step.buffers.capability, step.buffers.sms = (9, 0), 2  # as an H100 of 2 SMs: several programs, several tiles each
        with mock.patch.object(gluon_train, "tile_for", lambda n, sms: tile):
            _, grads = step(dict(model.named_parameters()), batch, torch.tensor(SCALE))
        assert step.buffers.kernel == "gluon", step.buffers.gluon_failure
    return [g.double() for g in grads[0::2]]  # weights (the step returns weight, bias, weight, bias, ...)


def main() -> None:
    with mock.patch.object(tuning, "HALF_ACTIVATIONS", True):  # the tests' half-activations shape
        model, batch = _network()
        exact = _emulated(model, batch, inputs=False, activations=False, output_dz=False, hidden_dz=False)
        exact_model = cast_model(model, torch.float32)
        _, exact32 = AutogradForwardBackward(exact_model, torch.nn.functional.mse_loss)(dict(exact_model.named_parameters()), Batch(batch.inputs.float(), batch.targets), SCALE)
        check = max(float((a.double() - b).abs().max() / b.abs().max()) for a, b in zip(exact32[0::2], exact, strict=True))
        _, half = AutogradForwardBackward(model, torch.nn.functional.mse_loss)(dict(model.named_parameters()), batch, SCALE)
        triton = _fused(model, batch, None)
        gluon_small, gluon_large = _fused(model, batch, gluon_train.SMALL_TILE), _fused(model, batch, gluon_train.LARGE_TILE)
    rows = {
        "Triton kernel": triton,
        "Gluon kernel, small tile": gluon_small,
        "Gluon kernel, large tile": gluon_large,
        "PyTorch fp16 autograd": [g.double() for g in half[0::2]],
        "emulation, every rounding": _emulated(model, batch, inputs=True, activations=True, output_dz=True, hidden_dz=True),
        "emulation, inputs only": _emulated(model, batch, inputs=True, activations=False, output_dz=False, hidden_dz=False),
        "emulation, activations only": _emulated(model, batch, inputs=False, activations=True, output_dz=False, hidden_dz=False),
        "emulation, output dz only": _emulated(model, batch, inputs=False, activations=False, output_dz=True, hidden_dz=False),
        "emulation, hidden dz only": _emulated(model, batch, inputs=False, activations=False, output_dz=False, hidden_dz=True),
    }
    relative = lambda ours, truth: float((ours - truth).abs().max() / truth.abs().max())
    print(f"exact gradient: float64, checked against fp32 autograd of the same weights ({check:.1e} apart)")
    print(f"{'largest error / largest value, per weight gradient':36s} " + " ".join(f"layer {i:<4d}" for i in range(len(exact))))
    for name, grads in rows.items():
        print(f"{name:36s} " + " ".join(f"{relative(g, t):10.2e}" for g, t in zip(grads, exact, strict=True)))
    for name in ("Gluon kernel, small tile", "Gluon kernel, large tile"):
        print(f"{name} against the Triton kernel: " + " ".join(f"{relative(g, t):.1e}" for g, t in zip(rows[name], triton, strict=True)))
    emulated = rows["emulation, every rounding"]
    print("Triton kernel against the emulation of every rounding: " + " ".join(f"{relative(g, t):.1e}" for g, t in zip(triton, emulated, strict=True)))


if __name__ == "__main__":
    main()
