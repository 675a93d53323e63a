"""The NTC bake's settings: :class:`NTCConfig`, its checks and its device-dependent defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

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
)
from neuralbake.bakes.ntc.layout import (
    LATENT_SHAPES,
    MAX_HIDDEN_LAYERS,
    MAX_HIDDEN_WIDTH,
    MAX_PE_FREQUENCIES,
    NTCLayout,
    check_bpp,
    choose_layout,
)
from neuralbake.bakes.ntc.texture_set import ChannelGroup, TextureSet, check_texture_set, load_texture_set, split_source
from neuralbake.bakes.run import Footprint
from neuralbake.core.paths import PathField
from neuralbake.errors import ConfigError
from neuralbake.kernels import KERNEL_MODES
from neuralbake.nn.half_run import HALF_RUN_PARAMETER_BYTES, HalfRun
from neuralbake.nn.trainer import TrainerConfig
from neuralbake.render.mip import is_power_of_two

__all__ = ["CPU_BATCH", "CPU_LR", "CPU_STEPS", "CPU_TEXTURE_SIZE", "GPU_BATCH", "GPU_LR", "GPU_STEPS", "NTCConfig", "WEIGHT_CLIP", "device_defaults", "load_config_texture_set", "ntc_footprint"]

CPU_TEXTURE_SIZE = 256
"""Largest side a CPU bake resamples a set to by default: DamagedHelmet's 11 channels at 2048² ran
past 15 minutes on a 2-core CPU, and about 12 at 512²; at 256² (the crate's size) the bake takes
about 2 minutes (README)."""


CPU_STEPS, CPU_BATCH, CPU_LR = 3000, 8192, 0.01
"""A CPU bake's noise-phase steps, texels per step and learning rate: about 2 minutes for the crate
on 2 cores; a higher rate than a GPU's, which a short run needs."""
GPU_STEPS, GPU_BATCH, GPU_LR = 400_000, 32_768, 0.005
"""A GPU bake's. On an H200 (2026-11-29, training compiled, wsd with the last 35 % decaying, each alone on the GPU),
400,000 steps are the shortest measured run the report calls converged on both sets: the crate at 4 bpp reaches 41.76 dB
in 240 s of training (its half-length twin 0.40 dB less), DamagedHelmet at 2048² 35.48 dB in 282 s (433 s wall; twin
0.10 dB less). At 200,000 steps the crate was still improving (42.04 dB, 0.73 dB over a 100,000-step run; crate runs
differ by up to 0.7 dB run to run) and the helmet gave 35.06 dB. Cosine at 100,000 steps, the default until then,
gave 41.34 and 34.93 dB. With the weights clamped (:data:`WEIGHT_CLIP`) 100,000 steps gained 0.6-1.8 dB over 30,000 on
DamagedHelmet and the crate: ``bench/ntc_convergence.py``, docs/benchmarks.md."""
WEIGHT_CLIP = 3.0
"""The default :attr:`NTCConfig.weight_clip`. Unclamped, a layer's largest weight grew to 6-18x its
RMS in long runs, coarsening the int8 steps of all the others, and 100,000 steps ended below 30,000
in three of four runs; at 3x (H200, DamagedHelmet 3.69 bpp) 30,000 steps gave 34.26 dB and
100,000 35.00 dB, against 33.35 / 32.13-33.14 dB without (docs/benchmarks.md)."""
TIME_BUDGET_STEPS = 10_000_000
"""The step cap of a run given ``--seconds`` and no ``--steps``: the time ends it."""


def _default_train() -> TrainerConfig:
    # wsd: the noise phase's half-length twin says whether doubling the run would pay (neuralbake.nn.half_run)
    return TrainerConfig(steps=None, learning_rate=None, schedule="wsd", decay_fraction=0.35, precision="fp32", eval_every=500, checkpoint_every=1000,
                         log_every=50, keep_best=True)


@dataclass
class NTCConfig(KernelsConfig):
    """Everything that determines an NTC compression."""

    sources: list[Annotated[str, PathField(split=split_source)]] = field(default_factory=list)
    """Texture images (PATH or NAME=PATH; a group named normal keeps X and Y) or one .gltf file."""
    material: str = "0"
    """glTF material to read (index or name)."""
    texture_size: int | None = None
    """Resample the set so its larger side is at most this power of two (a smaller set is kept as it
    is). None: the device's default, the set's own size on a GPU and 256 on a CPU."""
    bpp: list[float] = field(default_factory=lambda: [4.0])
    """Target bits per texel of mip 0 for the whole file (every mip level included); 0.5 to 48 (26.7
    and 42.7 are about the BC1 and BC7 sets' rates). Several values (1,2,4) compress once per rate
    into bpp_<X>/ folders and draw the rate-distortion curve (rd.json, rd.png)."""
    hidden: tuple[int, ...] = (64, 48, 32)
    """Hidden layer widths of the decoder MLP (RTXNTC's is about 64-48-32); its weights count in the
    bpp. On DamagedHelmet at 2048², 256,256,128 gains 2.7 dB at ~3 bpp and 6.5 dB at 43 bpp for 13.6x
    the decode work (docs/benchmarks.md)."""
    pe_frequencies: int = 3
    """Frequency octaves of the positional encoding of the texel inside its latent cell."""
    batch_size: int | None = None
    """Random texels per training step (over all mip levels). None: the device's default (8192 on
    a CPU, 32768 on a GPU)."""
    finetune_steps: int | None = None
    """Steps after the main (noise) phase with hard-rounded latents (straight-through). None: a
    tenth of the main phase's steps, however it ended (--steps, --seconds or a plateau)."""
    finetune_lr_fraction: float = 0.05
    """Peak learning rate of the hard-rounding phase as a fraction of train.learning_rate (the
    main phase's own schedule ends at train.final_lr_fraction of it). The phase follows train.schedule: on wsd it holds
    this rate for its first 65 % and then decays (the 200,000- and 400,000-step runs were measured so)."""
    weight_clip: float | None = WEIGHT_CLIP
    """Clamp each decoder layer's weights to this many times their RMS after every update, which
    bounds the stored int8 scale (max|w| / 127) and keeps long runs improving; null in a --config
    file: no clamp."""
    baselines: bool = True
    """Also round-trip the set through BC1 / BC7 (+ BC5 for normals) and report their PSNR."""
    bc7_uber_level: int = 1
    """bc7enc effort for the BC7 baseline, 0 (fastest) to 4 (best)."""
    train: TrainerConfig = field(default_factory=_default_train)  # this bake's training defaults

    def rates(self) -> list[float]:
        """The target rates, ascending (one compression each)."""
        return sorted(float(b) for b in self.bpp)

    def validate(self) -> None:
        """Raise ConfigError on settings no compression can use."""
        if self.kernels not in KERNEL_MODES:
            raise ConfigError(f"unknown kernels {self.kernels!r}.", field="kernels", fix="use auto, triton or torch.")
        if not self.sources:
            raise ConfigError("no textures given.", field="sources", fix="pass image files or a .gltf file.")
        self._validate_rates()
        size = self.texture_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not (is_power_of_two(size) and 4 <= size <= 16384)):
            raise ConfigError(f"{size} is not a power of two from 4 to 16384.", field="texture_size", fix="use e.g. 256, 1024 or 2048 (--size).")
        hidden = tuple(self.hidden) if isinstance(self.hidden, (list, tuple)) else ()
        if not hidden or len(hidden) > MAX_HIDDEN_LAYERS or any(isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= MAX_HIDDEN_WIDTH for h in hidden):
            raise ConfigError(
                f"hidden must list 1 to {MAX_HIDDEN_LAYERS} layer widths, each an integer from 1 to {MAX_HIDDEN_WIDTH}, not {str(self.hidden)[:80]}.",
                field="hidden",
                fix="use e.g. 64,48,32 (decompress refuses a container with wider or more layers).",
            )
        if isinstance(self.pe_frequencies, bool) or not isinstance(self.pe_frequencies, int) or not 1 <= self.pe_frequencies <= MAX_PE_FREQUENCIES:
            raise ConfigError(
                f"must be an integer from 1 to {MAX_PE_FREQUENCIES}, not {str(self.pe_frequencies)[:40]}.",
                field="pe_frequencies",
                fix="use e.g. 3 (decompress refuses a container with more).",
            )
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1):
            raise ConfigError("must be >= 1.", field="batch_size", fix="use e.g. 8192.")
        if self.finetune_steps is not None and (isinstance(self.finetune_steps, bool) or not isinstance(self.finetune_steps, int) or self.finetune_steps < 0):
            raise ConfigError("must be >= 0.", field="finetune_steps", fix="use e.g. 500.")
        if not 0 < self.finetune_lr_fraction <= 1:
            raise ConfigError("must be in (0, 1].", field="finetune_lr_fraction", fix="use e.g. 0.2.")
        if self.weight_clip is not None and (isinstance(self.weight_clip, bool) or not isinstance(self.weight_clip, (int, float)) or not 1 <= self.weight_clip <= 127):
            raise ConfigError(f"must be a number from 1 to 127, not {str(self.weight_clip)[:40]}.", field="weight_clip", fix=f"use e.g. {WEIGHT_CLIP:g} (the default), or null in a --config file for no clamp.")
        if not 0 <= self.bc7_uber_level <= 4:
            raise ConfigError("must be 0 to 4.", field="bc7_uber_level", fix="use 1.")
        replace(self.train, steps=self.train.steps or 1, learning_rate=self.train.learning_rate or CPU_LR).validate()  # None: the device decides

    def _validate_rates(self) -> None:
        if not isinstance(self.bpp, (list, tuple)) or not self.bpp:
            raise ConfigError("no rates given.", field="bpp", fix="pass --bpp with one or more values, e.g. --bpp 4 or --bpp 1,2,4.")
        for bpp in self.bpp:
            if isinstance(bpp, bool) or not isinstance(bpp, (int, float)) or not math.isfinite(bpp):
                check_bpp(float("nan"))
            check_bpp(bpp)
        names = [f"{float(b):g}" for b in self.bpp]
        if len(set(names)) != len(names):
            raise ConfigError(f"rates repeat: {', '.join(names)}.", field="bpp", fix="give each rate once.")


def _default_steps(config: NTCConfig, device: torch.device) -> int:
    """The main phase's steps when ``--steps`` is left out (:func:`device_defaults`)."""
    return TIME_BUDGET_STEPS if config.train.seconds is not None else GPU_STEPS if device.type == "cuda" else CPU_STEPS


def _main_steps(config: NTCConfig, device: torch.device) -> int:
    """The main phase's steps: the config's, or the device's default."""
    return config.train.steps or _default_steps(config, device)


def device_defaults(config: NTCConfig, device: torch.device) -> dict[str, Any]:
    """On a GPU the set's own size and :data:`GPU_STEPS` (batch, learning rate); on a CPU at most
    :data:`CPU_TEXTURE_SIZE` texels a side and :data:`CPU_STEPS`. With ``--seconds`` and no
    ``--steps``, the time decides."""
    gpu = device.type == "cuda"
    chosen: dict[str, Any] = {"train.steps": _default_steps(config, device), "train.learning_rate": GPU_LR if gpu else CPU_LR, "batch_size": GPU_BATCH if gpu else CPU_BATCH}
    return chosen if gpu else {"texture_size": CPU_TEXTURE_SIZE, **chosen}


def load_config_texture_set(config: NTCConfig) -> TextureSet:
    """Load and validate the configured texture set, resampled down to ``texture_size`` if it is larger."""
    texture_set = load_texture_set(config.sources, material=config.material)
    if config.texture_size is not None and max(texture_set.width, texture_set.height) > config.texture_size:
        texture_set = texture_set.resized(config.texture_size)
        check_texture_set(texture_set)
    return texture_set


# -- footprint --------------------------------------------------------------------------------

NTC_BASE_BYTES = PROCESS_BYTES + 96 * MIB
"""The process's base with the texture-set readers and the BCn codecs loaded."""
ASSUMED_SIDE = 4096
"""The set's side assumed when ``texture_size`` is unset (a GPU bakes the set's own size, known only
once it is read): a 4K set. Larger sets (up to 16K a side) are checked by the image loader, which
compares each map's decoded size with the memory available before decoding it."""
ASSUMED_CHANNELS = 16
"""Channels assumed for the set: the most a set may have (DamagedHelmet's material has 11)."""
SET_COPIES = 8
"""Float32 copies of the whole mip chain the bake holds at its peak: the loaded and the resampled
set, its mip chain, the sampler's texels on the device, an evaluation's prediction, the decoded
container, and the BC1 and BC7 baselines' round trips."""
SET_COPIES_ON_GPU = 3
"""Of those, the ones a GPU holds: the sampler's texels, an evaluation's prediction and the decoded
container (the set, its mip chain and the baselines stay in host memory)."""
EVAL_CHUNK = 1 << 16
"""Texels an evaluation decodes at once."""


def _layout(config: NTCConfig, bpp: float, side: int) -> NTCLayout:
    groups = (ChannelGroup("set", tuple(f"C{i}" for i in range(ASSUMED_CHANNELS)), "data"),)
    try:
        return choose_layout(side, side, groups, bpp, hidden=tuple(config.hidden), pe_frequencies=config.pe_frequencies)
    except ConfigError:  # a rate below this size's smallest file: the bake refuses it itself; count the smallest
        return NTCLayout(side, side, groups, LATENT_SHAPES[0], tuple(config.hidden), config.pe_frequencies)


def estimated_memory(config: NTCConfig, device: torch.device) -> dict[str, float]:
    """Bytes by the setting that drives them: the set's copies and every texel's coordinates in an
    evaluation (``texture_size``), the latent grids with their gradients and Adam moments (``bpp``;
    the rates train one after another), a step's gathered latents and decoder activations
    (``batch_size``) and the decoder's width (``hidden``: weights, and the evaluation's chunks)."""
    side = config.texture_size or ASSUMED_SIDE
    texels = 4 / 3 * side * side  # every mip level
    layouts = [_layout(config, float(bpp), side) for bpp in config.rates()] or [_layout(config, 4.0, side)]
    latents = max(sum(layout.latent_cells()) * layout.shape.features for layout in layouts)
    widths = max((layout.layer_widths for layout in layouts), key=sum)
    features = layouts[0].shape.features
    batch = config.batch_size or (GPU_BATCH if device.type == "cuda" else CPU_BATCH)
    copies = SET_COPIES_ON_GPU if device.type == "cuda" else SET_COPIES
    # the four high cells, the four low cells and their blend, fake-quantised, kept for the backward pass
    per_sample = 4 * (10 * features) * 3
    # a wsd run's half-length twin keeps two more copies of the masters and Adam's moments
    twin = HalfRun(replace(config.train, steps=_main_steps(config, device))).enabled
    trained = TRAINED_PARAMETER_BYTES + (HALF_RUN_PARAMETER_BYTES if twin else 0)
    return {
        "texture_size": texels * (ASSUMED_CHANNELS * 4 * copies + 3 * 4 + 3 * 8),
        "bpp": latents * trained,
        "batch_size": mlp_training_bytes(batch, widths, 4) + batch * per_sample,
        "hidden": mlp_parameters(widths) * trained + min(texels, EVAL_CHUNK) * (sum(widths) + 10 * features) * 4,
    }


def ntc_footprint(config: NTCConfig, device: torch.device) -> Footprint:
    """Peak memory of an NTC compression (:func:`estimated_memory` on top of its base) and its steps:
    both phases (``train.steps`` + ``finetune_steps``) for every rate."""
    terms = estimated_memory(config, device)
    total = lambda c, d: sum(estimated_memory(c, d).values())  # noqa: E731
    gpu = device.type == "cuda"
    knobs = {"batch_size": GPU_BATCH if gpu else CPU_BATCH, "texture_size": None if gpu else CPU_TEXTURE_SIZE, "hidden": (64, 48, 32), "bpp": [4.0]}
    field = dominant_field(total, config, device, knobs, fallback=max(terms, key=lambda k: terms[k]))
    rates = max(1, len(config.bpp)) if isinstance(config.bpp, (list, tuple)) else 1
    main = _main_steps(config, device)
    finetune = config.finetune_steps if config.finetune_steps is not None else main // 10
    steps_field = "finetune_steps" if finetune > main else "train.steps"
    steps = rates * (main + finetune + HalfRun(replace(config.train, steps=main)).extra_steps)
    return footprint(terms, steps=steps, steps_field=steps_field, base=NTC_BASE_BYTES, field=field)
