"""The neural material bake's settings, and the sizes it picks by device."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from neuralbake.bakes.config import KernelsConfig
from neuralbake.bakes.footprint import (
    MIB,
    PROCESS_BYTES,
    TRAINED_PARAMETER_BYTES,
    dominant_field,
    footprint,
    mlp_parameters,
    mlp_training_bytes,
    precision_bytes,
)
from neuralbake.bakes.neural_material.model import DIRECTION_FEATURES, REFERENCE_CHUNK
from neuralbake.bakes.run import Footprint
from neuralbake.core.paths import InputPath, InputPathOrFolder
from neuralbake.errors import ConfigError
from neuralbake.kernels import KERNEL_MODES
from neuralbake.nn.half_run import HALF_RUN_PARAMETER_BYTES, HalfRun
from neuralbake.nn.mlp import MAX_LAYERS
from neuralbake.nn.trainer import TrainerConfig

__all__ = ["LATENT_CHANNELS", "NeuralMaterialConfig", "device_defaults", "material_memory", "neural_material_footprint"]

LATENT_CHANNELS = (4, 8, 16)
"""Latent channels per texel a bake accepts (``NeuralMaterialConfig.latent``)."""

MAX_TEXTURE_SIZE = 8192
"""Largest latent texture side (mip 0) a bake accepts."""


def _default_train() -> TrainerConfig:
    # steps None: the device's (device_defaults). Cosine, judged on the held-out figure's rate (HELD_OUT_RATE): on the
    # wsd schedule with half the run decaying (H200, 2026-11-29, 30,000 steps) the copper tray's previews lost 0.43 dB (44.39 dB against 44.82) and
    # the crate's material 0.20, velvet gained 1.27 and the nail 0.15, and every run's held-out figure still gained
    # 0.6-1.7 dB over its half-length twin (docs/benchmarks.md)
    return TrainerConfig(steps=None, learning_rate=0.005, precision="fp32", eval_every=500, checkpoint_every=500)


@dataclass
class NeuralMaterialConfig(KernelsConfig):
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
    chunk, not per step); batches are then served from the chunk. 0: 2^18 on CPU, 2^22 on a GPU."""
    sampling_steps: int = 0
    """Training steps of the importance-sampling head after the bake (a proxy lobe per texel; the neural material's layer samples with it; 0: none, cosine sampling); at most the bake's own steps. 500 lowered the copper tray's sampling variance 9.3x against cosine sampling."""
    compare_size: int = 128
    """Side in pixels of the preview renders (sphere, tile) that score the bake against the reference."""
    compare_spp: int = 32
    """Samples per pixel of those renders (both use the reference's sampling and one seed)."""
    verdict: bool = True
    """For a glTF asset's material: also compress its maps with NTC at the neural material's bytes (on a CPU at most
    256 a side, 1,000 steps: about 30 s more for the example crate), score it on the same renders, and say in the report
    (``verdict``) and the closing line whether NTC or the BC set fits the asset better (``bakes/neural_material/verdict.py``)."""
    normal: tuple[float, float, float] = (0.0, 1.0, 0.0)
    """World-space surface normal the material's orientation masks are baked for (+y: facing up)."""
    train: TrainerConfig = field(default_factory=_default_train)  # this bake's training defaults

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
            if not 0 <= getattr(self, name) <= MAX_LAYERS:
                raise ConfigError(f"must be in [0, {MAX_LAYERS}], got {getattr(self, name)}.", field=name, fix=f"set {name} to 0 to {MAX_LAYERS}.")
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

    On a GPU, 16,384 samples a step and 30,000 steps: the copper tray's preview renders reach 44.8 dB / FLIP 0.012
    there in 36 s of training on an H200 (cosine schedule) and gained nothing at 60,000 or 100,000 (44.6 dB at 10,000);
    the example crate's material (a glTF asset) is at 29.77 dB in 25 s, its held-out figure still rising at 10,000
    steps (0.13 dB per 1,000) and flat at 30,000 (0.05). On a CPU, 2,000 steps of 4,096 (about a minute on 2 cores,
    41.4 dB), which the report calls still improving.
    """

    def choose(config: Any, device: torch.device) -> dict[str, Any]:
        gpu = device.type == "cuda"
        return {f"{prefix}train.steps": 30_000 if gpu else 2000, f"{prefix}batch_size": 16_384 if gpu else 4096}

    return choose


# -- footprint --------------------------------------------------------------------------------

MATERIAL_BASE_BYTES = PROCESS_BYTES + 192 * MIB
"""The process's base with the material graph, the preview renderer and FLIP loaded: a copper-tray
bake at 64 x 64 latents, 4,096 samples a step and 32-pixel previews peaked at 707 MiB on a 2-core CPU."""
ASSUMED_TEXEL_INPUTS = 64
"""Texel inputs the encoder reads per texel (every layer parameter and mask of the material; a
glTF asset's maps), known only once the material is loaded: the copper tray has 34."""
GRAPH_BYTES_PER_SAMPLE = 512
"""Temporaries of one material-graph evaluation per sample (noise octaves, masks, a lobe stack's
[N, 3] values), freed as the graph goes on (no autograd)."""
ASSET_TEXTURE_SIDE = 2048
"""A glTF asset's largest texture side, assumed: its maps finer than the latent texture are box-filtered
into it at up to 4 x 4 samples a texel (``bake._finish``)."""
LATENT_CHUNK = 1 << 15
THROUGHPUT_SAMPLES = 1 << 16
ASSET_VIEWS = 4
"""Held-out views of an asset's comparison (``bake.ASSET_VIEWS``), each with its G-buffer."""
GBUFFER_BYTES_PER_PIXEL = 1024


def reference_chunk(config: NeuralMaterialConfig, device: torch.device) -> int:
    """Reference samples the sampler evaluates and keeps at once (``ReferenceSampler``): whole batches."""
    batch = config.batch_size or 1
    per_chunk = config.reference_chunk or REFERENCE_CHUNK.get(device.type, REFERENCE_CHUNK["cpu"])
    return max(1, per_chunk // batch) * batch


def material_memory(config: NeuralMaterialConfig, device: torch.device, *, materials: int = 1) -> dict[str, float]:
    """Bytes of one neural material bake by the setting that drives them (``materials`` > 1: that many
    trained in one phase, ``--shared-decoder``, each with its own reference chunk and encoder).

    The reference chunk's stored samples and one graph evaluation (``reference_chunk``), a step's
    encoder + decoder activations (``batch_size``), the trained weights (``decoder_hidden``), the
    texel inputs of every latent texel and the latent pyramid with its fp16/u8 copies
    (``texture_size``), and the comparison renders (``compare_size``).
    """
    k = ASSUMED_TEXEL_INPUTS
    directions = 3 * len(config.direction_inputs)
    batch = config.batch_size or 0
    encoder = [k, *[config.encoder_hidden] * config.encoder_layers, config.latent]
    decoder = [config.latent + directions, *[config.decoder_hidden] * config.decoder_layers, 3]
    compute = precision_bytes(config.train.precision)
    twin = HALF_RUN_PARAMETER_BYTES if HalfRun(config.train).enabled else 0  # its copies of the masters and moments
    chunk = reference_chunk(config, device)
    render_chunk = 1 << 20 if device.type == "cuda" else 1 << 16
    graph = max(chunk, render_chunk, LATENT_CHUNK, THROUGHPUT_SAMPLES) * GRAPH_BYTES_PER_SAMPLE
    texels = config.texture_size**2
    asset = str(config.material).lower().endswith((".gltf", ".glb"))
    fine = config.texture_size * min(4, max(1, ASSET_TEXTURE_SIDE // config.texture_size)) if asset else config.texture_size
    pyramid = 4 / 3 * texels * (k * 4 + 3 * config.latent * 4)  # box-filtered inputs per level; latents, fp16 and u8 copies
    compare = config.compare_size**2 * (256 + (ASSET_VIEWS * GBUFFER_BYTES_PER_PIXEL if asset or config.asset else 0))
    return {
        "reference_chunk": materials * chunk * (k + directions + 3) * 4 + graph,
        "batch_size": mlp_training_bytes(batch, encoder, compute) + mlp_training_bytes(batch, decoder, compute) + batch * 64,
        "decoder_hidden": materials * (mlp_parameters(encoder) + mlp_parameters(decoder)) * (TRAINED_PARAMETER_BYTES + twin + compute),
        "texture_size": fine**2 * k * 4 + pyramid,
        "compare_size": compare,
    }


def material_knobs(device: torch.device, prefix: str = "") -> dict[str, Any]:
    """Each size setting of a neural material bake and its default on ``device`` (for
    :func:`~neuralbake.bakes.footprint.dominant_field`)."""
    knobs = {"batch_size": 16_384 if device.type == "cuda" else 4096, "texture_size": 512, "reference_chunk": 0, "compare_size": 128,
             "compare_spp": 32, "decoder_hidden": 64, "encoder_hidden": 64, "decoder_layers": 3, "encoder_layers": 2}
    return {prefix + name: value for name, value in knobs.items()}


def material_steps(config: NeuralMaterialConfig) -> int:
    """Optimiser steps: the bake's with its half-length twin's, then the sampling head's (at most as many as the bake's)."""
    steps = config.train.steps or 0
    return steps + HalfRun(config.train).extra_steps + min(config.sampling_steps, steps)


def neural_material_footprint(config: NeuralMaterialConfig, device: torch.device) -> Footprint:
    """Peak memory of a neural material bake (:func:`material_memory` on top of its base) and its steps."""
    terms = material_memory(config, device)
    total = lambda c, d: sum(material_memory(c, d).values())  # noqa: E731
    field = dominant_field(total, config, device, material_knobs(device), fallback=max(terms, key=lambda k: terms[k]))
    steps_field = "sampling_steps" if config.sampling_steps > (config.train.steps or 0) else "train.steps"
    return footprint(terms, steps=material_steps(config), steps_field=steps_field, base=MATERIAL_BASE_BYTES, field=field)
