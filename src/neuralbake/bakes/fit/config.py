"""The fit's settings: :class:`FitConfig` (one field per setting, a docstring under each), its
checks, and the sizes it picks by device when they are left unset."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from neuralbake.bakes.config import TrainedConfig
from neuralbake.core.paths import InputPath
from neuralbake.errors import ConfigError
from neuralbake.io.gltf import DEFAULT_MAX_TRIANGLES
from neuralbake.nn.trainer import TrainerConfig
from neuralbake.render.tonemap import TONE_MAP_OPERATORS

__all__ = [
    "FIT_TARGETS",
    "MAX_RENDER_SIZE",
    "MAX_TEXTURE_SIZE",
    "MAX_VIEWS",
    "FitConfig",
    "device_defaults",
    "steps_per_epoch",
]

FIT_TARGETS = ("unlit", "vertex-color", "luma-chroma")
MAX_TEXTURE_SIZE = 8192
MAX_RENDER_SIZE = 8192
MAX_VIEWS = 1024
"""Most training views, and most held-out views (each keeps its reference and G-buffer rows)."""

GPU_DEFAULTS = {"render_size": 1024, "texture_size": 1024, "views": 32, "epochs": 50}
"""Full size: about a minute on an H100 for DamagedHelmet (docs/dev/benchmarks-diary.md), mostly reference renders."""
CPU_DEFAULTS = {"render_size": 384, "texture_size": 1024, "views": 32, "epochs": 20}
"""About 2.5 minutes on a 2-core CPU for DamagedHelmet (46 k triangles; 50 s of converged reference renders, held-out
PSNR 20.7 dB, 2026-11-28); the README's crate command (256 / 512 / 16 views / 10 epochs) takes about a minute, 43 s of
it reference renders."""


def _default_train() -> TrainerConfig:
    # Adam as the fit always ran it (torch's defaults), in fp32 (the stored values are projected
    # onto [0, 1] after every step), cosine decay to 10 % of the peak learning rate.
    return TrainerConfig(
        learning_rate=0.01,
        final_lr_fraction=0.1,
        precision="fp32",
        loss_scale="none",
        adam_beta2=0.999,
        adam_eps=1e-8,
        checkpoint_every=0,
        checkpoint_seconds=60.0,
        cuda_graph=False,
    )


@dataclass
class FitConfig(TrainedConfig):
    """Everything that determines a PBR-to-LOD fit."""

    asset: InputPath = ""
    """Path of the PBR asset (.gltf or .glb)."""
    reference: InputPath | None = None
    """Render the reference from this asset instead (the original of a simplified asset): the LOD's appearance is
    fitted to its original, as `neuralbake simplify` then `fit --reference` chain them."""
    shape: bool = False
    """Fit the vertex positions together with the appearance (large steps; every step re-renders the LOD), as for
    the seed's best LODs: for a simplified mesh against its original (with reference). Static meshes only."""
    shape_learning_rate: float = 0.002
    """Uniform-Adam step of the large-steps coordinates with shape, as a fraction of the bounding-box diagonal
    (follows the learning-rate schedule)."""
    shape_smoothness: float = 2.0
    """lambda of the large-steps parametrisation (I + lambda L) with shape: larger gives smoother, wider steps."""
    target: Literal["unlit", "vertex-color", "luma-chroma"] = "unlit"
    """unlit (one texture in uv1), vertex-color (COLOR_0) or luma-chroma (luminance in uv0, chrominance in uv1)."""
    texture_size: int | None = None
    """Side of the fitted texture (unlit) or of the luminance texture (luma-chroma), in texels (unset: 1024 on any device)."""
    chroma_size: int = 0
    """Side of the chrominance texture for luma-chroma; 0 means texture_size // 2."""
    render_size: int | None = None
    """Side of the square fitting renders, the loss resolution (unset: 1024 on a GPU, 384 on a CPU)."""
    views: int | None = None
    """Training views, a Fibonacci orbit around the asset (unset: 32 on any device)."""
    held_out_views: int = 4
    """Held-out views (a seeded random orbit) for PSNR/SSIM and the triptych."""
    epochs: int | None = None
    """Passes over the training views (unset: 50 on a GPU, 20 on a CPU)."""
    views_per_step: int = 1
    """Views whose losses are averaged in one Adam step (an epoch is ceil(views / views_per_step) steps)."""
    tonemap_learning_rate: float = 0.01
    """Adam learning rate of the inverse tone map's raw parameters (follows the same schedule)."""
    quantize: int = 0
    """Bits of the stored values during the fit and in the output: 0 (float; 16-bit PNGs) or 8."""
    quantizer: Literal["ste", "soft"] = "ste"
    """How 8-bit rounding is made differentiable: straight-through estimator or soft (annealed tanh staircase)."""
    soft_temperature: tuple[float, float] = (2.0, 60.0)
    """Sharpness of the soft quantiser at the first and the last step (geometric schedule)."""
    tonemap: Literal["none", "fit"] = "none"
    """none: stored values are display colours; fit: LDR codes decoded by a fitted inverse tone map."""
    tonemap_order: int = 1
    """Order of the fitted curve: 1 (cH = cL / (beta + alpha cL)) or 2 (inverse of (cH^2 + a cH) / (b cH^2 + c cH + d))."""
    display_tone_map: str = "aces"
    """Display transform applied to HDR before comparing: aces, reinhard, modified_reinhard or linear."""
    exposure: float = 0.0
    """Exposure in stops before the display transform."""
    weights: InputPath | None = None
    """Optional greyscale mask in the asset's uv0 space (white = important) that up-weights the loss."""
    weight_max: float = 4.0
    """Loss weight where the mask is white (1 where it is black)."""
    init: Literal["splat", "constant"] = "splat"
    """Starting values: splat (reference pixels averaged onto their nearest texel/vertex) or constant mid-grey."""
    warm_start: InputPath | None = None
    """A previous fit's checkpoint (.neuralbake/checkpoints/fit.pt in its output folder) to start from instead of init:
    same asset, target and sizes; how a refit with newly painted weights picks up where the last fit stood."""
    uv1: Literal["auto", "generate"] = "auto"
    """auto: keep the asset's uv1 if every mesh has one, else unwrap with xatlas; generate: always unwrap."""
    atlas_padding: int = 2
    """Texels between xatlas charts (at texture_size)."""
    environment: bool = True
    """Light with the procedural sky as well as the directional light."""
    environment_samples: int = 8
    """Environment light + BRDF samples per pixel of each half of a reference render's first round (later rounds
    take more, as their noise floor needs)."""
    reference_noise_db: float = 40.0
    """Noise floor the held-out views' references are rendered to (their estimated PSNR against their own
    expectation; more environment samples until it is reached): what the fit is scored against."""
    training_noise_db: float = 34.0
    """Noise floor the training views' references are rendered to. Lower than the held-out views': the fit
    averages every texel over the views that see it, whose grain is independent."""
    max_environment_samples: int = 512
    """Cap on a reference view's environment samples per pixel (both halves of its last round)."""
    shadows: bool = True
    """Shadow rays for the directional light in the reference renders (traced with warp-lang's BVH)."""
    light_direction: tuple[float, float, float] = (-0.45, 0.75, 0.5)
    """Direction towards the directional light (world space)."""
    light_irradiance: float = 2.0
    """Irradiance of the directional light."""
    fov_y_deg: float = 40.0
    """Vertical field of view of every view."""
    max_triangles: int = DEFAULT_MAX_TRIANGLES
    """Triangle budget: larger assets are refused before their attributes are decoded."""
    train: TrainerConfig = field(default_factory=_default_train)  # this bake's training defaults

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""

        def bad(name: str, problem: str, fix: str) -> ConfigError:
            return ConfigError(problem, field=name, fix=fix)

        if not self.asset:
            raise bad("asset", "no asset given.", "pass the PBR glTF to fit.")
        if self.target not in FIT_TARGETS:
            raise bad("target", f"unknown target {self.target!r}.", f"use one of {', '.join(FIT_TARGETS)}.")
        for name, top in (("texture_size", MAX_TEXTURE_SIZE), ("render_size", MAX_RENDER_SIZE)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 4 <= v <= top:
                raise bad(name, f"{name} must be an integer in [4, {top}], got {v!r}.", "pass e.g. 1024.")
        if not isinstance(self.chroma_size, int) or not (self.chroma_size == 0 or 2 <= self.chroma_size <= MAX_TEXTURE_SIZE):
            raise bad(
                "chroma_size",
                f"chroma_size must be 0 or in [2, {MAX_TEXTURE_SIZE}], got {self.chroma_size!r}.",
                "pass 0 (half of texture_size) or e.g. 512.",
            )
        for name, low in (("views", 1), ("held_out_views", 1), ("epochs", 1), ("views_per_step", 1), ("environment_samples", 1), ("max_environment_samples", 2)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise bad(name, f"{name} must be an integer >= {low}, got {v!r}.", f"pass e.g. {max(low, 4)}.")
        for name in ("views", "held_out_views"):
            v = getattr(self, name)
            if v > MAX_VIEWS:
                raise bad(
                    name,
                    f"{name} must be at most {MAX_VIEWS}, got {v}; every view keeps its reference render in memory.",
                    f"pass e.g. {32 if name == 'views' else 4} (a few dozen views cover an asset; more epochs revisit them).",
                )
        for name in ("reference_noise_db", "training_noise_db"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 10 <= v <= 80:
                raise bad(name, f"{name} must be a number of dB from 10 to 80, got {v!r}.", "pass e.g. 40 (higher: cleaner references, longer renders).")
        if self.views_per_step > self.views:
            raise bad("views_per_step", f"views_per_step ({self.views_per_step}) exceeds views ({self.views}).", "lower it or add views.")
        for name, value in (
            ("train.learning_rate", self.train.learning_rate),
            ("tonemap_learning_rate", self.tonemap_learning_rate),
            ("shape_learning_rate", self.shape_learning_rate),
            ("shape_smoothness", self.shape_smoothness),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise bad(name, f"{name} must be a positive number, got {value!r}.", "pass e.g. 0.01.")
        if self.quantize not in (0, 8):
            raise bad("quantize", f"quantize must be 0 (off) or 8 bits, got {self.quantize!r}.", "pass --quantize 8 or leave it off.")
        if self.quantizer not in ("ste", "soft"):
            raise bad("quantizer", f"unknown quantizer {self.quantizer!r}.", "use ste or soft.")
        t0, t1 = self.soft_temperature
        if not (0 < t0 <= t1 and math.isfinite(t1)):
            raise bad(
                "soft_temperature",
                f"soft_temperature must be (start, end) with 0 < start <= end, got {self.soft_temperature!r}.",
                "pass e.g. (2, 60).",
            )
        if self.tonemap not in ("none", "fit"):
            raise bad("tonemap", f"unknown tonemap {self.tonemap!r}.", "use none or fit.")
        if self.tonemap_order not in (1, 2):
            raise bad("tonemap_order", f"tonemap_order must be 1 or 2, got {self.tonemap_order!r}.", "pass 1 or 2.")
        if self.display_tone_map not in TONE_MAP_OPERATORS:
            raise bad(
                "display_tone_map", f"unknown display tone map {self.display_tone_map!r}.", f"use one of {', '.join(TONE_MAP_OPERATORS)}."
            )
        if not (math.isfinite(self.weight_max) and self.weight_max >= 1.0):
            raise bad("weight_max", f"weight_max must be >= 1, got {self.weight_max!r}.", "pass e.g. 4.")
        if self.init not in ("splat", "constant"):
            raise bad("init", f"unknown init {self.init!r}.", "use splat or constant.")
        if self.uv1 not in ("auto", "generate"):
            raise bad("uv1", f"unknown uv1 mode {self.uv1!r}.", "use auto or generate.")
        if not isinstance(self.atlas_padding, int) or not 0 <= self.atlas_padding <= 64:
            raise bad("atlas_padding", f"atlas_padding must be in [0, 64], got {self.atlas_padding!r}.", "pass e.g. 2.")
        if not (math.isfinite(self.light_irradiance) and self.light_irradiance >= 0):
            raise bad("light_irradiance", f"light_irradiance must be >= 0, got {self.light_irradiance!r}.", "pass e.g. 2.")
        if not 1.0 <= self.fov_y_deg <= 150.0:
            raise bad("fov_y_deg", f"fov_y_deg must be in [1, 150], got {self.fov_y_deg!r}.", "pass e.g. 40.")
        if not isinstance(self.max_triangles, int) or self.max_triangles < 1:
            raise bad("max_triangles", f"max_triangles must be a positive integer, got {self.max_triangles!r}.", "pass e.g. 2000000.")
        if self.train.precision != "fp32":
            raise bad(
                "train.precision", f"the fit trains its stored values in fp32, got {self.train.precision!r}.", "leave precision at fp32."
            )
        self.train.validate()

    @property
    def chroma_side(self) -> int:
        """The chrominance texture side in use."""
        return self.chroma_size or max((self.texture_size or 0) // 2, 2)


def device_defaults(config: FitConfig, device: torch.device) -> dict[str, Any]:
    """Full size on a GPU; on a CPU, sizes that finish in a minute or two (fields left ``None`` only)."""
    return dict(GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)


def steps_per_epoch(config: FitConfig) -> int:
    """Adam steps in one pass over the training views."""
    assert config.views is not None
    return math.ceil(config.views / config.views_per_step)
