"""NTC training budgets: the two phases' lengths, a time budget, latents kept in range, and the report's
PSNR-against-time curve and convergence verdict."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from neuralbake.bakes.ntc import NTCConfig, NTCModel, TexelSampler, choose_layout, compress_texture_set, load_texture_set
from neuralbake.bakes.ntc.config import CPU_BATCH, CPU_LR, CPU_STEPS, GPU_BATCH, GPU_LR, GPU_STEPS, device_defaults
from neuralbake.nn.trainer import Trainer, TrainerConfig

from ..conftest import make_test_pattern

SIZE = 32


@pytest.fixture
def sources(tmp_path: Path) -> list[str]:
    path = tmp_path / "base.png"
    Image.fromarray((make_test_pattern(SIZE, SIZE, 3, seed=5) * 255).round().astype(np.uint8)).save(path)
    return [f"base_color={path}"]


def _config(sources: list[str], **train) -> NTCConfig:
    settings = {"steps": 60, "learning_rate": 0.03, "precision": "fp32", "eval_every": 10, "checkpoint_every": 0, "log_every": 10, **train}
    return NTCConfig(sources=sources, bpp=[16.0], hidden=(16,), pe_frequencies=2, batch_size=256, baselines=False, device="cpu", train=TrainerConfig(**settings))


def test_the_report_gives_both_phases_the_curve_and_the_verdict(sources: list[str], tmp_path: Path) -> None:
    report = compress_texture_set(_config(sources), tmp_path / "out", progress=False)
    assert report["steps"] == {"noise": 60, "round": 6}  # the rounding phase: a tenth of the noise phase
    assert report["training"]["stopped_by"] == "steps"
    curve = report["psnr_curve"]
    assert [p["step"] for p in curve][:7] == [0, 10, 20, 30, 40, 50, 60]
    assert curve[-1]["step"] == 66
    assert all(b["seconds"] >= a["seconds"] for a, b in zip(curve, curve[1:]))
    assert curve[-1]["psnr_db"] > curve[0]["psnr_db"] + 3  # it learned
    verdict = report["training"]
    assert verdict["main_phase"] == "noise" and isinstance(verdict["converged"], bool)
    assert [p["phase"] for p in verdict["phases"]] == ["noise", "round"] and verdict["phases"][0]["evaluations"] == 7


def test_a_time_budget_through_the_cli_ends_the_main_phase(sources: list[str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from neuralbake.cli.ntc import ntc_app

    args = ["compress", *sources, "--bpp", "16", "--seconds", "1.5", "--batch-size", "256", "--hidden", "16", "--pe-frequencies", "2",
            "--eval-every", "20", "--device", "cpu", "--quiet", "--no-baselines", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(ntc_app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["training"]["stopped_by"] == "seconds"
    assert 0 < report["steps"]["noise"] < 1_000_000
    assert report["steps"]["round"] == max(1, report["steps"]["noise"] // 10)


def _trained_latents(sources: list[str], model_type: type) -> torch.Tensor:
    texture_set = load_texture_set(sources)
    layout = choose_layout(texture_set.width, texture_set.height, texture_set.groups, 16.0, hidden=(16,), pe_frequencies=2)
    model = model_type(layout, generator=torch.Generator().manual_seed(0))
    sampler = TexelSampler(layout, texture_set.mip_chain(), 256, torch.device("cpu"))
    config = TrainerConfig(steps=60, learning_rate=0.2, schedule="constant", precision="fp32", checkpoint_every=0, checkpoint_seconds=0, log_every=10)
    Trainer(model, sampler, torch.nn.functional.mse_loss, config, device=torch.device("cpu")).fit()
    return torch.cat([model.latents_high.detach().flatten(), model.latents_low.detach().flatten()])


class _Unprojected(NTCModel):
    constrain_ = None  # the trainer then leaves the latents where Adam puts them


def test_latents_stay_in_their_quantisation_range(sources: list[str]) -> None:
    """A fast learning rate drives latents outwards (the noise phase rewards standing out from the noise); the
    model's projection holds them at the bound, where they still get gradients."""
    assert float(_trained_latents(sources, _Unprojected).abs().max()) > 1.2  # what the projection prevents
    latents = _trained_latents(sources, NTCModel)
    assert float(latents.abs().max()) <= 1.0
    assert float((latents.abs() == 1.0).float().mean()) > 0.02  # held at the bound, not merely never pushed


def test_device_defaults_choose_length_batch_and_rate(sources: list[str]) -> None:
    config = NTCConfig(sources=sources)
    assert device_defaults(config, torch.device("cpu")) == {"texture_size": 256, "train.steps": CPU_STEPS, "train.learning_rate": CPU_LR, "batch_size": CPU_BATCH}
    assert device_defaults(config, torch.device("cuda")) == {"train.steps": GPU_STEPS, "train.learning_rate": GPU_LR, "batch_size": GPU_BATCH}
    timed = replace(config, train=replace(config.train, seconds=60.0))
    assert device_defaults(timed, torch.device("cuda"))["train.steps"] > 1_000_000  # the time ends it
    config.validate()  # left to the device, the settings still check


def test_an_undertrained_bake_says_so_in_its_report_and_summary_line(sources: list[str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from neuralbake.cli.ntc import ntc_app

    args = ["compress", *sources, "--bpp", "16", "--steps", "40", "--eval-every", "5", "--batch-size", "256", "--hidden", "16",
            "--pe-frequencies", "2", "--device", "cpu", "--quiet", "--no-baselines", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(ntc_app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    training = json.loads((tmp_path / "out" / "report.json").read_text())["training"]
    assert training["converged"] is False and training["last_quarter_gain"] > 0.25
    assert "still improving when it stopped" in result.output and "--steps" in result.output


def _trained_model(sources: list[str], weight_clip: float | None) -> NTCModel:
    texture_set = load_texture_set(sources)
    layout = choose_layout(texture_set.width, texture_set.height, texture_set.groups, 16.0, hidden=(16,), pe_frequencies=2)
    model = NTCModel(layout, generator=torch.Generator().manual_seed(0), weight_clip=weight_clip)
    sampler = TexelSampler(layout, texture_set.mip_chain(), 256, torch.device("cpu"))
    config = TrainerConfig(steps=60, learning_rate=0.05, schedule="constant", precision="fp32", checkpoint_every=0, checkpoint_seconds=0, log_every=10)
    Trainer(model, sampler, torch.nn.functional.mse_loss, config, device=torch.device("cpu")).fit()
    return model


def test_weight_clip_bounds_every_layer_and_so_its_int8_scale(sources: list[str]) -> None:
    """Unclamped, a few weights outgrow their layer (the int8 scale max|w|/127 then coarsens all the others);
    clamped to K times the RMS after each update, the stored scale stays within K/127 of the RMS."""
    ratio = lambda w: float(w.abs().max() / w.pow(2).mean().sqrt())
    free = _trained_model(sources, None)
    assert max(ratio(layer.weight.detach()) for layer in free.layers) > 3.2  # what the clamp prevents
    clamped = _trained_model(sources, 3.0)
    for layer in clamped.layers:
        assert ratio(layer.weight.detach()) <= 3.0 * 1.01  # the RMS of the clamped weights is a little lower than before
    from neuralbake.bakes.ntc.container import pack_container, read_container

    container = read_container(pack_container(clamped))
    for scale, weight in zip(container.scales, container.weights()):
        assert float(scale) <= 3.0 / 127 * float(weight.pow(2).mean().sqrt()) * 1.01


def test_weight_clip_out_of_range_names_the_field(sources: list[str]) -> None:
    from neuralbake.errors import ConfigError

    with pytest.raises(ConfigError, match="weight_clip"):
        NTCConfig(sources=sources, weight_clip=0.5).validate()
    NTCConfig(sources=sources, weight_clip=None).validate()
