import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from typer.testing import CliRunner

from neuralbake.bakes.neural_texture import (
    ImageSampler,
    NeuralTextureConfig,
    bake_neural_texture,
    texel_lookup,
    transform_uv,
    uv_grid,
)
from neuralbake.cli import app
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.images import load_image
from neuralbake.nn.trainer import TrainingInterrupted

from ..conftest import make_test_pattern

runner = CliRunner()


def tiny_config(image: Path, **train) -> NeuralTextureConfig:
    config = NeuralTextureConfig(image=str(image), batch_size=256)
    config.network.hidden = 16
    config.network.layers = 2
    config.train.steps = train.pop("steps", 40)
    config.train.eval_every = 10
    config.train.checkpoint_every = 0
    for key, value in train.items():
        setattr(config.train, key, value)
    return config


def test_transforms_and_lookup():
    image = torch.arange(4 * 6 * 1, dtype=torch.float32).reshape(4, 6, 1)
    uv = torch.tensor([[0.0, 0.0], [0.99, 0.99], [0.5, 0.25]])
    assert texel_lookup(image, uv)[:, 0].tolist() == [0.0, 23.0, 9.0]
    assert transform_uv(uv, "flip")[2].tolist() == [0.25, 0.5]
    assert transform_uv(uv, "zoom")[0].tolist() == [0.25, 0.25]
    grid = uv_grid(6, 4)
    assert torch.equal(texel_lookup(image, grid).reshape(4, 6, 1), image)


def test_sampler_is_seeded():
    image = torch.rand(8, 8, 3)
    sampler = ImageSampler(image, "identity", 16)
    a = sampler.sample(torch.Generator().manual_seed(5))
    b = sampler.sample(torch.Generator().manual_seed(5))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


def test_cli_smoke_psnr_rises(tiny_png, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["texture", str(tiny_png), "--out", str(out), "--steps", "150", "--hidden", "32", "--layers", "2", "--lr", "0.01", "--device", "cpu", "--quiet"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    first, last = report["psnr_curve"][0][1], report["psnr_curve"][-1][1]
    assert last > first + 5.0, report["psnr_curve"]
    assert report["steps"] == 150 and report["samples_seen"] == 150 * 1024 and report["params"] > 0
    assert report["device"]["type"] == "cpu" and report["seconds"] > 0
    for name in ["network.safetensors", "network.json", "network.fp16.bin", "network.fp32.bin", "preview.png", "loss.png", "config.json", "output.png"]:
        assert (out / name).is_file(), name
    preview = Image.open(out / "preview.png")
    assert preview.width > 3 * 24
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["steps"] == 150 and config["network"]["hidden"] == 32
    assert not [p for p in os.listdir(out) if p.endswith(".partial")]

    rendered = tmp_path / "big.png"
    result = runner.invoke(app, ["texture", "infer", str(out), "--size", "48x40", "--out", str(rendered)])
    assert result.exit_code == 0, result.output
    assert Image.open(rendered).size == (48, 40)
    result = runner.invoke(app, ["texture", "infer", str(out), "--size", "24x20", "--out", str(tmp_path / "same.png"), "--precision", "fp16"])
    assert result.exit_code == 0, result.output
    same, _ = load_image(tmp_path / "same.png")
    reference, _ = load_image(out / "output.png")
    assert np.abs(same - reference).max() < 0.02


def test_channels_follow_the_image(tmp_path):
    for channels, mode in [(1, "L"), (4, "RGBA")]:
        data = (make_test_pattern(16, 12, channels) * 255).round().astype(np.uint8)
        path = tmp_path / f"{mode}.png"
        Image.fromarray(data[..., 0] if channels == 1 else data, mode=mode).save(path)
        report = bake_neural_texture(tiny_config(path, steps=20), tmp_path / mode, progress=False)
        assert report["image"]["channels"] == channels
        assert load_image(tmp_path / mode / "output.png")[0].shape == (12, 16, channels)


def test_16bit_rgb_png_bakes(tmp_path):
    import png

    data = (make_test_pattern(16, 12, 3) * 65535).round().astype(np.uint16)
    path = tmp_path / "deep.png"
    with open(path, "wb") as handle:
        png.Writer(width=16, height=12, bitdepth=16, greyscale=False).write(handle, data.reshape(12, -1).tolist())
    config = tiny_config(path, steps=20)
    config.transform = "zoom"
    report = bake_neural_texture(config, tmp_path / "deep", progress=False)
    assert report["image"]["bit_depth"] == 16 and report["image"]["channels"] == 3


def test_size_option_resamples(tiny_png, tmp_path):
    config = tiny_config(tiny_png, steps=10)
    config.texture_size = (12, 10)
    report = bake_neural_texture(config, tmp_path / "o", progress=False)
    assert report["trained_size"] == [12, 10]


def test_interrupted_then_resumed_bake_matches_uninterrupted(tiny_png, tmp_path):
    config = tiny_config(tiny_png, steps=30, precision="fp16")
    bake_neural_texture(config, tmp_path / "full", progress=False)

    def stop_at_12(trainer, step):
        if step == 12:
            trainer.request_stop()

    with pytest.raises(TrainingInterrupted):
        bake_neural_texture(tiny_config(tiny_png, steps=30, precision="fp16"), tmp_path / "split", progress=False, on_step=stop_at_12)
    assert (tmp_path / "split" / ".neuralbake" / "checkpoints" / "train.pt").is_file()
    assert not (tmp_path / "split" / "network.json").exists()
    bake_neural_texture(tiny_config(tiny_png, steps=30, precision="fp16"), tmp_path / "split", resume=True, progress=False)
    full = load_file(tmp_path / "full" / "network.safetensors")
    split = load_file(tmp_path / "split" / "network.safetensors")
    assert full.keys() == split.keys()
    for key in full:
        assert torch.equal(full[key], split[key]), key


@pytest.mark.parametrize(
    "make_input, message",
    [
        (lambda d: d / "missing.png", "file not found"),
        (lambda d: (d / "text.png").write_text("not an image") and d / "text.png", "not an image"),
        (lambda d: Image.new("RGB", (1, 1)).save(d / "dot.png") or d / "dot.png", "at least 2x2"),
        (lambda d: Image.new("L", (16385, 2)).save(d / "wide.png") or d / "wide.png", "at most 16384"),
    ],
)
def test_bad_inputs_fail_before_writing(tmp_path, make_input, message):
    image = make_input(tmp_path)
    out = tmp_path / "never"
    result = runner.invoke(app, ["texture", str(image), "--out", str(out), "--steps", "5", "--quiet"])
    assert result.exit_code == 2
    assert message in result.output and "Fix:" in result.output
    assert not out.exists()


def test_unwritable_output_folder(tiny_png, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["texture", str(tiny_png), "--out", str(blocker / "sub"), "--steps", "5", "--quiet"])
    assert result.exit_code == 2 and "cannot be written" in result.output
    with pytest.raises(InputError, match="is a file"):
        bake_neural_texture(tiny_config(tiny_png), blocker, progress=False)


def test_bad_options_are_clear(tiny_png, tmp_path):
    result = runner.invoke(app, ["texture", str(tiny_png), "--out", str(tmp_path / "o"), "--size", "big"])
    assert result.exit_code != 0 and "WIDTHxHEIGHT" in result.output
    result = runner.invoke(app, ["texture", str(tiny_png), "--out", str(tmp_path / "o"), "--precision", "fp8"])
    assert result.exit_code == 2 and "precision" in result.output
    assert not (tmp_path / "o").exists()
    if not torch.cuda.is_available():
        result = runner.invoke(app, ["texture", str(tiny_png), "--out", str(tmp_path / "o"), "--device", "cuda"])
        assert result.exit_code == 2 and "no GPU" in result.output


@pytest.mark.parametrize("args", [[], ["texture"], ["texture", "bake"], ["texture", "infer"], ["version"]])
def test_every_command_has_help(args):
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_infer_errors(tmp_path):
    result = runner.invoke(app, ["texture", "infer", str(tmp_path), "--out", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "no bundle manifest" in result.output


@pytest.mark.slow
def test_a_killed_texture_bake_resumes_to_a_valid_bundle(tmp_path, tiny_png, kill_and_resume) -> None:
    out = tmp_path / "out"
    report = kill_and_resume(["texture", "bake", str(tiny_png), "--steps", "600", "--batch-size", "64", "--checkpoint-every", "2", "--precision", "fp32"], out)
    assert report["steps"] == 600
    from neuralbake.nn.serialize import load_coordinate_network

    load_coordinate_network(out)


def test_infer_refuses_a_flipped_byte_in_any_file_of_the_bake(tiny_png, tmp_path):
    out = tmp_path / "bake"
    bake_neural_texture(tiny_config(tiny_png, steps=4), out, progress=False)
    names = json.loads((out / "bake.json").read_text())["files"]
    assert {"network.safetensors", "network.json", "network.fp16.bin", "report.json"} <= set(names)
    for name in names:
        path = out / name
        original = path.read_bytes()
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 0x01
        path.write_bytes(bytes(damaged))
        result = runner.invoke(app, ["texture", "infer", str(out), "--size", "8x8", "--out", str(tmp_path / "x.png")])
        assert result.exit_code == 2, name
        assert name in result.output and "sha256" in result.output, result.output
        path.write_bytes(original)
    result = runner.invoke(app, ["texture", "infer", str(out), "--size", "8x8", "--out", str(tmp_path / "x.png")])
    assert result.exit_code == 0, result.output


def test_fused_training_kernel_bakes_and_the_report_says_so(tiny_png, tmp_path):
    """``--kernels triton`` trains through the fused Triton step (the interpreter on a CPU); ``auto`` on a CPU is PyTorch."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs a GPU or TRITON_INTERPRET=1")
    common = ["--steps", "60", "--hidden", "16", "--layers", "2", "--batch-size", "256", "--lr", "0.02", "--schedule", "cosine", "--device", "cpu", "--quiet"]
    result = runner.invoke(app, ["texture", str(tiny_png), "--out", str(tmp_path / "fused"), "--kernels", "triton", *common])
    assert result.exit_code == 0, result.output
    fused = json.loads((tmp_path / "fused" / "report.json").read_text())
    assert fused["kernels"] == {"train": "triton", "optimizer_step": "triton", "batches": "triton", "train_kernel": "triton"}
    assert fused["psnr_curve"][-1][1] > fused["psnr_curve"][0][1] + 3.0, fused["psnr_curve"]
    result = runner.invoke(app, ["texture", str(tiny_png), "--out", str(tmp_path / "torch"), *common])
    assert result.exit_code == 0, result.output
    reference = json.loads((tmp_path / "torch" / "report.json").read_text())
    assert reference["kernels"] == {"train": "torch", "optimizer_step": "torch", "batches": "torch", "train_kernel": "torch"}
    # same seed, batches of the same distribution (the kernel draws its own), same fp16 scheme: the two runs end close
    assert abs(fused["psnr_db"] - reference["psnr_db"]) < 0.5, (fused["psnr_db"], reference["psnr_db"])
    result = runner.invoke(app, ["texture", str(tiny_png), "--out", str(tmp_path / "bad"), "--kernels", "triton", "--hidden", "256", "--device", "cpu"])
    assert result.exit_code != 0 and "256 wide" in result.output and "--kernels auto or torch" in result.output


def test_auto_falls_back_to_pytorch_when_the_kernels_fail_here(tiny_png, tmp_path, monkeypatch):
    """Under ``auto`` a fused step that fails on this machine (say, Triton cannot compile it) trains on PyTorch, with a note; ``triton`` fails."""
    pytest.importorskip("triton")
    from neuralbake.kernels import training

    def broken(self, *arguments):
        raise RuntimeError("PassManager::run failed")

    from neuralbake.bakes import run as run_module

    monkeypatch.setattr(run_module, "kernel_choice", lambda mode, device, reason, **options: ("triton", "as on a GPU"))
    monkeypatch.setattr(training.FusedForwardBackward, "_launch", broken)  # the training kernel, under both the step and the call
    config = tiny_config(tiny_png, steps=20)
    report = bake_neural_texture(config, tmp_path / "auto", progress=False)
    assert report["kernels"] == {"train": "torch", "optimizer_step": "torch", "batches": "torch", "train_kernel": "torch"} and report["steps"] == 20
    assert report["kernel_paths"]["train"]["path"] == "torch" and "PassManager::run failed" in report["kernel_paths"]["train"]["why"]
    config = tiny_config(tiny_png, steps=20)
    config.kernels = "triton"
    with pytest.raises(ConfigError, match="PassManager") as info:
        bake_neural_texture(config, tmp_path / "triton", progress=False)
    assert info.value.fix == "use --kernels auto or torch."


def test_infer_through_the_fused_mlp_matches_pytorch(tiny_png, tmp_path):
    """``texture infer --kernels triton`` renders with the fused Triton MLP (the interpreter on a CPU), the same PNG as PyTorch's to one level in 255."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs a GPU or TRITON_INTERPRET=1")
    bake_neural_texture(tiny_config(tiny_png, steps=30), tmp_path / "bake", progress=False)
    images = {}
    for kernels in ("triton", "torch"):
        result = runner.invoke(app, ["texture", "infer", str(tmp_path / "bake"), "--size", "40x24", "--out", str(tmp_path / f"{kernels}.png"), "--kernels", kernels, "--quiet"])
        assert result.exit_code == 0, result.output
        images[kernels] = np.asarray(Image.open(tmp_path / f"{kernels}.png"), dtype=np.int16)
    assert images["triton"].shape == images["torch"].shape and np.abs(images["triton"] - images["torch"]).max() <= 1
    result = runner.invoke(app, ["texture", "infer", str(tmp_path / "bake"), "--size", "8x8", "--out", str(tmp_path / "x.png"), "--kernels", "cuda"])
    assert result.exit_code != 0 and "unknown kernels" in result.output
