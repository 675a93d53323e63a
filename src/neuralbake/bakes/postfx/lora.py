"""A style LoRA for the render pass's diffusion models, trained as a bake (the adapters themselves:
:mod:`neuralbake.postfx.adapters`).

:data:`LORA_TRAIN` trains one as a bake on the one run path (``neuralbake postfx lora IMAGES --base
MODEL``): the images are centre-cropped, encoded once by the VAE, their captions (``IMAGE.txt`` or one
prompt) once by the text encoder(s); each step draws an image, a timestep and noise and fits the
LoRA matrices to the model's denoising target (the diffusers training scripts' objective) through the
shared :class:`~neuralbake.nn.trainer.Trainer` (fp32 master weights, fp16 or bf16 compute on a GPU,
loss scaling, checkpoints that resume). Only the adapter is trained and checkpointed; the model stays
frozen. The report gives the denoising loss on the training images at fixed timesteps and noise
before and after, and ``samples.png`` draws the prompt with and without the LoRA.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from neuralbake.bakes.config import TrainedConfig
from neuralbake.bakes.footprint import TRAINED_PARAMETER_BYTES, dominant_field, footprint, precision_bytes
from neuralbake.bakes.postfx.footprint import CHAIN_BASE_BYTES, SD15
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun, Footprint
from neuralbake.core.paths import InputPathOrFolder, LibraryFolder
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.images import load_image, resize_image, save_png
from neuralbake.nn.trainer import TrainerConfig
from neuralbake.postfx.adapters import add_lora, save_lora
from neuralbake.postfx.models import inspect_model, load_pipeline
from neuralbake.render.pictures import panel_grid

__all__ = ["LORA_TRAIN", "LoraTrainConfig", "LoraWeights", "lora_footprint", "lora_memory"]


def _default_train() -> TrainerConfig:
    return TrainerConfig(steps=None, learning_rate=1e-4, schedule="constant", warmup_steps=0, precision="fp16", adam_beta2=0.999, adam_eps=1e-8,
                         log_every=10, eval_every=0, checkpoint_every=100, cuda_graph=False)


@dataclass
class LoraTrainConfig(TrainedConfig):
    """Everything that determines a style LoRA's training."""

    images: InputPathOrFolder = ""
    """Folder of training images (PNG or JPEG); IMAGE.txt beside an image is its caption."""
    base: LibraryFolder = ""
    """The model the LoRA is for: a diffusers-layout folder (SD 1.x/2.x or SDXL)."""
    prompt: str = ""
    """Caption of the images without a .txt of their own (e.g. "a render in the studio's style")."""
    rank: int = 8
    """LoRA rank (the adapter's size: 4-64 is usual)."""
    resolution: int | None = None
    """Side the images are cropped and scaled to (unset: 512 on a GPU, 128 on a CPU)."""
    batch_size: int = 1
    """Images per step."""
    samples: int = 2
    """Sample pictures drawn from the prompt with and without the LoRA for the report (0: none)."""
    sample_steps: int | None = None
    """Denoising steps of the sample pictures (unset: 25 on a GPU, 4 on a CPU)."""
    train: TrainerConfig = field(default_factory=_default_train)

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""
        if not self.images:
            raise ConfigError("no images given.", field="images", fix="pass the folder of training images.")
        if not self.base:
            raise ConfigError("no base model given.", field="base", fix="pass --base DIR, the diffusers-layout model the LoRA is for.")
        for name, low, top in (("rank", 1, 256), ("resolution", 16, 2048), ("batch_size", 1, 64), ("samples", 0, 16), ("sample_steps", 1, 200)):
            value = getattr(self, name)
            if value is not None and not low <= value <= top:
                raise ConfigError(f"{name} must be in [{low}, {top}], got {value!r}.", field=name, fix=f"pass a value in [{low}, {top}].")
        if self.resolution is not None and self.resolution % 8:
            raise ConfigError(f"resolution must be a multiple of 8, got {self.resolution}.", field="resolution", fix="pass e.g. 512.")
        self.train.validate()


def _lora_defaults(config: LoraTrainConfig, device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        return {"train.steps": 1000, "resolution": 512, "sample_steps": 25}
    return {"train.steps": 60, "resolution": 128, "sample_steps": 4}


class LoraWeights(nn.Module):
    """The LoRA matrices being trained, as this module's parameters: the very tensors the network's
    peft layers use (so loading a checkpoint into this module updates the network). The frozen network
    is not part of it, so checkpoints and the trainer's low-precision copies hold only the adapter."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.names = {name.replace(".", "__"): name for name, p in network.named_parameters() if "lora_" in name}
        if not self.names:
            raise ValueError("the network has no LoRA parameters")
        found = dict(network.named_parameters())
        self.weights = nn.ParameterDict({key: found[name] for key, name in self.names.items()})

    def network_params(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The trainer's tensors (keyed like this module's parameters) keyed like the network's."""
        return {self.names[key.split(".", 1)[1]]: value for key, value in params.items()}


@dataclass
class _NoisedBatch:
    inputs: torch.Tensor
    """Noised latents ``[B, 4, h, w]``."""
    targets: torch.Tensor
    """What the network must predict (the noise, or the velocity for v-prediction models)."""
    timesteps: torch.Tensor
    text: torch.Tensor
    """Text-encoder states of the captions ``[B, tokens, width]``."""
    added: dict[str, torch.Tensor] | None = None
    """SDXL's pooled text embedding and size ids."""


class _Sampler:
    """Random image, timestep and noise per sample, from latents and captions encoded once."""

    def __init__(self, latents: torch.Tensor, text: torch.Tensor, pooled: torch.Tensor | None, time_ids: torch.Tensor | None, noise: Any,
                 batch_size: int) -> None:
        self.latents, self.text, self.pooled, self.time_ids = latents, text, pooled, time_ids
        self.noise = noise
        self.batch_size = batch_size

    def draw(self, index: torch.Tensor, timesteps: torch.Tensor, noise: torch.Tensor) -> _NoisedBatch:
        clean = self.latents[index]
        noisy = self.noise.add_noise(clean, noise, timesteps)
        target = noise if self.noise.config.prediction_type == "epsilon" else self.noise.get_velocity(clean, noise, timesteps)
        added = None
        if self.pooled is not None:
            added = {"text_embeds": self.pooled[index], "time_ids": self.time_ids[index]}
        return _NoisedBatch(noisy, target, timesteps, self.text[index], added)

    def sample(self, generator: torch.Generator) -> _NoisedBatch:
        device = self.latents.device
        index = torch.randint(0, self.latents.shape[0], (self.batch_size,), generator=generator, device=device)
        timesteps = torch.randint(0, self.noise.config.num_train_timesteps, (self.batch_size,), generator=generator, device=device)
        noise = torch.randn(self.latents[index].shape, generator=generator, device=device)
        return self.draw(index, timesteps, noise)


class _DenoiseForwardBackward:
    """The trainer's forward/backward for a LoRA: the frozen network called with the trainer's copies
    of the LoRA matrices swapped in (``torch.func.functional_call``), MSE to the target."""

    def __init__(self, network: nn.Module, weights: LoraWeights, dtype: torch.dtype) -> None:
        self.network, self.weights, self.dtype = network, weights, dtype

    def predict(self, params: dict[str, torch.Tensor], batch: _NoisedBatch) -> torch.Tensor:
        from torch.func import functional_call

        kwargs: dict[str, Any] = {"encoder_hidden_states": batch.text.to(self.dtype), "return_dict": False}
        if batch.added is not None:
            kwargs["added_cond_kwargs"] = {k: v.to(self.dtype) for k, v in batch.added.items()}
        swapped = self.weights.network_params(params)
        return functional_call(self.network, swapped, (batch.inputs.to(self.dtype), batch.timesteps), kwargs, strict=False)[0]

    def __call__(self, params: dict[str, torch.Tensor], batch: _NoisedBatch, loss_scale: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        prediction = self.predict(params, batch)
        loss = torch.nn.functional.mse_loss(prediction.float(), batch.targets.float())
        grads = torch.autograd.grad(loss * loss_scale, list(params.values()), allow_unused=True)
        return loss.detach(), [torch.zeros_like(p) if g is None else g for p, g in zip(params.values(), grads)]


def _training_images(config: LoraTrainConfig) -> list[tuple[Path, str]]:
    folder = Path(config.images)
    if not folder.is_dir():
        raise InputError("the images folder does not exist.", path=folder, field="images", fix="pass the folder that holds the training images.")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    if not files:
        raise InputError("the folder holds no PNG or JPEG images.", path=folder, field="images", fix="put the style's example images (PNG or JPEG) in it.")
    pairs = []
    for file in files:
        caption_file = file.with_suffix(".txt")
        caption = caption_file.read_text(encoding="utf-8", errors="replace").strip()[:1000] if caption_file.is_file() else config.prompt
        if not caption:
            raise InputError("the image has no caption.", path=file, field="prompt",
                             fix=f"write one in {caption_file.name} beside it, or give every image the same one with --prompt.")
        pairs.append((file, caption))
    return pairs


def _square(image: np.ndarray, side: int) -> np.ndarray:
    """Centre crop to a square, then resize to ``side`` (antialiased)."""
    height, width = image.shape[:2]
    edge = min(height, width)
    top, left = (height - edge) // 2, (width - edge) // 2
    return resize_image(np.ascontiguousarray(image[top : top + edge, left : left + edge, :3]), side, side)


def _train_body(run: BakeRun) -> BakeOutcome:
    import diffusers  # optional (the postfx extra): imported only when a LoRA is trained

    config: LoraTrainConfig = run.config
    device = run.device
    started = time.perf_counter()
    pairs = _training_images(config)
    info = inspect_model(config.base, field="base")
    if info.family == "flux":
        raise ConfigError("LoRA training is offered for SD 1.x/2.x and SDXL models.", field="base", fix="pass an SD or SDXL model folder.")
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[config.train.precision] if device.type == "cuda" else torch.float32
    if device.type != "cuda" and config.train.precision != "fp32":
        config.train.precision = "fp32"  # the CPU trains in fp32 (half-precision matmuls are emulated there)
    pipe = load_pipeline(info, [], device=device, dtype=dtype, img2img=False)
    unet = pipe.unet
    unet.requires_grad_(False)
    torch.manual_seed(config.train.seed)
    add_lora(unet, rank=config.rank)
    for name, parameter in unet.named_parameters():
        if "lora_" in name:
            parameter.data = parameter.data.float()  # fp32 masters; the trainer makes the compute copies
            parameter.requires_grad_(True)
    weights = LoraWeights(unet)
    side = config.resolution
    with torch.no_grad(), run.task("encoding images and captions", len(pairs), unit="image") as advance:
        latents, texts, pooled = [], [], []
        for file, caption in pairs:
            image, _ = load_image(file)
            if image.shape[2] < 3:
                image = np.repeat(image[..., :1], 3, axis=2)
            pixels = torch.from_numpy(_square(image, side)).permute(2, 0, 1)[None].to(device, dtype) * 2.0 - 1.0
            latents.append(pipe.vae.encode(pixels).latent_dist.mean.float() * pipe.vae.config.scaling_factor)
            if info.family == "sdxl":
                embeds, _, pooled_embeds, _ = pipe.encode_prompt(caption, device=device, do_classifier_free_guidance=False)
                pooled.append(pooled_embeds.float())
            else:
                embeds, _ = pipe.encode_prompt(caption, device, 1, False)
            texts.append(embeds.float())
            advance(1)
    latents_t, text_t = torch.cat(latents), torch.cat(texts)
    pooled_t = torch.cat(pooled) if pooled else None
    time_ids = torch.tensor([[side, side, 0, 0, side, side]], dtype=torch.float32, device=device).repeat(len(pairs), 1) if pooled else None
    noise = diffusers.DDPMScheduler.from_config(pipe.scheduler.config)
    noise.alphas_cumprod = noise.alphas_cumprod.to(device)
    sampler = _Sampler(latents_t, text_t, pooled_t, time_ids, noise, config.batch_size)
    step = _DenoiseForwardBackward(unet, weights, dtype)

    # the judge: the denoising loss on every training image at fixed timesteps and noise (before and after)
    probe = torch.Generator(device="cpu").manual_seed(12345)
    levels = torch.linspace(50, noise.config.num_train_timesteps - 50, 4).long()
    fixed = [(torch.tensor([i]), levels[k : k + 1], torch.randn(latents_t[:1].shape, generator=probe)) for i in range(len(pairs)) for k in range(len(levels))]

    def evaluate(model: nn.Module) -> dict[str, float]:
        own = {f"weights.{k}": v.to(dtype) for k, v in model.weights.items()}
        with torch.no_grad():
            losses = [torch.nn.functional.mse_loss(step.predict(own, b).float(), b.targets.float()).item()
                      for b in (sampler.draw(i.to(device), t.to(device), n.to(device)) for i, t, n in fixed)]
        return {"denoise_loss": float(np.mean(losses))}

    result = run.train(weights, sampler, torch.nn.functional.mse_loss, config.train, evaluate=evaluate, forward_backward=step,
                       compatibility={"images": [f.name for f, _ in pairs], "rank": config.rank, "resolution": side, "base": str(info.path)})
    out = run.stage
    save_lora(unet, out / "lora.safetensors", family=info.family)
    before = next((e["denoise_loss"] for e in result.history if e.get("event") == "eval" and "denoise_loss" in e), None)
    after = evaluate(weights)["denoise_loss"]
    fields: dict[str, Any] = {
        "family": info.family,
        "base": str(info.path),
        "images": len(pairs),
        "captions": sorted({c for _, c in pairs})[:20],
        "rank": config.rank,
        "lora_parameters": sum(p.numel() for p in weights.parameters()),
        "lora_bytes": (out / "lora.safetensors").stat().st_size,
        "resolution": side,
        "steps": result.steps,
        "skipped_steps": result.skipped_steps,
        "final_loss": result.final_loss,
        "train_seconds": result.train_seconds,
        "seconds": time.perf_counter() - started,
        "metrics_definition": "denoise_loss: MSE of the network's prediction (noise, or velocity) on every training image at 4 fixed timesteps "
                              "with fixed noise; before = the base model, after = with the trained LoRA",
        "outputs": ["lora.safetensors", "samples.png" if config.samples else None],
    }
    if config.samples:
        prompt = config.prompt or pairs[0][1]
        rows = []
        sample_pipe = pipe
        for enabled in (False, True):
            (sample_pipe.enable_lora if enabled else sample_pipe.disable_lora)()
            row = []
            for k in range(config.samples):
                with torch.no_grad():
                    image = sample_pipe(prompt, num_inference_steps=config.sample_steps, height=side, width=side, output_type="np",
                                        generator=torch.Generator("cpu").manual_seed(config.train.seed + k)).images[0]
                row.append(np.asarray(image, dtype=np.float32))
            rows.append(row)
        save_png(out / "samples.png", panel_grid(rows))
        fields["samples"] = {"file": "samples.png", "prompt": prompt, "rows": ["base model", "with the LoRA"], "seeds": config.samples}
    metrics = {"denoise_loss": after, "denoise_loss_before": before}
    return BakeOutcome(metrics, fields, curve_title="LoRA training loss", quality_key=None)


# -- footprint --------------------------------------------------------------------------------

ASSUMED_IMAGES = 100
"""Training images assumed (their latents and text embeddings are kept, encoded once)."""


def lora_memory(config: LoraTrainConfig, device: torch.device, model: Any = None) -> dict[str, float]:
    """Bytes by the setting that drives them: the frozen model's weights (``base``; assumed, see
    :data:`neuralbake.bakes.postfx.footprint.SD15`), the adapter with its gradient and Adam state (``rank``), a
    step's UNet activations kept for the backward pass (``batch_size`` images at ``resolution``), and
    the VAE's encoding of an image and the sample pictures' denoising, with guidance (``resolution``)."""
    model = model or SD15
    cuda = device.type == "cuda"
    values = precision_bytes(config.train.precision) if cuda else 4  # the CPU trains in fp32
    side = config.resolution or 0
    latent = side * side / 64
    embeddings = ASSUMED_IMAGES * (4 * latent + 77 * 2048) * 4
    return {
        "base": model.parameters * values,
        "rank": config.rank * model.lora_parameters_per_rank * (TRAINED_PARAMETER_BYTES + values),
        "batch_size": config.batch_size * latent * model.training_values * values,
        "resolution": side * side * model.vae_values * values + 2 * latent * model.inference_values * values + embeddings,
    }


def lora_footprint(config: LoraTrainConfig, device: torch.device) -> Footprint:
    """Peak memory of a LoRA training (:func:`lora_memory` on top of the chain's base) and its steps (``train.steps``)."""
    terms = lora_memory(config, device)
    total = lambda c, d: sum(lora_memory(c, d).values())  # noqa: E731
    knobs = {"resolution": 512 if device.type == "cuda" else 128, "batch_size": 1, "rank": 8}
    field = dominant_field(total, config, device, knobs, fallback=max(terms, key=lambda k: terms[k]))
    return footprint(terms, steps=config.train.steps or 0, steps_field="train.steps", base=CHAIN_BASE_BYTES, field=field)


LORA_TRAIN: Bake[LoraTrainConfig] = Bake("postfx_lora", LoraTrainConfig, _train_body, _lora_defaults, title="LoRA",
                                         footprint=lora_footprint)
"""Training a style LoRA on the one run path."""
