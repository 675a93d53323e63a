"""The neural material bake's settings, and the sizes it picks by device."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from neuralbake.bakes.neural_material.model import DIRECTION_FEATURES
from neuralbake.errors import ConfigError
from neuralbake.kernels import KERNEL_MODES
from neuralbake.nn.trainer import TrainerConfig
from neuralbake.core.paths import InputPath, InputPathOrFolder

__all__ = ["LATENT_CHANNELS", "NeuralMaterialConfig", "device_defaults"]

LATENT_CHANNELS = (4, 8, 16)
"""Latent channels per texel a bake accepts (``NeuralMaterialConfig.latent``)."""

MAX_TEXTURE_SIZE = 8192
"""Largest latent texture side (mip 0) a bake accepts."""


def _default_train() -> TrainerConfig:
    # steps None: 10,000 on a GPU, 2,000 on a CPU (device_defaults)
    return TrainerConfig(steps=None, learning_rate=0.005, precision="fp32", eval_every=500, checkpoint_every=500)


@dataclass
class NeuralMaterialConfig:
    """Everything that determines a neural material bake."""

    material: InputPath = ""
    """What to bake: a neuralbake material (.json), a MaterialX document (.mtlx) or a glTF asset (.gltf, .glb; one of its materials)."""
    material_name: str = ""
    """With a glTF asset (as the material or with --asset): the name of its material to bake or to place on; left out, the one on the most triangles."""
    asset: InputPath = ""
    """A glTF asset (.gltf, .glb) to place a layered material on: its orientation-dependent nodes see the asset's world normal per texel (instead of --normal), and the bake is scored on renders of the asset."""
    latent: int = 8
    """Latent channels per texel (the paper uses 8; 4, 8 or 16)."""
    texture_size: int = 512
    """Side of the baked latent texture (mip 0), in texels. 512 holds the copper tray's thin scratches visibly better than 256 (CPU defaults: 41.3 vs 39.9 dB preview PSNR) for about 3 s more of latent baking and 4x the latent bytes. For a glTF asset, at most its largest texture side."""
    decoder_hidden: int = 64
    """Neurons per hidden layer of the decoder."""
    decoder_layers: int = 3
    """Hidden layers of the decoder (the paper: about 3 x 64)."""
    encoder_hidden: int = 64
    """Neurons per hidden layer of the encoder (training only)."""
    encoder_layers: int = 2
    """Hidden layers of the encoder (training only)."""
    batch_size: int | None = None
    """(uv, wi, wo) samples per training step; left out: 16384 on a GPU, 4096 on a CPU."""
    material_sampling: float = 0.5
    """Fraction of light directions drawn by the reference material's own sampler (the rest cosine)."""
    uniform_views: float = 0.5
    """Fraction of view directions drawn uniformly over the hemisphere (the rest cosine-distributed).
    Cosine alone rarely shows the decoder a grazing view: on the copper tray at the CPU defaults the
    grazing texture view scored 11.9 or 17.5 dB depending on the seed, 18.9 with half uniform views
    (preview PSNR 0.3-0.8 dB lower)."""
    direction_inputs: tuple[str, ...] = ("wi", "wo", "half")
    """Direction features the decoder reads after the latent, each a local-frame 3-vector: wi, wo, half (normalize(wi + wo))."""
    shared_decoder: InputPathOrFolder = ""
    """A baked neural material folder whose decoder this bake starts from, keeping its first
    ``shared_layers`` layers (the part that interprets the directions) fixed, so several materials
    share them; only the rest of the decoder, the encoder and the latents are trained."""
    shared_layers: int = 1
    """With ``shared_decoder`` (a baked folder), or in a pack with ``--share``: how many leading decoder layers are shared (frozen)."""
    reference_chunk: int = 0
    """Reference samples evaluated per call of the material graph (the graph's thousands of small ops run once per
    chunk, not per step); batches are then served from the chunk. 0: 2^18 on CPU, 2^20 on a GPU."""
    sampling_steps: int = 0
    """Training steps of the importance-sampling head after the bake (a proxy lobe per texel; the neural material's layer samples with it; 0: none, cosine sampling); at most the bake's own steps. 500 lowered the copper tray's sampling variance 9.3x against cosine sampling."""
    compare_size: int = 128
    """Side in pixels of the preview renders (sphere, tile) that score the bake against the reference."""
    compare_spp: int = 32
    """Samples per pixel of those renders (both use the reference's sampling and one seed)."""
    normal: tuple[float, float, float] = (0.0, 1.0, 0.0)
    """World-space surface normal the material's orientation masks are baked for (+y: facing up)."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N."""
    train: TrainerConfig = field(default_factory=_default_train)
    """Optimisation settings (trained in fp32 by default, as in the paper)."""
    kernels: Literal["auto", "triton", "torch"] = "auto"
    """triton: the fused Triton kernels on a CUDA GPU for the decode in the comparison renders and throughput (fp32, latent fetch included) and for training the encoder and decoder; torch: PyTorch; auto: PyTorch here (fused fp16 training measured 1.0-1.5x the CUDA-graph step on an H100; in the default fp32 the Triton kernels compile for minutes and trained the copper tray in 225 s against 8.6 s)."""

    def validate(self) -> None:
        """Raise ConfigError on settings no bake can use (before any file is touched)."""
        if not self.material:
            raise ConfigError("no material given.", field="material", fix="pass a .json or .mtlx material.")
        self.validate_settings()

    def validate_settings(self) -> None:
        """Every check but the material's (a pack's template has none of its own)."""
        if self.kernels not in KERNEL_MODES:
            raise ConfigError(f"unknown kernels {self.kernels!r}.", field="kernels", fix="use auto, triton or torch.")
        if isinstance(self.latent, bool) or self.latent not in LATENT_CHANNELS:
            raise ConfigError(
                f"latent channels must be one of {', '.join(map(str, LATENT_CHANNELS))}, got {self.latent!r}.", field="latent", fix="use 4, 8 or 16."
            )
        if not 1 <= self.texture_size <= MAX_TEXTURE_SIZE:
            raise ConfigError(f"texture size {self.texture_size} is out of range.", field="texture_size", fix=f"use 1 to {MAX_TEXTURE_SIZE} texels.")
        for name in ("decoder_hidden", "encoder_hidden", "batch_size", "compare_size", "compare_spp"):
            if name == "batch_size" and self.batch_size is None:
                continue  # left to the device (the runner fills it before the bake starts)
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}.", field=name, fix=f"set {name} to 1 or more.")
        for name in ("decoder_layers", "encoder_layers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}.", field=name, fix=f"set {name} to 0 or more.")
        unknown = [name for name in self.direction_inputs if name not in DIRECTION_FEATURES]
        if unknown or not self.direction_inputs:
            raise ConfigError(f"unknown or no direction inputs {list(self.direction_inputs)}.", field="direction_inputs", fix=f"use some of {sorted(DIRECTION_FEATURES)}.")
        if self.shared_decoder and not 1 <= self.shared_layers <= self.decoder_layers:
            raise ConfigError(
                f"shared_layers must be 1 to {self.decoder_layers} (the decoder's hidden layers), got {self.shared_layers}.",
                field="shared_layers",
                fix="share 1 layer (the first, direction-interpreting one) or a few more.",
            )
        if self.sampling_steps < 0:
            raise ConfigError(f"must be >= 0, got {self.sampling_steps}.", field="sampling_steps", fix="use 0 (no sampling head) or a step count.")
        if self.reference_chunk < 0:
            raise ConfigError(f"must be >= 0, got {self.reference_chunk}.", field="reference_chunk", fix="use 0 (automatic) or a sample count.")
        for name in ("material_sampling", "uniform_views"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"must be in [0, 1], got {value}.", field=name, fix="use e.g. 0.5.")
        # steps left out (None) are the device's to choose; the runner fills them before the bake starts
        dataclasses.replace(self.train, steps=1).validate() if self.train.steps is None else self.train.validate()


def device_defaults(prefix: str = "") -> Any:
    """The bake's sizes by device, for fields under ``prefix`` (``""``, or ``"bake."`` for a pack).

    On a GPU, 10,000 steps of 16,384 samples (44.5 dB / FLIP 0.014 on the copper tray in about a
    minute on an H100); on a CPU, 2,000 steps of 4,096 (about a minute on 2 cores, 41.4 dB).
    """

    def choose(config: Any, device: torch.device) -> dict[str, Any]:
        gpu = device.type == "cuda"
        return {f"{prefix}train.steps": 10_000 if gpu else 2000, f"{prefix}batch_size": 16_384 if gpu else 4096}

    return choose
