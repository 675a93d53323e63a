"""The generated shaders against the PyTorch modules they were exported from.

The parity tests compile the generated source with slangpy's CPU device (Slang's C++ target, built
with the host compiler) and dispatch the compute entry point over random inputs. The HLSL file is
checked the same way, through Slang's HLSL front end; no DXC/FXC run happens here.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from neuralbake.errors import BundleError, ConfigError
from neuralbake.export import export_bundle_shader, generate_mlp_hlsl, generate_mlp_slang
from neuralbake.io.bundle import read_bundle
from neuralbake.io.device_layout import LayerTensors, pack_device_layout, unpack_device_layout
from neuralbake.nn.activations import ACTIVATIONS
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.serialize import save_coordinate_network

try:
    import slangpy
except ImportError:  # pragma: no cover - depends on the environment
    slangpy = None

needs_slangpy = pytest.mark.skipif(slangpy is None, reason="slangpy is not installed (pip install slangpy); it compiles and runs the shaders")

FP32_TOLERANCE = 1e-4
_module_ids = itertools.count()


@pytest.fixture(scope="module")
def slang_device():
    """slangpy's CPU device: Slang compiles to C++ and the host compiler builds the kernel."""
    return slangpy.create_device(type=slangpy.DeviceType.cpu)


def run_kernel(device, source: str, weights: bytes, inputs: np.ndarray, outputs: int, function_name: str = "nb_mlp_eval") -> np.ndarray:
    """Dispatch ``<function_name>_kernel`` over ``inputs`` ``[N, C]``; returns ``[N, outputs]`` float32."""
    module = device.load_module_from_source(f"nb_export_test_{next(_module_ids)}", source)
    program = device.link_program([module], [module.entry_point(f"{function_name}_kernel")])
    kernel = device.create_compute_kernel(program)
    usage = slangpy.BufferUsage.shader_resource
    weight_buffer = device.create_buffer(data=np.frombuffer(weights, dtype=np.uint8).copy(), usage=usage)
    input_buffer = device.create_buffer(data=np.ascontiguousarray(inputs, dtype=np.float32).reshape(-1), struct_size=4, usage=usage)
    output_buffer = device.create_buffer(
        data=np.full(inputs.shape[0] * outputs, np.nan, dtype=np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access
    )
    kernel.dispatch(
        thread_count=[inputs.shape[0], 1, 1],
        vars={
            f"{function_name}_weights": weight_buffer,
            f"{function_name}_inputs": input_buffer,
            f"{function_name}_outputs": output_buffer,
            f"{function_name}_constants": {f"{function_name}_point_count": inputs.shape[0]},
        },
    )
    return output_buffer.to_numpy().view(np.float32).reshape(inputs.shape[0], outputs)


def small_coordinate_network(seed: int = 0, frequencies: int = 3) -> CoordinateNetwork:
    torch.manual_seed(seed)
    config = CoordinateNetworkConfig(coordinates=2, frequencies=frequencies, hidden=16, layers=2, outputs=3)
    return CoordinateNetwork(config).eval()


def rounded_to_fp16(module: torch.nn.Module) -> torch.nn.Module:
    """The module with every weight rounded through fp16 but still computing in fp32."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(parameter.half().float())
    return module


@needs_slangpy
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_coordinate_network_bundle_matches_pytorch(tmp_path, slang_device, precision):
    network = small_coordinate_network()
    save_coordinate_network(tmp_path / "bundle", network, training_precision="fp32")
    written = export_bundle_shader(tmp_path / "bundle", tmp_path / "shader", precision=precision)
    coords = torch.rand(200, 2, generator=torch.Generator().manual_seed(1)) * 1.2 - 0.1
    if precision == "fp16":
        network = rounded_to_fp16(network)
    with torch.no_grad():
        expected = network(coords).numpy()
    actual = run_kernel(slang_device, written.slang.read_text(), written.weights.read_bytes(), coords.numpy(), outputs=3)
    assert np.abs(actual - expected).max() < FP32_TOLERANCE


@needs_slangpy
def test_the_shaders_encoding_stays_exact_at_high_octaves(tmp_path, slang_device):
    """12 octaves (phases up to 2^11 pi x): the shader reduces the phase in half-turns as frequency_encode does, so the
    two agree (taking sin(2^11 pi x) directly in float32 is off by up to 8e-4 in each encoded value)."""
    torch.manual_seed(0)
    network = CoordinateNetwork(CoordinateNetworkConfig(coordinates=2, frequencies=12, hidden=16, layers=0, outputs=3, output_activation="none"))
    with torch.no_grad():  # the outputs are the encoding's three highest-octave values of u: its error, not a network's
        layer = network.mlp.layers[0]
        layer.weight.zero_()
        layer.bias.zero_()
        for row, column in enumerate((21, 22, 23)):
            layer.weight[row, column] = 1.0
    save_coordinate_network(tmp_path / "bundle", network.eval(), training_precision="fp32")
    written = export_bundle_shader(tmp_path / "bundle", tmp_path / "shader", precision="fp32")
    coords = torch.rand(300, 2, generator=torch.Generator().manual_seed(2)) * 1.2 - 0.1
    with torch.no_grad():
        expected = network(coords).numpy()
    actual = run_kernel(slang_device, written.slang.read_text(), written.weights.read_bytes(), coords.numpy(), outputs=3)
    assert np.abs(actual - expected).max() < FP32_TOLERANCE


@needs_slangpy
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_mlp_activation_matches_pytorch(slang_device, activation):
    torch.manual_seed(2)
    mlp = MLP(MLPConfig(inputs=5, hidden=8, layers=2, outputs=4, hidden_activation=activation, output_activation=activation, leak=0.2)).eval()
    if activation == "exp":  # keep exp's outputs near 1 so the absolute tolerance means something
        with torch.no_grad():
            for parameter in mlp.parameters():
                parameter.mul_(0.3)
    buffer, table = pack_device_layout(mlp.linear_layers(), "fp32")
    source = generate_mlp_slang(table, hidden_activation=activation, output_activation=activation, leak=0.2, function_name="decoder")
    inputs = torch.randn(150, 5, generator=torch.Generator().manual_seed(3)) * 2
    with torch.no_grad():
        expected = mlp(inputs).numpy()
    actual = run_kernel(slang_device, source, buffer, inputs.numpy(), outputs=4, function_name="decoder")
    assert np.abs(actual - expected).max() < FP32_TOLERANCE


@needs_slangpy
def test_int8_layout_matches_the_dequantised_network(slang_device):
    """int8 codes with a per-layer scale (the NTC decoder's storage): the shader sums codes * inputs and scales once; PyTorch
    multiplies by the dequantised weights. Same values up to the order of the fp32 operations."""
    torch.manual_seed(6)
    mlp = MLP(MLPConfig(inputs=7, hidden=12, layers=2, outputs=3, hidden_activation="leaky_relu", output_activation="none", leak=0.05)).eval()
    layers = []
    with torch.no_grad():
        for index, layer in enumerate(mlp.layers):
            scale = float(layer.weight.abs().max() / 127.0)
            codes = torch.clamp(torch.round(layer.weight / scale), -127, 127)
            layer.weight.copy_(codes * scale)
            layers.append(LayerTensors(f"layers.{index}", codes.to(torch.int8), layer.bias.clone(), scale=scale))
    buffer, table = pack_device_layout(layers, "int8")
    assert all(entry["scale_offset"] == entry["bias_offset"] + 4 * entry["outputs"] for entry in table)
    unpacked = unpack_device_layout(buffer, table, "int8")
    for got, layer in zip(unpacked, mlp.layers, strict=True):
        assert torch.allclose(got.weight, layer.weight, rtol=0, atol=1e-7) and torch.equal(got.bias, layer.bias) and got.scale is not None
    source = generate_mlp_slang(table, hidden_activation="leaky_relu", output_activation="none", leak=0.05, precision="int8", function_name="decoder")
    inputs = torch.randn(120, 7, generator=torch.Generator().manual_seed(7)) * 2
    with torch.no_grad():
        expected = mlp(inputs).numpy()
    actual = run_kernel(slang_device, source, buffer, inputs.numpy(), outputs=3, function_name="decoder")
    assert np.abs(actual - expected).max() < FP32_TOLERANCE


@needs_slangpy
def test_hlsl_runs_through_slangs_hlsl_front_end(tmp_path, slang_device):
    network = small_coordinate_network(seed=4)
    save_coordinate_network(tmp_path, network, training_precision="fp32")
    written = export_bundle_shader(tmp_path, tmp_path, precision="fp32")
    coords = torch.rand(70, 2, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = network(coords).numpy()
    actual = run_kernel(slang_device, written.hlsl.read_text(), written.weights.read_bytes(), coords.numpy(), outputs=3)
    assert np.abs(actual - expected).max() < FP32_TOLERANCE


def test_slang_and_hlsl_differ_only_in_entry_point_attribute():
    table = [{"name": "layers.0", "inputs": 3, "outputs": 2, "weight_offset": 0, "bias_offset": 32}]
    options = {"hidden_activation": "relu", "output_activation": "none", "leak": 0.01}
    slang = generate_mlp_slang(table, **options).replace("(slang)", "").splitlines()
    hlsl = generate_mlp_hlsl(table, **options).replace("(hlsl)", "").splitlines()
    assert [line for line in slang if line != '[shader("compute")]'] == hlsl


def test_offsets_come_from_the_manifest(tmp_path):
    network = small_coordinate_network()
    save_coordinate_network(tmp_path, network, training_precision="fp32")
    written = export_bundle_shader(tmp_path, tmp_path / "out", precision="fp16")
    source = written.slang.read_text()
    for index, layer in enumerate(read_bundle(tmp_path).manifest["device_layouts"]["fp16"]["layers"]):
        assert f"NB_MLP_EVAL_L{index}_WEIGHT_OFFSET = {layer['weight_offset']};" in source
        assert f"NB_MLP_EVAL_L{index}_BIAS_OFFSET = {layer['bias_offset']};" in source
    assert written.weights.read_bytes() == (tmp_path / "network.fp16.bin").read_bytes()
    assert written.hlsl.is_file()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden_activation": "swish"}, "hidden_activation"),
        ({"precision": "bf16"}, "precision"),
        ({"function_name": "2bad name"}, "function_name"),
        ({"encoding": {"type": "frequency", "coordinates": 2, "frequencies": 2}}, "encoding"),
        ({"encoding": {"type": "hash_grid"}}, "encoding.type"),
        ({"encoding": {"type": "frequency", "coordinates": 2}}, "encoding"),
    ],
)
def test_bad_options_name_the_field(change, field):
    table = [{"name": "layers.0", "inputs": 12, "outputs": 2, "weight_offset": 0, "bias_offset": 96}]
    options = {"hidden_activation": "relu", "output_activation": "none", "leak": 0.01, **change}
    with pytest.raises(ConfigError) as caught:
        generate_mlp_slang(table, **options)
    assert caught.value.field == field


def test_layers_that_do_not_chain_are_refused():
    table = [
        {"name": "layers.0", "inputs": 3, "outputs": 4, "weight_offset": 0, "bias_offset": 48},
        {"name": "layers.1", "inputs": 5, "outputs": 1, "weight_offset": 64, "bias_offset": 96},
    ]
    with pytest.raises(ConfigError, match="layers.1|layers\\[1\\]"):
        generate_mlp_hlsl(table, hidden_activation="relu", output_activation="none", leak=0.01)


def test_missing_device_layout_is_a_bundle_error(tmp_path):
    network = small_coordinate_network()
    save_coordinate_network(tmp_path, network, training_precision="fp32")
    with pytest.raises(BundleError, match="bf16"):
        export_bundle_shader(tmp_path, tmp_path / "out", precision="bf16")
