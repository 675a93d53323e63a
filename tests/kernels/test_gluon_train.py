"""The Gluon training kernel on the CPU: which steps it takes, how the step launches it, and that it compiles for an H100.

Triton's interpreter does not run Gluon, so its values are checked on a GPU by ``bench/kernels_parity.py
--gluon-train-only`` (against autograd, and against the Triton kernel that tests/kernels/test_fused.py checks here).
These tests compile it for sm_90 with the CUDA tools in Triton's wheel (no GPU needed): at each variant the parity
script runs, every product must be a warpgroup MMA inside the tile loop, the weights stored in shared memory before
it and never again, and only the tile's own operands stored inside it.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from neuralbake.kernels import fused as fused_module
from neuralbake.kernels import gluon_train
from neuralbake.kernels.fused import FusedForwardBackward
from neuralbake.nn.mlp import CoordinateNetwork, CoordinateNetworkConfig
from neuralbake.nn.trainer import Batch

SUPPORTED = {"device_capability": (9, 0), "dtype_name": "float16", "kp": 16, "hp": 64, "op": 16, "hidden": 3, "loss": "mse", "dx": False, "wide": False}


def test_the_gluon_step_takes_fp16_networks_of_width_64_on_a_hopper_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gluon_train, "interpreting", lambda: False)
    if not gluon_train._AVAILABLE:
        pytest.skip("this Triton has no Gluon")
    assert gluon_train.gluon_train_reason(**SUPPORTED) is None
    assert gluon_train.gluon_train_reason(**(SUPPORTED | {"kp": 32, "hidden": 1, "loss": "relative_l1", "device_capability": (9, 1)})) is None
    refused = [
        ("device_capability", None),  # no CUDA GPU
        ("device_capability", (8, 0)),  # Ampere: no warpgroup MMA
        ("device_capability", (10, 0)),  # Blackwell: no warpgroup MMA either
        ("dtype_name", "bfloat16"),
        ("dtype_name", "float32"),
        ("hp", 32),
        ("hp", 128),
        ("kp", 128),
        ("op", 32),
        ("hidden", 0),
        ("hidden", 4),
        ("loss", "upstream"),  # FusedMLP's backward inside autograd
        ("dx", True),
        ("wide", True),
    ]
    for field, value in refused:
        assert gluon_train.gluon_train_reason(**(SUPPORTED | {field: value})) is not None, field
    monkeypatch.setattr(gluon_train, "GLUON_TRAIN", False)
    assert "GLUON_TRAIN" in gluon_train.gluon_train_reason(**SUPPORTED)


def _step(loss: str = "mse") -> tuple[CoordinateNetwork, FusedForwardBackward]:
    torch.manual_seed(2)
    model = CoordinateNetwork(CoordinateNetworkConfig(hidden=64, layers=4, outputs=3, hidden_activation="leaky_relu", output_activation="sigmoid"))
    return model, FusedForwardBackward(model, loss, dtype=torch.float16)


def test_under_the_interpreter_and_on_the_cpu_the_step_is_the_triton_kernel() -> None:
    model, step = _step()
    params = {name: p.detach().half() for name, p in model.named_parameters()}
    batch = Batch(inputs=torch.rand(70, 2), targets=torch.rand(70, 3))
    step(params, batch, 128.0)
    assert step.buffers.kernel == "triton"
    assert step.buffers.gluon_reason(step.packed, "mse", False, 70, 12) is not None


def test_the_step_launches_the_gluon_kernel_with_each_argument_in_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch the fused step makes where gluon_train_reason allows, bound by name to the kernel's parameters (its
    values run on a GPU only): given rows, then rows the kernel draws."""
    calls = []
    model, step = _step("relative_l1")
    monkeypatch.setattr(step.buffers, "gluon_reason", lambda *_: None)
    monkeypatch.setattr(gluon_train, "launch", lambda grid, args, constants: calls.append((grid, args, dict(constants))))
    params = {name: p.detach().half() for name, p in model.named_parameters()}
    n = 300
    batch = Batch(inputs=torch.rand(n, 2), targets=torch.rand(n, 3))
    step(params, batch, torch.tensor(64.0))
    assert step.buffers.kernel == "gluon"
    ((grid, args, constants),) = calls
    rows, warps = gluon_train.TILE
    assert grid == (min(step.buffers.programs, -(-n // rows)),)
    kernel = gluon_train._mlp_train_gluon_kernel
    signature = inspect.signature(kernel.fn)
    bound = signature.bind(*args, SEED=0, IMG_W=1, IMG_H=1, BM=rows, W=warps, **({"SAMPLE": False, "TRANSFORM": 0} | constants)).arguments
    p, buffers = step.packed, step.buffers
    assert bound["N"] == n and bound["grad_ptr"] is buffers.grads and bound["loss_ptr"] is buffers.losses
    assert float(bound["scale_ptr"]) == 64.0 and bound["in_ptr"].shape == (n, 2) and torch.equal(bound["target_ptr"], batch.targets)
    assert bound["w_in"] is p.w_in and bound["b_in"] is p.b_in and bound["w_hid"] is p.w_hid and bound["b_hid"] is p.b_hid
    assert bound["w_out"] is p.w_out and bound["b_out"] is p.b_out
    assert (bound["K"], bound["O"], bound["FREQ"], bound["KP"], bound["HP"], bound["OP"], bound["HIDDEN"]) == (2, 3, 3, 16, 64, 16, 3)
    assert (bound["HACT"], bound["OACT"], bound["LOSS"]) == (2, 5, 2) and bound["LEAK"] == pytest.approx(0.01)
    assert bound["FLOOR"] == pytest.approx(0.01) and bound["HALF_ACT"] is p.half_activations and bound["SAMPLE"] is False
    # a drawn batch: the draw counter and the image, the seed and the transform
    from neuralbake.bakes.neural_texture import ImageSampler

    image = torch.rand(16, 24, 3)
    draws = step.draws_from(ImageSampler(image, "zoom", 200))
    assert draws is not None
    step(params, None, torch.tensor(64.0), draws=draws, seed=9)
    grid, args, constants = calls[-1]
    bound = signature.bind(*args, BM=rows, W=warps, **({"SAMPLE": False, "TRANSFORM": 0} | constants)).arguments
    assert bound["SAMPLE"] is True and bound["in_ptr"] is step.draw_counter and bound["target_ptr"] is draws.image
    assert (bound["SEED"], bound["IMG_W"], bound["IMG_H"], bound["TRANSFORM"]) == (9, 24, 16, fused_module._draw_arguments(draws, 9)[1])
    assert bound["N"] == 200 and bound["K"] == 2


def test_a_gluon_kernel_that_fails_here_leaves_the_triton_kernel_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    model, step = _step()
    params = {name: p.detach().half() for name, p in model.named_parameters()}
    batch = Batch(inputs=torch.rand(90, 2), targets=torch.rand(90, 3))
    expected_loss, expected = step(params, batch, 32.0)
    monkeypatch.setattr(step.buffers, "gluon_reason", lambda *_: None)

    def failing(*_):
        raise RuntimeError("PTX assembly failed\n(details)")

    monkeypatch.setattr(gluon_train, "launch", failing)
    with pytest.warns(RuntimeWarning, match=r"PTX assembly failed\); using the Triton kernel"):
        loss, gradients = step(params, batch, 32.0)
    monkeypatch.undo()
    assert step.buffers.kernel == "triton" and "RuntimeError: PTX assembly failed" in step.buffers.gluon_failure
    assert step.buffers.gluon_reason(step.packed, "mse", False, 90, 12) == step.buffers.gluon_failure  # from then on
    assert torch.equal(loss, expected_loss) and all(torch.equal(a, b) for a, b in zip(gradients, expected))


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    """``bench/kernels_sass.py --gluon-train --json``: the kernel compiled for sm_90 at its variants, counted. In a process
    of its own: with ``TRITON_INTERPRET=1`` (set for these tests) Gluon cannot compile its helpers."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "kernels_sass.py"), "--gluon-train", "--json"], check=False, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not gluon_train._AVAILABLE, reason="needs Triton with Gluon")
def test_the_gluon_step_compiles_for_sm90_with_every_product_a_warpgroup_mma_on_shared_memory(compiled: list[dict]) -> None:
    from tests.kernels.test_gluon_decode import _tools_present

    if not _tools_present():
        pytest.skip("needs Triton's CUDA tools")
    assert len(compiled) == 8
    for counts in compiled:
        shape, loop, before = counts["shape"], counts["loop"], counts["before"]
        hidden, k_steps = shape["HIDDEN"], shape["KP"] // 16
        # forward: input (KP / 16 steps of 16), hidden (4 each) and output (4) layers; backward: the output layer's
        # gradient, bias gradient (4 + 4) and da (1), each hidden layer's gradient, bias gradient and da (12), the
        # input layer's gradient and bias gradient (8): one 64-row instruction per 16 of depth
        assert loop.get("HGMMA", 0) == k_steps + 16 * hidden + 21, shape
        assert loop.get("HMMA", 0) == 0, shape  # no mma.sync: no operand staged in registers
        assert before.get("STS", 0) + before.get("STSM", 0) > 0, shape  # the weights, stored before the tiles
        # in the loop only the tile's operands are stored: the input tile, each activation and each dz (4 stmatrix
        # of 64 x 64 a warp), the output layer's dz (1); never the weights again
        stores = loop.get("STS", 0) + loop.get("STSM", 0)
        assert stores <= 8 * (hidden + 1) + 1 + 3, (shape, stores)
