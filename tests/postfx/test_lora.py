"""Training a style LoRA as a bake: it lowers the denoising loss on its images, its file loads into
the render pass and changes the result, a stopped training resumes to the same adapter, the
trainer's swapped-in forward/backward matches plain autograd, and bad inputs are clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from neuralbake.bakes.postfx.chain import POSTFX
from neuralbake.bakes.postfx.config import PostfxConfig
from neuralbake.bakes.postfx.lora import LORA_TRAIN, LoraTrainConfig, LoraWeights, _DenoiseForwardBackward, _Sampler
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.images import load_image, save_png
from neuralbake.nn.trainer import TrainerConfig, TrainingInterrupted
from neuralbake.postfx.adapters import add_lora

pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from neuralbake.postfx.models import make_random_model

    root = tmp_path_factory.mktemp("lora-base")
    return Path(make_random_model(root, family="sd", size="tiny", controlnet=False, seed=1)["base"])


def _style(folder: Path) -> Path:
    """Three striped images; one has its own caption."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(3):
        image = np.zeros((40, 48, 3), np.float32)
        image[..., 0] = 0.9
        image[k::6] = 0.1
        image[:, ::6, 2] = 1.0
        save_png(folder / f"s{k}.png", image)
    (folder / "s0.txt").write_text("red stripes\n")
    return folder


def _config(base: Path, images: Path, steps: int = 24, **changes) -> LoraTrainConfig:
    train = TrainerConfig(steps=steps, learning_rate=1e-2, schedule="constant", precision="fp32", log_every=4, eval_every=0, checkpoint_every=8,
                          adam_beta2=0.999, adam_eps=1e-8, cuda_graph=False, seed=5)
    settings = {"images": str(images), "base": str(base), "prompt": "a striped style", "rank": 4, "resolution": 32, "samples": 1, "sample_steps": 2, "train": train, "device": "cpu"}
    settings.update(changes)
    return LoraTrainConfig(**settings)


def test_training_lowers_the_denoising_loss_and_the_lora_changes_the_render_pass(base: Path, tmp_path: Path) -> None:
    images = _style(tmp_path / "style")
    report = LORA_TRAIN.run(_config(base, images), tmp_path / "lora", progress=False)
    assert report["images"] == 3 and report["captions"] == ["a striped style", "red stripes"]
    assert report["denoise_loss"] < 0.97 * report["denoise_loss_before"]
    lora = tmp_path / "lora" / "lora.safetensors"
    tensors = load_file(lora)
    assert tensors and all(k.startswith("unet.") for k in tensors) and sum(t.numel() for t in tensors.values()) == report["lora_parameters"]
    samples = load_image(tmp_path / "lora" / "samples.png")[0]
    assert samples.shape[:2] == (2 * 32 + 4, 32)  # base row above the LoRA row
    assert np.abs(samples[:32] - samples[36:]).mean() > 1e-3
    render = tmp_path / "render.png"
    save_png(render, np.full((32, 32, 3), 0.4, np.float32))
    common = {"render": str(render), "model": str(base), "prompt": "a striped style", "steps": 4, "strength": 0.8, "size": 64, "device": "cpu", "seed": 2}
    plain = POSTFX.run(PostfxConfig(**common), tmp_path / "plain", progress=False)
    styled = POSTFX.run(PostfxConfig(**common, loras=[f"{lora}:1.0"]), tmp_path / "styled", progress=False)
    assert plain["loras"] == [] and styled["loras"][0]["weight"] == 1.0
    assert np.abs(load_image(tmp_path / "plain" / "result.png")[0] - load_image(tmp_path / "styled" / "result.png")[0]).mean() > 1e-3


def _stop_at(step: int):
    def hook(trainer, at: int) -> None:
        if at == step:
            trainer.request_stop()

    return hook


def test_a_stopped_training_resumes_to_the_same_adapter(base: Path, tmp_path: Path) -> None:
    images = _style(tmp_path / "style")
    config = _config(base, images, steps=16, samples=0)
    straight = LORA_TRAIN.run(config, tmp_path / "straight", progress=False)
    with pytest.raises(TrainingInterrupted):
        LORA_TRAIN.run(_config(base, images, steps=16, samples=0), tmp_path / "stopped", progress=False, on_step=_stop_at(10))
    resumed = LORA_TRAIN.run(_config(base, images, steps=16, samples=0), tmp_path / "stopped", progress=False, resume=True)
    assert resumed["resumed"] is True and resumed["steps"] == straight["steps"] == 16
    a, b = load_file(tmp_path / "straight" / "lora.safetensors"), load_file(tmp_path / "stopped" / "lora.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["denoise_loss"] == straight["denoise_loss"]


def test_the_swapped_in_forward_backward_matches_autograd(base: Path) -> None:
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel.from_pretrained(base / "unet")
    unet.requires_grad_(False)
    torch.manual_seed(0)
    add_lora(unet, rank=2, random_b=True)
    for name, parameter in unet.named_parameters():
        parameter.requires_grad_("lora_" in name)
    weights = LoraWeights(unet)
    from diffusers import DDPMScheduler

    noise = DDPMScheduler(num_train_timesteps=1000)
    sampler = _Sampler(torch.randn(2, 4, 8, 8), torch.randn(2, 16, 16), None, None, noise, batch_size=2)
    batch = sampler.sample(torch.Generator().manual_seed(3))
    params = {f"weights.{k}": v.detach().clone().requires_grad_(True) for k, v in weights.weights.items()}
    loss, grads = _DenoiseForwardBackward(unet, weights, torch.float32)(params, batch, 8.0)
    reference = torch.nn.functional.mse_loss(unet(batch.inputs, batch.timesteps, encoder_hidden_states=batch.text).sample, batch.targets)
    reference.backward()
    assert torch.allclose(loss, reference.detach(), rtol=1e-6)
    for (key, _), grad in zip(params.items(), grads):
        own = weights.weights[key.split(".", 1)[1]].grad
        assert torch.allclose(grad, 8.0 * own, rtol=1e-4, atol=1e-7), key  # scaled by the loss scale
    assert any(g.abs().sum() > 0 for g in grads)


def test_bad_training_inputs_are_clear_errors(base: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    bare = _style(tmp_path / "bare")
    (bare / "s0.txt").unlink()  # no image has a caption of its own
    cases = [
        ({"images": str(tmp_path / "nowhere")}, InputError, "not found", "images"),
        ({"images": str(tmp_path / "empty")}, InputError, "no PNG or JPEG", "images"),
        ({"images": str(bare), "prompt": ""}, InputError, "no caption", "prompt"),
        ({"base": str(tmp_path / "empty")}, InputError, "model_index.json", "base"),
        ({"rank": 0}, ConfigError, "rank", "rank"),
        ({"resolution": 100}, ConfigError, "multiple of 8", "resolution"),
    ]
    for change, error, match, field in cases:
        config = _config(base, bare)
        for name, value in change.items():
            setattr(config, name, value)
        with pytest.raises(error, match=match) as caught:
            LORA_TRAIN.run(config, tmp_path / "out", progress=False)
        assert caught.value.field == field, (change, caught.value.field)
        assert not (tmp_path / "out" / "lora.safetensors").exists()
    from neuralbake.postfx.models import make_random_model

    flux = make_random_model(tmp_path / "flux", family="flux", size="tiny", controlnet=False)
    config = _config(base, bare, prompt="x")
    config.base = flux["base"]
    with pytest.raises(ConfigError, match="SD 1.x/2.x and SDXL") as caught:
        LORA_TRAIN.run(config, tmp_path / "out", progress=False)
    assert caught.value.field == "base"
