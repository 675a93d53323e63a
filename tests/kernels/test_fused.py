"""The fused Triton kernels against their PyTorch references (values and gradients).

On a machine without a GPU the kernels run in Triton's interpreter (tests/conftest.py sets
``TRITON_INTERPRET=1`` there), so these check the kernel code itself. Tolerances: fp32 weights
agree to 1e-5 (the same sums in another order); fp16 weights to 2e-2 relative to the output's
scale, the largest value of the reference (fp16 has 11 significant bits; PyTorch sums each layer in
fp32 and rounds to fp16 after it, the training kernels do the same, and the decodes of fp16
networks sum their hidden layers in fp16, as tiny-cuda-nn does: kernels.packing.PackedMLP.half_sums).
"""

from __future__ import annotations

import contextlib
import math
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

import triton
import triton.language as tl

from neuralbake.bakes.neural_material.model import NeuralMaterial, relative_l1
from neuralbake.bakes.ntc.container import pack_container, read_container
from neuralbake.bakes.ntc.decode import decode_texels
from neuralbake.bakes.ntc.layout import LatentShape, NTCLayout
from neuralbake.bakes.ntc.model import NTCModel
from neuralbake.bakes.ntc.texture_set import ChannelGroup
from neuralbake.errors import ConfigError
from neuralbake.kernels import interpreting, resolve_kernels, training, tuning, unsupported_reason
from neuralbake.kernels.decoders import FusedNeuralMaterial, FusedNTC
from neuralbake.kernels.packing import PackedMLP, mlp_forward
from neuralbake.kernels.training import FusedForwardBackward, FusedMLP
from neuralbake.kernels.triton_network import _sin_cos_turns
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.trainer import AutogradForwardBackward, Batch, Trainer, TrainerConfig, cast_model

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
pytestmark = pytest.mark.skipif(DEVICE.type == "cpu" and not interpreting(), reason="needs a GPU or TRITON_INTERPRET=1")


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    scale = float(expected.detach().abs().max())
    assert scale > 0, "a reference of zeros cannot tell a right kernel from a wrong one"
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    error = float((actual.detach().float() - expected.detach().float()).abs().max())
    assert error <= tolerance * scale, f"max error {error:.3g} > {tolerance * scale:.3g}"


def _as_close_as_autograd(actual: torch.Tensor, autograd: torch.Tensor, exact: torch.Tensor, scale: float = 1.0) -> None:
    """An fp16 gradient summed over rows with cancelling signs carries fp16's rounding of each term, so it is judged
    against the exact (fp32) gradient of the same fp16 weights: no further from it than PyTorch's own fp16 autograd
    gradient is (twice that, plus 0.1 % of the tensor's scale). ``actual`` and ``autograd`` are scaled by ``scale``."""
    fused_error = float((actual.float() / scale - exact).abs().max())
    torch_error = float((autograd.float() / scale - exact).abs().max())
    assert fused_error <= 2.0 * torch_error + 1e-3 * float(exact.abs().max()), (fused_error, torch_error)


def _mlp(inputs: int, hidden: int, layers: int, outputs: int, hidden_act: str, output_act: str, seed: int = 0) -> MLP:
    torch.manual_seed(seed)
    config = MLPConfig(inputs=inputs, hidden=hidden, layers=layers, outputs=outputs, hidden_activation=hidden_act, output_activation=output_act)
    return MLP(config).to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    ("hidden_act", "output_act", "layers", "hidden"),
    [("relu", "none", 3, 64), ("leaky_relu", "sigmoid", 2, 48), ("clamped_gelu", "none", 1, 16), ("tanh", "exp", 4, 32), ("sigmoid", "relu", 2, 20)],
)
def test_mlp_forward_matches_torch(dtype: torch.dtype, hidden_act: str, output_act: str, layers: int, hidden: int) -> None:
    mlp = _mlp(12, hidden, layers, 5, hidden_act, output_act).to(dtype)
    x = torch.rand(300, 12, device=DEVICE) * 2 - 1
    expected = mlp(x.to(dtype))
    _close(mlp_forward(PackedMLP.from_mlp(mlp), x.to(dtype)), expected, dtype)


def test_frequency_encoded_coordinates_match_the_coordinate_network() -> None:
    torch.manual_seed(1)
    net = CoordinateNetwork(CoordinateNetworkConfig(hidden=32, layers=3, outputs=4, frequencies=4)).to(DEVICE)
    uv = torch.rand(257, 2, device=DEVICE) * 3 - 1
    _close(mlp_forward(PackedMLP.from_mlp(net.mlp), uv, frequencies=4), net(uv), torch.float32)


def test_the_kernels_frequency_encoding_stays_accurate_at_high_octaves() -> None:
    """12 octaves (phases up to 2^11 pi): the kernel's encoding, one sine of a phase reduced exactly in half-turns, against float64."""
    from neuralbake.nn.encoding import frequency_encode

    uv = torch.rand(300, 2, generator=torch.Generator().manual_seed(20), dtype=torch.float64) * 3 - 1
    identity = PackedMLP(
        [torch.eye(48, dtype=torch.float64).float(), torch.eye(48).float()], [torch.zeros(48), torch.zeros(48)],
        hidden_activation="none", output_activation="none", leak=0.0, dtype=torch.float32,
    )  # fmt: skip
    encoded = mlp_forward(identity, uv.float().to(DEVICE), frequencies=12).double().cpu()
    exact = frequency_encode(uv.float().double(), 12)
    assert float((encoded - exact).abs().max()) < 1e-5  # fp32 sin(x * pi 2^11) taken directly is off by 8e-4 here


@triton.jit
def _sines(t_ptr, cosine_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``sin(pi t)``, or ``cos(pi t)`` where ``cosine``, by the kernels' :func:`_sin_cos_turns`."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    t = tl.load(t_ptr + i, mask=mask, other=0.0)
    tl.store(out_ptr + i, _sin_cos_turns(t, tl.load(cosine_ptr + i, mask=mask, other=0) != 0), mask=mask)


def test_the_kernels_sine_of_half_turns_is_as_accurate_as_fp32_allows() -> None:
    """``_sin_cos_turns`` (the encodings' sine: a Taylor series on the phase's remainder after its nearest half-turn)
    against float64 over phases of many turns, both signs, the half- and quarter-turns themselves and phases a few ulps
    below whole turns: within 6e-7,
    about what the fp32 product pi u leaves (a series one term shorter is off by 4e-6)."""
    generator = torch.Generator().manual_seed(21)
    quarters = torch.arange(-16, 17, dtype=torch.float32) / 4
    # just below whole turns, where the reduced phase (a cosine's, plus half a turn) rounds up to 2.5 half-turns
    edges = torch.tensor([-1e-8, -(2.0**-24), -(2.0**-23), 2 - 2.0**-23, 2 - 2.0**-22, 4 - 2.0**-21, -2 - 2.0**-22, 1 - 2.0**-24, 3.0, -3.0])
    fixed = torch.cat([quarters, edges])
    t = torch.cat([fixed, fixed, (torch.rand(20000, generator=generator, dtype=torch.float64) * 4096 - 2048).float()])
    cosine = torch.cat([torch.zeros(len(fixed)), torch.ones(len(fixed)), (torch.rand(20000, generator=generator) < 0.5).float()]).to(torch.int32)
    out = torch.empty_like(t)
    t, cosine, out = t.to(DEVICE), cosine.to(DEVICE), out.to(DEVICE)
    _sines[(triton.cdiv(t.numel(), 1024),)](t, cosine, out, t.numel(), BLOCK=1024)
    phase = torch.pi * t.double().cpu()
    exact = torch.where(cosine.cpu().bool(), torch.cos(phase), torch.sin(phase))
    assert float((out.double().cpu() - exact).abs().max()) < 6e-7


def _neural_material(latent: int, directions: tuple[str, ...], dtype: torch.dtype) -> NeuralMaterial:
    torch.manual_seed(2)
    sizes = [(16, 8), (8, 4), (4, 2), (2, 1), (1, 1)]
    latents = [torch.randn(h, w, latent, device=DEVICE) for w, h in sizes]
    decoder = _mlp(latent + 3 * len(directions), 32, 3, 3, "relu", "none", seed=3)
    material = NeuralMaterial(latents, decoder, directions)
    return material.to(dtype) if dtype != torch.float32 else material


def _hemisphere(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(seed)
    wi = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    wo = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
    wo[: n // 2, 2] = wo[: n // 2, 2].abs()  # half the views above, so most samples are valid
    wi[: n // 2, 2] = wi[: n // 2, 2].abs()
    return wi.to(DEVICE), wo.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    ("latent", "directions", "feature_columns"),
    # two half-width feature tiles (14 inputs -> 16 columns; 17 -> 32), and one tile (15 -> 16: 12 latents do not fit in 8)
    [(8, ("wi", "wo"), 8), (8, ("half", "wo", "wi"), 16), (12, ("wi",), 16)],
)
@pytest.mark.parametrize("filtered", [False, True])
def test_neural_material_decode_matches_torch(dtype: torch.dtype, latent: int, directions: tuple[str, ...], feature_columns: int, filtered: bool) -> None:
    material = _neural_material(latent, directions, dtype)
    assert FusedNeuralMaterial(material).feature_columns == feature_columns
    n = 333
    uv = (torch.rand(n, 2, device=DEVICE) * 4 - 2).float()  # wraps several times, negative too
    uv[:6] = torch.tensor([[0.0, 0.0], [1.0, 1.0], [1 / 32, 1 / 16], [-1e-7, 0.999999], [3e9, -2e9], [1e6 + 0.25, -1e6 - 0.5]], device=DEVICE)
    wi, wo = _hemisphere(n, 4)
    lod = (torch.rand(n, device=DEVICE) * 6 - 0.5) if filtered else None  # below 0 and past the last level too
    if lod is not None:
        lod[:3] = torch.tensor([0.0, 2.0, 4.0], device=DEVICE)
    expected = material.decode(uv, wi, wo, lod)
    material.kernels = "triton"
    actual = material.decode(uv, wi, wo, lod)
    assert actual.shape == (n, 3) and actual.dtype == torch.float32
    assert bool((actual[(wi[:, 2] <= 0) | (wo[:, 2] <= 0)] == 0).all())
    _close(actual, expected, dtype)
    if lod is None:
        layer = material(uv)  # the Layer interface takes the same path
        _close(layer.eval(wi, wo), expected, dtype)


def test_fp16_decodes_sum_in_fp16_and_match_torch() -> None:
    """fp16 decodes sum their hidden layers in fp16 (PackedMLP.half_sums) and meet the fp16 tolerance."""
    mlp = _mlp(12, 32, 3, 5, "leaky_relu", "none", seed=4).half()
    packed = PackedMLP.from_mlp(mlp)
    assert packed.half_sums
    x = torch.rand(300, 12, device=DEVICE).half()
    _close(mlp_forward(packed, x), mlp(x), torch.float16)
    material = _neural_material(8, ("wi", "wo"), torch.float16)
    uv = torch.rand(300, 2, device=DEVICE)
    wi, wo = _hemisphere(300, 5)
    expected = material.decode(uv, wi, wo)
    material.kernels = "triton"
    _close(material.decode(uv, wi, wo), expected, torch.float16)
    container = _ntc_container()
    x = torch.randint(0, 16, (300,), device=DEVICE)
    level = torch.zeros_like(x)
    fused = FusedNTC(container, torch.float16)
    assert fused.packed.half_sums
    _close(fused.texels(level, x, x.flip(0)), decode_texels(container, level, x, x.flip(0)), torch.float16)


def test_a_decode_output_layer_padded_to_4_gives_the_values_of_torch() -> None:
    mlp = _mlp(12, 32, 2, 3, "relu", "none", seed=6)
    packed = PackedMLP.from_mlp(mlp)
    assert packed.op == 4 and PackedMLP.from_mlp(mlp, training=True).op == 16
    x = torch.rand(200, 12, device=DEVICE)
    _close(mlp_forward(packed, x), mlp(x), torch.float32)


def test_only_fp16_decodes_with_a_leak_in_0_1_sum_in_fp16() -> None:
    mlp = _mlp(12, 32, 2, 5, "leaky_relu", "none", seed=4)
    assert not PackedMLP.from_mlp(mlp).half_sums  # fp32
    assert not PackedMLP.from_mlp(mlp, torch.bfloat16).half_sums  # no bf16 accumulation on the tensor cores
    assert PackedMLP.from_mlp(mlp, torch.float16).half_sums
    assert not PackedMLP.from_mlp(mlp, torch.float16, training=True).half_sums  # FusedMLP's forward: what its backward differentiates
    assert (PackedMLP.from_mlp(mlp, torch.float16).op, PackedMLP.from_mlp(mlp, torch.float16, training=True).op) == (8, 16)
    weights, biases = [layer.weight for layer in mlp.layers], [layer.bias for layer in mlp.layers]
    steep = PackedMLP(weights, biases, hidden_activation="leaky_relu", output_activation="none", leak=1.5, dtype=torch.float16)
    assert not steep.half_sums  # max(x, leak x) is the leaky ReLU only for 0 <= leak <= 1


def _ntc_container(features: int = 4, hidden: tuple[int, ...] = (24, 16), size: int = 16):
    layout = NTCLayout(size, size, (ChannelGroup("a", ("R", "G", "B")), ChannelGroup("b", ("X", "Y"))), LatentShape(2, features, 4), hidden=hidden, pe_frequencies=2)
    model = NTCModel(layout, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        for layer in model.layers:  # larger weights than the initialisation, so the outputs leave [0, 1] sometimes
            layer.weight.mul_(3.0)
            layer.bias.add_(0.4)
    return read_container(pack_container(model)).to(DEVICE)


@pytest.mark.parametrize(("dtype", "features"), [(torch.float32, 4), (torch.float16, 4), (torch.float32, 6), (torch.float16, 12)])
def test_ntc_random_access_matches_torch(dtype: torch.dtype, features: int) -> None:
    """Latent feature counts of the shipped shapes, powers of two or not (4, 6, 12), in both precisions."""
    container = _ntc_container(features=features)
    g = torch.Generator().manual_seed(6)
    sizes = container.layout.level_sizes
    level = torch.randint(0, len(sizes), (400,), generator=g)
    width = torch.tensor([w for w, _ in sizes])[level]
    height = torch.tensor([h for _, h in sizes])[level]
    x = (torch.rand(400, generator=g) * width).long()
    y = (torch.rand(400, generator=g) * height).long()
    level, x, y = level.to(DEVICE), x.to(DEVICE), y.to(DEVICE)
    expected = decode_texels(container, level, x, y)
    _close(FusedNTC(container, dtype).texels(level, x, y), expected, dtype)


def test_ntc_int8_arithmetic_matches_its_reference_and_stays_near_fp32() -> None:
    """The int8 decode (int8 activations x the container's int8 weights, int32 sums) against its PyTorch arithmetic
    (``decode_texels_int8``), random access and a whole level; and that arithmetic against the fp32 decode."""
    from neuralbake.bakes.ntc.int8 import calibrate_int8, decode_texels_int8, int8_factors

    container = _ntc_container()
    calibration = calibrate_int8(container, texels=4096)
    assert len(calibration.steps) == len(container.weights_int8) and all(step > 0 for step in calibration.steps)
    fused = FusedNTC(container, torch.int8, int8_factors(container, calibration))
    g = torch.Generator().manual_seed(8)
    sizes = container.layout.level_sizes
    level = torch.randint(0, len(sizes), (600,), generator=g)
    x = (torch.rand(600, generator=g) * torch.tensor([w for w, _ in sizes])[level]).long()
    y = (torch.rand(600, generator=g) * torch.tensor([h for _, h in sizes])[level]).long()
    level, x, y = level.to(DEVICE), x.to(DEVICE), y.to(DEVICE)
    expected = decode_texels_int8(container, calibration, level, x, y)
    error = (fused.texels(level, x, y) - expected).abs()
    # the same integer sums; an fp32 difference in a feature can move one activation across a rounding step (a rare
    # one-step change, each far below the output's scale)
    assert float(error.max()) < 0.02 and float((error > 1e-5).float().mean()) < 0.02, (float(error.max()), float((error > 1e-5).float().mean()))
    width, height = sizes[1]
    yy, xx = torch.meshgrid(torch.arange(height, device=DEVICE), torch.arange(width, device=DEVICE), indexing="ij")
    whole = decode_texels_int8(container, calibration, torch.full((width * height,), 1, device=DEVICE), xx.reshape(-1), yy.reshape(-1))
    assert float((fused.level(1).reshape(-1, whole.shape[1]) - whole).abs().max()) < 0.02
    fp32 = decode_texels(container, level, x, y)
    assert 1e-4 < float((expected - fp32).abs().mean()) < 0.01  # quantised activations: a small, real difference
    with pytest.raises(ConfigError, match="activation steps"):
        FusedNTC(container, torch.int8)
    with pytest.raises(ConfigError, match="int8 decode"):
        FusedNTC(container, torch.float16, int8_factors(container, calibration))


def test_int8_calibration_steps_and_factors() -> None:
    """The steps are the quantile of each layer's input magnitudes over 127; the factors the inverse steps and step x
    weight scale, layer by layer; and the unclamped int8 decoder stays within a few steps of the fp32 one."""
    from neuralbake.bakes.ntc.int8 import _layer_inputs, _texels, calibrate_int8, decoder_forward_int8, fp16_latents, int8_factors
    from neuralbake.bakes.ntc.model import GridTables, decoder_forward, sample_features
    from neuralbake.nn.activations import activation_fn

    container = _ntc_container().to("cpu")
    layout = container.layout
    level, x, y = _texels(container, 2048, torch.Generator().manual_seed(0))
    features = sample_features(*fp16_latents(container), GridTables.from_layout(layout), level, x, y, layout.pe_frequencies)
    inputs = _layer_inputs(container, features)
    largest = calibrate_int8(container, texels=2048, quantile=1.0)
    assert largest.steps == pytest.approx([float(t.abs().max()) / 127 for t in inputs], rel=1e-6)
    median = calibrate_int8(container, texels=2048, quantile=0.5)
    assert median.steps == pytest.approx([float(t.abs().flatten().kthvalue(math.ceil(0.5 * t.numel())).values) / 127 for t in inputs], rel=1e-6)
    inverse, factor = int8_factors(container, largest)
    scales = [float(s) for s in container.scales]
    assert inverse.tolist() == pytest.approx([1 / s for s in largest.steps], rel=1e-6)
    assert factor.tolist() == pytest.approx([a * b for a, b in zip(largest.steps, scales, strict=True)], rel=1e-6)
    exact = decoder_forward(features, container.weights(), container.biases, activation_fn(layout.activation, layout.leak))
    error = (decoder_forward_int8(features, container, largest) - exact).abs()
    assert float(error.mean()) < 0.015 * float(exact.abs().mean()), (float(error.mean()), float(exact.abs().mean()))  # measured 0.009


def test_ntc_whole_level_matches_random_access() -> None:
    container = _ntc_container(features=2, hidden=(16,))
    fused = FusedNTC(container, torch.float32)
    for index in (0, 1, 4):
        width, height = container.layout.level_sizes[index]
        yy, xx = torch.meshgrid(torch.arange(height, device=DEVICE), torch.arange(width, device=DEVICE), indexing="ij")
        level = torch.full((width * height,), index, device=DEVICE)
        expected = decode_texels(container, level, xx.reshape(-1), yy.reshape(-1)).reshape(height, width, -1)
        _close(fused.level(index), expected, torch.float32)


LOSSES = {
    "mse": torch.nn.functional.mse_loss,
    "l1": torch.nn.functional.l1_loss,
    "relative_l1": relative_l1,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize(("hidden_act", "output_act"), [("relu", "none"), ("leaky_relu", "sigmoid"), ("tanh", "exp")])
def test_training_step_gradients_match_autograd(dtype: torch.dtype, loss: str, hidden_act: str, output_act: str) -> None:
    model = _mlp(10, 32, 3, 3, hidden_act, output_act, seed=7).to(dtype)
    n = 300  # three tiles over two programs: the per-program slots and their sum both count
    g = torch.Generator().manual_seed(8)
    batch = Batch(inputs=(torch.rand(n, 10, generator=g) * 2 - 1).to(DEVICE).to(dtype), targets=torch.rand(n, 3, generator=g).to(DEVICE))
    params = dict(model.named_parameters())
    scale = 64.0 if dtype == torch.float16 else 1.0
    ref_loss, ref_grads = AutogradForwardBackward(model, LOSSES[loss])(params, batch, scale)
    fused = FusedForwardBackward(model, loss, dtype=dtype, programs=2)
    fused_loss, fused_grads = fused(params, batch, torch.tensor(scale, device=DEVICE))
    _close(fused_loss, ref_loss, dtype)
    if dtype == torch.float32:
        for (name, param), expected, actual in zip(params.items(), ref_grads, fused_grads):
            assert actual.shape == param.shape, name
            _close(actual, expected, dtype)
        return
    exact_model = cast_model(model, torch.float32)
    exact = Batch(inputs=batch.inputs.float(), targets=batch.targets)
    _, exact_grads = AutogradForwardBackward(exact_model, LOSSES[loss])(dict(exact_model.named_parameters()), exact, 1.0)
    for (name, param), half, actual, truth in zip(params.items(), ref_grads, fused_grads, exact_grads):
        assert actual.shape == param.shape, name
        _as_close_as_autograd(actual, half, truth, scale)


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("hidden", [32, 128])
def test_gradients_carried_in_registers_or_added_to_the_slots_agree(monkeypatch: pytest.MonkeyPatch, layers: int, hidden: int) -> None:
    """fp16 training with a program's running gradients carried in registers across its tiles (weights loaded once)
    or added to its slot in memory: the loss step's and FusedMLP's gradients agree with one another and are
    as close to the exact gradient as autograd's fp16 ones; a network whose gradients do not fit in registers never carries;
    a network without hidden-to-hidden layers (layers=1) included."""
    model = _mlp(10, hidden, layers, 3, "leaky_relu", "sigmoid", seed=7).half()
    exact = cast_model(model, torch.float32)
    n = 500  # several tiles a program (64 rows a tile, 32 at width 128; three programs)
    g = torch.Generator().manual_seed(8)
    batch = Batch(inputs=(torch.rand(n, 10, generator=g) * 2 - 1).to(DEVICE).half(), targets=torch.rand(n, 3, generator=g).to(DEVICE))
    upstream = torch.randn(n, 3, generator=g).to(DEVICE)
    params = dict(model.named_parameters())
    _, half_grads = AutogradForwardBackward(model, LOSSES["mse"])(params, batch, 64.0)
    _, exact_grads = AutogradForwardBackward(exact, LOSSES["mse"])(dict(exact.named_parameters()), Batch(batch.inputs.float(), batch.targets), 64.0)
    tensors = [layer.weight for layer in model.layers] + [layer.bias for layer in model.layers]
    results = []
    fits = training.carries_gradients
    for carry in (False, True):  # the slots forced on a network that would carry, to compare the two on one network
        monkeypatch.setattr(training, "carries_gradients", lambda packed, carry=carry: carry and fits(packed))
        step = FusedForwardBackward(model, "mse", dtype=torch.float16, programs=3)
        # 128 x 3: 37,264 gradient values, past 128 registers x 64 threads
        assert step.buffers.carry == (carry and not (hidden == 128 and layers == 3))
        _, grads = step(params, batch, torch.tensor(64.0, device=DEVICE))
        for half_grad, actual, truth in zip(half_grads, grads, exact_grads, strict=True):
            _as_close_as_autograd(actual, half_grad, truth)
        dx, weight_grads = FusedMLP(model, programs=3).backward(batch.inputs, upstream, tensors)
        results.append([*grads, dx, *weight_grads])
    for other in results[1:]:
        for expected, actual in zip(results[0], other, strict=True):
            assert float((actual.float() - expected.float()).abs().max()) <= 1e-2 * max(1e-6, float(expected.float().abs().max()))


def test_which_networks_carry_their_gradients_in_registers() -> None:
    """fp16 and bf16 networks whose gradients fit the register estimate carry them; wider or deeper ones and fp32 ones keep the slots."""

    def carries(inputs: int, hidden: int, layers: int, dtype: torch.dtype = torch.float16) -> bool:
        return training.carries_gradients(PackedMLP.from_mlp(_mlp(inputs, hidden, layers, 3, "leaky_relu", "sigmoid"), dtype, training=True))

    assert carries(12, 64, 4) and carries(12, 128, 1) and carries(24, 64, 2)  # the RTXNS network, the neural material's encoder
    assert not carries(12, 64, 5) and not carries(12, 128, 2) and not carries(64, 64, 4)
    assert carries(12, 64, 4, torch.bfloat16) and not carries(12, 64, 5, torch.bfloat16)
    assert not carries(12, 64, 4, torch.float32)


@pytest.mark.parametrize("hidden_act", ["relu", "leaky_relu"])
def test_fp16_training_matches_autograd(hidden_act: str) -> None:
    """The fp16 training kernel's ReLUs in fp32 on the unrounded sum, rounded after: the loss and FusedMLP's values as
    PyTorch's fp16 layers compute them, every gradient as close to the exact one as autograd's."""
    model = _mlp(10, 32, 3, 3, hidden_act, "sigmoid", seed=7).half()
    g = torch.Generator().manual_seed(8)
    batch = Batch(inputs=(torch.rand(300, 10, generator=g) * 2 - 1).to(DEVICE).half(), targets=torch.rand(300, 3, generator=g).to(DEVICE))
    params = dict(model.named_parameters())
    step = FusedForwardBackward(model, "mse", dtype=torch.float16, programs=2)
    ref_loss, ref_grads = AutogradForwardBackward(model, LOSSES["mse"])(params, batch, 64.0)
    loss, grads = step(params, batch, torch.tensor(64.0, device=DEVICE))
    _close(loss, ref_loss, torch.float16)
    exact_model = cast_model(model, torch.float32)
    _, exact_grads = AutogradForwardBackward(exact_model, LOSSES["mse"])(dict(exact_model.named_parameters()), Batch(batch.inputs.float(), batch.targets), 1.0)
    for half_grad, actual, truth in zip(ref_grads, grads, exact_grads, strict=True):
        _as_close_as_autograd(actual, half_grad, truth, 64.0)
    _close(FusedMLP(model)(batch.inputs), model(batch.inputs), torch.float16)


def test_training_step_of_a_coordinate_network_matches_autograd() -> None:
    torch.manual_seed(9)
    net = CoordinateNetwork(CoordinateNetworkConfig(hidden=16, layers=2, outputs=3, output_activation="sigmoid")).to(DEVICE)
    batch = Batch(inputs=torch.rand(200, 2, device=DEVICE), targets=torch.rand(200, 3, device=DEVICE))
    params = dict(net.named_parameters())
    ref_loss, ref_grads = AutogradForwardBackward(net, LOSSES["mse"])(params, batch, 1.0)
    fused_loss, fused_grads = FusedForwardBackward(net, "mse", dtype=torch.float32, programs=3)(params, batch, 1.0)
    _close(fused_loss, ref_loss, torch.float32)
    for expected, actual in zip(ref_grads, fused_grads):
        _close(actual, expected, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("hidden_act", "output_act"), [("relu", "none"), ("leaky_relu", "sigmoid"), ("tanh", "exp")])
def test_fused_mlp_inside_autograd_matches_autograd(dtype: torch.dtype, hidden_act: str, output_act: str) -> None:
    """``MLP.kernels = "triton"``: values, weight and input gradients through an outer graph (a loss on part of the outputs)."""
    reference = _mlp(13, 32, 2, 5, hidden_act, output_act, seed=11).to(dtype)
    fused = _mlp(13, 32, 2, 5, hidden_act, output_act, seed=11).to(dtype)
    fused.kernels = "triton"
    g = torch.Generator().manual_seed(12)
    x = (torch.rand(2, 150, 13, generator=g) * 2 - 1).to(DEVICE).to(dtype)  # leading dims, and two tiles over the programs
    upstream = torch.randn(2, 150, 5, generator=g).to(DEVICE)
    results = []
    for model in (reference, fused):
        rows = x.clone().requires_grad_()
        y = model(rows)
        (torch.sin(y.float()) * upstream).sum().backward()  # any graph around the MLP
        results.append((y, rows.grad, [p.grad for p in model.parameters()]))
    (y_ref, dx_ref, grads_ref), (y_fused, dx_fused, grads_fused) = results
    assert isinstance(fused.runner, FusedMLP)  # the kernels ran, not the PyTorch layers
    assert y_fused.shape == y_ref.shape and y_fused.dtype == dtype and dx_fused.dtype == dtype
    _close(y_fused, y_ref, dtype)
    _close(dx_fused, dx_ref, dtype)
    for expected, actual in zip(grads_ref, grads_fused, strict=True):
        assert actual.shape == expected.shape and actual.dtype == dtype
        _close(actual, expected, dtype)


def test_fused_mlp_leaves_frozen_layers_alone_and_takes_empty_batches() -> None:
    """Layers turned into buffers (a shared decoder part) get no gradient; the others match autograd; 0 rows give 0 rows."""
    reference, fused = (_mlp(9, 16, 2, 3, "relu", "none", seed=13) for _ in range(2))
    fused.kernels = "triton"
    for model in (reference, fused):
        value = model.layers[0].weight.detach().clone()
        del model.layers[0].weight
        model.layers[0].register_buffer("weight", value)
    x = torch.rand(70, 9, generator=torch.Generator().manual_seed(14)).to(DEVICE)
    for model in (reference, fused):
        (model(x) ** 2).sum().backward()
    assert fused.layers[0].weight.grad is None
    for expected, actual in zip(reference.parameters(), fused.parameters(), strict=True):
        _close(actual.grad, expected.grad, torch.float32)
    empty = fused(torch.zeros(0, 9, device=DEVICE, requires_grad=True))
    assert empty.shape == (0, 3)
    empty.sum().backward()


class _Sampler:
    capturable = True

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def sample(self, generator: torch.Generator) -> Batch:
        uv = torch.rand(self.batch_size, 2, generator=generator, device=DEVICE)
        target = torch.stack((torch.sin(6 * uv[:, 0]), uv[:, 1] ** 2, uv[:, 0] * uv[:, 1]), dim=1) * 0.5 + 0.25
        return Batch(inputs=uv, targets=target)


def _small_net(seed: int, *, fused: bool = True) -> tuple[CoordinateNetwork, FusedForwardBackward | None]:
    """The tests' small coordinate network (16 wide, fp16 compute) and, with ``fused``, its fused step over two programs."""
    torch.manual_seed(seed)
    net = CoordinateNetwork(CoordinateNetworkConfig(hidden=16, layers=2, outputs=3)).to(DEVICE)
    return net, (FusedForwardBackward(net, "mse", dtype=torch.float16, programs=2) if fused else None)


def test_trainer_with_the_fused_step_follows_the_autograd_loss_curve() -> None:
    """Same seed, same batches: the two runs' losses agree step for step (fp16 compute, dynamic loss scale)."""
    config = TrainerConfig(steps=30, learning_rate=0.01, precision="fp16", log_every=5, eval_every=0, checkpoint_every=0, checkpoint_seconds=0)
    curves = []
    for fused in (False, True):
        net, step = _small_net(10, fused=fused)
        trainer = Trainer(net, _Sampler(128), LOSSES["mse"], config, device=DEVICE, forward_backward=step)
        result = trainer.fit()
        curves.append([event["loss"] for event in result.history if event["event"] == "train"])
    assert curves[0][-1] < 0.6 * curves[0][0]
    for a, b in zip(*curves):
        assert math.isclose(a, b, rel_tol=0.02), curves


def _pair(
    precision: str, *, scale: float = 4096.0, steps: int = 6, layers: int = 2, hidden: int = 16, scaling: str = "dynamic", rows: int = 150, on_step=None
) -> list[Trainer]:
    """Two trainers on the same fused forward/backward kernel and batches: the optimizer step on the GPU kernels, and in PyTorch."""
    config = TrainerConfig(
        steps=steps, learning_rate=0.02, precision=precision, loss_scale=scaling, initial_loss_scale=scale, loss_scale_growth_interval=2,
        log_every=steps, eval_every=0, checkpoint_every=0, checkpoint_seconds=0,
    )  # fmt: skip
    trainers = []
    for fused_update in (True, False):
        torch.manual_seed(15)
        net = CoordinateNetwork(CoordinateNetworkConfig(hidden=hidden, layers=layers, outputs=3)).to(DEVICE)
        dtype = torch.float16 if precision == "fp16" else torch.float32
        step = FusedForwardBackward(net, "mse", dtype=dtype, programs=2)
        # the PyTorch step's trainer is told the kernels cannot stand in for its optimizer, so it runs Adam itself
        refuse = mock.patch.object(FusedForwardBackward, "can_update", staticmethod(lambda optimizer: "the test's PyTorch step"))
        with contextlib.nullcontext() if fused_update else refuse:
            trainer = Trainer(net, _Sampler(rows), LOSSES["mse"], config, device=DEVICE, forward_backward=step, on_step=on_step)
        assert (trainer.fused_update is not None) == fused_update
        trainers.append(trainer)
    return trainers


def _same_state(fused: Trainer, torch_step: Trainer, tolerance: float) -> None:
    for (name, a), b in zip(fused.model.named_parameters(), torch_step.model.parameters(), strict=True):
        error = float((a - b).abs().max())
        assert error <= tolerance * float(b.abs().max()), (name, error)
        state_a, state_b = fused.optimizer.state[a], torch_step.optimizer.state[b]
        assert float(state_a["step"]) == float(state_b["step"]), name
        for key in ("exp_avg", "exp_avg_sq"):
            assert float((state_a[key] - state_b[key]).abs().max()) <= tolerance * float(state_b[key].abs().max()) + 1e-12, (name, key)
    assert fused.scaler.state_dict() == torch_step.scaler.state_dict()
    for counter in ("_loss_sum", "_loss_count", "_skipped", "_nonfinite_run", "_found_inf"):
        a, b = float(getattr(fused, counter)), float(getattr(torch_step, counter))
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9), (counter, a, b)


@pytest.mark.parametrize(
    ("precision", "layers", "hidden", "scaling"),
    [("fp32", 2, 16, "dynamic"), ("fp16", 2, 16, "dynamic"), ("fp16", 1, 20, "static"), ("fp32", 3, 20, "none")],
)
def test_the_fused_optimizer_step_matches_pytorch_adam_and_the_loss_scaler(precision: str, layers: int, hidden: int, scaling: str) -> None:
    """The step's gradient sum, unscale, Adam, loss scale and counters on the kernels equal PyTorch's fused Adam path
    (no hidden-to-hidden layer, widths that are not powers of two, every loss-scale mode)."""
    fused, torch_step = _pair(precision, layers=layers, hidden=hidden, scaling=scaling)
    for _ in range(6):
        trained_with = fused.model.mlp.layers[0].weight.detach().clone()
        assert fused.train_step() and torch_step.train_step()
    # the same arithmetic in another order (and the same fp16 rounding of the compute weights, biases included)
    _same_state(fused, torch_step, 1e-5 if precision == "fp32" else 1e-4)
    steps = {float(fused.optimizer.state[p]["step"]) for p in fused.model.parameters()}
    assert steps == {6.0} and len({id(fused.optimizer.state[p]["step"]) for p in fused.model.parameters()}) == len(steps) * len(list(fused.model.parameters()))
    if scaling == "dynamic":
        assert fused.scaler.scale == 4096.0 * 2**3  # grew every second clean step, as PyTorch's rule says
    # the masters are still the model's parameters (views of the kernel's flat buffer), and each step packs them into the compute weights it trains with
    packed = fused.forward_backward.packed
    first = fused.model.mlp.layers[0]
    _close(packed.w_in[: first.in_features, : first.out_features].float().t(), trained_with, torch.float32 if precision == "fp32" else torch.float16)
    assert not torch.equal(trained_with, first.weight.detach())  # and the step moved the masters past them


def test_an_empty_batch_is_a_skipped_step_on_both_paths() -> None:
    """0 rows: the loss is 0/0, so the step is skipped (masters, moments and step counts untouched) and the scale backs off, as in PyTorch."""
    fused, torch_step = _pair("fp16", rows=0)
    before = [p.detach().clone() for p in fused.model.parameters()]
    assert not fused.train_step() and not torch_step.train_step()
    assert all(torch.equal(a, b) for a, b in zip(before, fused.model.parameters(), strict=True))
    assert fused.skipped_steps == 1 and fused.scaler.scale == 2048.0
    _same_state(fused, torch_step, 0.0)


@pytest.mark.parametrize("how", ["in place", "through .data", "replaced"])
def test_masters_changed_between_steps_reach_the_kernels(how: str) -> None:
    """A hook that edits the weights (a projection: in place, through ``.data`` (no version bump), or by replacing the
    tensor) is seen by the next fused step, as by the PyTorch step, and Adam's moments survive it."""

    def shrink(trainer: Trainer, step: int) -> None:
        weight = trainer.model.mlp.layers[1].weight
        if how == "in place":
            with torch.no_grad():
                weight.mul_(0.5)
        elif how == "through .data":
            weight.data.mul_(0.5)
        else:
            weight.data = weight.detach() * 0.5

    fused, torch_step = _pair("fp32", on_step=shrink)
    fused.fit()
    torch_step.fit()
    _same_state(fused, torch_step, 1e-5)


def test_an_optimizer_state_with_several_step_counts_is_refused() -> None:
    """The fused step keeps one Adam step count; a state whose parameters disagree (not one this trainer writes) is refused, naming the fix."""
    fused, _ = _pair("fp32")
    fused.train_step()
    first = next(fused.model.parameters())
    fused.optimizer.state[first] = {key: value.clone() + (1 if key == "step" else 0) for key, value in fused.optimizer.state[first].items()}
    with pytest.raises(ConfigError, match="one Adam step count") as info:
        fused.train_step()
    assert info.value.fix == "use --kernels torch to go on from this state."


def test_the_fused_optimizer_step_skips_overflows_and_backs_the_scale_off() -> None:
    """A loss scale that overflows fp16 skips the update (masters, moments and step count untouched) and halves the scale, as PyTorch does."""
    fused, torch_step = _pair("fp16", scale=2.0**40)
    before = [p.detach().clone() for p in fused.model.parameters()]
    assert not fused.train_step() and not torch_step.train_step()
    for a, b in zip(before, fused.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert fused.skipped_steps == 1 and fused.scaler.scale == 2.0**39
    for _ in range(20):
        fused.train_step()
        torch_step.train_step()
    assert 0 < fused.skipped_steps < 21 and fused.skipped_steps == torch_step.skipped_steps
    _same_state(fused, torch_step, 2e-3)
    assert int(fused.forward_backward.draw_counter) == 21  # every step advances the draw counter, skipped or not


@pytest.mark.parametrize("same_trainer", [False, True])
def test_the_fused_optimizer_step_resumes_from_a_checkpoint(tmp_path, same_trainer: bool) -> None:
    """A run stopped at step 3 and resumed ends where an unbroken run ends: in a fresh process (new model, new step), or in the
    same trainer, whose loaded optimizer state is new tensors and whose masters were copied into in place (taken in again)."""
    config = TrainerConfig(steps=6, learning_rate=0.02, precision="fp16", log_every=6, eval_every=0, checkpoint_every=3, checkpoint_seconds=0)
    finals = []
    for resume in (False, True):
        net, step = _small_net(16)
        path = tmp_path / f"run{int(resume)}.ckpt"
        trainer = Trainer(net, _Sampler(150), LOSSES["mse"], config, device=DEVICE, forward_backward=step, checkpoint_path=path)
        if resume:
            for _ in range(3):
                trainer.train_step()
            trainer._save_checkpoint()
            if same_trainer:
                for _ in range(2):  # steps the checkpoint does not have: loading must undo them
                    trainer.train_step()
            else:
                net, step = _small_net(99)  # a fresh process's model
                trainer = Trainer(net, _Sampler(150), LOSSES["mse"], config, device=DEVICE, forward_backward=step, checkpoint_path=path)
            trainer.fit(resume=True)
        else:
            trainer.fit()
        finals.append([p.detach().clone() for p in net.parameters()])
    for a, b in zip(*finals, strict=True):
        assert torch.equal(a, b)


def test_a_rehearsal_of_the_fused_step_leaves_the_model_and_the_run_alone() -> None:
    """``rehearse`` (a bake's try of the kernels) runs the whole fused step on copies: the weights and the run that follows are as without it."""
    config = TrainerConfig(steps=4, learning_rate=0.02, precision="fp16", log_every=4, eval_every=0, checkpoint_every=0, checkpoint_seconds=0)
    finals = []
    for rehearse in (False, True):
        net, step = _small_net(17)
        assert step is not None
        if rehearse:
            before = [p.detach().clone() for p in net.parameters()]
            step.rehearse(_Sampler(90).sample(torch.Generator(device=DEVICE).manual_seed(1)))
            assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True)) and not step.updated
        Trainer(net, _Sampler(150), LOSSES["mse"], config, device=DEVICE, forward_backward=step).fit()
        assert step.updated
        finals.append([p.detach().clone() for p in net.parameters()])
    for a, b in zip(*finals, strict=True):
        assert torch.equal(a, b)


def test_unsupported_networks_are_refused_with_the_reason() -> None:
    assert unsupported_reason([12, 64, 64, 3], ["relu", "none"]) is None
    assert "256" in unsupported_reason([12, 256, 3], ["relu", "none"])
    assert "9 linear" in unsupported_reason([4] * 10, ["relu", "none"])
    assert "clamped_gelu" in unsupported_reason([4, 16, 3], ["clamped_gelu", "none"], training=True)
    with pytest.raises(ConfigError, match="kernels"):
        PackedMLP.from_mlp(_mlp(4, 200, 2, 3, "relu", "none"))
    with pytest.raises(ConfigError, match="use --kernels auto or torch"):
        resolve_kernels("triton", DEVICE, "a layer is 256 wide")
    assert resolve_kernels("auto", DEVICE, "a layer is 256 wide") == "torch"
    assert resolve_kernels("torch", DEVICE) == "torch"
    with pytest.raises(ConfigError, match="unknown kernels"):
        resolve_kernels("cuda", DEVICE)


def test_auto_never_picks_the_interpreter_on_the_cpu() -> None:
    assert resolve_kernels("auto", torch.device("cpu")) == "torch"
    assert resolve_kernels("triton", torch.device("cpu")) == "triton"  # explicitly asked: the interpreter (tests)


def test_auto_leaves_fp32_kernels_to_pytorch_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp32 kernels compile for minutes with Triton 3.6: ``auto`` takes the kernels for fp16/bf16 work only; ``triton`` insists."""
    import neuralbake.kernels as kernels_module

    monkeypatch.setattr(kernels_module, "interpreting", lambda: False)
    monkeypatch.setattr(kernels_module, "triton_installed", lambda: True)
    gpu = torch.device("cuda")
    assert resolve_kernels("auto", gpu, dtype=torch.float16) == "triton"
    assert resolve_kernels("auto", gpu, dtype=torch.bfloat16) == "triton"
    assert resolve_kernels("auto", gpu, dtype=torch.float32) == "torch"
    assert resolve_kernels("triton", gpu, dtype=torch.float32) == "triton"
    assert resolve_kernels("auto", gpu, "too wide", dtype=torch.float16) == "torch"


def test_int64_addressing_gives_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Buffers past 2^31 elements switch the decodes to int64 addresses; forced on small ones, nothing changes."""
    from neuralbake.kernels import decoders, packing

    assert not tuning.wide_addresses(2**31 - 1, 5) and tuning.wide_addresses(7, 2**31)
    mlp = _mlp(12, 32, 2, 5, "relu", "none")
    x = torch.rand(300, 12, device=DEVICE)
    material = _neural_material(8, ("wi", "wo"), torch.float32)
    material.kernels = "triton"
    uv = torch.rand(200, 2, device=DEVICE) * 3 - 1
    wi, wo = _hemisphere(200, 11)
    lod = torch.rand(200, device=DEVICE) * 4
    container = _ntc_container()
    ntc = FusedNTC(container, torch.float32)
    narrow = [mlp_forward(PackedMLP.from_mlp(mlp), x), material.decode(uv, wi, wo), material.decode(uv, wi, wo, lod), ntc.level(1)]
    for module in (packing, decoders):  # the modules that launch these decodes
        monkeypatch.setattr(module, "wide_addresses", lambda *counts: True)
    material._fused = None
    wide = [mlp_forward(PackedMLP.from_mlp(mlp), x), material.decode(uv, wi, wo), material.decode(uv, wi, wo, lod), ntc.level(1)]
    for a, b in zip(narrow, wide):
        assert torch.equal(a, b)


def test_try_kernels_falls_back_only_under_auto() -> None:
    from neuralbake.kernels import try_kernels

    notes: list[str] = []

    def broken() -> None:
        raise RuntimeError("ptxas fatal")

    assert try_kernels("auto", "triton", broken, notes.append) == "torch" and "ptxas fatal" in notes[0]
    assert try_kernels("auto", "triton", lambda: None, notes.append) == "triton"
    assert try_kernels("auto", "torch", broken, notes.append) == "torch" and len(notes) == 1  # no trial on the PyTorch path
    with pytest.raises(ConfigError, match="ptxas fatal"):
        try_kernels("triton", "triton", broken, notes.append)


@pytest.mark.parametrize(("transform", "encoded"), [("identity", True), ("flip", True), ("zoom", True), ("flip", False)])
def test_the_training_kernel_draws_its_own_texel_batch_and_trains_on_it(transform: str, encoded: bool) -> None:
    """A step that draws its batch in the kernel (``draws``): uv uniform in [0, 1), a new batch per draw (not the last
    one shifted) and the same one for the same (seed, draw), the targets the sampler's nearest texels at the transformed
    uv, and the loss and gradients those of autograd on that batch (fp32: 1e-5), for a coordinate network and for a
    plain MLP on the two coordinates; a rehearsal leaves the draw counter alone."""
    from neuralbake.bakes.neural_texture import ImageSampler, texel_lookup, transform_uv

    torch.manual_seed(21)
    if encoded:
        net = CoordinateNetwork(CoordinateNetworkConfig(hidden=16, layers=2, outputs=3)).to(DEVICE)
    else:
        net = _mlp(2, 16, 2, 3, "leaky_relu", "sigmoid", seed=21)
    step = FusedForwardBackward(net, "mse", dtype=torch.float32, programs=2)
    image = torch.rand(9, 13, 3, device=DEVICE)  # not square: u and v scale differently
    draws = step.draws_from(ImageSampler(image, transform, 300))
    assert draws is not None and draws.transform == transform
    step.seek_draws(5)
    batch = step.drawn_batch(draws, seed=7)
    assert batch.inputs.shape == (300, 2) and float(batch.inputs.min()) >= 0.0 and float(batch.inputs.max()) < 1.0
    assert abs(float(batch.inputs.mean()) - 0.5) < 0.05
    assert torch.equal(batch.targets, texel_lookup(image, transform_uv(batch.inputs, transform)))
    assert torch.equal(step.drawn_batch(draws, seed=7).inputs, batch.inputs)
    assert not torch.equal(step.drawn_batch(draws, seed=8).inputs, batch.inputs)
    step.seek_draws(6)
    following = step.drawn_batch(draws, seed=7).inputs
    assert not torch.equal(following, batch.inputs) and not torch.equal(following[:-1], batch.inputs[1:])
    step.seek_draws(5)
    params = dict(net.named_parameters())
    expected_loss, expected = AutogradForwardBackward(net, LOSSES["mse"])(params, batch, 8.0)
    loss, gradients = step(params, None, 8.0, draws=draws, seed=7)
    assert math.isclose(float(loss), float(expected_loss), rel_tol=1e-5) and int(step.draw_counter) == 5
    for ours, theirs in zip(gradients, expected, strict=True):
        _close(ours, theirs, torch.float32)
    step.rehearse(batch, draws=draws, seed=7)
    assert int(step.draw_counter) == 5 and not step.updated


def test_only_samplers_that_say_what_they_draw_and_fit_the_network_are_drawn_in_the_kernel() -> None:
    """``draws_from`` is None for an image whose channels are not the outputs, an unknown transform, an empty batch, a
    network on other inputs, and a sampler subclass that overrides ``sample`` without ``texel_draws``."""
    from neuralbake.bakes.neural_texture import ImageSampler

    image = torch.rand(8, 8, 3, device=DEVICE)
    _, step = _small_net(24)
    assert step is not None and step.draws_from(ImageSampler(image, "zoom", 64)) is not None
    assert step.draws_from(ImageSampler(torch.rand(8, 8, 4, device=DEVICE), "zoom", 64)) is None
    assert step.draws_from(ImageSampler(image, "mirror", 64)) is None
    assert step.draws_from(ImageSampler(image, "zoom", 0)) is None
    three = FusedForwardBackward(_mlp(3, 16, 1, 3, "relu", "none"), "mse", dtype=torch.float32, programs=2)
    assert three.draws_from(ImageSampler(image, "zoom", 64)) is None

    class Jittered(ImageSampler):
        def sample(self, generator: torch.Generator) -> Batch:
            batch = super().sample(generator)
            return Batch(inputs=batch.inputs + 0.001, targets=batch.targets)

    assert step.draws_from(Jittered(image, "zoom", 64)) is None


def test_a_trainer_lets_the_kernel_draw_the_batches_and_resumes_the_draws(tmp_path) -> None:
    """With an image sampler the fused step draws each batch in the kernel (the sampler is never called): the loss falls,
    the draw counter follows the step count, two runs with one seed end bit for bit alike, a run resumed from a checkpoint
    ends where the unbroken one ends, and a sampler that does not describe its draws is called again."""
    from neuralbake.bakes.neural_texture import ImageSampler

    v, u = torch.meshgrid(torch.linspace(0, 1, 24, device=DEVICE), torch.linspace(0, 1, 32, device=DEVICE), indexing="ij")
    image = torch.stack((0.5 + 0.4 * torch.sin(6 * u), v * v, 0.5 * (u + v)), dim=-1)

    calls = []

    def counting(transform: str, rows: int) -> ImageSampler:
        """An image sampler that counts its ``sample`` calls (on the instance: its class still draws as ImageSampler)."""
        sampler = ImageSampler(image, transform, rows)
        draw = sampler.sample
        sampler.sample = lambda generator: calls.append(1) or draw(generator)  # type: ignore[method-assign]
        return sampler

    config = TrainerConfig(steps=8, learning_rate=0.02, precision="fp16", log_every=1, eval_every=0, checkpoint_every=4, checkpoint_seconds=0)
    finals = []
    for run in ("plain", "again", "resumed"):
        net, step = _small_net(23)
        path = tmp_path / f"{run}.ckpt"
        trainer = Trainer(net, counting("flip", 128), LOSSES["mse"], config, device=DEVICE, forward_backward=step, checkpoint_path=path)
        assert trainer.fused_draws is not None
        if run == "resumed":
            for _ in range(4):
                trainer.train_step()
            trainer._save_checkpoint()
            for _ in range(2):  # steps the checkpoint does not have: the resumed run draws from step 4 again
                trainer.train_step()
            result = trainer.fit(resume=True)
        else:
            result = trainer.fit()
            losses = [event["loss"] for event in result.history if event["event"] == "train"]
            assert losses[-1] < losses[0], losses
        assert int(step.draw_counter) == 8 and step.updated
        finals.append([p.detach().clone() for p in net.parameters()])
    assert not calls
    for a, b, c in zip(*finals, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    net, step = _small_net(23)
    silent = counting("flip", 128)
    silent.texel_draws = lambda: None  # type: ignore[method-assign]
    trainer = Trainer(net, silent, LOSSES["mse"], config, device=DEVICE, forward_backward=step)
    assert trainer.fused_draws is None
    trainer.train_step()
    assert len(calls) == 1 and trainer.fused_draws is None


def test_only_a_trainer_whose_step_needs_them_keeps_fp16_compute_weights() -> None:
    """The fused optimizer step trains from its own packed weights: its trainer holds no fp16 copy of the model. The
    autograd step, and a fused forward/backward whose optimizer step runs in PyTorch, get one."""
    config = TrainerConfig(steps=2, precision="fp16", log_every=2, eval_every=0, checkpoint_every=0, checkpoint_seconds=0)
    net, step = _small_net(3)
    fused = Trainer(net, _Sampler(64), LOSSES["mse"], config, device=DEVICE, forward_backward=step)
    assert fused.fused_update is not None and fused.compute_model is net
    autograd = Trainer(_small_net(3, fused=False)[0], _Sampler(64), LOSSES["mse"], config, device=DEVICE)
    assert autograd.compute_model is not autograd.model
    assert {p.dtype for p in autograd.compute_params.values()} == {torch.float16}
    net, step = _small_net(3)
    with mock.patch.object(FusedForwardBackward, "can_update", staticmethod(lambda optimizer: "refused")):
        torch_step = Trainer(net, _Sampler(64), LOSSES["mse"], config, device=DEVICE, forward_backward=step)
    assert torch_step.fused_update is None and torch_step.compute_model is not net
    assert {p.dtype for p in torch_step.compute_params.values()} == {torch.float16}
    torch_step.fit()
    fused.fit()


def test_a_ticket_left_by_an_interrupted_step_does_not_change_the_next_steps() -> None:
    """Adam's programs elect the one that closes the step by a ticket counter; a count left behind by a step stopped among
    them (an exception in the interpreter) is reset by the next step's gradient sum, so the steps after it are exact."""
    fused, torch_step = _pair("fp16")
    assert fused.train_step() and torch_step.train_step()
    flat = fused.forward_backward.adam_state
    assert flat is not None and int(flat.ticket) == 0
    flat.ticket.fill_(5)
    for _ in range(3):
        assert fused.train_step() and torch_step.train_step()
    _same_state(fused, torch_step, 1e-4)
    assert int(flat.ticket) == 0
