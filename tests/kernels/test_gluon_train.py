"""The Gluon training kernel on the CPU: its values on Triton's interpreter, which steps it takes, how the step launches
it, and that it compiles for an H100.

Triton's interpreter does not run Gluon itself; ``tests/kernels/gluon_interpret.py`` runs the kernel's Python body
there, and these tests check its gradients against the Triton kernel and the exact gradient. What only the hardware
does (layouts, barriers, the tensor cores' sums) is checked on a GPU by ``tests/kernels/test_gpu_parity.py -k gluon_training``.
These tests also compile it for sm_90 with the CUDA tools in Triton's wheel (no GPU needed): at each variant the parity
script runs, every product must be a warpgroup MMA inside the tile loop, the weights stored in shared memory before
it and never again, and only the tile's own operands stored inside it.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from neuralbake.errors import ConfigError
from neuralbake.kernels import gluon_train, interpreting, training
from neuralbake.kernels.training import FusedForwardBackward
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.trainer import Batch
from tests.kernels.test_gluon_decode import _tools_present

SUPPORTED = {"device_capability": (9, 0), "dtype_name": "float16", "kp": 16, "hp": 64, "op": 16, "hidden": 3, "loss": "mse", "dx": False, "wide": False}


def test_the_gluon_step_takes_fp16_networks_of_width_64_on_a_hopper_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
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


def _step(loss: str = "mse") -> tuple[CoordinateNetwork, FusedForwardBackward]:
    torch.manual_seed(2)
    model = CoordinateNetwork(CoordinateNetworkConfig(hidden=64, layers=4, outputs=3, hidden_activation="leaky_relu", output_activation="sigmoid"))
    return model, FusedForwardBackward(model, loss, dtype=torch.float16)


def test_on_the_cpu_the_step_is_the_triton_kernel_for_want_of_a_hopper_gpu() -> None:
    model, step = _step()
    params = {name: p.detach().half() for name, p in model.named_parameters()}
    batch = Batch(inputs=torch.rand(70, 2), targets=torch.rand(70, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused by the gate, not tried and fallen back
        step(params, batch, 128.0)
    assert step.buffers.kernel == "triton" and step.buffers.gluon_failure is None
    reason = step.buffers.gluon_reason(step.packed, "mse", False, 70, 12)
    assert reason is not None and ("Hopper" in reason or "Gluon" in reason), reason  # no capability (or no Gluon)


def test_a_step_takes_a_tile_a_program_up_to_one_an_sm_then_at_least_two() -> None:
    assert gluon_train.programs_for(16, 264, 132, 4) == 16  # 2^10 rows on an H100: a tile each
    assert gluon_train.programs_for(132, 264, 132, 4) == 132
    assert gluon_train.programs_for(256, 264, 132, 4) == 132  # two tiles each
    assert gluon_train.programs_for(400, 264, 132, 4) == 200
    assert gluon_train.programs_for(4096, 264, 132, 4) == 264  # 2^18 rows: two programs an SM
    assert gluon_train.programs_for(4096, 100, 132, 4) == 100
    assert gluon_train.programs_for(2048, 264, 132, 8) == 132  # programs of 8 warps: one an SM
    assert gluon_train.programs_for(0, 264, 132, 4) == 1  # an empty batch: one program writes a slot of zeros


def test_a_step_of_no_programs_is_refused() -> None:
    model = CoordinateNetwork(CoordinateNetworkConfig(hidden=64, layers=4, outputs=3))
    with pytest.raises(ConfigError, match="at least one program") as caught:
        FusedForwardBackward(model, "mse", dtype=torch.float16, programs=0)
    assert caught.value.field == "programs"


def test_small_steps_take_the_two_warpgroup_tile_and_large_ones_the_one_warpgroup_tile() -> None:
    small, large = gluon_train.SMALL_TILE, gluon_train.LARGE_TILE
    assert small[1] == 2 * large[1] == 8 and small[0] == 2 * large[0]
    assert gluon_train.tile_for(1 << 10, 132) == small
    assert gluon_train.tile_for(1 << 14, 132) == small  # 128 tiles of 128 rows
    assert gluon_train.tile_for(gluon_train.SMALL_STEP * 132 * 128, 132) == small
    assert gluon_train.tile_for(gluon_train.SMALL_STEP * 132 * 128 + 1, 132) == large
    assert gluon_train.tile_for(1 << 17, 132) == small
    assert gluon_train.tile_for(1 << 18, 132) == large


def test_the_step_launches_the_gluon_kernel_with_each_argument_in_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch the fused step makes where gluon_train_reason allows, bound by name to the kernel's parameters (its
    values: the interpreter tests below and tests/kernels/test_gpu_parity.py on a GPU): given rows, then rows the kernel draws."""
    calls = []
    model, step = _step("relative_l1")
    monkeypatch.setattr(step.buffers, "gluon_reason", lambda *_: None)
    step.buffers.sms = 132

    class Recorder:  # the kernel, as gluon_train.launch launches it: kernel[grid](*args, **constants)
        fn = gluon_train.mlp_train_gluon_kernel.fn

        def __getitem__(self, grid):
            return lambda *args, **constants: calls.append((grid, args, constants))

    monkeypatch.setattr(gluon_train, "mlp_train_gluon_kernel", Recorder())
    params = {name: p.detach().half() for name, p in model.named_parameters()}
    n = 300
    batch = Batch(inputs=torch.rand(n, 2), targets=torch.rand(n, 3))
    step(params, batch, torch.tensor(64.0))
    assert step.buffers.kernel == "gluon"
    ((grid, args, constants),) = calls
    rows, warps = gluon_train.SMALL_TILE  # 300 rows: a small step
    assert grid == (gluon_train.programs_for(-(-n // rows), step.buffers.programs, 132, warps),) == (min(step.buffers.programs, 3),)
    assert constants.pop("num_warps") == warps
    signature = inspect.signature(Recorder.fn)
    bound = signature.bind(*args, **constants).arguments
    assert (bound["BM"], bound["W"], bound["SEED"], bound["IMG_W"], bound["IMG_H"], bound["TRANSFORM"]) == (rows, warps, 0, 1, 1, 0)
    p, buffers = step.packed, step.buffers
    assert bound["N"] == n and bound["grad_ptr"] is buffers.grads and bound["loss_ptr"] is buffers.losses
    assert float(bound["scale_ptr"]) == 64.0 and bound["in_ptr"].shape == (n, 2) and torch.equal(bound["target_ptr"], batch.targets)
    assert bound["w_in"] is p.w_in and bound["b_in"] is p.b_in and bound["w_hid"] is p.w_hid and bound["b_hid"] is p.b_hid
    assert bound["w_out"] is p.w_out and bound["b_out"] is p.b_out
    assert (bound["K"], bound["O"], bound["FREQ"], bound["KP"], bound["HP"], bound["OP"], bound["HIDDEN"]) == (2, 3, 3, 16, 64, 16, 3)
    assert (bound["HACT"], bound["OACT"], bound["LOSS"]) == (2, 5, 2) and bound["LEAK"] == pytest.approx(0.01)
    assert bound["FLOOR"] == pytest.approx(0.01) and bound["SAMPLE"] is False
    # a drawn batch: the draw counter and the image, the seed and the transform
    from neuralbake.bakes.neural_texture import ImageSampler

    image = torch.rand(16, 24, 3)
    draws = step.draws_from(ImageSampler(image, "zoom", 200))
    assert draws is not None
    step(params, None, torch.tensor(64.0), draws=draws, seed=9)
    grid, args, constants = calls[-1]
    constants.pop("num_warps")
    bound = signature.bind(*args, **constants).arguments
    assert bound["SAMPLE"] is True and bound["in_ptr"] is step.draw_counter and bound["target_ptr"] is draws.image
    assert (bound["SEED"], bound["IMG_W"], bound["IMG_H"], bound["TRANSFORM"]) == (9, 24, 16, training.draw_arguments(draws, 9)[1])
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


@pytest.mark.skipif(not gluon_train._AVAILABLE or not _tools_present(), reason="needs Triton with Gluon and its CUDA tools")
def test_the_gluon_step_compiles_for_sm90_with_every_product_a_warpgroup_mma_on_shared_memory(compiled: list[dict]) -> None:
    assert len(compiled) == 16  # eight variants at each tile
    for counts in compiled:
        shape, loop, before, (rows, _) = counts["shape"], counts["loop"], counts["before"], counts["tile"]
        hidden, k_steps, depth = shape["HIDDEN"], shape["KP"] // 16, rows // 16
        # per warp, one instruction per 16 of a product's depth. Forward: the input (KP / 16), hidden (4 each) and
        # output (4) layers, a warpgroup's own 64 rows. Backward: the output layer's gradient and bias gradient (each
        # over the tile's rows) and da (1); each hidden layer's gradient and bias gradient (the tile's rows) and da (4);
        # the input layer's gradient and bias gradient
        forward = k_steps + 4 * hidden + 4
        backward = 2 * depth + 1 + hidden * (2 * depth + 4) + 2 * depth
        assert loop.get("HGMMA", 0) == forward + backward, (shape, rows)
        assert loop.get("HMMA", 0) == 0, shape  # no mma.sync: no operand staged in registers
        assert before.get("STS", 0) + before.get("STSM", 0) > 0, shape  # the weights, stored before the tiles
        # in the loop only the tile's operands are stored: the input tile, each activation and each dz (4 stmatrix
        # of 64 x 64 a warp), the output layer's dz (1); never the weights again
        stores = loop.get("STS", 0) + loop.get("STSM", 0)
        assert stores <= 8 * (hidden + 1) + 1 + 3, (shape, stores)


# The kernel's values on Triton's CPU interpreter (tests/kernels/gluon_interpret.py runs its Python body there):
# against the Triton kernel (the same arithmetic; fp32 sums in another order, so a dz may round to the neighbouring
# fp16 value: 1e-3 of each gradient's scale) and against the exact (fp32) gradient of the same fp16 weights (fp16's
# 2e-2 of the scale, as tests/kernels/test_fused.py states; both kernels' fp16 roundings of the activations and of dz
# leave up to about 0.7 % there at these shapes).

def _coordinates(layers: int, hidden_act: str, output_act: str, frequencies: int = 3) -> CoordinateNetwork:
    torch.manual_seed(5)
    config = CoordinateNetworkConfig(hidden=64, layers=layers, outputs=3, frequencies=frequencies, hidden_activation=hidden_act, output_activation=output_act)
    return CoordinateNetwork(config)


def _plain(inputs: int, layers: int, outputs: int, hidden_act: str, output_act: str) -> MLP:
    torch.manual_seed(6)
    return MLP(MLPConfig(inputs=inputs, hidden=64, layers=layers, outputs=outputs, hidden_activation=hidden_act, output_activation=output_act))


INTERPRETED = [
    # (network, loss): the shapes bench/kernels_sass.py compiles, the RTXNS network's first
    pytest.param(lambda: _coordinates(4, "leaky_relu", "sigmoid"), "mse", id="rtxns"),
    pytest.param(lambda: _coordinates(3, "relu", "none"), "relative_l1", id="relu-relative_l1"),
    pytest.param(lambda: _coordinates(2, "leaky_relu", "exp"), "l1", id="one-hidden-exp-l1"),
    pytest.param(lambda: _coordinates(3, "tanh", "none"), "mse", id="tanh"),
    pytest.param(lambda: _coordinates(4, "relu", "sigmoid"), "l1", id="relu-sigmoid-l1"),
    pytest.param(lambda: _coordinates(4, "leaky_relu", "sigmoid", frequencies=8), "mse", id="32-encoded-inputs"),
    pytest.param(lambda: _plain(5, 4, 1, "leaky_relu", "sigmoid"), "mse", id="plain-5-inputs-1-output"),
    pytest.param(lambda: _plain(20, 4, 7, "leaky_relu", "none"), "mse", id="plain-20-inputs"),
    pytest.param(lambda: _plain(40, 3, 16, "leaky_relu", "none"), "l1", id="plain-40-inputs-16-outputs"),
]


def _gluon_on_the_interpreter(monkeypatch: pytest.MonkeyPatch, step: FusedForwardBackward, tile: tuple[int, int]) -> None:
    """``step`` takes the Gluon kernel at ``tile`` as on an H100 of 2 SMs (several programs, several tiles each)."""
    if not gluon_train._AVAILABLE:
        pytest.skip("this Triton has no Gluon")
    if not interpreting():
        pytest.skip("runs the kernel on Triton's CPU interpreter (TRITON_INTERPRET=1)")
    from tests.kernels.gluon_interpret import interpreted

    step.buffers.capability, step.buffers.sms = (9, 0), 2
    monkeypatch.setattr(gluon_train, "tile_for", lambda n, sms: tile)
    monkeypatch.setattr(gluon_train, "mlp_train_gluon_kernel", interpreted(gluon_train.mlp_train_gluon_kernel))


def _strict(call):
    """``call()`` with every warning an error: a Gluon kernel that fails falls back to the Triton kernel with a warning,
    which would otherwise pass these checks with the Triton kernel's values."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return call()


def _agree(gluon: list[torch.Tensor], triton: list[torch.Tensor], tolerance: float = 1e-3) -> None:
    for ours, theirs in zip(gluon, triton, strict=True):
        assert ours.shape == theirs.shape
        scale = float(theirs.abs().max())
        assert scale > 0, "a gradient of zeros cannot tell a right kernel from a wrong one"
        assert float((ours - theirs).abs().max()) <= tolerance * scale, (float((ours - theirs).abs().max()), scale)


@pytest.mark.parametrize("tile", [gluon_train.SMALL_TILE, gluon_train.LARGE_TILE], ids=["small-tile", "large-tile"])
@pytest.mark.parametrize(("network", "loss"), INTERPRETED)
def test_the_gluon_step_on_the_interpreter_matches_the_triton_kernel_and_the_exact_gradient(monkeypatch: pytest.MonkeyPatch, tile, network, loss: str) -> None:
    from neuralbake.nn.trainer import AutogradForwardBackward, cast_model
    from tests.kernels.test_fused import LOSSES, _close

    model = network().half()
    mlp = model.mlp if isinstance(model, CoordinateNetwork) else model
    columns = 2 if isinstance(model, CoordinateNetwork) else mlp.config.inputs  # a coordinate network's uv, else the MLP's inputs
    n = 700  # a partial last tile; 6 tiles of 128 over 2 programs, or 11 of 64 over 4
    g = torch.Generator().manual_seed(8)
    batch = Batch(inputs=torch.rand(n, columns, generator=g).half(), targets=torch.rand(n, mlp.config.outputs, generator=g) + 0.05)
    params = dict(model.named_parameters())
    triton_loss, triton_grads = FusedForwardBackward(model, loss, dtype=torch.float16, programs=4)(params, batch, torch.tensor(64.0))
    step = FusedForwardBackward(model, loss, dtype=torch.float16, programs=4)
    _gluon_on_the_interpreter(monkeypatch, step, tile)
    gluon_loss, gluon_grads = _strict(lambda: step(params, batch, torch.tensor(64.0)))
    assert step.buffers.kernel == "gluon"
    assert math.isclose(float(gluon_loss), float(triton_loss), rel_tol=1e-5)
    _agree(gluon_grads, triton_grads)
    exact_model = cast_model(model, torch.float32)
    _, exact_grads = AutogradForwardBackward(exact_model, LOSSES[loss])(dict(exact_model.named_parameters()), Batch(batch.inputs.float(), batch.targets), 1.0)
    for ours, truth in zip(gluon_grads, exact_grads, strict=True):
        _close(ours / 64.0, truth, torch.float16)


@pytest.mark.parametrize("tile", [gluon_train.SMALL_TILE, gluon_train.LARGE_TILE], ids=["small-tile", "large-tile"])
def test_the_gluon_step_on_the_interpreter_draws_the_triton_kernels_batch(monkeypatch: pytest.MonkeyPatch, tile) -> None:
    """A step whose kernel draws its rows (the RTXNS bake's): the same texels as the Triton kernel draws, the same
    gradients; then a step of no rows: gradients of zeros and a loss of 0 / 0 (NaN: the trainer skips the step), as the
    Triton kernel gives."""
    from neuralbake.bakes.neural_texture import ImageSampler

    model = _coordinates(4, "leaky_relu", "sigmoid").half()
    params = dict(model.named_parameters())
    image = torch.rand(23, 31, 3, generator=torch.Generator().manual_seed(4))
    results = []
    for kernel in ("triton", "gluon"):
        step = FusedForwardBackward(model, "mse", dtype=torch.float16, programs=4)
        if kernel == "gluon":
            _gluon_on_the_interpreter(monkeypatch, step, tile)
        draws = step.draws_from(ImageSampler(image, "zoom", 500))
        assert draws is not None
        results.append(_strict(lambda step=step, draws=draws: step(params, None, torch.tensor(32.0), draws=draws, seed=3)))
        assert step.buffers.kernel == kernel
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's, of the loss's 1 / (rows x outputs) at no rows
            empty = step(params, Batch(inputs=torch.zeros(0, 2).half(), targets=torch.zeros(0, 3)), torch.tensor(32.0))
        assert step.buffers.kernel == kernel and step.buffers.gluon_failure is None
        assert math.isnan(float(empty[0])) and all(not bool(g.any()) for g in empty[1])
    (triton_loss, triton_grads), (gluon_loss, gluon_grads) = results
    assert math.isclose(float(gluon_loss), float(triton_loss), rel_tol=1e-5)
    _agree(gluon_grads, triton_grads)
