import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuralbake.bakes.neural_material import (
    NeuralMaterialConfig,
    NeuralMaterialModel,
    ReferenceSampler,
    bake_neural_material,
    dequantize_latents,
    load_neural_material,
    quantize_latents,
    texel_features,
)
from neuralbake.cli import app
from neuralbake.errors import ConfigError, InputError, TrainingError
from neuralbake.material.loader import load_material

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "materials"
UP = torch.tensor([[0.0, 1.0, 0.0]])


def tiny(material: str = "rusty_iron_nail.json", **train) -> NeuralMaterialConfig:
    config = NeuralMaterialConfig(material=str(EXAMPLES / material), resolution=8, batch_size=512, device="cpu")
    config.decoder_hidden = config.encoder_hidden = 16
    config.compare_size, config.compare_spp = 24, 4
    config.train.steps = train.pop("steps", 60)
    config.train.log_every = 10
    config.train.checkpoint_every = 0
    for key, value in train.items():
        setattr(config.train, key, value)
    return config


@pytest.mark.parametrize("name", ["antique_copper_tray.json", "weathered_leather.mtlx"])
def test_sampler_and_model_shapes(name):
    material = load_material(EXAMPLES / name)
    features = texel_features(material, torch.rand(5, 2), UP.expand(5, 3)).shape[1]
    sampler = ReferenceSampler(material, UP, 64, 0.5, torch.device("cpu"))
    batch = sampler.sample(torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (64, features + 6) and batch.targets.shape == (64, 3)
    assert torch.isfinite(batch.targets).all() and (batch.targets >= 0).all()
    model = NeuralMaterialModel(features, NeuralMaterialConfig(latent=4))
    assert model(batch.inputs).shape == (64, 3)
    assert model.encoder.layers[-1].out_features == 4 and model.decoder.layers[0].in_features == 4 + 9  # latent, wi, wo, half


def test_tiny_bake_learns_and_round_trips(tmp_path):
    config = tiny(steps=80)
    config.train.log_every = 1
    report = bake_neural_material(config, tmp_path / "nm", progress=False)
    events = [json.loads(line) for line in (tmp_path / "nm" / "events.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in events if e["event"] == "train"]
    assert sum(losses[-10:]) / 10 < 0.8 * losses[0], losses
    assert report["mip_levels"] == 4 and report["latent"] == 8 and report["psnr_db"] > 10
    for name in ["network.json", "latents.fp16.safetensors", "latents.u8.safetensors", "renders/comparison.png", "texture_views.png", "loss.png", "report.json"]:
        assert (tmp_path / "nm" / name).is_file(), name
    loaded = load_neural_material(tmp_path / "nm")
    assert [tuple(level.shape) for level in loaded.latents] == [(8, 8, 8), (4, 4, 8), (2, 2, 8), (1, 1, 8)]
    quantized = load_neural_material(tmp_path / "nm", quantized=True)
    wi = torch.nn.functional.normalize(torch.rand(32, 3) + torch.tensor([0, 0, 0.3]), dim=1)
    uv = torch.rand(32, 2)
    a = loaded(uv).eval(wi, wi.flip(0)).detach()
    b = quantized(uv).eval(wi, wi.flip(0)).detach()
    assert torch.isfinite(a).all() and (a >= 0).all()
    assert (a - b).abs().max() < 0.05 * max(float(a.abs().max()), 1e-3) + 1e-3


def test_u8_latents_within_half_a_step():
    latent = torch.randn(6, 5, 8) * torch.linspace(0.1, 3.0, 8)
    codes, scale, offset = quantize_latents(latent)
    assert codes.dtype == torch.uint8
    error = (dequantize_latents(codes, scale, offset) - latent).abs()
    assert (error <= scale / 2 + 1e-6).all()


def test_bad_inputs(tmp_path):
    config = tiny()
    config.latent = 0
    with pytest.raises(ConfigError, match="latent"):
        bake_neural_material(config, tmp_path / "a", progress=False)
    (tmp_path / "empty.json").write_text('{"format": "neuralbake.material", "version": 1, "nodes": {}}')
    config = tiny()
    config.material = str(tmp_path / "empty.json")
    with pytest.raises(InputError, match="no layers"):
        bake_neural_material(config, tmp_path / "b", progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_nan_in_reference_names_uv_and_directions():
    class NaNLayer:
        def sample(self, wo, u):
            return wo, torch.ones(len(wo))

        def eval(self, wi, wo):
            out = torch.ones(len(wi), 3)
            out[3] = float("nan")
            return out

    class NaNMaterial:
        def __call__(self, uv, normal):
            return NaNLayer()

        def layer_and_inputs(self, uv, normal):
            return NaNLayer(), uv

    sampler = ReferenceSampler(NaNMaterial(), UP, 8, 0.5, torch.device("cpu"))
    with pytest.raises(TrainingError, match=r"uv=\[.*\], wi=\[.*\], wo=\[.*\]"):
        sampler.sample(torch.Generator().manual_seed(0))


def test_cli_material_bake(tmp_path):
    result = CliRunner().invoke(
        app,
        ["material", "bake", str(EXAMPLES / "velvet.json"), "--out", str(tmp_path / "v"), "--steps", "20", "--resolution", "8",
         "--batch-size", "256", "--device", "cpu", "--quiet"],
    )
    assert result.exit_code == 0, result.output
    assert "PSNR" in result.output and (tmp_path / "v" / "network.json").is_file()
    result = CliRunner().invoke(app, ["material", "bake", str(EXAMPLES / "velvet.json"), "--out", str(tmp_path / "w"), "--latent", "0"])
    assert result.exit_code == 2 and "latent" in result.output
