import math

import pytest
import torch

from neuralbake.nn.activations import ACTIVATIONS, activation_fn, clamped_gelu
from neuralbake.nn.encoding import FrequencyEncoding, frequency_encode
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig


def test_frequency_encoding_values_and_order():
    x = torch.tensor([[0.25, 0.5]], dtype=torch.float64)
    out = frequency_encode(x, 3)
    expected = []
    for value in (0.25, 0.5):
        for k in range(3):
            phase = (2**k) * math.pi * value
            expected += [math.sin(phase), math.cos(phase)]
    assert out.shape == (1, 12)
    torch.testing.assert_close(out, torch.tensor([expected], dtype=torch.float64))


def test_frequency_encoding_keeps_high_octaves_accurate_in_float32():
    """The phase reduced exactly in half-turns before pi multiplies it: float32 at 12 octaves (phases up to 2^11 pi x)
    stays within 1e-6 of float64 (sin(2^11 pi x) taken directly in float32 is 8e-4 off), and the gradient is the
    encoding's own (gradcheck in float64, where the reduction's floor is flat)."""
    x = torch.rand(500, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 3 - 1
    x32 = x.float()
    exact = torch.stack([torch.stack((torch.sin(math.pi * 2**k * x32.double()), torch.cos(math.pi * 2**k * x32.double())), -1) for k in range(12)], -2)
    assert float((frequency_encode(x32, 12).double() - exact.flatten(start_dim=-3)).abs().max()) < 1e-6
    coords = x[:6].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda c: frequency_encode(c, 9), (coords,), eps=1e-7, atol=1e-4)


def test_default_encoding_matches_rtxns_input_count():
    config = CoordinateNetworkConfig()
    network = CoordinateNetwork(config)
    assert network.encoding.output_dim == 2 * 6 == 12
    assert network.mlp.layers[0].in_features == 12
    assert [layer.out_features for layer in network.mlp.layers] == [64, 64, 64, 64, 3]


@pytest.mark.parametrize("frequencies", [1, 4, 6])
def test_encoding_count_maps_to_inputs(frequencies):
    encoding = FrequencyEncoding(inputs=3, frequencies=frequencies)
    assert encoding(torch.rand(5, 3)).shape == (5, 3 * 2 * frequencies) == (5, encoding.output_dim)


def test_encoding_rejects_bad_arguments():
    with pytest.raises(ValueError):
        FrequencyEncoding(2, 0)
    with pytest.raises(ValueError, match="expects 2 coordinates"):
        FrequencyEncoding(2, 3)(torch.rand(4, 3))


@pytest.mark.parametrize("batch_shape", [(7,), (2, 5)])
def test_mlp_shapes(batch_shape):
    mlp = MLP(MLPConfig(inputs=5, hidden=16, layers=3, outputs=4))
    assert len(mlp.layers) == 4
    assert mlp(torch.rand(*batch_shape, 5)).shape == (*batch_shape, 4)
    assert mlp.parameter_count() == (5 * 16 + 16) + 2 * (16 * 16 + 16) + (16 * 4 + 4)


def test_mlp_zero_hidden_layers_is_linear():
    mlp = MLP(MLPConfig(inputs=3, hidden=8, layers=0, outputs=2, output_activation="none"))
    assert len(mlp.layers) == 1
    x = torch.rand(4, 3)
    torch.testing.assert_close(mlp(x), x @ mlp.layers[0].weight.T + mlp.layers[0].bias)


def test_mlp_runs_in_weight_dtype():
    mlp = MLP(MLPConfig(inputs=4, hidden=8, layers=2, outputs=3)).to(torch.bfloat16)
    assert mlp(torch.rand(3, 4)).dtype == torch.bfloat16


def test_activation_values():
    x = torch.tensor([-4.0, -1.5, -0.5, 0.0, 0.5, 1.5, 3.0, 6.0])
    torch.testing.assert_close(activation_fn("leaky_relu", 0.1)(x), torch.where(x > 0, x, 0.1 * x))
    torch.testing.assert_close(activation_fn("relu")(x), x.clamp(min=0))
    torch.testing.assert_close(activation_fn("exp")(x), x.exp())
    expected = torch.minimum(x, torch.tensor(3.0)) * (x / 3 + 0.5).clamp(0, 1)
    torch.testing.assert_close(clamped_gelu(x), expected)
    assert clamped_gelu(torch.tensor(100.0)) == 3.0
    assert clamped_gelu(torch.linspace(-10, 10, 2001)).min() >= -3 / 16 - 1e-6
    with pytest.raises(ValueError, match="unknown activation"):
        activation_fn("swish")


def test_mlp_rejects_unknown_activation():
    with pytest.raises(ValueError, match="hidden_activation"):
        MLP(MLPConfig(hidden_activation="swish"))


@pytest.mark.parametrize("activation", sorted(set(ACTIVATIONS) - {"relu"}))
def test_gradcheck_encoding_and_mlp(activation):
    torch.manual_seed(0)
    network = CoordinateNetwork(
        CoordinateNetworkConfig(frequencies=2, hidden=6, layers=2, outputs=3, hidden_activation=activation, output_activation="sigmoid")
    ).double()
    params = tuple(network.parameters())
    coords = torch.rand(4, 2, dtype=torch.float64, requires_grad=True)

    def f(coords, *weights):
        mapping = dict(zip((n for n, _ in network.named_parameters()), weights))
        return torch.func.functional_call(network, mapping, (coords,))

    # Kinks of relu/leaky_relu/clamped_gelu are avoided with probability one by random inputs.
    assert torch.autograd.gradcheck(f, (coords, *[p.detach().clone().requires_grad_(True) for p in params]), eps=1e-6, atol=1e-5)


def test_gradcheck_relu_mlp():
    torch.manual_seed(1)
    mlp = MLP(MLPConfig(inputs=3, hidden=5, layers=1, outputs=2, hidden_activation="relu", output_activation="tanh")).double()
    x = torch.rand(6, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(mlp, (x,), eps=1e-6, atol=1e-5)


def test_configs_share_their_layer_fields_by_keyword_only():
    from neuralbake.core.config import field_docs

    with pytest.raises(TypeError):
        MLPConfig(3, 8)  # positional arguments could silently shift when a shared field is added
    coordinate = CoordinateNetworkConfig(frequencies=2, hidden=16, layers=2, outputs=4, leak=0.1)
    mlp = coordinate.mlp_config()
    assert (mlp.inputs, mlp.hidden, mlp.layers, mlp.outputs, mlp.leak) == (8, 16, 2, 4, 0.1)
    docs = field_docs(CoordinateNetworkConfig)  # the CLI's help text reads the shared fields' docs
    assert {"hidden", "layers", "hidden_activation", "frequencies"} <= set(docs)


def test_mlp_kernels_run_through_what_is_registered_under_their_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MLP.kernels`` other than torch builds its runner once from the registered builder; an unknown name says what is known."""
    from neuralbake.nn import mlp as mlp_module

    monkeypatch.setattr(mlp_module, "_MLP_KERNELS", {})  # this test's own table, restored after
    net = MLP(MLPConfig(inputs=4, hidden=8, layers=1, outputs=2))
    x = torch.rand(5, 4)
    net.kernels = "doubled"
    with pytest.raises(ValueError, match="registered: torch"):
        net(x)
    built = []

    def build(mlp: MLP):
        built.append(mlp)
        return lambda rows: 2 * rows[..., :2]

    mlp_module.register_mlp_kernels("doubled", build)
    assert torch.equal(net(x), 2 * x[:, :2]) and torch.equal(net(x), 2 * x[:, :2])
    assert built == [net]
    net.kernels = "torch"
    assert net(x).shape == (5, 2) and not torch.equal(net(x), 2 * x[:, :2])
