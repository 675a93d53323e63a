import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuralbake.bakes.neural_material import (
    NEURAL_MATERIAL,
    NeuralMaterialConfig,
    NeuralMaterialModel,
    ReferenceSampler,
    bake_neural_material,
    load_neural_material,
    relative_l1,
    texel_features,
)
from neuralbake.bakes.run import apply_defaults
from neuralbake.cli import app
from neuralbake.errors import ConfigError, InputError, TrainingError
from neuralbake.io.manifest import BAKE_MANIFEST, verify_bake_folder
from neuralbake.material.loader import load_material
from neuralbake.nn.quantize import dequantize_latents_affine_u8, quantize_latents_affine_u8

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "materials"
UP = torch.tensor([[0.0, 1.0, 0.0]])


def tiny(material: str = "rusty_iron_nail.json", **train) -> NeuralMaterialConfig:
    config = NeuralMaterialConfig(material=str(EXAMPLES / material), texture_size=8, batch_size=512, device="cpu")
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


def test_held_out_evaluation_reports_a_display_figure_beside_the_relative_one() -> None:
    from neuralbake.bakes.neural_material.bake import HELD_OUT_DISPLAY, HELD_OUT_QUALITY, held_out_evaluation
    from neuralbake.nn.batches import Batch

    g = torch.Generator().manual_seed(0)
    f_cos = torch.cat((0.5 + 1.5 * torch.rand(512, 3, generator=g), 0.02 + 0.03 * torch.rand(512, 3, generator=g)))  # bright, then dim samples

    class Draws:
        def draw(self, count: int, generator: torch.Generator) -> Batch:
            return Batch(inputs=torch.zeros(len(f_cos), 1), targets=torch.log1p(f_cos))

    class Fixed(torch.nn.Module):
        def __init__(self, values: torch.Tensor) -> None:
            super().__init__()
            self.values = values

        def forward(self, inputs: torch.Tensor) -> torch.Tensor:
            return torch.log1p(self.values)

    evaluate = held_out_evaluation(Draws(), torch.device("cpu"), seed=0)
    assert evaluate(Fixed(f_cos))[HELD_OUT_DISPLAY] == 120.0  # exact: the figures' ceiling
    dim_off, bright_off = f_cos.clone(), f_cos.clone()
    dim_off[512:] *= 1.1  # every dim sample 10 % too bright
    bright_off[:512] *= 1.05  # every bright one 5 %
    dim, bright = evaluate(Fixed(dim_off)), evaluate(Fixed(bright_off))
    # the relative figure weighs the dim samples' error most, the display-mapped one the bright samples'
    assert dim[HELD_OUT_QUALITY] < bright[HELD_OUT_QUALITY] and dim[HELD_OUT_DISPLAY] > bright[HELD_OUT_DISPLAY]
    diverged = evaluate(Fixed(torch.full_like(f_cos, 1e30)))  # log1p 69: an f cos whose square overflows in float32
    assert math.isfinite(diverged[HELD_OUT_DISPLAY]) and diverged[HELD_OUT_DISPLAY] < 10.0


def test_u8_latents_within_half_a_step():
    latent = torch.randn(6, 5, 8) * torch.linspace(0.1, 3.0, 8)
    codes, scale, offset = quantize_latents_affine_u8(latent)
    assert codes.dtype == torch.uint8
    error = (dequantize_latents_affine_u8(codes, scale, offset) - latent).abs()
    assert (error <= scale / 2 + 1e-6).all()


def test_relative_l1_weighs_relative_errors_of_f_cos():
    # The same 50% error of f cos costs about the same on a dim (grazing) sample as on a bright
    # one, while a plain L1 on log(1 + f cos) made the dim one ~60x cheaper.
    def cost(x: float, ratio: float, loss) -> float:
        target = torch.log1p(torch.full((1, 3), x))
        return float(loss(torch.log1p(torch.full((1, 3), x * ratio)), target))

    for loss_ratio in (cost(0.005, 1.5, relative_l1) / cost(0.5, 1.5, relative_l1), cost(0.05, 0.5, relative_l1) / cost(2.0, 0.5, relative_l1)):
        assert 0.3 < loss_ratio < 1.5, loss_ratio
    plain = cost(0.005, 1.5, torch.nn.functional.l1_loss) / cost(0.5, 1.5, torch.nn.functional.l1_loss)
    assert plain < 0.02, plain
    # Black targets keep the plain L1, and a negative (clamped-to-black) prediction still gets a gradient.
    prediction = torch.tensor([[-0.2, 0.1, 0.3]], requires_grad=True)
    target = torch.zeros(1, 3)
    loss = relative_l1(prediction, target)
    assert torch.isclose(loss, torch.nn.functional.l1_loss(prediction, target))
    loss.backward()
    assert torch.all(prediction.grad != 0)


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
    # the settings are refused before the folder is made; the material in the run, which leaves no outputs
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists() or not [p for p in (tmp_path / "b").iterdir() if p.name != ".neuralbake"]
    result = CliRunner().invoke(app, ["material", "bake", str(tmp_path / "empty.json"), "--out", str(tmp_path / "c"), "--quiet"])
    assert result.exit_code == 2 and "no layers" in result.output and not (tmp_path / "c").exists()  # the command removes the folder it made


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
        ["material", "bake", str(EXAMPLES / "velvet.json"), "--out", str(tmp_path / "v"), "--steps", "20", "--size", "8",
         "--batch-size", "256", "--device", "cpu", "--compare-size", "16", "--compare-spp", "2", "--quiet"],
    )
    assert result.exit_code == 0, result.output
    assert "PSNR" in result.output and (tmp_path / "v" / "network.json").is_file()
    result = CliRunner().invoke(app, ["material", "bake", str(EXAMPLES / "velvet.json"), "--out", str(tmp_path / "w"), "--latent", "0"])
    assert result.exit_code == 2 and "latent" in result.output


def test_render_compares_with_the_reference(tmp_path):
    bake_neural_material(tiny(steps=20), tmp_path / "nm", progress=False)
    result = CliRunner().invoke(app, ["material", "render", str(tmp_path / "nm"), "--out", str(tmp_path / "r"), "--size", "16", "--spp", "2", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert set(report["scenes"]) == {"sphere", "tile"} and report["precision"] == "fp16"
    assert 5 < report["psnr_db"] < 80 and 0 < report["flip"] < 1
    assert (tmp_path / "r" / "comparison.png").is_file() and (tmp_path / "r" / "tile_neural.exr").is_file()
    missing = CliRunner().invoke(app, ["material", "render", str(tmp_path / "nm"), "--out", str(tmp_path / "s"), "--material", str(tmp_path / "gone.json")])
    assert missing.exit_code != 0 and "gone.json" in missing.output and "--material" in missing.output
    assert report["latent_filtering"] == "level 0, bilinear"
    filtered = CliRunner().invoke(
        app, ["material", "render", str(tmp_path / "nm"), "--out", str(tmp_path / "f"), "--size", "16", "--spp", "2", "--device", "cpu", "--filter-latents"]
    )
    assert filtered.exit_code == 0, filtered.output
    report = json.loads((tmp_path / "f" / "report.json").read_text())
    assert set(report["scenes"]) == {"sphere", "tile", "plane"} and report["latent_filtering"].startswith("trilinear")


def test_shared_decoder_keeps_the_first_layer_and_trains_the_rest(tmp_path):
    first = tmp_path / "first"
    bake_neural_material(tiny(steps=20), first, progress=False)
    config = tiny("velvet.json", steps=20)
    config.shared_decoder = str(first)
    report = bake_neural_material(config, tmp_path / "second", progress=False)
    a, b = load_neural_material(first), load_neural_material(tmp_path / "second")
    assert torch.equal(a.decoder.layers[0].weight, b.decoder.layers[0].weight)
    assert torch.equal(a.decoder.layers[0].bias, b.decoder.layers[0].bias)
    assert not torch.equal(a.decoder.layers[1].weight, b.decoder.layers[1].weight)
    assert report["decoder_trained_params"] < report["decoder_params"] and report["shared_decoder"]["layers"] == 1
    bad = tiny(steps=5)
    bad.shared_decoder, bad.decoder_hidden = str(first), 32
    with pytest.raises(ConfigError, match="shared_decoder"):
        bake_neural_material(bad, tmp_path / "third", progress=False)


def test_cli_pack_bakes_materials_with_a_shared_first_layer(tmp_path):
    args = ["material", "pack", str(EXAMPLES / "rusty_iron_nail.json"), str(EXAMPLES / "velvet.json"), "--out", str(tmp_path / "scene"),
            "--steps", "10", "--size", "8", "--batch-size", "256", "--device", "cpu", "--compare-size", "12", "--compare-spp", "2", "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "id 0: rusty_iron_nail" in result.output and "id 1: velvet" in result.output
    pack = json.loads((tmp_path / "scene" / "pack.json").read_text())
    assert pack["shared_first_layers"] == 1 and set(pack["bakes"]) == {"rusty_iron_nail", "velvet"}
    shader = json.loads((tmp_path / "scene" / "shader" / "material_pack.json").read_text())
    first, second = (load_neural_material(tmp_path / "scene" / "materials" / n) for n in ("rusty_iron_nail", "velvet"))
    assert torch.equal(first.decoder.layers[0].weight, second.decoder.layers[0].weight)
    separate = sum((tmp_path / "scene" / "materials" / n / "network.fp16.bin").stat().st_size for n in ("rusty_iron_nail", "velvet"))
    assert (tmp_path / "scene" / "shader" / "material_pack.weights.fp16.bin").stat().st_size < separate, shader
    # the pack ran on the runner: one bake.json over everything, one phase (checkpoint) per baked material
    manifest = verify_bake_folder(tmp_path / "scene")
    assert manifest is not None and manifest["bake"] == "material_pack" and "materials/velvet/latents.u8.safetensors" in manifest["files"]
    assert sorted(p.name for p in (tmp_path / "scene" / ".neuralbake" / "checkpoints").glob("*.pt")) == ["rusty_iron_nail.pt", "velvet.pt"]
    assert verify_bake_folder(tmp_path / "scene" / "materials" / "velvet") is not None  # each material is a bake folder of its own
    assert [m["bundle"] for m in shader["materials"]] == [str(tmp_path / "scene" / "materials" / n) for n in ("rusty_iron_nail", "velvet")]
    velvet = json.loads((tmp_path / "scene" / "materials" / "velvet" / "report.json").read_text())
    assert velvet["shared_decoder"]["bundle"] == str(tmp_path / "scene" / "materials" / "rusty_iron_nail")


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_view_directions_mix_cosine_and_uniform(fraction: float) -> None:
    from scipy import stats

    from neuralbake.bakes.neural_material import view_directions

    wo = view_directions(20000, fraction, torch.Generator().manual_seed(3), torch.device("cpu"))
    assert torch.allclose(wo.norm(dim=1), torch.ones(len(wo)), atol=1e-5) and bool((wo[:, 2] >= 0).all())
    # cos(theta) has cdf (1 - f) c^2 + f c: cosine-distributed views have c^2 uniform, uniform ones c.
    cdf = lambda c: (1.0 - fraction) * c**2 + fraction * c
    assert stats.kstest(wo[:, 2].double().numpy(), cdf).pvalue > 1e-3
    azimuth = torch.atan2(wo[:, 1], wo[:, 0]).double().numpy()
    assert stats.kstest(azimuth, stats.uniform(loc=-math.pi, scale=2 * math.pi).cdf).pvalue > 1e-3


def test_device_defaults_fill_only_what_is_left_out() -> None:
    cpu = apply_defaults(NEURAL_MATERIAL, config := NeuralMaterialConfig(material="m.json"), torch.device("cpu"))
    assert cpu == {"train.steps": 2000, "batch_size": 4096} and config.texture_size == 512  # the README's CPU figures
    gpu = apply_defaults(NEURAL_MATERIAL, NeuralMaterialConfig(material="m.json"), torch.device("cuda"))
    assert gpu == {"train.steps": 30_000, "batch_size": 16_384}  # a layered material converges there (44.8 dB on an H200)
    asset = apply_defaults(NEURAL_MATERIAL, NeuralMaterialConfig(material="helmet.GLB"), torch.device("cuda"))
    assert asset == gpu  # a glTF asset's material likewise (the crate's: still rising at 10,000 steps, flat at 30,000)
    from neuralbake.bakes.material_pack import MATERIAL_PACK, MaterialPackConfig

    scenes = apply_defaults(MATERIAL_PACK, MaterialPackConfig(materials=["a.glb", "b.gltf"]), torch.device("cuda"))
    assert scenes == {"bake.train.steps": 30_000, "bake.batch_size": 16_384}
    given = NeuralMaterialConfig(material="m.json", batch_size=256)
    given.train.steps = 7
    assert apply_defaults(NEURAL_MATERIAL, given, torch.device("cuda")) == {} and (given.train.steps, given.batch_size) == (7, 256)


def test_footprint_counts_a_chosen_wsd_runs_twin() -> None:
    from neuralbake.bakes.neural_material.config import material_memory, material_steps

    cosine = NeuralMaterialConfig(material="m.json", batch_size=256)
    cosine.train.steps = 1000
    wsd = NeuralMaterialConfig(material="m.json", batch_size=256)
    wsd.train.steps, wsd.train.schedule = 1000, "wsd"
    assert material_steps(cosine) == 1000 and material_steps(wsd) == 1100  # the twin decays a fifth of 500 steps (decay_fraction 0.2)
    weights = lambda c: material_memory(c, torch.device("cpu"))["decoder_hidden"]  # noqa: E731
    assert weights(wsd) > weights(cosine)  # its copies of the masters and Adam's moments


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny finished neural material bake folder (with its bake.json)."""
    out = tmp_path_factory.mktemp("baked") / "nm"
    config = tiny("velvet.json", steps=10)
    config.latent, config.texture_size, config.compare_size, config.compare_spp = 4, 4, 8, 1
    bake_neural_material(config, out, progress=False)
    return out


@pytest.mark.slow
def test_render_and_export_refuse_a_bake_folder_with_any_byte_changed(baked: Path, tmp_path: Path) -> None:
    manifest = verify_bake_folder(baked)
    assert manifest is not None and {"network.json", "latents.fp16.safetensors", "latents.u8.safetensors", "config.json"} <= set(manifest["files"])
    runner = CliRunner()
    for name in manifest["files"]:
        folder = tmp_path / name.replace("/", "_")
        shutil.copytree(baked, folder, ignore=shutil.ignore_patterns(".neuralbake"))
        data = bytearray((folder / name).read_bytes())
        data[len(data) // 2] ^= 0x01
        (folder / name).write_bytes(bytes(data))
        for argv in (["material", "render", str(folder), "--out", str(tmp_path / "r"), "--size", "8", "--spp", "1", "--device", "cpu", "--quiet"],
                     ["material", "export", str(folder), "--out", str(tmp_path / "e")]):
            result = runner.invoke(app, argv)
            shown = "".join(result.output.split())  # rich wraps long paths
            assert result.exit_code == 2, (name, argv[1], result.output)
            assert name.replace("/", "") in shown.replace("/", "") and BAKE_MANIFEST in shown, (name, argv[1], result.output)
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()


@pytest.mark.slow
def test_a_killed_material_bake_resumes_to_a_valid_bundle(tmp_path: Path, kill_and_resume) -> None:
    out = tmp_path / "out"
    argv = ["material", "bake", str(EXAMPLES / "velvet.json"), "--latent", "4", "--size", "8", "--batch-size", "64", "--steps", "400",
            "--checkpoint-every", "2", "--compare-size", "8", "--compare-spp", "1", "--decoder-hidden", "16", "--encoder-hidden", "16",
            "--reference-chunk", "6400", "--device", "cpu"]
    report = kill_and_resume(argv, out)
    assert report["steps"] == 400 and report["latent"] == 4 and report["resolution"] == 8
    assert (out / ".neuralbake" / "checkpoints" / "train.pt").is_file() and not (out / "checkpoint.pt").exists()
    assert [tuple(level.shape) for level in load_neural_material(out).latents] == [(8, 8, 4), (4, 4, 4), (2, 2, 4), (1, 1, 4)]


@pytest.mark.slow
def test_a_killed_material_pack_resumes_to_a_valid_pack(tmp_path: Path, kill_and_resume) -> None:
    out = tmp_path / "pack"
    argv = ["material", "pack", str(EXAMPLES / "rusty_iron_nail.json"), str(EXAMPLES / "velvet.json"), "--latent", "4", "--size", "8",
            "--batch-size", "64", "--steps", "200", "--checkpoint-every", "2", "--compare-size", "8", "--compare-spp", "1",
            "--decoder-hidden", "16", "--encoder-hidden", "16", "--device", "cpu"]
    kill_and_resume(argv, out)
    pack = json.loads((out / "pack.json").read_text())
    assert set(pack["bakes"]) == {"rusty_iron_nail", "velvet"}
    for name in ("rusty_iron_nail", "velvet"):
        assert verify_bake_folder(out / "materials" / name) is not None


@pytest.mark.slow
def test_pack_refuses_an_input_bake_with_a_byte_changed(baked: Path, tmp_path: Path) -> None:
    folder = tmp_path / "velvet"
    shutil.copytree(baked, folder, ignore=shutil.ignore_patterns(".neuralbake"))
    data = bytearray((folder / "latents.u8.safetensors").read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / "latents.u8.safetensors").write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["material", "pack", str(folder), "--out", str(tmp_path / "pack"), "--device", "cpu", "--quiet"])
    shown = "".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "latents.u8.safetensors" in shown and BAKE_MANIFEST in shown, result.output
    assert not (tmp_path / "pack").exists()


def test_fused_training_and_decode_bake_like_pytorch_and_the_report_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kernels=triton`` trains the encoder and decoder through the fused kernels and scores and times the bake through the
    fused decode (the interpreter on a CPU); the same loss curve and scores as PyTorch."""
    pytest.importorskip("triton")
    import os

    from neuralbake.bakes.neural_material import bake as bake_module
    from neuralbake.bakes.neural_material.comparison import throughput

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs a GPU or TRITON_INTERPRET=1")
    # the interpreter runs a kernel thousands of times slower than a GPU: time a small batch
    monkeypatch.setattr(bake_module, "throughput", lambda *args: throughput(*args, samples=2048, repeats=1))
    reports = {}
    for kernels in ("torch", "triton"):
        config = tiny(steps=20)
        config.kernels = kernels
        reports[kernels] = bake_neural_material(config, tmp_path / kernels, progress=False)
    assert reports["torch"]["kernels"] == {"train": "torch", "decode": "torch", "decode_kernel": "torch"}
    assert reports["triton"]["kernels"] == {"train": "triton", "decode": "triton", "decode_kernel": "triton"}  # the interpreter runs no Gluon
    assert reports["triton"]["throughput"]["neural_kernels"] == "triton"
    assert abs(reports["triton"]["psnr_db"] - reports["torch"]["psnr_db"]) < 0.05
    assert reports["triton"]["final_loss"] == pytest.approx(reports["torch"]["final_loss"], rel=1e-3)
    config = tiny()
    config.kernels = "fast"
    with pytest.raises(ConfigError, match="kernels"):
        config.validate()


def test_an_impossible_fused_decode_fails_before_training(tmp_path: Path) -> None:
    """A decoder the kernels cannot run, with ``kernels=triton``, stops the bake before any step (the reason and the fix named)."""
    config = tiny(steps=5000)
    config.decoder_hidden = 256
    config.kernels = "triton"
    with pytest.raises(ConfigError, match="256 wide") as info:
        bake_neural_material(config, tmp_path / "nm", progress=False)
    assert "--kernels auto or torch" in str(info.value.fix)
    assert not (tmp_path / "nm" / "events.jsonl").exists()
