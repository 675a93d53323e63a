"""The neural material bake: a layered material becomes a latent texture plus a tiny decoder MLP.

After Zeltner et al. 2024, "Real-Time Neural Appearance Models": during training an *encoder* MLP
maps the material's per-texel inputs (every layer parameter and mask at ``uv``, see
``MaterialGraph.texel_inputs``) to a latent vector of ``latent`` channels, and a *decoder* MLP
maps ``(latent, wi, wo)`` (local shading frame, normal +z) to the cosine-weighted BSDF value
``f(wi, wo) cos(theta_i)``, RGB. Both train jointly with the shared trainer on random
``(uv, wi, wo)``: ``wo`` half cosine-distributed and half uniform over the hemisphere (more grazing
views than cosine alone gives, see ``uniform_views``), ``wi`` half cosine-distributed and half
drawn by the reference material's own sampler, so highlights are learned. The decoder predicts
``log(1 + f cos)``, which keeps HDR peaks from dominating, and the loss is L1 in that space
weighted to a relative error of ``f cos`` above 0.01 (:func:`relative_l1`), so that dim (grazing)
configurations are learned too; a shader undoes it with ``exp(y) - 1`` (clamped at 0).

After training, the encoder is run once per texel to bake the latent texture (``resolution``
squared, with a mip pyramid whose lower levels come from the encoder applied to box-filtered
inputs, as the paper prescribes) and is then dropped: what ships is the latent texture (fp16, and
8-bit with a per-channel scale and offset) and the decoder in the network bundle format with its
packed device layouts.

Masks that depend on the world orientation (dust on up-facing areas) are baked for the surface
normal given in the config (default: facing up, +y), since a texture has no orientation of its
own.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from safetensors.torch import save

from neuralbake.core.config import save_config
from neuralbake.core.device import resolve_device, seed_everything
from neuralbake.core.events import EventSink, EventWriter, JsonlSink, ProgressSink, progress_task
from neuralbake.core.metrics import psnr
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import BundleError, ConfigError, InputError, TrainingError
from neuralbake.io.bundle import read_bundle, write_bundle
from neuralbake.io.files import sha256_file
from neuralbake.io.device_layout import LayerTensors
from neuralbake.io.files import atomic_write_bytes, prepare_output_dir
from neuralbake.io.refs import outside_refs_allowed
from neuralbake.io.images import save_png
from neuralbake.material.frame import cosine_hemisphere_pdf, square_to_cosine_hemisphere
from neuralbake.material.loader import load_material
from neuralbake.material.texture import sample_texture
from neuralbake.nn.mlp import MLP, MLPConfig
from neuralbake.nn.quantize import dequantize_latents_affine_u8, quantize_latents_affine_u8
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig
from neuralbake.render.compare import compare_materials
from neuralbake.render.mip import build_mip_pyramid
from neuralbake.render.pictures import comparison_row, panel_grid
from neuralbake.render.preview import SCENES
from neuralbake.render.tonemap import tone_map

__all__ = [
    "NeuralMaterial",
    "NeuralMaterialConfig",
    "NeuralMaterialLayer",
    "NeuralMaterialModel",
    "ReferenceSampler",
    "bake_neural_material",
    "load_neural_material",
    "render_neural_material",
    "texel_features",
]

BUNDLE_KIND = "neural_material"
LATENT_CHANNELS = (4, 8, 16)
"""Latent channels per texel a bake accepts (``NeuralMaterialConfig.latent``)."""

DIRECTION_FEATURES = {
    "wi": lambda wi, wo: wi,
    "wo": lambda wi, wo: wo,
    "half": lambda wi, wo: F.normalize(wi + wo, dim=1, eps=1e-8),
}
"""Direction features a decoder can read after its latent (local frame, normal +z), by name."""


def decoder_inputs(latent: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor, direction_inputs: tuple[str, ...] | list[str]) -> torch.Tensor:
    """The decoder's input rows: ``[latent, feature(wi, wo) for each named direction feature]``."""
    return torch.cat([latent, *(DIRECTION_FEATURES[name](wi, wo).to(latent.dtype) for name in direction_inputs)], dim=1)


def _default_train() -> TrainerConfig:
    return TrainerConfig(steps=2000, learning_rate=0.005, precision="fp32", eval_every=500, checkpoint_every=500)


@dataclass
class NeuralMaterialConfig:
    """Everything that determines a neural material bake."""

    material: str = ""
    """The layered material to bake: a neuralbake material (.json) or a MaterialX document (.mtlx)."""
    latent: int = 8
    """Latent channels per texel (the paper uses 8; 4, 8 or 16)."""
    resolution: int = 512
    """Side of the baked latent texture (mip 0), in texels. 512 holds the copper tray's thin scratches visibly better than 256 (CPU defaults: 41.3 vs 39.9 dB preview PSNR) for about 3 s more of latent baking and 4x the latent bytes."""
    decoder_hidden: int = 64
    """Neurons per hidden layer of the decoder."""
    decoder_layers: int = 3
    """Hidden layers of the decoder (the paper: about 3 x 64)."""
    encoder_hidden: int = 64
    """Neurons per hidden layer of the encoder (training only)."""
    encoder_layers: int = 2
    """Hidden layers of the encoder (training only)."""
    batch_size: int = 4096
    """(uv, wi, wo) samples per training step."""
    material_sampling: float = 0.5
    """Fraction of light directions drawn by the reference material's own sampler (the rest cosine)."""
    uniform_views: float = 0.5
    """Fraction of view directions drawn uniformly over the hemisphere (the rest cosine-distributed).
    Cosine alone rarely shows the decoder a grazing view: on the copper tray at the CPU defaults the
    grazing texture view scored 11.9 or 17.5 dB depending on the seed, 18.9 with half uniform views
    (preview PSNR 0.3-0.8 dB lower)."""
    direction_inputs: tuple[str, ...] = ("wi", "wo", "half")
    """Direction features the decoder reads after the latent, each a local-frame 3-vector: wi, wo, half (normalize(wi + wo))."""
    shared_decoder: str = ""
    """A baked neural material folder whose decoder this bake starts from, keeping its first
    ``shared_layers`` layers (the part that interprets the directions) fixed, so several materials
    share them; only the rest of the decoder, the encoder and the latents are trained."""
    shared_layers: int = 1
    """With ``shared_decoder``: how many leading decoder layers are shared (frozen)."""
    reference_chunk: int = 0
    """Reference samples evaluated per call of the material graph (the graph's thousands of small ops run once per
    chunk, not per step); batches are then served from the chunk. 0: 2^18 on CPU, 2^20 on a GPU."""
    compare_size: int = 128
    """Side in pixels of the preview renders (sphere, tile) that score the bake against the reference."""
    compare_spp: int = 32
    """Samples per pixel of those renders (both use the reference's sampling and one seed)."""
    normal: tuple[float, float, float] = (0.0, 1.0, 0.0)
    """World-space surface normal the material's orientation masks are baked for (default: facing up)."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N."""
    train: TrainerConfig = field(default_factory=_default_train)
    """Optimisation settings (trained in fp32 by default, as in the paper)."""

    def validate(self) -> None:
        if not self.material:
            raise ConfigError("no material given.", field="material", fix="pass a .json or .mtlx material.")
        if isinstance(self.latent, bool) or self.latent not in LATENT_CHANNELS:
            raise ConfigError(
                f"latent channels must be one of {', '.join(map(str, LATENT_CHANNELS))}, got {self.latent!r}.", field="latent", fix="use 4, 8 or 16."
            )
        if not 1 <= self.resolution <= 8192:
            raise ConfigError(f"resolution {self.resolution} is out of range.", field="resolution", fix="use 1 to 8192 texels.")
        for name in ("decoder_hidden", "encoder_hidden", "batch_size", "compare_size", "compare_spp"):
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
        if self.reference_chunk < 0:
            raise ConfigError(f"must be >= 0, got {self.reference_chunk}.", field="reference_chunk", fix="use 0 (automatic) or a sample count.")
        for name in ("material_sampling", "uniform_views"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"must be in [0, 1], got {value}.", field=name, fix="use e.g. 0.5.")
        self.train.validate()


def texel_features(material: Any, uv: torch.Tensor, normal: torch.Tensor) -> torch.Tensor:
    """Every per-texel input of a compiled material at ``uv``: ``[N, K]``."""
    return material.layer_and_inputs(uv, normal)[1]


class NeuralMaterialModel(torch.nn.Module):
    """Encoder (texel inputs -> latent) and decoder (latent, wi, wo -> log(1 + f cos)), trained jointly.

    ``forward(inputs [N, K + 6])`` takes the texel inputs followed by ``wi`` and ``wo`` and returns
    the decoder's ``[N, 3]`` prediction of ``log(1 + f cos)``.
    """

    def __init__(self, features: int, config: NeuralMaterialConfig) -> None:
        super().__init__()
        self.features = features
        self.latent = config.latent
        relu_linear = {"hidden_activation": "relu", "output_activation": "none"}
        self.encoder = MLP(MLPConfig(inputs=features, hidden=config.encoder_hidden, layers=config.encoder_layers, outputs=config.latent, **relu_linear))
        self.direction_inputs = tuple(config.direction_inputs)
        inputs = config.latent + 3 * len(self.direction_inputs)
        self.decoder = MLP(MLPConfig(inputs=inputs, hidden=config.decoder_hidden, layers=config.decoder_layers, outputs=3, **relu_linear))

    def share_decoder(self, decoder: MLP, layers: int) -> None:
        """Start from ``decoder``'s weights and freeze its first ``layers`` layers.

        The frozen weights become buffers, so the trainer (which optimises ``named_parameters``)
        leaves them alone while checkpoints and the bundle still carry them under the same names.
        """
        if decoder.config != self.decoder.config:
            raise ConfigError(
                f"the shared decoder's architecture {decoder.config} differs from this bake's {self.decoder.config}.",
                field="shared_decoder",
                fix="bake with the same --latent, decoder size and direction inputs as the shared bundle.",
            )
        self.decoder.load_state_dict(decoder.state_dict())
        for layer in self.decoder.layers[:layers]:
            for name in ("weight", "bias"):
                value = getattr(layer, name).detach().clone()
                delattr(layer, name)
                layer.register_buffer(name, value)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        latent = self.encoder(inputs[:, : self.features])
        wi, wo = inputs[:, self.features : self.features + 3], inputs[:, self.features + 3 :]
        return self.decoder(decoder_inputs(latent.to(inputs.dtype), wi, wo, self.direction_inputs))


def _directions_above(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return square_to_cosine_hemisphere(torch.rand(n, 2, generator=generator, device=device))


def _view_directions(n: int, uniform_fraction: float, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """View directions: ``uniform_fraction`` of them uniform over the hemisphere, the rest cosine-distributed."""
    u = torch.rand(n, 3, generator=generator, device=device)
    cosine = square_to_cosine_hemisphere(u[:, :2])
    z = u[:, 0:1]
    r = torch.sqrt(torch.clamp(1.0 - z * z, min=0.0))
    phi = 2.0 * math.pi * u[:, 1:2]
    uniform = torch.cat([r * torch.cos(phi), r * torch.sin(phi), z], dim=1)
    return torch.where(u[:, 2:3] < uniform_fraction, uniform, cosine)


class ReferenceSampler:
    """Training batches from the reference material: inputs ``[texel inputs, wi, wo]``, targets ``log(1 + f cos)``.

    A layered material's node graph is thousands of small tensor operations (hashed noise octaves,
    masks, lobes); launched once per training step they, not the networks, set the pace. So the
    sampler evaluates ``chunk`` independent samples in one call and serves ``batch_size`` of them per
    step until the chunk is used up. The samples are the same i.i.d. draws as one call per step
    would give; only their grouping into graph evaluations differs.
    """

    capturable = False  # the material graph syncs with the host (noise tables, masks)

    def __init__(
        self,
        material: Any,
        normal: torch.Tensor,
        batch_size: int,
        material_sampling: float,
        device: torch.device,
        *,
        chunk: int = 0,
        uniform_views: float = 0.0,
    ) -> None:
        self.material, self.normal, self.batch_size = material, normal, batch_size
        self.material_sampling, self.device, self.uniform_views = material_sampling, device, uniform_views
        per_chunk = chunk or (1 << 20 if device.type == "cuda" else 1 << 18)
        self.batches_per_chunk = max(1, per_chunk // batch_size)
        self._inputs: torch.Tensor | None = None
        self._targets: torch.Tensor | None = None
        self._next = 0

    def draw(self, n: int, generator: torch.Generator) -> Batch:
        """``n`` fresh reference samples in one evaluation of the material graph."""
        uv = torch.rand(n, 2, generator=generator, device=self.device)
        normal = self.normal.expand(n, 3)
        wo = _view_directions(n, self.uniform_views, generator, self.device)
        with torch.no_grad():
            bsdf, features = self.material.layer_and_inputs(uv, normal)
            wi_material, pdf = bsdf.sample(wo, torch.rand(n, 2, generator=generator, device=self.device))
            wi_cosine = _directions_above(n, generator, self.device)
            use_material = (torch.rand(n, generator=generator, device=self.device) < self.material_sampling) & (pdf > 0)
            wi = torch.where(use_material[:, None], wi_material, wi_cosine)
            value = bsdf.eval(wi, wo)
        if not torch.isfinite(value).all():
            bad = (~torch.isfinite(value)).any(dim=1).nonzero()[0, 0]
            raise TrainingError(
                f"the reference material gave a non-finite value at uv={uv[bad].tolist()}, wi={wi[bad].tolist()}, wo={wo[bad].tolist()}.",
                field="material",
                fix="check the material's parameters and node graph at that uv.",
            )
        return Batch(inputs=torch.cat([features, wi, wo], dim=1), targets=torch.log1p(value.clamp(min=0.0)))

    def sample(self, generator: torch.Generator) -> Batch:
        if self._inputs is None or self._next == self.batches_per_chunk:
            chunk = self.draw(self.batch_size * self.batches_per_chunk, generator)
            self._inputs = chunk.inputs.reshape(self.batches_per_chunk, self.batch_size, -1)
            self._targets = chunk.targets.reshape(self.batches_per_chunk, self.batch_size, -1)
            self._next = 0
        assert self._targets is not None
        batch = Batch(inputs=self._inputs[self._next], targets=self._targets[self._next])
        self._next += 1
        return batch


RELATIVE_LOSS_FLOOR = 0.01
"""``f cos`` below which :func:`relative_l1` weighs absolute rather than relative errors."""


def relative_l1(prediction: torch.Tensor, target: torch.Tensor, floor: float = RELATIVE_LOSS_FLOOR) -> torch.Tensor:
    """The training loss: L1 in the decoder's ``log(1 + f cos)`` space, weighted to a relative error.

    ``log1p`` is linear below 1, so a plain L1 there weighs a dim sample's error absolutely: at a
    grazing light and view (``f cos ~ 0.005``) a factor-of-two, colour-shifting error costs almost
    nothing, and the texture view that shows it was at 10 dB. A change ``d`` of ``y = log(1 + x)``
    is a change ``(1 + x) d`` of ``x``, so the weight ``floor (1 + x) / (x + floor)`` (``x`` the
    target's ``f cos``) makes each term ``floor |dx| / (x + floor)``: relative above ``floor``,
    absolute below it, and exactly the old L1 for ``x = 0``. The gradient still flows for every
    prediction (the weights depend on the target only).
    """
    x = torch.expm1(target)
    weight = floor * (1.0 + x) / (x + floor)
    return torch.mean(weight * (prediction - target).abs())


# -- the baked, shippable material -----------------------------------------------------------------


class NeuralMaterial:
    """A baked neural material: latent mip pyramid + decoder. ``material(uv, normal) -> NeuralMaterialLayer``."""

    def __init__(self, latents: list[torch.Tensor], decoder: MLP, direction_inputs: tuple[str, ...] | list[str] = ("wi", "wo")) -> None:
        self.latents = latents
        self.decoder = decoder
        self.direction_inputs = tuple(direction_inputs)

    def latent_at(self, uv: torch.Tensor, level: int = 0) -> torch.Tensor:
        """Bilinear (repeat-wrapped) latent lookup at ``uv`` from mip ``level``: ``[N, latent]``."""
        return sample_texture(self.latents[level], uv, wrap="repeat")

    def evaluate(self, latent: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``f(wi, wo) cos`` from latents and local directions, ``[N, 3]``."""
        dtype = next(self.decoder.parameters()).dtype
        y = self.decoder(decoder_inputs(latent.float(), wi.float(), wo.float(), self.direction_inputs).to(dtype)).float()
        valid = ((wi[:, 2] > 0) & (wo[:, 2] > 0)).float()[:, None]
        return torch.expm1(torch.clamp(y, min=0.0)) * valid

    def __call__(self, uv: torch.Tensor, normal: torch.Tensor | None = None) -> NeuralMaterialLayer:
        return NeuralMaterialLayer(self, self.latent_at(uv))

    def to(self, dtype: torch.dtype) -> NeuralMaterial:
        """A copy whose decoder and latents run in ``dtype`` (e.g. fp16, as a shader would)."""
        decoder = MLP(self.decoder.config).to(next(self.decoder.parameters()).device)
        decoder.load_state_dict(self.decoder.state_dict())
        return NeuralMaterial([latent.to(dtype).float() for latent in self.latents], decoder.to(dtype), self.direction_inputs)


class NeuralMaterialLayer:
    """The :class:`~neuralbake.material.layering.Layer` interface over a neural material.

    ``eval`` is the decoder; ``sample``/``pdf`` are cosine-weighted (any density is valid for an
    unbiased estimate; the decoder has no sampler of its own yet).
    """

    def __init__(self, material: NeuralMaterial, latent: torch.Tensor) -> None:
        self.material, self.latent = material, latent

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        return self.material.evaluate(self.latent, wi, wo)

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wi = square_to_cosine_hemisphere(u)
        return wi, cosine_hemisphere_pdf(wi) * (wo[:, 2] > 0)

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        return cosine_hemisphere_pdf(wi) * (wo[:, 2] > 0)


def _uv_grid(resolution: int, device: torch.device) -> torch.Tensor:
    centres = (torch.arange(resolution, device=device, dtype=torch.float32) + 0.5) / resolution
    v, u = torch.meshgrid(centres, centres, indexing="ij")
    return torch.stack([u, v], dim=-1).reshape(-1, 2)


def bake_latent_pyramid(model: NeuralMaterialModel, material: Any, normal: torch.Tensor, resolution: int, *, chunk: int = 1 << 15) -> list[torch.Tensor]:
    """Run the encoder per texel: mip 0 from the inputs at texel centres, each lower mip from the
    encoder applied to 2x2 box-filtered inputs of the level above. Returns ``[R_k, R_k, latent]`` per level."""
    device = normal.device
    uv = _uv_grid(resolution, device)
    with torch.no_grad():
        features = torch.cat([texel_features(material, part, normal.expand(len(part), 3)) for part in uv.split(chunk)])
        levels = []
        for grid in build_mip_pyramid(features.reshape(resolution, resolution, -1), odd="ceil"):
            flat = grid.reshape(-1, grid.shape[-1])
            latent = torch.cat([model.encoder(part) for part in flat.split(chunk)])
            levels.append(latent.reshape(grid.shape[0], grid.shape[1], -1).float())
    return levels


# -- the bake ------------------------------------------------------------------------------------


def _render_directional(material: Any, normal: torch.Tensor, light: torch.Tensor, resolution: int, view: torch.Tensor) -> torch.Tensor:
    """A flat, noise-free comparison image: ``f(wi, wo) cos * E`` at texel centres for one light and view."""
    uv = _uv_grid(resolution, normal.device)
    n = len(uv)
    with torch.no_grad():
        value = material(uv, normal.expand(n, 3)).eval(light.expand(n, 3), view.expand(n, 3))
    return value.reshape(resolution, resolution, 3)


def _held_out_directions(device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(12345)
    pairs = []
    for _ in range(4):
        wi = square_to_cosine_hemisphere(torch.rand(1, 2, generator=generator))
        wo = square_to_cosine_hemisphere(torch.rand(1, 2, generator=generator))
        pairs.append((wi.to(device), wo.to(device)))
    # and the mirror configuration, where the highlights are
    wo = torch.nn.functional.normalize(torch.tensor([[0.3, 0.1, 0.9]]), dim=1).to(device)
    pairs.append((wo * torch.tensor([-1.0, -1.0, 1.0], device=device), wo))
    return pairs


def _auto_exposed(x: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Tone-mapped sRGB of ``x`` with the exposure that puts ``reference``'s mean at 0.18 (per view)."""
    key = float(reference.mean().clamp(min=1e-8))
    return tone_map(x * (0.18 / key))


def bake_neural_material(
    config: NeuralMaterialConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    sinks: list[EventSink] | None = None,
) -> dict[str, Any]:
    """Train, bake and write a neural material (see the module docstring); returns the report."""
    wall = time.perf_counter()
    config.validate()
    device = resolve_device(config.device)
    material = load_material(config.material, device=device)
    out = prepare_output_dir(out_dir)
    normal = torch.nn.functional.normalize(torch.tensor(config.normal, dtype=torch.float32, device=device), dim=0)[None]
    seed_everything(config.train.seed)
    features = texel_features(material, torch.full((1, 2), 0.5, device=device), normal).shape[1]
    model = NeuralMaterialModel(features, config).to(device)
    shared: dict[str, Any] | None = None
    if config.shared_decoder:
        source = load_neural_material(config.shared_decoder, device=device)
        if tuple(source.direction_inputs) != tuple(config.direction_inputs):
            raise ConfigError(
                f"the shared decoder reads directions {list(source.direction_inputs)}, this bake {list(config.direction_inputs)}.",
                field="direction_inputs",
                fix="use the shared bundle's direction inputs.",
            )
        model.share_decoder(source.decoder, config.shared_layers)
        shared = {"bundle": str(Path(config.shared_decoder).resolve()), "layers": config.shared_layers,
                  "sha256": [sha256_file(Path(config.shared_decoder) / "network.safetensors")]}
    sampler = ReferenceSampler(
        material, normal, config.batch_size, config.material_sampling, device, chunk=config.reference_chunk, uniform_views=config.uniform_views
    )
    save_config(out / "config.json", config)
    log = out / "events.jsonl"
    if not resume:
        log.unlink(missing_ok=True)
    all_sinks: list[EventSink] = [JsonlSink(log), *(sinks or [])]
    if progress:
        all_sinks.append(ProgressSink("neural material", console=Console(stderr=True)))
    with EventWriter(all_sinks) as events:
        trainer = Trainer(
            model, sampler, relative_l1, config.train, device=device, checkpoint_path=out / "checkpoint.pt", events=events,
            compatibility={
                "material": sha256_file(config.material), "features": features, "latent": config.latent, "shared": shared,
                # the objective: resuming under another loss or view distribution changes the run silently
                "loss": "relative_l1", "uniform_views": config.uniform_views,
            },
        )
        result = trainer.fit(resume=resume)

    levels = bake_latent_pyramid(model, material, normal, config.resolution)
    neural = NeuralMaterial(levels, model.decoder, config.direction_inputs)
    manifest = _write_bundle(out, neural, config, features, shared)
    report_fields = _compare(out, material, neural, normal, config)
    report_fields["throughput"] = _throughput(material, neural, normal)
    source_bytes = sum(t.numel() * t.element_size() for t in getattr(material, "parameters", {}).values())
    plot_loss_curve(out / "loss.png", result.history, title=f"neural material: {Path(config.material).name}")
    return write_report(
        out / "report.json",
        bake="neural_material",
        device=device,
        metrics={"final_loss": result.final_loss},
        **report_fields,
        steps=result.steps,
        samples_seen=result.samples_seen,
        seconds=round(result.train_seconds, 3),
        wall_seconds=round(time.perf_counter() - wall, 3),
        decoder_params=sum(layer.weight.numel() + layer.bias.numel() for layer in model.decoder.layers),
        decoder_trained_params=model.decoder.parameter_count(),
        shared_decoder=shared,
        encoder_params=model.encoder.parameter_count(),
        texel_inputs=features,
        latent=config.latent,
        resolution=config.resolution,
        mip_levels=len(levels),
        bundle=manifest,
        source_material_parameter_bytes=source_bytes,
    )


def _write_bundle(out: Path, neural: NeuralMaterial, config: NeuralMaterialConfig, features: int, shared: dict[str, Any] | None = None) -> dict[str, Any]:
    latents = {f"latent.mip{k}": level for k, level in enumerate(neural.latents)}
    atomic_write_bytes(out / "latents.fp16.safetensors", save({k: v.detach().cpu().half().contiguous() for k, v in latents.items()}))
    quantized: dict[str, torch.Tensor] = {}
    for key, level in latents.items():
        codes, scale, offset = quantize_latents_affine_u8(level.detach().cpu())
        quantized.update({f"{key}.codes": codes, f"{key}.scale": scale, f"{key}.offset": offset})
    atomic_write_bytes(out / "latents.u8.safetensors", save(quantized))
    decoder = neural.decoder
    layers = [LayerTensors(f"decoder.layers.{i}", layer.weight, layer.bias) for i, layer in enumerate(decoder.layers)]
    write_bundle(
        out,
        {f"decoder.{k}": v for k, v in decoder.state_dict().items()},
        kind=BUNDLE_KIND,
        metadata={
            "architecture": {**asdict(decoder.config), "direction_inputs": list(neural.direction_inputs),
                             "inputs_layout": "latent (L), then each of direction_inputs (3 each; wi, wo, half = normalize(wi + wo)): local frame, normal +z", "output": "log(1 + f cos); f cos = max(exp(y) - 1, 0)"},
            "latent": {"channels": config.latent, "resolution": config.resolution, "mip_levels": len(neural.latents),
                       "fp16": "latents.fp16.safetensors", "u8": "latents.u8.safetensors", "wrap": "repeat", "filter": "bilinear",
                       "u8_decode": "latent = codes * scale + offset (per channel)"},
            "precision": {"training": "fp32", "inference": "fp16 or fp32"},
            "shared_decoder": shared,
            "material": {"source": str(Path(config.material).resolve()), "sha256": sha256_file(config.material), "texel_inputs": features,
                         "baked_normal": list(config.normal)},
        },
        layers=layers,
        extra_files={"latents_fp16": "latents.fp16.safetensors", "latents_u8": "latents.u8.safetensors"},
    )
    files = ["network.json", "network.safetensors", "network.fp16.bin", "network.fp32.bin", "latents.fp16.safetensors", "latents.u8.safetensors"]
    return {"files": files, "bytes": {name: (out / name).stat().st_size for name in files}}


def _compare(out: Path, reference: Any, neural: NeuralMaterial, normal: torch.Tensor, config: NeuralMaterialConfig) -> dict[str, Any]:
    """Score the bake: preview renders (the headline numbers) and flat texture views (fp32, fp16, u8)."""
    baked = _as_baked(reference, normal)
    renders = compare_materials(
        baked, neural, out / "renders", size=config.compare_size, spp=config.compare_spp, device=normal.device, labels=("reference", "neural")
    )
    size = min(config.resolution, 128)
    half = neural.to(torch.float16)
    u8 = NeuralMaterial([dequantize_latents_affine_u8(*quantize_latents_affine_u8(level)) for level in neural.latents], neural.decoder, neural.direction_inputs)
    scores: dict[str, list[float]] = {"fp32": [], "fp16": [], "u8": []}
    rows = []
    for wi, wo in _held_out_directions(normal.device):
        ref = _render_directional(reference, normal, wi, size, wo)
        ref_ldr = _auto_exposed(ref, ref)
        net = _render_directional(neural, normal, wi, size, wo)
        net_ldr = _auto_exposed(net, ref)
        scores["fp32"].append(psnr(net_ldr, ref_ldr))
        scores["fp16"].append(psnr(_auto_exposed(_render_directional(half, normal, wi, size, wo), ref), ref_ldr))
        scores["u8"].append(psnr(_auto_exposed(_render_directional(u8, normal, wi, size, wo), ref), ref_ldr))
        rows += comparison_row(ref_ldr, net_ldr, error="heat", heat_scale=0.25, colormap="red")
    save_png(out / "texture_views.png", panel_grid(rows, gap=2))
    return {
        "psnr_db": renders["psnr_db"],
        "flip": renders["flip"],
        "renders": renders,
        "texture_views": {
            "psnr_db": float(np.mean(scores["fp32"])),
            "psnr_per_view_db": [round(v, 3) for v in scores["fp32"]],
            "psnr_fp16_db": float(np.mean(scores["fp16"])),
            "psnr_u8_latents_db": float(np.mean(scores["u8"])),
            "method": "flat texture at texel centres, one (light, view) pair per row, each tone-mapped with the exposure that "
            "puts the reference's mean at 0.18; texture_views.png: reference | neural | |error| x4",
        },
        "comparison": "renders/comparison.png: sphere and tile, reference | neural | FLIP error",
    }


def _throughput(reference: Any, neural: NeuralMaterial, normal: torch.Tensor, samples: int = 1 << 16, repeats: int = 3) -> dict[str, Any]:
    """Samples/s of the reference graph and of the neural material (PyTorch, eager) on the bake's device.

    The neural path runs in fp16 on a GPU (as shipped) and fp32 on a CPU; ``bench/neural_material.py``
    measures larger batches and the torch.compile path.
    """
    device = normal.device
    generator = torch.Generator(device=device).manual_seed(1)
    uv = torch.rand(samples, 2, generator=generator, device=device)
    wi = _directions_above(samples, generator, device)
    wo = _directions_above(samples, generator, device)
    normals = normal.expand(samples, 3)
    shipped = neural.to(torch.float16) if device.type == "cuda" else neural

    def rate(run: Any) -> float:
        best = math.inf
        with torch.no_grad():
            for _ in range(repeats + 1):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                run()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                best = min(best, time.perf_counter() - start)
        return samples / best

    reference_rate = rate(lambda: reference(uv, normals).eval(wi, wo))
    neural_rate = rate(lambda: shipped.evaluate(shipped.latent_at(uv), wi, wo))
    return {
        "reference_samples_per_second": round(reference_rate),
        "neural_samples_per_second": round(neural_rate),
        "speedup": round(neural_rate / reference_rate, 2),
        "samples": samples,
        "neural_precision": "fp16" if device.type == "cuda" else "fp32",
        "method": "best of several eager PyTorch runs on the bake's device; bench/neural_material.py for large batches and torch.compile",
    }


def _as_baked(reference: Any, normal: torch.Tensor) -> Any:
    """The reference material evaluated for the baked world normal (orientation masks as baked)."""

    def material(uv: torch.Tensor, _: torch.Tensor) -> Any:
        return reference(uv, normal.expand(uv.shape[0], 3))

    return material


def load_neural_material(bundle_dir: str | Path, *, device: torch.device | str = "cpu", quantized: bool = False) -> NeuralMaterial:
    """Read a baked neural material (decoder bundle + fp16 or 8-bit latents).

    The manifest, the weights and the latent file are checked before use
    (:func:`neuralbake.export.neural_material_manifest.read_neural_material_manifest` and
    ``read_latent_levels``): anything missing, mistyped, truncated or inconsistent is a
    BundleError naming the file and the field.
    """
    from neuralbake.export.neural_material_manifest import read_latent_levels, read_neural_material_manifest

    bundle = read_bundle(bundle_dir, kind=BUNDLE_KIND)
    info = read_neural_material_manifest(bundle)
    arch = {key: info.fields[f"architecture.{key}"] for key in ("inputs", "hidden", "layers", "outputs", "hidden_activation", "output_activation", "leak")}
    try:
        decoder = MLP(MLPConfig(**arch))
        decoder.load_state_dict({k.removeprefix("decoder."): v for k, v in bundle.tensors.items()})
    except (ValueError, TypeError, RuntimeError) as exc:
        raise BundleError(
            f"the weights do not fit the decoder the manifest describes ({exc}).",
            path=bundle.manifest_path,
            field="architecture",
            fix="the weights and manifest come from different bakes; copy a matching pair.",
        ) from exc
    levels = []
    for data, scale, offset in read_latent_levels(bundle, info, "u8" if quantized else "fp16"):
        tensor = torch.from_numpy(data.copy())
        if quantized:
            levels.append(dequantize_latents_affine_u8(tensor, torch.from_numpy(scale), torch.from_numpy(offset)))
        else:
            levels.append(tensor.float())
    device = torch.device(device)
    return NeuralMaterial([level.to(device) for level in levels], decoder.to(device), info.fields["architecture.direction_inputs"])


def _reference_material(manifest_path: Path, info: Any, material: str | Path | None, allow_other: bool) -> Path:
    """The reference material to compare against, after checking it is the one the bundle was baked from."""
    recorded = Path(info.source) if info.source else None
    if material is None and recorded is None:
        raise InputError(
            "the bundle does not record the material it was baked from.",
            path=manifest_path,
            field="material.source",
            fix="pass --material with the .json or .mtlx file it was baked from.",
        )
    if material is None and info.source_sha256 is None and not outside_refs_allowed():
        # material.source is an absolute path outside the bundle's folder: follow it only when the
        # bundle also pins its content (bundles since 2026-11-23 do), so a crafted manifest cannot
        # make `material render` open or probe any file on the machine.
        raise InputError(
            "the bundle names its source material by path but records no sha256 of it (written before 2026-11-23, or edited).",
            path=manifest_path,
            field="material.sha256",
            fix="pass --material with the .json or .mtlx file it was baked from, or run with --allow-outside-refs if you trust this bundle.",
        )
    source = Path(material) if material is not None else recorded
    assert source is not None
    if not source.is_file() or source.suffix.lower() not in (".json", ".mtlx"):
        problem = "is not a .json or .mtlx file" if source.is_file() else "is not there"
        raise InputError(
            f"the reference material {'the bundle was baked from ' if material is None else ''}{problem}.",
            path=source,
            field="material.source" if material is None else "material",
            fix="pass --material with the .json or .mtlx file it was baked from.",
        )
    if allow_other:
        return source
    if info.source_sha256 is not None:
        expected, how = info.source_sha256, "its sha256 differs from the one recorded at bake time (material.sha256)"
    elif recorded is not None and recorded.is_file() and source.resolve() != recorded.resolve():
        expected, how = sha256_file(recorded), f"its content differs from {recorded}, which the bundle was baked from"
    else:
        expected, how = None, ""
    if expected is not None:
        mismatch = sha256_file(source) != expected
    else:  # an older bundle whose material is gone: the file name is all there is to compare
        mismatch = recorded is not None and source.name != recorded.name
        how = f"the bundle was baked from {recorded.name if recorded else '?'}"
    if mismatch:
        changed = material is None or (recorded is not None and source.resolve() == recorded.resolve())
        raise InputError(
            ("the material was changed since the bake" if changed else "this is not the material the bundle was baked from")
            + f": {how}. Comparing against it would score the bake against the wrong reference.",
            path=source,
            field="material.sha256" if info.source_sha256 is not None else "material.source",
            fix="pass the material the bundle was baked from (--material), or re-run the bake; to compare against another material "
            "on purpose, use allow_other_material=True (CLI: --allow-other-material).",
        )
    return source


def render_neural_material(
    bundle_dir: str | Path,
    out_dir: str | Path,
    *,
    material: str | Path | None = None,
    size: int = 256,
    spp: int = 64,
    precision: Literal["fp32", "fp16"] = "fp16",
    quantized: bool = False,
    device: str = "auto",
    seed: int = 7,
    allow_other_material: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Render a baked neural material and its reference on the preview scenes, side by side.

    Writes ``comparison.png`` (per scene: reference | neural | FLIP error), linear EXRs and
    ``report.json`` (tone-mapped PSNR and HDR FLIP per scene). The reference is the material the
    bundle was baked from (its manifest records the path) unless ``material`` names another copy;
    it is evaluated for the baked normal, as the neural material was. ``precision`` and
    ``quantized`` choose what the shipped shader would run: fp16 decoder and latents by default,
    8-bit latents with ``quantized``.

    The reference must be the material the bundle was baked from: where the manifest records
    its sha256 (``material.sha256``) the file's must match; for older bundles, the recorded file
    if it is still there, else its file name. A different material (or one edited since the
    bake) is refused with an InputError unless ``allow_other_material``, since the comparison
    would silently score the bake against the wrong reference.
    """
    from neuralbake.export.neural_material_manifest import read_neural_material_manifest

    torch_device = resolve_device(device)
    bundle = read_bundle(bundle_dir, kind=BUNDLE_KIND)
    info = read_neural_material_manifest(bundle)
    if info.baked_normal is None:
        raise BundleError("the manifest does not record the normal the material was baked for.", path=bundle.manifest_path,
                          field="material.baked_normal", fix="re-run `neuralbake material bake`.")
    neural = load_neural_material(bundle_dir, device=torch_device, quantized=quantized)
    source = _reference_material(bundle.manifest_path, info, material, allow_other_material)
    reference = load_material(source, device=torch_device)
    if precision == "fp16":
        neural = neural.to(torch.float16)
    normal = F.normalize(torch.tensor(info.baked_normal, dtype=torch.float32, device=torch_device), dim=0)[None]
    out = prepare_output_dir(out_dir)
    with progress_task("rendering", 2 * len(SCENES) * size * size, enabled=progress, unit="pixels") as advance:
        result = compare_materials(
            _as_baked(reference, normal), neural, out, size=size, spp=spp, device=torch_device, seed=seed,
            labels=("reference", "neural"), progress=advance,
        )
    return write_report(
        out / "report.json",
        bake="neural_material_render",
        device=torch_device,
        metrics={"psnr_db": result["psnr_db"], "flip": result["flip"]},
        bundle=str(bundle_dir),
        reference=str(source),
        precision=precision,
        latents="u8" if quantized else "fp16",
        **result,
    )
