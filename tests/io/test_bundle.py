import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from neuralbake.errors import BundleError
from neuralbake.io.bundle import read_bundle, read_device_layout, read_latent_textures, write_bundle
from neuralbake.io.device_layout import BIAS_ALIGNMENT, WEIGHT_ALIGNMENT
from neuralbake.nn.mlp import CoordinateNetwork, CoordinateNetworkConfig
from neuralbake.nn.serialize import load_coordinate_network, save_coordinate_network


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(3)
    network = CoordinateNetwork(CoordinateNetworkConfig(frequencies=3, hidden=20, layers=3, outputs=3))
    save_coordinate_network(tmp_path, network, training_precision="fp16")
    return network, tmp_path


def test_round_trip_is_exact(saved):
    network, path = saved
    loaded, bundle = load_coordinate_network(path)
    for key, value in network.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    x = torch.rand(32, 2)
    assert torch.equal(network(x), loaded(x))
    manifest = bundle.manifest
    assert manifest["architecture"]["inputs"] == 12 and manifest["architecture"]["hidden_layers"] == 3
    assert manifest["encoding"]["frequencies"] == 3 and manifest["precision"]["training"] == "fp16"
    assert len(manifest["files"]["weights"]["sha256"]) == 64


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_device_layout_offsets_alignment_and_values(saved, precision):
    network, path = saved
    bundle = read_bundle(path)
    buffer, layers = read_device_layout(bundle, precision)
    table = bundle.manifest["device_layouts"][precision]["layers"]
    elem = 2 if precision == "fp16" else 4
    end = 0
    for entry, linear, unpacked in zip(table, network.mlp.layers, layers):
        assert entry["weight_offset"] % WEIGHT_ALIGNMENT == 0 and entry["bias_offset"] % BIAS_ALIGNMENT == 0
        assert entry["weight_offset"] >= end
        assert entry["bias_offset"] >= entry["weight_offset"] + linear.weight.numel() * elem
        end = entry["bias_offset"] + linear.bias.numel() * elem
        dtype = torch.float16 if precision == "fp16" else torch.float32
        assert torch.equal(unpacked.weight, linear.weight.detach().to(dtype).float())
        assert torch.equal(unpacked.bias, linear.bias.detach().to(dtype).float())
        # a shader reads element (o, i) at weight_offset + (o * inputs + i) * elem
        o, i = linear.out_features - 1, linear.in_features - 1
        raw = torch.frombuffer(bytearray(buffer[entry["weight_offset"] + (o * entry["inputs"] + i) * elem :][:elem]), dtype=dtype)
        assert raw.item() == linear.weight[o, i].to(dtype).item()
    assert len(buffer) % WEIGHT_ALIGNMENT == 0 and len(buffer) >= end


def test_truncated_weights_are_a_clear_error(saved):
    _, path = saved
    weights = path / "network.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(BundleError, match="truncated") as info:
        load_coordinate_network(path)
    assert "network.safetensors" in str(info.value) and "Fix:" in str(info.value)


def test_corrupt_byte_is_caught_by_checksum(saved):
    _, path = saved
    weights = path / "network.safetensors"
    data = bytearray(weights.read_bytes())
    data[-7] ^= 0x5A
    weights.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="sha256"):
        load_coordinate_network(path)


def test_corrupt_device_layout_is_caught(saved):
    _, path = saved
    blob = path / "network.fp16.bin"
    blob.write_bytes(b"\x00" + blob.read_bytes()[1:])
    bundle = read_bundle(path)
    with pytest.raises(BundleError, match="network.fp16.bin"):
        read_device_layout(bundle, "fp16")


def test_manifest_problems(saved):
    _, path = saved
    manifest_path = path / "network.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text("{ not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        read_bundle(path)
    bad = dict(manifest, format_version=99)
    manifest_path.write_text(json.dumps(bad))
    with pytest.raises(BundleError, match="format_version 99"):
        read_bundle(path)
    bad = dict(manifest, config=dict(manifest["config"], hidden=21))
    manifest_path.write_text(json.dumps(bad))
    with pytest.raises(BundleError, match="do not fit the architecture"):
        load_coordinate_network(path)
    bad = dict(manifest, kind="neural_material")
    manifest_path.write_text(json.dumps(bad))
    with pytest.raises(BundleError, match="kind"):
        load_coordinate_network(path)
    del manifest["files"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="'files'"):
        read_bundle(path)


def test_missing_bundle(tmp_path):
    with pytest.raises(BundleError, match="no bundle manifest"):
        read_bundle(tmp_path)
    (tmp_path / "x").mkdir()


def test_latent_textures_are_read_verified_and_a_flipped_byte_is_refused(tmp_path):
    levels = {"latent.mip0": np.full((4, 4, 2), 0.5, np.float16), "latent.mip1": np.full((2, 2, 2), 0.25, np.float16)}
    save_file(levels, str(tmp_path / "latents.fp16.safetensors"))
    write_bundle(tmp_path, {"w": torch.zeros(1)}, kind="test", metadata={}, extra_files={"latents_fp16": "latents.fp16.safetensors"})
    bundle = read_bundle(tmp_path)
    read = read_latent_textures(bundle, "latents.fp16.safetensors", latent_format="fp16", channels=2, mip_levels=None, field="latent.fp16")
    assert [level[0].shape for level in read] == [(4, 4, 2), (2, 2, 2)]
    data = bytearray((tmp_path / "latents.fp16.safetensors").read_bytes())
    data[-1] ^= 0x01  # still finite halfs: only the manifest's sha256 can tell
    (tmp_path / "latents.fp16.safetensors").write_bytes(bytes(data))
    with pytest.raises(BundleError, match="sha256") as caught:
        read_latent_textures(bundle, "latents.fp16.safetensors", latent_format="fp16", channels=2, mip_levels=2, field="latent.fp16")
    assert caught.value.path.endswith("latents.fp16.safetensors") and caught.value.field == "files.latents_fp16"
