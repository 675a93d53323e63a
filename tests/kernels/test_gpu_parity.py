"""GPU parity of the fused kernels against the PyTorch reference: what the compiler makes of the kernel code on a GPU.

The CPU tests (the rest of tests/kernels) run the kernel code in Triton's interpreter; these run the compiled kernels,
at the bench's shapes and at awkward ones (row counts that are not a multiple of the tile, non-power-of-two widths,
wide layers), and the Gluon kernels, whose layouts, barriers and tensor-core sums only the hardware shows. Marked
``gpu`` and skipped without CUDA; run them on an H100 or H200 whenever a kernel changes:

    python -m pytest -m gpu tests/kernels/test_gpu_parity.py            # every check (fp32 kernels compile for minutes)
    python -m pytest -m gpu tests/kernels/test_gpu_parity.py -k "not fp32"   # fp16 and bf16, what ``auto`` runs

Tolerances: fp32 1e-5, fp16 2e-2, relative to the output's scale (gradients: to each gradient's scale). bf16 (three
mantissa bits fewer than fp16) is held to the same 2e-2 against PyTorch's bf16 result, or, where that misses, to
PyTorch's own bf16 error: the kernel's error against the fp32 network at most 1.25 times PyTorch's (see :func:`check`
and :func:`check_gradient`). Each check prints a line (``-s`` shows them); a test fails naming every check that failed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

from neuralbake.bakes.neural_material.model import NeuralMaterial, relative_l1
from neuralbake.bakes.ntc.decode import decode_texels
from neuralbake.kernels import gluon_train, training
from neuralbake.kernels.decoders import FusedNeuralMaterial, FusedNTC
from neuralbake.kernels.packing import PackedMLP, mlp_forward
from neuralbake.kernels.training import FusedForwardBackward, unpack_gradients
from neuralbake.nn.activations import activation_fn
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.precision import PRECISIONS
from neuralbake.nn.trainer import AutogradForwardBackward, Batch, cast_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="checks the compiled kernels on an NVIDIA GPU")]

ROOT = Path(__file__).resolve().parents[2]
HALF = (torch.float16, torch.bfloat16)
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=["fp32", "fp16", "bf16"])


def _bench():
    """bench/kernels.py (its inputs: the RTXNS image, the copper tray's latents, the helmet's NTC set), loaded by path."""
    if str(ROOT / "bench") not in sys.path:  # its own helpers (timing.py) sit beside it
        sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_kernels", ROOT / "bench" / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture
def device():
    FAILURES.clear()
    torch.manual_seed(0)
    return torch.device("cuda")


def TRITON_ONLY(**_: object) -> str:  # noqa: N802  (patched in for the kernels' gluon_reason functions)
    """Why the Gluon kernels do not run: the check compares them with the Triton (``tl.dot``) kernels."""
    return "the Triton kernel, for comparison"


def passed() -> None:
    assert not FAILURES, f"{len(FAILURES)} checks failed: " + "; ".join(FAILURES)


FAILURES: list[str] = []


def _error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Max absolute difference over the largest expected value (1 for a scalar under 1)."""
    scale = max(1e-6 if actual.dim() else 1.0, float(expected.detach().float().abs().max()))
    return float((actual.detach().float() - expected.detach().float()).abs().max()) / scale


def check(name: str, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, exact: torch.Tensor | None = None) -> None:
    """``actual`` against PyTorch's ``expected`` in the same precision; a bf16 value that misses may pass against ``exact``
    (the fp32 network's): its error there at most 1.25 times ``expected``'s own (bf16 rounds a hidden value by up to
    2^-9 of it, so two correct bf16 results can be further apart than 2e-2 of the largest output)."""
    error, tolerance = _error(actual, expected), (1e-5 if dtype == torch.float32 else 2e-2)
    ok, reason = error <= tolerance, f"relative error {error:.2e} (tolerance {tolerance:.0e})"
    if not ok and dtype == torch.bfloat16 and exact is not None:
        ours, theirs = _error(actual, exact), _error(expected, exact)
        ok = ours <= max(tolerance, 1.25 * theirs)
        reason += f"; against fp32 {ours:.2e} (PyTorch bf16 {theirs:.2e})"
    print(f"{'ok  ' if ok else 'FAIL'} {name:60s} {reason}", flush=True)
    if not ok:
        FAILURES.append(name)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-12))


def _relative_rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-12))


def _gradient_verdict(fused: torch.Tensor, autograd: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether a gradient passes, and the line that says why (see :func:`check_gradient`)."""
    error, tolerance = _relative(fused, autograd), (1e-5 if dtype == torch.float32 else 2e-2)
    if error <= tolerance or dtype == torch.float32:
        return error <= tolerance, f"relative error {error:.2e} (tolerance {tolerance:.0e})"
    ours, theirs = _relative_rms(fused, exact), _relative_rms(autograd, exact)
    rms_tolerance = min(5e-2 if dtype == torch.float16 else 2e-1, max(2e-3, 1.25 * theirs))
    worst, theirs_worst = _relative(fused, exact), _relative(autograd, exact)
    ok = ours <= rms_tolerance and worst <= max(2e-2, 1.25 * theirs_worst)
    return ok, (
        f"against fp32: RMS {ours:.2e} (tolerance {rms_tolerance:.0e}; autograd {theirs:.2e}), max {worst:.2e} "
        f"(autograd {theirs_worst:.2e}); max against autograd {error:.2e}"
    )


def check_gradient(name: str, fused: torch.Tensor, autograd: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype, *, quiet: bool = False) -> None:
    """A gradient against autograd's in the same precision (max error over the largest value, as every check).

    An fp16 or bf16 gradient that misses may pass another way, against the fp32 network's gradient: its relative
    RMS error within 1.25 times autograd's own in that precision (at most 5e-2 for fp16, 2e-1 for bf16, eight times
    coarser), and its max error within 1.25 times
    autograd's own max error (so a fault confined to a few rows still fails). A handful of rows whose ReLUs
    switch under fp16 rounding can set the max error of two correct fp16 gradients far apart (one input
    gradient of the 17-64x3-3 MLP: 1.8e-1 and 2.0e-1 of its largest value from the fp32 one). With
    ``quiet``, only a failure prints.
    """
    ok, reason = _gradient_verdict(fused, autograd, exact, dtype)
    if not ok or not quiet:
        print(f"{'ok  ' if ok else 'FAIL'} {name:60s} {reason}", flush=True)
    if not ok:
        FAILURES.append(name)


def check_gradients(name: str, fused: list[torch.Tensor], autograd: list[torch.Tensor], exact: list[torch.Tensor], dtype: torch.dtype) -> None:
    """Every weight gradient through :func:`check_gradient`; the one furthest from autograd's always prints."""
    worst = max(range(len(autograd)), key=lambda i: _relative(fused[i], autograd[i]))
    for i in range(len(autograd)):
        label = f"{name} worst weight gradient" if i == worst else f"{name} weight gradient {i}"
        check_gradient(label, fused[i], autograd[i], exact[i], dtype, quiet=i != worst)


_SLOPES = {"relu": lambda a: (a > 0).float(), "leaky_relu": lambda a: torch.where(a > 0, 1.0, 0.01), "tanh": lambda a: 1 - a * a}
"""Each hidden activation's derivative from its output, as the training kernel takes it (``_activation_slope``)."""


def kernel_arithmetic_gradients(network: CoordinateNetwork, batch: Batch, loss_fn, scale: float) -> list[torch.Tensor]:
    """The training kernel's weight gradients computed in PyTorch with the kernel's own rounding (bf16 or fp16 network):
    products of ``network.dtype`` operands summed in high precision (fp64 here, fp32 in the kernel), each hidden
    activation and each ``dz`` rounded to ``network.dtype``, the output activation, the loss and its slope unrounded,
    the frequency encoding in fp64 (as exact as the kernel's range reduction).

    Autograd in bf16 rounds elsewhere too (each linear layer's output, the output activation, ``da``), so its gradients
    and the kernel's differ by bf16 roundings that can add up to a few % of a gradient; against this reference the
    kernel's must agree to a fraction of one bf16 rounding.
    """
    dtype = network.mlp.layers[0].weight.dtype
    layers = network.mlp.layers
    weights = [layer.weight.detach().double() for layer in layers]
    biases = [layer.bias.detach().double() for layer in layers]
    slope, act = _SLOPES[network.mlp.config.hidden_activation], activation_fn(network.mlp.config.hidden_activation)
    a = network.encoding(batch.inputs.double()).to(dtype).double()
    activations = [a]
    for weight, bias in zip(weights[:-1], biases[:-1]):
        a = act(a @ weight.t() + bias).to(dtype).double()
        activations.append(a)
    z = (a @ weights[-1].t() + biases[-1]).requires_grad_()
    (dz,) = torch.autograd.grad(loss_fn(activation_fn(network.mlp.config.output_activation)(z), batch.targets.double()) * scale, z)
    dz = dz.to(dtype).double()
    gradients: list[torch.Tensor] = []
    for i in range(len(layers) - 1, -1, -1):
        gradients = [dz.t() @ activations[i], dz.sum(0)] + gradients
        if i:
            dz = (dz @ weights[i] * slope(activations[i])).to(dtype).double()
    return [gradient.float() for gradient in gradients]


def check_training(name: str, dtype: torch.dtype, fused, autograd, exact, compute: CoordinateNetwork, batch: Batch, loss_fn, scale: float) -> None:
    """A fused training step's ``(loss, gradients)`` against autograd's in the same precision and the fp32 network's
    (``exact``): the loss by :func:`check`, fp16 and fp32 gradients by :func:`check_gradients`, bf16 ones against the
    kernel's own arithmetic in PyTorch (:func:`kernel_arithmetic_gradients`), each gradient's relative RMS within 5e-3,
    with the distances of the kernel's and autograd's bf16 gradients from the fp32 ones printed for scale. The two sum
    in different orders, so now and then a value rounds to the other side of a bf16 step (2^-8 of it); autograd's bf16
    gradients lay 2e-3 to 6e-2 from the fp32 ones in the H100 run of 2026-11-26."""
    (fused_loss, grads), (ref_loss, ref_grads), (exact_loss, exact_grads) = fused, autograd, exact
    check(f"{name} loss", fused_loss, ref_loss, dtype, exact_loss)
    if dtype != torch.bfloat16:
        check_gradients(name, grads, ref_grads, exact_grads, dtype)
        return
    reference = kernel_arithmetic_gradients(compute, batch, loss_fn, scale)
    errors = [_relative_rms(ours, theirs) for ours, theirs in zip(grads, reference)]
    ok = max(errors) <= 5e-3
    ours, theirs = max(map(_relative_rms, grads, exact_grads)), max(map(_relative_rms, ref_grads, exact_grads))
    print(
        f"{'ok  ' if ok else 'FAIL'} {name + ' gradients':60s} against the kernel arithmetic: worst RMS {max(errors):.2e} "
        f"(tolerance 5e-03); against fp32: worst RMS {ours:.2e} (autograd bf16 {theirs:.2e})",
        flush=True,
    )
    if not ok:
        FAILURES.append(name)


def check_drawn_graph(device: torch.device, image: torch.Tensor) -> None:
    """Drawn batches in the trainer's CUDA graph: the draw counter follows the steps, the loss falls, and a run stopped at
    step 100 (``request_stop``) and resumed from its checkpoint ends bit for bit where the unbroken 200-step run ends."""
    import tempfile

    from neuralbake.bakes.neural_texture import ImageSampler
    from neuralbake.nn.trainer import Trainer, TrainerConfig, TrainingInterrupted

    def trainer(path: Path, on_step=None) -> Trainer:
        torch.manual_seed(5)
        net = CoordinateNetwork(CoordinateNetworkConfig(outputs=3)).to(device)
        config = TrainerConfig(steps=200, learning_rate=0.01, precision="fp16", log_every=20, eval_every=0, checkpoint_every=0, checkpoint_seconds=0)
        return Trainer(net, ImageSampler(image, "zoom", 1 << 16), torch.nn.functional.mse_loss, config, device=device,
                       forward_backward=FusedForwardBackward(net, "mse", dtype=torch.float16), checkpoint_path=path, on_step=on_step)  # fmt: skip

    with tempfile.TemporaryDirectory() as folder:
        unbroken = trainer(Path(folder) / "unbroken.ckpt")
        unbroken.fit()
        stopped = trainer(Path(folder) / "stopped.ckpt", on_step=lambda run, step: run.request_stop() if step == 100 else None)
        try:
            stopped.fit()
        except TrainingInterrupted:
            pass
        resumed = trainer(Path(folder) / "stopped.ckpt")
        resumed.fit(resume=True)
        for label, run in (("unbroken", unbroken), ("resumed at step 100", resumed)):
            counter = int(run.forward_backward.draw_counter)
            curve = [event["loss"] for event in run.history if event["event"] == "train"]
            ok = run.fused_draws is not None and run.graph is not None and counter == run.step == 200 and curve[-1] < curve[0]
            print(f"{'ok  ' if ok else 'FAIL'} {'drawn batches, graphed trainer, ' + label:60s} counter {counter} at step {run.step}, "
                  f"loss {curve[0]:.5f} -> {curve[-1]:.5f}", flush=True)  # fmt: skip
            if not ok:
                FAILURES.append(f"drawn batches graphed {label}")
        same = all(torch.equal(a, b) for a, b in zip(unbroken.master.values(), resumed.master.values(), strict=True))
        print(f"{'ok  ' if same else 'FAIL'} {'drawn batches, graphed trainer, resumed = unbroken':60s} masters bit for bit", flush=True)
        if not same:
            FAILURES.append("drawn batches graphed resume")


GLUON_TOLERANCE = 5e-3
"""The Gluon decode against the Triton decode, relative to the output's scale: four times tighter than either against
PyTorch. The two run the same operations in the same precisions, but not always in the same order: where they differ,
an fp16 feature or hidden value rounded the other way, and the output moved by about as much as the fp16 decodes
differ from PyTorch's. Each line says how many values differ."""


def check_gluon_decode(device: torch.device, sizes: list[tuple[int, int]]) -> None:
    """The Gluon neural-material decode (kernels.gluon_decode) against PyTorch, and against the Triton decode
    (:data:`GLUON_TOLERANCE`), at each shape it runs: latent channels, direction features, hidden width and layers,
    activation; bilinear and trilinear; a row count that is not a multiple of its tile and one that spreads over every
    persistent program."""
    from neuralbake.kernels import gluon_decode

    shapes = (
        (8, ("wi", "wo"), 64, 3, "relu"),  # the copper tray's (the bench's) shape
        (8, ("half", "wo", "wi"), 64, 3, "relu"),  # 17 inputs: two 16-column feature tiles
        (8, ("wi", "wo"), 32, 2, "leaky_relu"),
        (4, ("half",), 16, 1, "relu"),  # no hidden-to-hidden layer
        (16, ("wi", "wo", "half"), 64, 4, "leaky_relu"),  # three hidden-to-hidden layers (a 4-row buffer)
        (16, ("wi", "wo"), 64, 3, "relu"),  # 22 inputs: 32 columns without the half vector
    )
    for channels, directions, hidden, layers, act in shapes:
        latents = [torch.randn(h, w, channels, device=device).half() for w, h in sizes]
        decoder = MLP(MLPConfig(inputs=channels + 3 * len(directions), hidden=hidden, layers=layers, outputs=3, hidden_activation=act, output_activation="none"))
        neural = NeuralMaterial(latents, decoder.to(device).half(), directions)
        fast = FusedNeuralMaterial(neural)
        with mock.patch.object(gluon_decode, "gluon_reason", TRITON_ONLY):
            plain = FusedNeuralMaterial(neural)
        name = f"gluon decode {channels} ch {directions} {hidden}x{layers} {act}"
        if fast.kernel != "gluon" or plain.kernel != "triton":
            print(f"FAIL {name:60s} kernels {fast.kernel} / {plain.kernel}: {fast.gluon_reason}", flush=True)
            FAILURES.append(name)
            continue
        for n in (333, 1 << 20, 1 << 22):  # a tile, 7 tiles a program and 16 on an H100 (gluon_decode.tiles_per_program)
            uv = torch.rand(n, 2, device=device) * 4 - 2
            wi = torch.nn.functional.normalize(torch.randn(n, 3, device=device), dim=1)
            wo = torch.nn.functional.normalize(torch.randn(n, 3, device=device), dim=1)
            lod = torch.rand(n, device=device) * 12 - 1
            for filtering, extra in (("bilinear", ()), ("trilinear", (lod,))):
                ours = fast(uv, wi, wo, *extra)
                check(f"{name} {filtering} n={n}", ours, neural.decode(uv, wi, wo, *extra), torch.float16)
                theirs = plain(uv, wi, wo, *extra)
                differ = float((ours != theirs).float().mean())
                error = _error(ours, theirs)
                ok = error <= GLUON_TOLERANCE
                label = f"{name} {filtering} n={n} vs triton"
                print(f"{'ok  ' if ok else 'FAIL'} {label:60s} {'the same bits' if differ == 0 else f'{differ:.1e} of the values differ, relative error {error:.2e} (tolerance {GLUON_TOLERANCE:.0e})'}", flush=True)
                if not ok:
                    FAILURES.append(label)


GLUON_TRAIN_TOLERANCE = 1e-2
"""The Gluon training kernel's loss and gradients against the Triton kernel's, relative to each one's largest value. Both
round the same values to fp16 in the same places, but sum their products in another order: a hidden value now and
then rounds to the other fp16 neighbour, and a ReLU or a leak flips with it."""


def check_gluon_train(device: torch.device, image: torch.Tensor) -> None:
    """The Gluon training kernel (kernels.gluon_train) at every kind of step it runs: hidden-to-hidden layers 1-3, ReLU and
    leaky ReLU, each loss and output activation, given and drawn batches, 1000 rows to 2^18, both tiles:
    against autograd (:func:`check_training`, as the Triton kernel is checked) and against the Triton kernel on the same
    batch (:data:`GLUON_TRAIN_TOLERANCE`)."""
    from neuralbake.bakes.neural_texture import ImageSampler

    losses = {"mse": torch.nn.functional.mse_loss, "l1": torch.nn.functional.l1_loss, "relative_l1": relative_l1}
    torch.manual_seed(6)
    shapes = ((4, "leaky_relu", "sigmoid", "mse"), (3, "relu", "none", "relative_l1"), (2, "leaky_relu", "exp", "l1"),
              (3, "tanh", "none", "mse"), (4, "relu", "sigmoid", "l1"))  # fmt: skip
    for layers, act, out_act, loss in shapes:
        model = CoordinateNetwork(CoordinateNetworkConfig(hidden=64, layers=layers, outputs=3, hidden_activation=act, output_activation=out_act)).to(device)
        compute = cast_model(model, torch.float16)
        exact_model = cast_model(compute, torch.float32)
        params = dict(compute.named_parameters())
        step = FusedForwardBackward(model, loss, dtype=torch.float16)
        name = f"gluon train 64x{layers} {act}/{out_act} {loss}"
        # 1000 to 2^16 rows: the small tile (one to four tiles a program on an H100); 2^18: the large one
        batches = [(f"n={n}", Batch(inputs=torch.rand(n, 2, device=device), targets=torch.rand(n, 3, device=device)), None) for n in (1000, 1 << 15, 1 << 16, 1 << 18)]
        if loss == "mse":
            for transform, rows in (("identity", 1 << 14), ("zoom", 1 << 16)):
                draws = step.draws_from(ImageSampler(image, transform, rows))
                step.seek_draws(4321)
                batches.append((f"drawn {transform}", step.drawn_batch(draws, seed=7), draws))
        for label, batch, draws in batches:
            scale = 256.0
            arguments = (params, None if draws else batch, torch.tensor(scale, device=device))
            fast = step(*arguments, draws=draws, seed=7)
            kernel = step.buffers.kernel
            with mock.patch.object(gluon_train, "gluon_train_reason", TRITON_ONLY):
                plain = step(*arguments, draws=draws, seed=7)
            if kernel != "gluon" or step.buffers.kernel != "triton":
                print(f"FAIL {name + ' ' + label:60s} kernels {kernel} / {step.buffers.kernel}: {step.buffers.gluon_reason(step.packed, loss, False, 1, 2)}", flush=True)
                FAILURES.append(f"{name} {label} dispatch")
                continue
            references = [AutogradForwardBackward(network, losses[loss])(dict(network.named_parameters()), batch, scale) for network in (compute, exact_model)]
            check_training(f"{name} {label}", torch.float16, fast, *references, compute, batch, losses[loss], scale)
            errors = [_error(fast[0], plain[0])] + [_error(a, b) for a, b in zip(fast[1], plain[1])]
            ok = max(errors) <= GLUON_TRAIN_TOLERANCE
            print(f"{'ok  ' if ok else 'FAIL'} {name + ' ' + label + ' vs triton':60s} loss {errors[0]:.1e}, worst gradient {max(errors[1:]):.1e} (tolerance {GLUON_TRAIN_TOLERANCE:.0e})", flush=True)
            if not ok:
                FAILURES.append(f"{name} {label} vs triton")
    # plain MLPs: inputs not encoded (5; 20 and 40, padded to 32 and 64), 1, 7 and 16 outputs, hidden width 48 padded to
    # 64, a sigmoid hidden layer; an empty batch, both tiles (2^18 rows: the large one)
    plain = ((5, 48, 3, "sigmoid", "none", "mse", 1), (20, 64, 4, "leaky_relu", "none", "relative_l1", 7), (40, 64, 2, "relu", "sigmoid", "l1", 16))
    for inputs, hidden, layers, act, out_act, loss, outputs in plain:
        mlp = MLP(MLPConfig(inputs=inputs, hidden=hidden, layers=layers, outputs=outputs, hidden_activation=act, output_activation=out_act)).to(device)
        compute = cast_model(mlp, torch.float16)
        exact_model = cast_model(compute, torch.float32)
        params = dict(compute.named_parameters())
        step = FusedForwardBackward(mlp, loss, dtype=torch.float16)
        name = f"gluon train mlp {inputs}-{hidden}x{layers}-{outputs} {act}/{out_act} {loss}"
        for n in (0, 1000, 1 << 15, 1 << 18):
            batch = Batch(inputs=(torch.rand(n, inputs, device=device) * 2 - 1).half(), targets=torch.rand(n, outputs, device=device))
            fast = step(params, batch, torch.tensor(256.0, device=device))
            kernel = step.buffers.kernel
            with mock.patch.object(gluon_train, "gluon_train_reason", TRITON_ONLY):
                slow = step(params, batch, torch.tensor(256.0, device=device))
            if kernel != "gluon":
                print(f"FAIL {name + f' n={n}':60s} kernel {kernel}", flush=True)
                FAILURES.append(f"{name} n={n} dispatch")
                continue
            if n == 0:
                ok = all(not g.any() for g in fast[1]) and float(fast[0].nan_to_num(0.0)) == float(slow[0].nan_to_num(0.0))
                print(f"{'ok  ' if ok else 'FAIL'} {name + ' n=0':60s} zero gradients, the loss as the Triton kernel's", flush=True)
                if not ok:
                    FAILURES.append(f"{name} n=0")
                continue
            exact_batch = Batch(inputs=batch.inputs.float(), targets=batch.targets)
            references = [AutogradForwardBackward(network, losses[loss])(dict(network.named_parameters()), rows, 256.0) for network, rows in ((compute, batch), (exact_model, exact_batch))]
            check_training(f"{name} n={n}", torch.float16, fast, *references, compute, batch, losses[loss], 256.0)
            errors = [_error(fast[0], slow[0])] + [_error(a, b) for a, b in zip(fast[1], slow[1])]
            ok = max(errors) <= GLUON_TRAIN_TOLERANCE
            print(f"{'ok  ' if ok else 'FAIL'} {name + f' n={n} vs triton':60s} loss {errors[0]:.1e}, worst gradient {max(errors[1:]):.1e} (tolerance {GLUON_TRAIN_TOLERANCE:.0e})", flush=True)
            if not ok:
                FAILURES.append(f"{name} n={n} vs triton")




@DTYPES
def test_mlp_forward(device, dtype) -> None:
    for hidden, layers, act, out_act in ((64, 3, "relu", "none"), (48, 2, "leaky_relu", "sigmoid"), (128, 2, "tanh", "none"), (16, 1, "clamped_gelu", "exp")):
        mlp = MLP(MLPConfig(inputs=12, hidden=hidden, layers=layers, outputs=5, hidden_activation=act, output_activation=out_act)).to(device).to(dtype)
        for n in (1000, 1 << 18):
            x = torch.rand(n, 12, device=device).to(dtype)
            exact = cast_model(mlp, torch.float32)(x.float())
            check(f"mlp {dtype} 12-{hidden}x{layers}-5 {act}/{out_act} n={n}", mlp_forward(PackedMLP.from_mlp(mlp), x), mlp(x), dtype, exact)
    net = CoordinateNetwork(CoordinateNetworkConfig(outputs=3)).to(device).to(dtype)
    uv = torch.rand(77777, 2, device=device)
    exact = cast_model(net.mlp, torch.float32)(net.encoding(uv).to(dtype).float())
    check(f"coordinate network {dtype}", mlp_forward(PackedMLP.from_mlp(net.mlp), uv, frequencies=3), net.mlp(net.encoding(uv).to(dtype)), dtype, exact)
    passed()


def test_neural_material_decode(device, bench) -> None:
    material = bench.copper_material(device)
    # 14 and 17 inputs: latents and directions in two half-width tiles; 12 latents + wi: one tile (FusedNeuralMaterial.feature_columns)
    twelve = [torch.randn(level.shape[0], level.shape[1], 12, device=device).half() for level in material.latents]
    for latents, directions in ((material.latents, ("wi", "wo")), (material.latents, ("half", "wo", "wi")), (twelve, ("wi",))):
        channels = int(latents[0].shape[2])
        decoder = MLP(MLPConfig(inputs=channels + 3 * len(directions), hidden=64, layers=3, outputs=3, hidden_activation="relu", output_activation="none"))
        neural = NeuralMaterial(latents, decoder.to(device).half(), directions)
        fused = NeuralMaterial(latents, neural.decoder, directions)
        fused.kernels = "triton"
        for n in (333, 1 << 20):
            uv = torch.rand(n, 2, device=device) * 4 - 2
            wi = torch.nn.functional.normalize(torch.randn(n, 3, device=device), dim=1)
            wo = torch.nn.functional.normalize(torch.randn(n, 3, device=device), dim=1)
            lod = torch.rand(n, device=device) * 12 - 1
            check(f"neural material {channels} ch {directions} bilinear n={n}", fused.decode(uv, wi, wo), neural.decode(uv, wi, wo), torch.float16)
            check(f"neural material {channels} ch {directions} trilinear n={n}", fused.decode(uv, wi, wo, lod), neural.decode(uv, wi, wo, lod), torch.float16)
    passed()


def test_gluon_decode(device, bench) -> None:
    check_gluon_decode(device, [(int(level.shape[1]), int(level.shape[0])) for level in bench.copper_material(device).latents])
    passed()


def test_ntc_decode(device, bench) -> None:
    from neuralbake.bakes.ntc.int8 import calibrate_int8, decode_texels_int8, int8_factors

    container = bench.helmet_ntc_container(device)
    fused_ntc = FusedNTC(container, torch.float16)
    for level_index in (0, 1, 5, 11):
        width, height = container.layout.level_sizes[level_index]
        n = min(width * height, 1 << 18)
        x = torch.randint(0, width, (n,), device=device)
        y = torch.randint(0, height, (n,), device=device)
        level = torch.full_like(x, level_index)
        check(f"ntc fp16 random access level {level_index}", fused_ntc.texels(level, x, y), decode_texels(container, level, x, y), torch.float16)
    width, height = container.layout.level_sizes[3]
    yy, xx = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij")
    expected = decode_texels(container, torch.full((width * height,), 3, device=device), xx.reshape(-1), yy.reshape(-1)).reshape(height, width, -1)
    check("ntc fp16 whole level 3", fused_ntc.level(3), expected, torch.float16)
    # int8 against its PyTorch arithmetic (the same integer sums; a rare one-step rounding difference allowed: fp16's tolerance)
    calibration = calibrate_int8(container)
    fused_int8 = FusedNTC(container, torch.int8, int8_factors(container, calibration))
    for level_index in (0, 5):
        width, height = container.layout.level_sizes[level_index]
        n = min(width * height, 1 << 18)
        x = torch.randint(0, width, (n,), device=device)
        y = torch.randint(0, height, (n,), device=device)
        level = torch.full_like(x, level_index)
        check(f"ntc int8 random access level {level_index}", fused_int8.texels(level, x, y), decode_texels_int8(container, calibration, level, x, y), torch.float16)
    passed()


@DTYPES
def test_fused_mlp_inside_autograd(device, dtype) -> None:
    """FusedMLP: an MLP's forward and backward inside autograd (the neural-material bake's encoder and decoder)."""
    torch.manual_seed(1)
    for inputs, hidden, layers, outputs in ((24, 64, 2, 8), (17, 64, 3, 3)):
        reference = MLP(MLPConfig(inputs=inputs, hidden=hidden, layers=layers, outputs=outputs, hidden_activation="relu", output_activation="none"))
        reference = reference.to(device).to(dtype)
        fused = MLP(reference.config).to(device).to(dtype)
        fused.load_state_dict(reference.state_dict())
        fused.kernels = "triton"
        exact = cast_model(reference, torch.float32)  # the same network in fp32: what both fp16 paths approximate
        for n in (1000, 1 << 16):
            x = (torch.rand(n, inputs, device=device) * 2 - 1).to(dtype)
            upstream = torch.randn(n, outputs, device=device)
            results = []
            for model, rows in ((reference, x), (fused, x), (exact, x.float())):
                rows = rows.clone().requires_grad_()
                y = model(rows)
                (y.float() * upstream).sum().backward()
                results.append((y, rows.grad, [p.grad.clone() for p in model.parameters()]))
                model.zero_grad(set_to_none=True)
            (y_ref, dx_ref, g_ref), (y_fused, dx_fused, g_fused), (y_exact, dx_exact, g_exact) = results
            name = f"fused mlp {dtype} {inputs}-{hidden}x{layers}-{outputs} n={n}"
            check(f"{name} values", y_fused, y_ref, dtype, y_exact)
            check_gradient(f"{name} input gradient", dx_fused, dx_ref, dx_exact, dtype)
            check_gradients(name, g_fused, g_ref, g_exact, dtype)
    passed()


LOSSES = {"mse": torch.nn.functional.mse_loss, "l1": torch.nn.functional.l1_loss, "relative_l1": relative_l1}


@DTYPES
def test_training_step(device, dtype) -> None:
    """The Triton training kernel (check_gluon_train checks the Gluon one) against autograd, with the running gradients
    carried in registers where ``carries_gradients`` takes them and, on the same batches, added to the slots."""
    torch.manual_seed(2)
    for hidden, act, out_act, loss in ((64, "leaky_relu", "sigmoid", "mse"), (128, "relu", "none", "relative_l1"), (32, "tanh", "exp", "l1")):
        model = CoordinateNetwork(CoordinateNetworkConfig(hidden=hidden, layers=4, outputs=3, hidden_activation=act, output_activation=out_act)).to(device)
        compute = CoordinateNetwork(model.config).to(device).to(dtype)
        compute.load_state_dict(model.state_dict())
        params = dict(compute.named_parameters())
        exact_model = cast_model(compute, torch.float32)  # the compute weights in fp32: what both paths approximate
        carried = FusedForwardBackward(model, loss, dtype=dtype)
        with mock.patch.object(training, "carries_gradients", lambda packed: False):
            slots = FusedForwardBackward(model, loss, dtype=dtype)
        steps = [carried, slots] if carried.buffers.carry else [slots]
        for n in (1000, 1 << 16):
            batch = Batch(inputs=torch.rand(n, 2, device=device), targets=torch.rand(n, 3, device=device))
            scale = 256.0 if dtype == torch.float16 else 1.0
            ref_loss, ref_grads = AutogradForwardBackward(compute, LOSSES[loss])(params, batch, scale)
            exact_loss, exact_grads = AutogradForwardBackward(exact_model, LOSSES[loss])(dict(exact_model.named_parameters()), batch, scale)
            for step in steps:
                where = "registers" if step.buffers.carry else "slots"
                with mock.patch.object(gluon_train, "gluon_train_reason", TRITON_ONLY):
                    fused_loss, grads = step(params, batch, torch.tensor(scale, device=device))
                name = f"train {dtype} {hidden} {act}/{out_act} {loss} {where} n={n}"
                check_training(name, dtype, (fused_loss, grads), (ref_loss, ref_grads), (exact_loss, exact_grads), compute, batch, LOSSES[loss], scale)
    passed()


@DTYPES
def test_batches_drawn_in_the_kernel(device, dtype, bench) -> None:
    """TexelDraws (uniform uv, an image's nearest texels), the RTXNS network on the bench's 1024x1024 image, each uv
    transform: the targets against the sampler's texel lookup, bit for bit, and the step against autograd on the batch
    the kernel drew (FusedForwardBackward.drawn_batch)."""
    from neuralbake.bakes.neural_texture import ImageSampler, texel_lookup, transform_uv

    image = bench.rtxns_image(device)
    torch.manual_seed(4)
    model = CoordinateNetwork(CoordinateNetworkConfig(outputs=3)).to(device)
    compute = cast_model(model, dtype)
    exact_model = cast_model(compute, torch.float32)
    params = dict(compute.named_parameters())
    step = FusedForwardBackward(model, "mse", dtype=dtype)
    scale = 256.0 if dtype == torch.float16 else 1.0
    for transform in ("identity", "flip", "zoom"):
        for n in (1000, 1 << 16):
            draws = step.draws_from(ImageSampler(image, transform, n))
            assert draws is not None
            step.seek_draws(123457)
            batch = step.drawn_batch(draws, seed=11)
            name = f"drawn batch {dtype} {transform} n={n}"
            assert torch.equal(batch.targets, texel_lookup(image, transform_uv(batch.inputs, transform))), name
            assert 0.0 <= float(batch.inputs.min()) and float(batch.inputs.max()) < 1.0, name
            references = [AutogradForwardBackward(network, LOSSES["mse"])(dict(network.named_parameters()), batch, scale) for network in (compute, exact_model)]
            check_training(name, dtype, step(params, None, scale, draws=draws, seed=11), *references, compute, batch, LOSSES["mse"], scale)
    passed()


def test_drawn_batches_in_the_graphed_trainer(device, bench) -> None:
    check_drawn_graph(device, bench.rtxns_image(device))
    passed()


def test_gluon_training_kernel(device, bench) -> None:
    check_gluon_train(device, bench.rtxns_image(device))
    passed()


@DTYPES
def test_optimizer_step_on_the_kernels(device, dtype) -> None:
    """The optimizer step on the kernels (gradient sum, unscale, Adam, loss scale) against PyTorch's fused Adam, the same
    fused forward/backward under both: masters and moments after each of 3 steps (before fp16 rounding flips compound),
    then 200 steps in a CUDA graph (training loss within 5 %, the same loss-scale history)."""
    from neuralbake.nn.trainer import Trainer, TrainerConfig

    class Sampler:
        capturable = True
        batch_size = 1 << 16

        def sample(self, generator: torch.Generator) -> Batch:
            uv = torch.rand(self.batch_size, 2, generator=generator, device=device)
            return Batch(inputs=uv, targets=torch.stack((torch.sin(9 * uv[:, 0]), uv[:, 1] ** 2, uv[:, 0] * uv[:, 1]), dim=1) * 0.4 + 0.3)

    precision = {d: name for name, d in PRECISIONS.items()}[dtype]

    def pair(steps: int) -> list[Trainer]:
        config = TrainerConfig(steps=steps, learning_rate=0.01, precision=precision, loss_scale_growth_interval=10, log_every=steps, eval_every=0, checkpoint_every=0, checkpoint_seconds=0)
        trainers = []
        for fused_update in (True, False):
            torch.manual_seed(3)
            net = CoordinateNetwork(CoordinateNetworkConfig(outputs=3)).to(device)
            # the PyTorch step's trainer is told the kernels cannot stand in for its optimizer (so it keeps its compute copy)
            refuse = mock.patch.object(FusedForwardBackward, "can_update", staticmethod(lambda optimizer: "the PyTorch step"))
            with contextlib.nullcontext() if fused_update else refuse:
                trainer = Trainer(net, Sampler(), LOSSES["mse"], config, device=device, forward_backward=FusedForwardBackward(net, "mse", dtype=dtype))
            assert (trainer.fused_update is not None) == fused_update
            trainers.append(trainer)
        return trainers

    run, _ = pair(3)
    fb = run.forward_backward
    compared = 0
    for step in range(3):
        before = {name: p.detach().clone() for name, p in run.model.named_parameters()}
        states = {name: {k: v.clone() for k, v in run.optimizer.state[p].items()} for name, p in run.model.named_parameters()}
        scale = float(run.scaler.scale_tensor)
        if not run.train_step():  # an overflow: Adam skipped, so the state must be as it was and the scale halved
            assert all(torch.equal(before[name], p) for name, p in run.model.named_parameters())
            assert all(torch.equal(states[name]["exp_avg"], run.optimizer.state[p]["exp_avg"]) for name, p in run.model.named_parameters() if states[name])
            assert float(run.scaler.scale_tensor) == scale / 2
            continue
        compared += 1
        programs = min(fb.buffers.programs, -(-Sampler.batch_size // fb.buffers.block_rows))
        expected = fb.buffers.grads[:programs].sum(0) / scale
        check(f"optimizer step {precision} step {step} gradient sum", fb.adam_state.grad, expected, torch.float32)
        reference = {name: torch.nn.Parameter(value.clone()) for name, value in before.items()}
        lr = torch.tensor(float(run.optimizer.param_groups[0]["lr"]), device=device)  # this step's, from the schedule
        adam = torch.optim.Adam(list(reference.values()), lr=lr, betas=(0.9, 0.99), eps=1e-10, fused=True, capturable=True)
        for name, param in reference.items():
            if states[name]:
                adam.state[param] = {k: v.clone() for k, v in states[name].items()}
        for param, grad in zip(reference.values(), unpack_gradients(fb.packed, fb.adam_state.grad)):
            param.grad = grad.contiguous().clone()
        adam.step()
        for name, param in run.model.named_parameters():
            check(f"optimizer step {precision} step {step} master {name}", param, reference[name], torch.float32)
            for key in ("exp_avg", "exp_avg_sq"):
                check(f"optimizer step {precision} step {step} {key} {name}", run.optimizer.state[param][key], adam.state[reference[name]][key], torch.float32)
            assert float(run.optimizer.state[param]["step"]) == float(adam.state[reference[name]]["step"]), name
    assert compared, "every step overflowed: nothing compared"
    trainers = pair(200)
    results = [trainer.fit() for trainer in trainers]
    losses = [result.final_loss for result in results]
    scalers = [(result.loss_scale, result.skipped_steps) for result in results]
    flat = trainers[0].forward_backward.adam_state
    ticket = int(flat.ticket) if flat is not None else -1  # Adam's programs, closing out of order on a GPU, left it at 0
    steps = {float(trainers[0].optimizer.state[p]["step"]) for p in trainers[0].model.parameters()}
    assert abs(losses[0] - losses[1]) <= 0.05 * losses[1], losses
    assert scalers[0] == scalers[1] and ticket == 0 and steps == {200.0 - scalers[0][1]}, (scalers, ticket, steps)
    passed()
