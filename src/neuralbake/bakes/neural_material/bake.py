"""The neural material bake as the runner runs it: train, bake the latent texture, write, score.

:func:`bake_material` is one material's whole bake inside a running :class:`BakeRun`; the neural
material bake runs it once into the staging folder, the material pack once per material (each in
its own phase and sub-folder), or, with ``--shared-decoder``, :func:`bake_materials_jointly` once
for all its materials (one phase, one decoder). Both train, then hand over to one finishing step
(latent pyramid, bundle, renders, report fields).
"""

from __future__ import annotations

import dataclasses
import math
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.func import functional_call

from neuralbake.bakes.folder import STATE_DIR
from neuralbake.bakes.neural_material.asset import (
    AssetMaterial,
    AssetSurface,
    is_asset,
    load_asset_material,
    place_material,
)
from neuralbake.bakes.neural_material.asset_scoring import asset_comparison, neural_material_bytes
from neuralbake.bakes.neural_material.comparison import compare, throughput
from neuralbake.bakes.neural_material.config import NeuralMaterialConfig, device_defaults, neural_material_footprint
from neuralbake.bakes.neural_material.latents import bake_latent_pyramid, load_neural_material, write_material_bundle
from neuralbake.bakes.neural_material.model import (
    NeuralMaterial,
    NeuralMaterialModel,
    ReferenceSampler,
    decoder_inputs,
    relative_l1,
    texel_features,
)
from neuralbake.bakes.neural_material.sampling import fit_sampling_head, relative_variance, view_directions
from neuralbake.bakes.neural_material.verdict import NTCAtBytes, map_texels, ntc_at_bytes, verdict_block
from neuralbake.bakes.ntc.bake import NTC
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.core.metrics import psnr
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.files import sha256_file
from neuralbake.io.neural_material_bundle import decoder_input_layout
from neuralbake.kernels import resolve_kernels, unsupported_reason
from neuralbake.material.frame import cosine_hemisphere_pdf, square_to_cosine_hemisphere
from neuralbake.material.loader import load_material
from neuralbake.nn.precision import compute_dtype
from neuralbake.nn.trainer import Batch
from neuralbake.render.preview import SCENES
from neuralbake.render.tonemap import tone_map

__all__ = ["NEURAL_MATERIAL", "JointNeuralMaterialModel", "JointSampler", "bake_material", "bake_materials_jointly", "bake_neural_material"]


def _shared_decoder(config: NeuralMaterialConfig, model: NeuralMaterialModel, device: torch.device, recorded_as: str | None) -> dict[str, Any] | None:
    """Start ``model``'s decoder from ``config.shared_decoder`` (frozen leading layers); what the report records."""
    if not config.shared_decoder:
        return None
    source = load_neural_material(config.shared_decoder, device=device)  # read_bundle: verifies the folder's bake.json
    if tuple(source.direction_inputs) != tuple(config.direction_inputs):
        raise ConfigError(
            f"the shared decoder reads directions {list(source.direction_inputs)}, this bake {list(config.direction_inputs)}.",
            field="direction_inputs",
            fix="use the shared bundle's direction inputs.",
        )
    model.share_decoder(source.decoder, config.shared_layers)
    return {"bundle": recorded_as or str(Path(config.shared_decoder).resolve()), "layers": config.shared_layers,
            "sha256": [sha256_file(Path(config.shared_decoder) / "network.safetensors")]}


@dataclasses.dataclass
class _Prepared:
    """A material ready to train: its config (texture size and name resolved), reference, baked normal, texel input count."""

    config: NeuralMaterialConfig
    material: Any
    normal: torch.Tensor
    features: int


def _prepare(run: BakeRun, config: NeuralMaterialConfig) -> _Prepared:
    device = run.device
    material = load_reference(config, device)
    if isinstance(material, AssetMaterial):  # recorded: the bundle and its shader are named after the asset's material
        config = dataclasses.replace(config, material_name=material.name)
    if isinstance(material, AssetMaterial) and config.texture_size > material.texture_side:
        run.note(f"latent texture {material.texture_side}x{material.texture_side}: no larger than the asset's largest texture")
        config = dataclasses.replace(config, texture_size=material.texture_side)
    normal = torch.nn.functional.normalize(torch.tensor(config.normal, dtype=torch.float32, device=device), dim=0)[None]
    features = texel_features(material, torch.full((1, 2), 0.5, device=device), normal).shape[1]
    return _Prepared(config, material, normal, features)


def _sampler(prepared: _Prepared, batch_size: int, device: torch.device) -> ReferenceSampler:
    c = prepared.config
    return ReferenceSampler(prepared.material, prepared.normal, batch_size, c.material_sampling, device, chunk=c.reference_chunk, uniform_views=c.uniform_views)


HELD_OUT_QUALITY = "held_out_db"
"""The figure a material bake's evaluations report and its ``converged`` verdict follows: ``-10 log10`` of the training
loss (:func:`~.model.relative_l1`) on a fixed held-out batch of reference samples, so 0.25 dB is a 6 % lower loss."""
HELD_OUT_RATE = 0.1
"""Gain of :data:`HELD_OUT_QUALITY` per 1,000 steps under which a run counts as converged whatever its last quarter
gained: the cosine anneal lifts that figure by 0.35-0.75 dB in the last quarter of every run (copper tray, H200,
10,000 to 100,000 steps), so the last quarter alone never says converged. Per 1,000 steps it gained 0.20 dB at
10,000 steps, 0.058 at 30,000, 0.050 at 60,000 and 0.014 at 100,000, while the preview renders gained 0.26 dB
from 10,000 to 30,000 steps and nothing after (44.56, 44.82, 44.80, 44.72 dB; docs/benchmarks.md)."""
HELD_OUT_DISPLAY = "held_out_display_db"
"""Recorded beside :data:`HELD_OUT_QUALITY` at each evaluation, not judged: the PSNR of the same held-out samples' ``f cos``,
exposed so the reference's mean is 0.18 and tone-mapped as the texture views are. The held-out figure weighs dim samples'
errors relatively, and it kept rising (0.7 dB per doubling of the copper tray's steps) where the preview renders had
stopped; this absolute, display-mapped figure is the candidate that may follow the previews (issue 42, not yet
measured on a GPU)."""
HELD_OUT_SAMPLES = {"cuda": 1 << 16, "cpu": 1 << 14}
"""Size of that batch (drawn once, with its own seed, like the training samples)."""


def held_out_evaluation(sampler: Any, device: torch.device, seed: int) -> Callable[[torch.nn.Module], dict[str, float]]:
    """``evaluate(model)`` for the trainer: the loss and :data:`HELD_OUT_QUALITY` on one batch of fresh reference samples
    (``sampler.draw``), drawn here from a generator of its own so the training draws are untouched."""
    generator = torch.Generator(device=device).manual_seed(seed + 0x5EED)
    batch = sampler.draw(HELD_OUT_SAMPLES.get(device.type, HELD_OUT_SAMPLES["cpu"]), generator)

    exposure = 0.18 / float(torch.expm1(batch.targets.double()).mean().clamp(min=1e-8))  # the targets are log1p(f cos)

    def shown_of(y: torch.Tensor) -> torch.Tensor:
        # in float64, a diverging prediction clamped: the tone map's squares stay finite
        return tone_map(torch.expm1(y.double().clamp(max=50.0)) * exposure)

    shown = shown_of(batch.targets)

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        with torch.no_grad():
            prediction = model(batch.inputs).float()
            loss = float(relative_l1(prediction, batch.targets))
            display = min(psnr(shown_of(prediction), shown), 120.0)  # the held-out figure's ceiling too
        return {"held_out_loss": loss, HELD_OUT_QUALITY: -10.0 * math.log10(max(loss, 1e-12)), HELD_OUT_DISPLAY: display}

    return evaluate


def _compatibility(prepared: _Prepared) -> dict[str, Any]:
    c = prepared.config
    return {
        "material": sha256_file(c.material), "features": prepared.features, "latent": c.latent,
        # absent (None) for a layered material without an asset, as in checkpoints from before these keys
        "asset": sha256_file(c.asset) if c.asset else None, "material_name": c.material_name or None,
        # the objective: resuming under another loss or view distribution changes the run silently
        "loss": "relative_l1", "uniform_views": c.uniform_views,
    }


def bake_material(
    run: BakeRun, config: NeuralMaterialConfig, folder: Path, *, phase: str = "train", shared_as: str | None = None, verdict: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train ``config``'s material as training phase ``phase`` and write its bundle and pictures into ``folder``.

    ``shared_as``: the path the report and manifest record for ``config.shared_decoder`` (a pack
    shares a folder that is still in staging). ``verdict``: for a glTF asset's material, also
    compress its maps with NTC at the neural material's bytes, score it on the same renders and
    say which tool fits (:mod:`.verdict`). Returns the report's metrics and fields.
    """
    device = run.device
    decode_kernels(config, device)  # an impossible --kernels triton fails before the work
    prepared = _prepare(run, config)
    model = NeuralMaterialModel(prepared.features, prepared.config).to(device)
    shared = _shared_decoder(prepared.config, model, device, shared_as)
    training_kernels = _training_kernels(run, prepared.config, model, device)
    compatibility = {**_compatibility(prepared), "shared": shared}
    try:
        sampler = _sampler(prepared, config.batch_size, device)
        result = run.train(model, sampler, relative_l1, config.train, phase=phase, compatibility=compatibility,
                           evaluate=held_out_evaluation(sampler, device, config.train.seed), quality_key=HELD_OUT_QUALITY)
    finally:
        model.encoder.kernels = model.decoder.kernels = "torch"  # the shipped decoder decodes on the decode path below
    return _finish(run, prepared, folder, model.encoder, model.decoder, result, shared, training_kernels, verdict=verdict)


class JointNeuralMaterialModel(torch.nn.Module):
    """Several materials trained together: one encoder per material (their texel inputs differ), one decoder for all.

    ``forward(inputs [N, 1 + K + 6])`` takes each row's material index, its texel inputs (padded to
    the widest material's ``K``), ``wi`` and ``wo``; every material's rows go through its encoder,
    all rows through the one decoder (the seed's scheme: only the latent textures differ).
    """

    def __init__(self, features: list[int], config: NeuralMaterialConfig) -> None:
        super().__init__()
        self.features = list(features)
        self.width = max(features)
        models = [NeuralMaterialModel(k, config) for k in features]
        self.encoders = torch.nn.ModuleList(model.encoder for model in models)
        self.decoder = models[0].decoder
        self.direction_inputs = tuple(config.direction_inputs)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        ids = inputs[:, 0].round().long()
        latent = torch.zeros(inputs.shape[0], self.encoders[0].config.outputs, dtype=inputs.dtype, device=inputs.device)
        for index, (encoder, k) in enumerate(zip(self.encoders, self.features, strict=True)):
            rows = torch.nonzero(ids == index).reshape(-1)
            latent = latent.index_put((rows,), encoder(inputs[rows, 1 : 1 + k]).to(inputs.dtype))
        wi, wo = inputs[:, 1 + self.width : 4 + self.width], inputs[:, 4 + self.width :]
        return self.decoder(decoder_inputs(latent, wi, wo, self.direction_inputs))


class JointSampler:
    """Batches of every material at once: each material's :class:`ReferenceSampler` serves an equal share, rows tagged with its index."""

    capturable = False

    def __init__(self, samplers: list[ReferenceSampler], features: list[int]) -> None:
        self.samplers, self.features, self.width = samplers, features, max(features)
        self.batch_size = sum(sampler.batch_size for sampler in samplers)

    def sample(self, generator: torch.Generator) -> Batch:
        return self._tagged([sampler.sample(generator) for sampler in self.samplers])

    def draw(self, n: int, generator: torch.Generator) -> Batch:
        """``n`` fresh samples, an equal share of each material's (as :meth:`ReferenceSampler.draw`)."""
        share = max(1, n // len(self.samplers))
        return self._tagged([sampler.draw(share, generator) for sampler in self.samplers])

    def _tagged(self, batches: list[Batch]) -> Batch:
        inputs, targets = [], []
        for index, (batch, k) in enumerate(zip(batches, self.features, strict=True)):
            x = batch.inputs
            tag = torch.full((x.shape[0], 1), float(index), dtype=x.dtype, device=x.device)
            pad = torch.zeros(x.shape[0], self.width - k, dtype=x.dtype, device=x.device)
            inputs.append(torch.cat([tag, x[:, :k], pad, x[:, k:]], dim=1))
            targets.append(batch.targets)
        return Batch(inputs=torch.cat(inputs), targets=torch.cat(targets))


def bake_materials_jointly(
    run: BakeRun, configs: list[NeuralMaterialConfig], folders: list[Path], names: list[str], *, phase: str = "joint"
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Train ``configs``' materials together (per-material encoders and latent textures, one decoder) as one phase,
    then write each one's bundle and pictures into its folder. Each step sees ``batch_size`` samples split evenly;
    a config with ``verdict`` gets one for its glTF material."""
    device = run.device
    template = configs[0]
    for config in configs:  # an impossible --kernels triton fails before the work
        decode_kernels(config, device)
    prepared = [_prepare(run, config) for config in configs]
    model = JointNeuralMaterialModel([p.features for p in prepared], template).to(device)
    per_material = max(1, template.batch_size // len(configs))
    sampler = JointSampler([_sampler(p, per_material, device) for p in prepared], [p.features for p in prepared])
    compatibility = {"joint": [_compatibility(p) for p in prepared], "names": names}
    result = run.train(model, sampler, relative_l1, template.train, phase=phase, compatibility=compatibility,
                       evaluate=held_out_evaluation(sampler, device, template.train.seed), quality_key=HELD_OUT_QUALITY)
    shared = {"joint": names, "layers": "all", "note": "one decoder trained with every material of the pack; per-material encoders and latents"}
    return [
        _finish(run, p, folder, encoder, model.decoder, result, shared, "torch", verdict=p.config.verdict)
        for p, folder, encoder in zip(prepared, folders, model.encoders, strict=True)
    ]


def _finish(
    run: BakeRun, prepared: _Prepared, folder: Path, encoder: Any, decoder: Any, result: Any, shared: dict[str, Any] | None,
    training_kernels: str, *, verdict: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """After training: bake the latent pyramid with ``encoder``, write the bundle, render and score (the report's metrics and
    fields); with ``verdict``, NTC at the same bytes joins the asset's renders and the report gets ``verdict``."""
    config, material, normal, features = prepared.config, prepared.material, prepared.normal, prepared.features
    device = run.device
    run.note(f"baking the {config.texture_size}x{config.texture_size} latent texture and scoring it")
    # an asset's maps finer than the latent texture are box-filtered into its texels (at most 4 x 4 samples each)
    supersample = min(4, max(1, material.texture_side // config.texture_size)) if isinstance(material, AssetMaterial) else 1
    levels = bake_latent_pyramid(types.SimpleNamespace(encoder=encoder), material, normal, config.texture_size, supersample=supersample)
    neural = NeuralMaterial(levels, decoder, config.direction_inputs)
    def trial() -> None:
        neural.kernels = "triton"
        probe = torch.full((4, 2), 0.5, device=device), torch.tensor([[0.0, 0.0, 1.0]] * 4, device=device)
        neural.decode(probe[0], probe[1], probe[1])

    neural.kernels = run.kernels("decode", config.kernels, decode_reason(config), dtype=torch.float32, trial=trial)  # decodes in fp32
    sampling = _fit_sampler(run, prepared, neural)
    folder.mkdir(parents=True, exist_ok=True)
    bundle = write_material_bundle(folder, neural, config, features, shared, shown=run.shown)
    with run.task("comparison renders", 2 * len(SCENES) * config.compare_size**2, unit="pixels") as advance:
        scores = compare(folder, material, neural, normal, config, progress=advance)
    metrics = {"psnr_db": scores.pop("psnr_db"), "flip": scores.pop("flip"), "final_loss": result.final_loss}
    asset: dict[str, Any] | None = None
    ntc: NTCAtBytes | None = None
    if isinstance(material, AssetSurface):
        latent_bytes, decoder_bytes = bundle["bytes"]["latents.u8.safetensors"], bundle["bytes"]["network.fp16.bin"]
        if verdict and isinstance(material, AssetMaterial):
            ntc = _verdict_ntc(run, config, material, folder, neural_material_bytes(material, latent_bytes, decoder_bytes)["total"])
        with run.task("asset renders", ASSET_VIEWS * config.compare_size**2, unit="pixels") as advance:
            asset = asset_comparison(
                folder, material, neural, size=config.compare_size, spp=config.compare_spp, views=ASSET_VIEWS, progress=advance,
                latent_bytes=latent_bytes, decoder_bytes=decoder_bytes, ntc_scene=ntc.scene if ntc is not None else None,
            )
        # the asset's own renders are the headline (if a view shows the material); the sphere and tile previews stay under "preview"
        scores["preview"] = {"psnr_db": metrics["psnr_db"], "flip": metrics["flip"]}
        if asset["psnr_db"] is not None:
            metrics.update(psnr_db=asset["psnr_db"], flip=asset["flip"])
    fields: dict[str, Any] = {
        **scores,
        "throughput": throughput(material, neural, normal),
        "sampling": sampling,
        "kernels": {"train": training_kernels, "decode": neural.kernels, "decode_kernel": neural.decode_kernel},
        "steps": result.steps,
        "samples_seen": result.samples_seen,
        "seconds": round(result.train_seconds, 3),
        "decoder_params": sum(layer.weight.numel() + layer.bias.numel() for layer in decoder.layers),
        "decoder_trained_params": decoder.parameter_count(),
        "shared_decoder": shared,
        "encoder_params": encoder.parameter_count(),
        "texel_inputs": features,
        "latent": config.latent,
        "resolution": config.texture_size,  # the report's key since the first bakes (README, docs/results)
        "mip_levels": len(levels),
        "bundle": bundle,
        "asset": asset if asset is not None else {"note": "no asset: a layered material baked for one world normal "
                                                  f"{list(config.normal)}, scored on the preview sphere and tile"},
        "source_material_parameter_bytes": sum(t.numel() * t.element_size() for t in getattr(material, "parameters", {}).values()),
    }
    if ntc is not None:
        fields["verdict"] = verdict_block(asset, ntc, texels=map_texels(material))
    elif isinstance(material, AssetMaterial) and config.verdict is False:
        fields["verdict"] = {"note": "not run (verdict false, --no-verdict)"}
    return metrics, fields


VERDICT_FOLDER = "verdict_ntc"
"""The NTC runs of the verdict, in the bake's checkpoints folder (kept for ``--resume``, not shipped)."""


def _verdict_ntc(run: BakeRun, config: NeuralMaterialConfig, material: AssetMaterial, folder: Path, target_bytes: int) -> NTCAtBytes:
    """NTC of ``material``'s maps at the neural material's ``target_bytes``, run as a stage of this bake (:func:`.verdict.ntc_at_bytes`)
    in ``checkpoints/verdict_ntc/`` (+ the material's folder inside a pack)."""
    run.note(f"verdict: NTC of {material.name}'s maps at the neural material's {target_bytes:,} bytes")
    where = Path(VERDICT_FOLDER) / (folder.relative_to(run.stage) if folder.is_relative_to(run.stage) else folder.name)
    ntc = ntc_at_bytes(
        material, target_bytes, run.checkpoints / where, lambda c, out: run.run_stage(NTC, c, out, resume=False),
        device=run.device, seed=config.train.seed, reuse=run.resume,
    )
    if ntc.scene is not None:
        ntc.record["folder"] = str(Path(STATE_DIR) / "checkpoints" / where)  # under the bake's --out
    return ntc


def _fit_sampler(run: BakeRun, prepared: _Prepared, neural: NeuralMaterial) -> dict[str, Any]:
    """Train the importance-sampling head on the baked material (``neural.sampler``); the report's ``sampling`` entry:
    relative variance of the one-sample albedo estimate with cosine sampling, the head, and the reference's own sampler."""
    config, material, normal = prepared.config, prepared.material, prepared.normal
    steps = min(config.sampling_steps, config.train.steps or 0)
    if steps <= 0:
        return {"head": None, "note": "cosine sampling (sampling_steps 0)"}
    device = run.device
    sample_uv = getattr(material, "sample_uv", None)

    def draw_uv(n: int, generator: torch.Generator) -> torch.Tensor:
        return sample_uv(n, generator) if sample_uv is not None else torch.rand(n, 2, generator=generator, device=device)

    run.note(f"training the importance-sampling head ({steps} steps)")
    started = time.perf_counter()
    neural.sampler, losses = fit_sampling_head(neural, draw_uv, steps=steps, batch_size=config.batch_size, seed=config.train.seed)
    seconds = time.perf_counter() - started
    generator = torch.Generator(device=device).manual_seed(config.train.seed + 1)
    n = 512
    uv, wo = draw_uv(n, generator), view_directions(n, 0.5, generator, device)
    with torch.no_grad():
        layer = neural(uv)
        reference = material(uv, normal.expand(n, 3))
        variance = {
            "cosine": relative_variance(layer.eval, lambda w, u: (square_to_cosine_hemisphere(u), cosine_hemisphere_pdf(square_to_cosine_hemisphere(u))), wo, 16, generator),
            "head": relative_variance(layer.eval, layer.sample, wo, 16, generator),
            "reference_own_sampling": relative_variance(reference.eval, reference.sample, wo, 16, generator),
        }
    return {"head": {"steps": steps, "seconds": round(seconds, 2), "final_loss": losses[-1], "hidden": neural.sampler.mlp.config.hidden},
            "relative_variance": {k: round(v, 4) for k, v in variance.items()},
            "method": "512 (texel, view) pairs, 16 one-sample estimates each of the luminance albedo (f cos / pdf); "
            "cosine and head on the neural material, the reference material with its own sampler; var / mean^2 averaged"}


ASSET_VIEWS = 4
"""Held-out views of an asset the bake is scored on."""


def load_reference(config: NeuralMaterialConfig, device: torch.device) -> Any:
    """The material a bake learns: a layered material (.json, .mtlx) or one material of a glTF asset."""
    if is_asset(config.material):
        if config.asset:
            raise ConfigError(
                f"--asset places a layered material on an asset, and {Path(config.material).name} is an asset itself.",
                field="asset",
                fix="leave --asset out when baking a glTF asset's own material.",
            )
        return load_asset_material(config.material, config.material_name, device=device)
    if config.material_name and not config.asset:
        raise ConfigError(
            f"material_name {config.material_name!r} picks a material of a glTF asset, and {Path(config.material).name} is not one.",
            field="material_name",
            fix="leave --material out for .json and .mtlx materials, or give the asset with --asset.",
        )
    layered = load_material(config.material, device=device)
    if getattr(layered, "transmissive", False):
        raise InputError(
            f"{Path(config.material).name} lets light through (transmission), and a neural material learns reflection only "
            "(light directions above the surface): the baked result would be wrong behind the glass.",
            path=config.material,
            field="transmission",
            fix="bake an opaque variant (transmission 0), or preview the glass itself with `neuralbake material preview`.",
        )
    if not config.asset:
        return layered
    up = torch.nn.functional.normalize(torch.tensor(config.normal, dtype=torch.float32, device=device), dim=0)
    return place_material(layered, config.material, config.asset, config.material_name, fallback_normal=up, device=device)


TORCH_TRAINS_FASTER = ("PyTorch's CUDA-graphed step trained the copper tray's 10,000 steps in 12.1 s, the fused MLP kernels "
                       "in 42.2 s (H200, 2026-11-29, bench/bakes_gpu.py)")
"""Why ``auto`` trains a neural material with PyTorch where the fused kernels could run (the report's ``kernel_paths``)."""


def _training_kernels(run: BakeRun, config: NeuralMaterialConfig, model: NeuralMaterialModel, device: torch.device) -> str:
    """Train the encoder and the decoder through the fused kernels (``triton``) or PyTorch; sets the MLPs' path.

    Each MLP's forward and backward is a fused kernel inside autograd
    (:class:`neuralbake.kernels.training.FusedMLP`); the loss, the glue between encoder and decoder
    and the optimiser stay PyTorch. Only ``--kernels triton`` takes it: the whole step replayed as a CUDA graph
    trains faster in PyTorch (:data:`TORCH_TRAINS_FASTER`), so ``auto`` trains with PyTorch.
    """
    reason = None
    for name, mlp in (("encoder", model.encoder), ("decoder", model.decoder)):
        why = unsupported_reason(mlp.config.widths(), [mlp.config.hidden_activation, mlp.config.output_activation], training=True)
        if why is not None and reason is None:
            reason = f"the {name}: {why}"
    dtype = compute_dtype(config.train.precision)

    def trial() -> None:
        # in the training precision: the kernels the steps will use (an fp32 compile alone takes minutes)
        model.encoder.kernels = model.decoder.kernels = "triton"
        params = {name: value.detach().to(dtype).requires_grad_() for name, value in model.named_parameters()}
        probe = torch.zeros(4, model.features + 6, device=device, dtype=dtype)
        probe[:, -1] = probe[:, -4] = 1.0
        functional_call(model, params, (probe,)).float().sum().backward()

    kernels = run.kernels("train", config.kernels, reason, dtype=dtype, trial=trial, torch_faster=TORCH_TRAINS_FASTER)
    model.encoder.kernels = model.decoder.kernels = kernels
    return kernels


def decode_reason(config: NeuralMaterialConfig) -> str | None:
    """Why the fused kernels cannot decode a bake with ``config``, or None."""
    directions = len(config.direction_inputs)
    widths = [decoder_input_layout(config.latent, config.direction_inputs).width, *[config.decoder_hidden] * config.decoder_layers, 3]
    reason = unsupported_reason(widths, ["relu", "none"])
    if reason is None and directions > 3:
        reason = f"the fused decode reads at most 3 direction features, and the bake has {directions}"
    return reason


def decode_kernels(config: NeuralMaterialConfig, device: torch.device) -> str:
    """``triton`` or ``torch`` for the decode of a bake with ``config`` on ``device`` (see :mod:`neuralbake.kernels`).

    Resolved before training, so an impossible ``--kernels triton`` fails before the work.
    """
    return resolve_kernels(config.kernels, device, decode_reason(config), dtype=torch.float32)  # the trained decoder decodes in fp32


def _bake_body(run: BakeRun) -> BakeOutcome:
    config: NeuralMaterialConfig = run.config
    metrics, fields = bake_material(run, config, run.stage, verdict=config.verdict)
    return BakeOutcome(metrics, fields, curve_title=f"neural material: {Path(config.material).name}", quality_key=HELD_OUT_QUALITY,
                       rate_tolerance=HELD_OUT_RATE)


NEURAL_MATERIAL = Bake(
    "neural_material", NeuralMaterialConfig, _bake_body, device_defaults=device_defaults(), title="neural material",
    footprint=neural_material_footprint,
)
"""The neural material bake, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def bake_neural_material(config: NeuralMaterialConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Train, bake and write a neural material (see the package docstring); returns the report.

    Runs through :func:`neuralbake.bakes.run.run_bake` (device defaults, validation, lock,
    staging, checkpoints, ``bake.json``). Raises :class:`~neuralbake.nn.trainer.TrainingInterrupted`
    when stopped with Ctrl-C or SIGTERM (``resume=True`` continues from the checkpoint).
    """
    return NEURAL_MATERIAL.run(config, out_dir, **options)
