"""What an AI render pass or a LoRA training needs, estimated before it starts: the diffusion model's
size is assumed (:data:`SD15`, the smallest family the chain runs; :data:`TINY` for the random test
model), the rest follows the config (working size, ControlNets, composition passes, upscaler tiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from neuralbake.bakes.footprint import MIB, PROCESS_BYTES, dominant_field, footprint
from neuralbake.bakes.postfx.config import PostfxConfig
from neuralbake.bakes.run import Footprint

__all__ = ["CHAIN_BASE_BYTES", "SD15", "TINY", "DiffusionSize", "postfx_footprint", "postfx_memory", "postfx_steps"]

@dataclass(frozen=True)
class DiffusionSize:
    """What a footprint assumes of a diffusion model it does not read: its weights and its activations."""

    name: str
    parameters: int
    """Parameters of the pipeline: UNet (or transformer), text encoder(s) and VAE."""
    controlnet_parameters: int
    """Parameters of one ControlNet for it."""
    inference_values: int
    """Values a UNet evaluation holds at its peak per latent pixel (no autograd; attention by PyTorch's
    fused scaled-dot-product kernels, which keep no attention matrix): the skip connections and a block's
    temporaries."""
    training_values: int
    """Values a UNet evaluation keeps per latent pixel for its backward pass (every resnet's and
    transformer's inputs, norms, projections and feed-forward activations)."""
    vae_values: int
    """Values the VAE's encoder or decoder holds at its peak per image pixel (its top blocks run at full resolution)."""
    lora_parameters_per_rank: int
    """LoRA parameters per unit of rank on the attention projections (:data:`neuralbake.postfx.adapters.LORA_TARGETS`)."""


SD15 = DiffusionSize("SD 1.5", parameters=1_066_000_000, controlnet_parameters=361_000_000, inference_values=6_000, training_values=100_000,
                     vae_values=800, lora_parameters_per_rank=199_000)
"""Stable Diffusion 1.5's shapes (860 M UNet, 123 M text encoder, 84 M VAE; an SD 1.5 ControlNet 361 M),
the model the footprints assume: the smallest family the chain runs. An SDXL folder is about 3x its
weights, a Flux one 11x; a service that offers those should size ``--job-memory`` for them. The
activation figures count the UNet's layers (320-1280 channels over four levels) and the VAE's
(128-512 channels, its last blocks at full resolution)."""
TINY = DiffusionSize("tiny random", parameters=116_451, controlnet_parameters=27_932, inference_values=150, training_values=2_500,
                     vae_values=50, lora_parameters_per_rank=688)
"""The tiny random model of ``neuralbake postfx make-model`` (tests, ``bench/footprints.py``): the same
arithmetic with its parameter counts, its activations scaled by its channels (8-16 against 320)."""

CHAIN_BASE_BYTES = PROCESS_BYTES + 384 * MIB
"""The process's base with diffusers, transformers, OpenCV and the upscaler's ncnn loaded."""
IMAGE_COPIES = 12
"""Float32 RGB copies of a frame the chain holds: the render and its passes, the conditions and their
resized copies, the img2img start, the result, its resized and rounded copies, the comparison panels."""
ESRGAN_BYTES_PER_TILE_PIXEL = 64 * 4 * 42
"""Real-ESRGAN x4plus on a tile, per input pixel: its 64-channel features (a dense block's concatenated
ones) in float32, and the 4x upsampled tail (16x the pixels)."""


def _network_bytes(precision: str, device: torch.device) -> int:
    if precision == "auto":
        return 2 if device.type == "cuda" else 4
    return 4 if precision == "fp32" else 2


def postfx_memory(config: PostfxConfig, device: torch.device, model: DiffusionSize = SD15) -> dict[str, float]:
    """Bytes by the setting that drives them: the model's and the ControlNets' weights (``model``,
    ``controlnets``; assumed, see :data:`SD15`), a denoising step's and the VAE's activations at the working
    size, with classifier-free guidance doubling the batch, and a frame's images (``size``; the render is
    taken at the working size: a larger render's own copies are left to the image reader, which checks its
    decoded size), the composition passes' results (``passes``) and the upscaler's tiles and output
    (``upscale``, ``upscale_tile``)."""
    values = _network_bytes(config.precision, device)
    side = config.size or 0
    pixels = side * side
    latent = pixels / 64
    batch = 2 if config.guidance > 1.0 else 1
    nets = len(config.controlnets)
    diffusion = 1 if config.model else 0  # an upscale-only pass loads no model and runs no UNet
    unet = diffusion * batch * latent * model.inference_values * (1 + 0.5 * nets) * values  # a ControlNet is the UNet's encoder half
    tile = config.upscale_tile or 400
    return {
        "model": diffusion * model.parameters * values,
        "controlnets": nets * model.controlnet_parameters * values,
        "size": unet + diffusion * pixels * model.vae_values * values + pixels * 3 * 4 * IMAGE_COPIES,
        "passes": len(config.passes) * pixels * 4 * 4 * 2,
        "upscale": (pixels * config.upscale**2 * 3 * 5) if config.upscale > 1 else 0,
        "upscale_tile": (tile * tile * ESRGAN_BYTES_PER_TILE_PIXEL) if config.upscale > 1 else 0,
    }


def postfx_steps(config: PostfxConfig) -> int:
    """Denoising steps of a frame: ``strength`` x ``steps`` for the base pass and each composition pass
    (a frame sequence runs them per frame; its length is known only once its folder is read)."""
    if not config.model:
        return 0  # upscale-only: no denoising
    return math.ceil((config.steps or 0) * config.strength) * (1 + len(config.passes))


def postfx_footprint(config: PostfxConfig, device: torch.device) -> Footprint:
    """Peak memory of the render pass (:func:`postfx_memory` on top of its base) and its denoising steps."""
    terms = postfx_memory(config, device)
    total = lambda c, d: sum(postfx_memory(c, d).values())  # noqa: E731
    knobs = {"size": 1024 if device.type == "cuda" else 512, "upscale": 1, "upscale_tile": 256, "precision": "auto"}
    field = dominant_field(total, config, device, knobs, fallback=max(terms, key=lambda k: terms[k]))
    return footprint(terms, steps=postfx_steps(config), steps_field="steps", base=CHAIN_BASE_BYTES, field=field)
